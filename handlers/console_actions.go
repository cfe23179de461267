package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// actionFields are the text fields of each takeover form, named as the
// models validation names them so that errors land next to their field.
var actionFields = map[models.TakeoverAction][]string{
	models.ActClaim:        nil,
	models.ActRelease:      {"reason"},
	models.ActForceRelease: {"reason"},
	models.ActNote:         {"text", "evidence_claim", "evidence_source"},
	models.ActRequestInput: {"question"},
	models.ActResume:       {"queue", "step", "instructions", "facts"},
	models.ActHandBack:     {"queue"},
	models.ActComplete:     {"resolution"},
	models.ActReject:       {"reason"},
	// The answer form's delegate fields are named like the API's, so that
	// "delegate.queue" errors land next to their field.
	models.ActProvideInput:         {"answer", "facts", "delegate.queue", "delegate.step", "delegate.instructions"},
	models.ActResolveRisk:          {"risk"},
	models.ActAcceptRecommendation: nil,
	models.ActPause:                {"reason"},
	models.ActUnpause:              {"reason"},
	models.ActCancel:               {"reason"},
	models.ActEscalate:             {"reason"},
	models.ActReassign:             {"to", "reason"},
}

// ConsoleActions lists the takeover actions, for route registration: every
// action the policy rules on (models.AllTakeoverActions).
func ConsoleActions() []models.TakeoverAction { return models.AllTakeoverActions }

var actionDone = map[models.TakeoverAction]string{
	models.ActClaim:                "You hold this session now. Others see that you are working on it.",
	models.ActRelease:              "Released: the session is back in the inbox for anyone to claim.",
	models.ActForceRelease:         "Force-released: the session is back in the inbox.",
	models.ActNote:                 "Note added.",
	models.ActRequestInput:         "Input requested: the session waits for an answer.",
	models.ActResume:               "Automation resumed: the step is queued for a worker.",
	models.ActHandBack:             "Handed back: the step is queued again.",
	models.ActComplete:             "Session completed.",
	models.ActReject:               "Session rejected.",
	models.ActProvideInput:         "Answer recorded.",
	models.ActResolveRisk:          "Risk marked resolved.",
	models.ActAcceptRecommendation: "Recommendation accepted: the recommended step is queued for a worker.",
	models.ActPause:                "Session paused.",
	models.ActUnpause:              "Session resumed.",
	models.ActCancel:               "Session cancelled.",
	models.ActEscalate:             "Escalated: the session waits in the inbox for a human.",
	models.ActReassign:             "Reassigned: the session is held by the person you chose.",
}

// ConsoleAction serves POST /console/sessions/:id/<action>. The form names
// the state version it was rendered at; the command runs through the models
// write path as user:<id>. On success the browser is sent back to the
// session page; a stale version re-renders the page with 409 and the
// conflict banner, invalid input with 422 and inline errors; in both cases
// nothing is written and what the user typed is kept.
func ConsoleAction(s *models.Store, a models.TakeoverAction) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Param("id")
		values := make(map[string]string, len(actionFields[a]))
		for _, f := range actionFields[a] {
			values[f] = c.FormValue(f)
		}
		expected, err := versionParam("expected_version", c.FormValue("state_version"))
		if err == nil {
			if check, cerr := queueCheck(c, s, a, values); cerr != nil {
				return cerr
			} else if check != nil {
				if shown, rerr := renderQueueCheck(c, s, id, a, expected, values, check); shown || rerr != nil {
					return rerr
				}
			}
		}
		if err == nil {
			_, err = runAction(c.Request().Context(), s, a, id, *CurrentUser(c), c.FormValue("idempotency_key"), expected, values)
		}
		if err != nil {
			return renderRefused(c, s, id, a, expected, values, err)
		}
		done := actionDone[a]
		if a == models.ActProvideInput && values["delegate.queue"]+values["delegate.step"] != "" {
			done = "Answer recorded and the next step queued."
		}
		to := string(views.SessionURL(id))
		if c.FormValue("next") != "" {
			// "Submit and next": the next session to decide, or the inbox
			// when nothing is left.
			next, err := s.NextInInbox(c.Request().Context(), *CurrentUser(c), id)
			if err != nil {
				return err
			}
			if next == "" {
				done += " Nothing else waits for you in the inbox."
				to = "/console/inbox"
			} else {
				done += " This is the next session in the inbox."
				to = string(views.SessionURL(next))
			}
		}
		if err := AddFlash(c, views.Banner{Kind: "success", Text: done}); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, to)
	}
}

