package views

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/a-h/templ"

	"github.com/taskpilots/handoff/models"
)

// The session timeline in words (issue 14): "Alex claimed", "worker w-7
// escalated: …", a note's text inline. The raw payload, the versions and the
// links to the state at that version sit behind a details disclosure.

// eventLine is one timeline entry in words: Who did What; Text is the
// human text that goes with it (a note, a reason, a question), shown
// inline.
type eventLine struct {
	Who  string
	What string
	Text string
}

// workersOf maps delegation ids to the worker that leased them, from the
// lease events the page holds, so that a worker's result names the worker
// rather than its token.
func workersOf(evs ...[]models.Event) map[string]string {
	out := map[string]string{}
	for _, list := range evs {
		for _, e := range list {
			if e.Type != models.EventDelegationLeased {
				continue
			}
			var p models.LeasePayload
			if json.Unmarshal([]byte(e.Payload), &p) == nil && p.Worker != "" {
				out[p.DelegationID] = p.Worker
			}
		}
	}
	return out
}

// describeEvent words e for the timeline. Payloads that do not decode (a
// tampered row) fall back to the event type; the raw payload is still in
// the details.
func describeEvent(e models.Event, names, workers map[string]string) eventLine {
	who := nameOf(names, e.Actor)
	raw := []byte(e.Payload)
	l := eventLine{Who: who, What: strings.ReplaceAll(string(e.Type), "_", " ")}
	switch e.Type {
	case models.EventSessionCreated:
		l.What = "created the session"
	case models.EventSessionPaused:
		var p models.PausePayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = "paused the session", p.Reason
		if p.Until != "" {
			l.What += " until " + p.Until
		}
	case models.EventSessionResumed:
		var p models.ReasonPayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = "resumed the session", p.Reason
	case models.EventSessionEscalated:
		var p models.EscalatePayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = "escalated to humans", firstOf(p.Reason, p.Question)
	case models.EventSessionCancelled:
		var p models.ReasonPayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = "cancelled the session", p.Reason
	case models.EventDelegationCreated:
		var p models.DelegationPayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = fmt.Sprintf("queued %s on %s", p.Step, p.Queue), firstOf(p.Note, p.Instructions)
	case models.EventDelegationLeased:
		var p models.LeasePayload
		_ = json.Unmarshal(raw, &p)
		if p.Worker != "" {
			l.Who = "worker " + p.Worker
		}
		l.What = "picked up the step (attempt " + strconv.Itoa(p.Attempt) + ")"
	case models.EventDelegationExpired:
		var p models.ExpiredPayload
		_ = json.Unmarshal(raw, &p)
		if p.Worker != "" {
			l.Who = "worker " + p.Worker
		}
		l.What = "let its lease expire"
		if p.Exhausted {
			l.What += "; no attempts left"
		}
	case models.EventResultCompleted, models.EventResultNeedsInput, models.EventResultRejected,
		models.EventResultEscalated, models.EventResultFailed:
		var p models.ResultPayload
		_ = json.Unmarshal(raw, &p)
		if w := workers[p.DelegationID]; w != "" {
			l.Who = "worker " + w
		}
		l.What, l.Text = resultWords(e.Type, p)
	case models.EventInputProvided:
		var p models.InputPayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = "answered", p.Answer
	case models.EventHumanClaimed:
		l.What = "claimed"
	case models.EventHumanReleased:
		var p models.HumanPayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = "released", p.Reason
		if p.Forced {
			l.What = "force-released"
		}
	case models.EventHumanNoted:
		var p models.HumanPayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = "added a note", p.Text
	case models.EventHumanRequestedInput:
		var p models.HumanPayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = "asked the requester", p.Question
	case models.EventHumanResumed, models.EventHumanHandedBack:
		var p models.HumanDelegationPayload
		_ = json.Unmarshal(raw, &p)
		verb := "resumed automation"
		if e.Type == models.EventHumanHandedBack {
			verb = "handed back"
		}
		l.What, l.Text = fmt.Sprintf("%s: %s on %s", verb, p.Step, p.Queue), firstOf(p.Note, p.Instructions)
	case models.EventHumanCompleted:
		var p models.HumanPayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = "completed the session", p.Resolution
	case models.EventHumanRejected:
		var p models.HumanPayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = "rejected the session", p.Reason
	case models.EventChildrenSpawned:
		var p models.ChildrenPayload
		_ = json.Unmarshal(raw, &p)
		l.What = fmt.Sprintf("started %d child sessions (%s)", len(p.Join.Children), p.Join.Policy)
	case models.EventChildrenJoined:
		var p models.JoinPayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = "joined the children: "+p.Result, p.Reason
	case models.EventReviewScored:
		l.What = "scored a review"
	case models.EventEscalationSLABreached:
		l.Who, l.What = "The SLA clock", "ran out"
	case models.EventRiskResolved:
		var p models.RiskResolvedPayload
		_ = json.Unmarshal(raw, &p)
		l.What, l.Text = "marked resolved: "+strings.Join(p.Risks, "; "), p.Note
	}
	return l
}

func resultWords(t models.EventType, p models.ResultPayload) (string, string) {
	switch t {
	case models.EventResultCompleted:
		what := "completed " + p.Step
		if p.NextStep != "" {
			what += "; next: " + p.NextStep
		}
		return what, ""
	case models.EventResultNeedsInput:
		return "needs input on " + p.Step, p.Question
	case models.EventResultRejected:
		return "rejected " + p.Step, p.Question
	case models.EventResultEscalated:
		return "escalated", p.Question
	}
	text := ""
	if p.Failure != nil {
		text = p.Failure.Class + colonIf(p.Failure.Message) + " " + p.Failure.Message
	}
	what := "failed " + p.Step
	if p.Retry {
		what += "; retrying"
	}
	return what, strings.TrimSpace(text)
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			return s
		}
	}
	return ""
}

// timelineURL is the session page at the timeline page before (0: the
// newest), keeping the type filter.
func timelineURL(id string, before int64, t models.EventType) templ.SafeURL {
	q := url.Values{}
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	if t != "" {
		q.Set("type", string(t))
	}
	u := string(SessionURL(id))
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return templ.SafeURL(u + "#timeline")
}