// queueCheck asks models.QueueKnown about the queue a hand-back or resume
// names, unless the user ticked the confirmation for that very queue; it
// returns the confirmation to show, or nil to go ahead. An empty queue is
// the one the session came from, and the command validates the rest.
func queueCheck(c echo.Context, s *models.Store, a models.TakeoverAction, values map[string]string) (*views.QueueCheck, error) {
	if a != models.ActResume && a != models.ActHandBack {
		return nil, nil
	}
	q := strings.TrimSpace(values["queue"])
	if q == "" || c.FormValue("confirm_queue") == q {
		return nil, nil
	}
	// Invalid input is refused inline first, by the command: the question
	// is only worth asking about a form that would otherwise go through.
	v := int64(1)
	var invalid error
	if a == models.ActResume {
		facts, ferr := parseFactLines(values["facts"])
		if ferr != nil {
			return nil, nil
		}
		invalid = models.ResumeInput{ExpectedVersion: &v, Queue: q, Step: values["step"], Instructions: values["instructions"], Facts: facts}.Validate()
	} else {
		invalid = models.HandBackInput{ExpectedVersion: &v, Queue: q}.Validate()
	}
	if invalid != nil {
		return nil, nil
	}
	ctx := c.Request().Context()
	known, err := s.QueueKnown(ctx, q)
	if err != nil || known {
		return nil, err
	}
	list, err := s.KnownQueues(ctx)
	if err != nil {
		return nil, err
	}
	return &views.QueueCheck{Queue: q, Known: list}, nil
}

// renderQueueCheck shows the form again with what was typed and the queue
// confirmation; nothing was written (422, like any form that needs more from
// the user). It shows nothing (false) when the page does not offer the form
// to this user now or the form is stale: then the command runs and says why
// it refuses.
func renderQueueCheck(c echo.Context, s *models.Store, id string, a models.TakeoverAction, expected int64, values map[string]string, check *views.QueueCheck) (bool, error) {
	d, err := loadSessionPage(c, s, id)
	if err != nil {
		return true, err
	}
	// A form from an older version gets the conflict banner first: the
	// re-rendered form would otherwise carry the new version unseen.
	if !slices.Contains(d.Actions, a) || d.Row.StateVersion != expected {
		return false, nil
	}
	d.Forms = map[models.TakeoverAction]views.ActionForm{a: {Values: values, QueueCheck: check}}
	return true, Render(c, http.StatusUnprocessableEntity, views.SessionPage(d))
}

// runAction calls the takeover command of a.
func runAction(ctx context.Context, s *models.Store, a models.TakeoverAction, id string, u models.User, key string, expected int64, v map[string]string) (models.Outcome, error) {
	ev := &expected
	switch a {
	case models.ActClaim:
		return s.ClaimEscalation(ctx, id, u, key, models.ClaimInput{ExpectedVersion: ev})
	case models.ActRelease:
		return s.Release(ctx, id, u, key, models.ReleaseInput{ExpectedVersion: ev, Reason: v["reason"]})
	case models.ActForceRelease:
		return s.ForceRelease(ctx, id, u, key, models.ReleaseInput{ExpectedVersion: ev, Reason: v["reason"]})
	case models.ActNote:
		return s.AddNote(ctx, id, u, key, models.NoteInput{ExpectedVersion: ev, Text: v["text"],
			EvidenceClaim: v["evidence_claim"], EvidenceSource: v["evidence_source"]})
	case models.ActRequestInput:
		return s.RequestInput(ctx, id, u, key, models.RequestInputInput{ExpectedVersion: ev, Question: v["question"]})
	case models.ActResume:
		in := models.ResumeInput{ExpectedVersion: ev, Queue: strings.TrimSpace(v["queue"]), Step: v["step"], Instructions: v["instructions"]}
		facts, ferr := parseFactLines(v["facts"])
		in.Facts = facts
		if ferr != nil {
			// Report the facts together with every other invalid field.
			all := &models.ValidationError{Fields: ferr.Fields}
			var ve *models.ValidationError
			if errors.As(in.Validate(), &ve) {
				all.Fields = append(all.Fields, ve.Fields...)
			}
			return models.Outcome{}, all
		}
		return s.ResumeAutomation(ctx, id, u, key, in)
	case models.ActHandBack:
		return s.HandBack(ctx, id, u, key, models.HandBackInput{ExpectedVersion: ev, Queue: strings.TrimSpace(v["queue"])})
	case models.ActComplete:
		return s.CompleteHuman(ctx, id, u, key, models.CompleteInput{ExpectedVersion: ev, Resolution: v["resolution"]})
	case models.ActReject:
		return s.RejectHuman(ctx, id, u, key, models.RejectInput{ExpectedVersion: ev, Reason: v["reason"]})
	case models.ActProvideInput:
		return provideInput(ctx, s, id, u, key, ev, v)
	case models.ActAcceptRecommendation:
		return s.AcceptRecommendation(ctx, id, u, key, models.AcceptInput{ExpectedVersion: ev})
	case models.ActPause, models.ActUnpause, models.ActCancel, models.ActEscalate:
		return s.ControlSession(ctx, id, u, a, key, models.ControlInput{ExpectedVersion: ev, Reason: v["reason"]})
	case models.ActReassign:
		return s.Reassign(ctx, id, u, key, models.ReassignInput{ExpectedVersion: ev, To: v["to"], Reason: v["reason"]})
	case models.ActResolveRisk:
		// Like a note, resolving a risk names no version: the risk being
		// still open is the only precondition, checked by the command.
		return s.ResolveRisk(ctx, id, u, key, models.ResolveRiskInput{Risk: v["risk"]})
	}
	return models.Outcome{}, echo.ErrNotFound
}

// provideInput answers a session waiting for input from the console form:
// the answer, facts as key=value lines and, when a queue, step or
// instructions are filled in, the next step to delegate in the same
// transaction.
func provideInput(ctx context.Context, s *models.Store, id string, u models.User, key string, ev *int64, v map[string]string) (models.Outcome, error) {
	in := models.InputInput{ExpectedVersion: ev, Answer: v["answer"]}
	// Any of the three filled in asks for a delegation, so that instructions
	// typed without a queue are refused rather than dropped.
	q, st, instr := strings.TrimSpace(v["delegate.queue"]), v["delegate.step"], v["delegate.instructions"]
	if q != "" || strings.TrimSpace(st) != "" || strings.TrimSpace(instr) != "" {
		in.Delegate = &models.InputDelegate{Queue: q, Step: st, Instructions: instr}
	}
	facts, ferr := parseFactLines(v["facts"])
	in.Facts = facts
	if ferr != nil {
		// Report the facts together with every other invalid field.
		all := &models.ValidationError{Fields: ferr.Fields}
		var ve *models.ValidationError
		if errors.As(in.Validate(), &ve) {
			all.Fields = append(all.Fields, ve.Fields...)
		}
		return models.Outcome{}, all
	}
	return s.ProvideInputAs(ctx, id, u, key, in)
}

// parseFactLines reads "key=value" lines; blank lines are skipped.
func parseFactLines(text string) (map[string]any, *models.ValidationError) {
	var facts map[string]any
	v := &models.ValidationError{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, val, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			v.Add("facts", "line %d must be key=value", i+1)
			continue
		}
		if facts == nil {
			facts = map[string]any{}
		}
		facts[k] = strings.TrimSpace(val)
	}
	if len(v.Fields) > 0 {
		return facts, v
	}
	return facts, nil
}

// renderRefused answers a refused action with the session page: the form
// keeps what was typed, with inline errors (422), the conflict banner (409)
// or a banner saying why it is not allowed (403, 422). Unknown sessions and
// internal errors go to the error handler.
func renderRefused(c echo.Context, s *models.Store, id string, a models.TakeoverAction, expected int64, values map[string]string, err error) error {
	status := StatusFor(err)
	code := models.ErrorCode(err)
	if status >= 500 || code == models.ENOTFOUND || code == models.EUNAUTH {
		return err
	}
	d, lerr := loadSessionPage(c, s, id)
	if lerr != nil {
		return lerr
	}
	form := views.ActionForm{Values: values}
	var ve *models.ValidationError
	switch {
	case errors.As(err, &ve):
		form.Errors = make(map[string]string, len(ve.Fields))
		for _, f := range ve.Fields {
			if prev, ok := form.Errors[f.Field]; ok {
				form.Errors[f.Field] = prev + "; " + f.Message
			} else {
				form.Errors[f.Field] = f.Message
			}
		}
		if !slices.Contains(d.Actions, a) {
			// The page does not offer this form now (say, a claim of a
			// session the user already holds), so inline errors would show
			// nowhere: say it in the banner.
			msgs := make([]string, len(ve.Fields))
			for i, f := range ve.Fields {
				msgs[i] = f.Field + " " + f.Message
			}
			d.Problem = fmt.Sprintf("Nothing was saved: %s was refused (%s).", strings.ToLower(actionName(a)), strings.Join(msgs, "; "))
		}
	case code == models.ECONFLICT:
		d.Conflict = &views.Conflict{Action: a, FromVersion: expected, Events: d.EventsSince(expected), Values: values}
		if holder, ok := models.IsClaimed(err); ok {
			d.Conflict.Holder = holder
		}
	case code == models.EFORBIDDEN:
		d.Problem = forbiddenText(d)
	case code == models.EILLEGAL:
		d.Problem = fmt.Sprintf("%s is not possible now: the session is %s.", actionName(a), views.StatusLabel(d.State.Status))
	default:
		d.Problem = ProblemFor(err).Detail
	}
	d.Forms = map[models.TakeoverAction]views.ActionForm{a: form}
	return Render(c, status, views.SessionPage(d))
}

func forbiddenText(d views.SessionPageData) string {
	if d.State.Status == models.StatusHumanActive && d.State.Assignee != "" {
		holder := d.Names[d.State.Assignee]
		if holder == "" {
			holder = d.State.Assignee
		}
		return "Nothing was saved: " + holder + " holds this session; only they or an admin can act on it."
	}
	return "Nothing was saved: your role cannot act on escalations."
}

func actionName(a models.TakeoverAction) string {
	s := strings.ReplaceAll(string(a), "-", " ")
	return strings.ToUpper(s[:1]) + s[1:]
}
