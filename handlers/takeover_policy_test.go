package handlers_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/views"
	"github.com/taskpilots/handoff/web"
)

// panelForms are the takeover forms a session page shows, by their
// data-testid hooks (the per-risk forms are ruled on separately).
func panelForms(doc *goquery.Document) []string {
	var out []string
	doc.Find(`form[data-testid^="action-"]`).Each(func(_ int, f *goquery.Selection) {
		if v, _ := f.Attr("data-testid"); v != "action-resolve-risk" {
			out = append(out, v)
		}
	})
	return out
}

// allowedForms is what the policy allows u on st, as form hooks.
func allowedForms(st models.State, u models.User) []string {
	var out []string
	for _, a := range models.PanelActions {
		if ok, _ := models.TakeoverPolicy(a, u, st); ok {
			out = append(out, "action-"+string(a))
		}
	}
	return out
}

// TestTakeoverPolicyButtons renders the session page for every status ×
// role × holder and checks that the forms shown are exactly the actions the
// policy allows: the page has no rule of its own.
func TestTakeoverPolicyButtons(t *testing.T) {
	users := []models.User{
		{ID: "usr_agent", Role: models.RoleAgent},
		{ID: "usr_reviewer", Role: models.RoleReviewer},
		{ID: "usr_admin", Role: models.RoleAdmin},
	}
	for _, status := range models.AllStatuses {
		for _, u := range users {
			for _, holder := range []string{"none", "self", "other"} {
				st := models.State{SessionID: "ses_x", Status: status, Version: 5, Queue: "refunds",
					Risks:      []string{"refunded before"},
					Escalation: &models.Escalation{RecommendedNext: "issue-refund", Step: "check"}}
				switch holder {
				case "self":
					st.Assignee = u.Actor()
				case "other":
					st.Assignee = "user:usr_someone"
				}
				d := views.SessionPageData{
					SessionDetail: models.SessionDetail{Row: models.Session{ID: "ses_x", Status: status, StateVersion: 5}, State: st},
					Actions:       models.TakeoverActions(st, u),
				}
				var buf bytes.Buffer
				ctx := views.WithPageContext(context.Background(), views.PageContext{User: &u})
				if err := views.SessionPage(d).Render(ctx, &buf); err != nil {
					t.Fatal(err)
				}
				doc, err := goquery.NewDocumentFromReader(&buf)
				if err != nil {
					t.Fatal(err)
				}
				got, want := panelForms(doc), allowedForms(st, u)
				if !slices.Equal(got, want) {
					t.Errorf("%s, %s, holder %s: page offers %v, policy allows %v", status, u.Role, holder, got, want)
				}
				// Submit and next goes with the decisions only.
				if n := doc.Find(`[data-testid="action-next"]`).Length(); (n > 0) != slices.ContainsFunc(want, isDecisionForm) {
					t.Errorf("%s, %s, holder %s: %d submit-and-next buttons for %v", status, u.Role, holder, n, want)
				}
			}
		}
	}
}

func isDecisionForm(f string) bool {
	switch f {
	case "action-complete", "action-reject", "action-resume", "action-hand-back", "action-accept-recommendation":
		return true
	}
	return false
}

// policyValues are valid inputs for every action, so that a refusal can
// only come from the policy (role, holder, status), not from validation.
var policyValues = map[models.TakeoverAction]url.Values{
	models.ActComplete:     {"resolution": {"refunded"}},
	models.ActReject:       {"reason": {"not eligible"}},
	models.ActRequestInput: {"question": {"which card?"}},
	// "elsewhere" has no route or worker: the tick confirms it (tested in
	// TestConsoleUnknownQueueConfirmation).
	models.ActResume:       {"queue": {"elsewhere"}, "confirm_queue": {"elsewhere"}, "step": {"issue-refund"}},
	models.ActNote:         {"text": {"called the customer"}},
	models.ActProvideInput: {"answer": {"the visa"}},
}

// TestTakeoverPolicyCommands drives real sessions, one per status × role ×
// holder × action, through the session page and the form routes: the page
// offers what the policy allows on the session's state, and every action
// posted is accepted exactly when the policy allows it; a refused one
// writes no event.
func TestTakeoverPolicyCommands(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{})
		ana, anaU := agent(t, b, "Ana Agent", models.RoleAgent)
		_, benU := agent(t, b, "Ben Agent", models.RoleAgent)
		rita, ritaU := agent(t, b, "Rita Reviewer", models.RoleReviewer)
		ada, adaU := agent(t, b, "Ada Admin", models.RoleAdmin)
		viewers := []struct {
			b *browser
			u models.User
		}{{ana, anaU}, {rita, ritaU}, {ada, adaU}}

		claim := func(id string, u models.User) {
			v := mustStateOf(t, s, id).Version
			if _, err := s.ClaimEscalation(ctx, id, u, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
				t.Fatal(err)
			}
		}
		scenarios := map[string]func(viewer models.User) string{
			"escalated": func(models.User) string {
				return escalatedOnFreshQueue(t, s)
			},
			"held by self": func(viewer models.User) string {
				id := escalatedOnFreshQueue(t, s)
				if viewer.CanTakeOver() {
					claim(id, viewer)
				}
				return id
			},
			"held by other": func(models.User) string {
				id := escalatedOnFreshQueue(t, s)
				claim(id, benU)
				return id
			},
			"awaiting_input": func(models.User) string { return awaitingSession(t, s, "Which card?") },
			"queued": func(models.User) string {
				// Another queue, so that the escalations' worker never leases it.
				id, _ := storetest.Delegated(ctx, t, s, "parked")
				return id
			},
			"paused": func(models.User) string {
				// Another queue, so that the escalations' worker never leases it.
				id, _ := storetest.Delegated(ctx, t, s, "parked")
				v := mustStateOf(t, s, id).Version
				if _, err := s.Transition(ctx, id, models.EventSessionPaused, "test:controller", "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
					t.Fatal(err)
				}
				return id
			},
			"completed": func(models.User) string {
				id := escalatedOnFreshQueue(t, s)
				claim(id, benU)
				v := mustStateOf(t, s, id).Version
				if _, err := s.CompleteHuman(ctx, id, benU, "", models.CompleteInput{ExpectedVersion: &v, Resolution: "done"}); err != nil {
					t.Fatal(err)
				}
				return id
			},
		}
		for name, setup := range scenarios {
			for _, vw := range viewers {
				for _, a := range models.PanelActions {
					id := setup(vw.u)
					st := mustStateOf(t, s, id)
					path := "/console/sessions/" + id
					if a == models.PanelActions[0] {
						// Once per scenario and viewer: the page offers what
						// the policy allows on the real state.
						if got, want := panelForms(getDoc(vw.b, path)), allowedForms(st, vw.u); !slices.Equal(got, want) {
							t.Errorf("%s, %s: page offers %v, policy allows %v", name, vw.u.Role, got, want)
						}
					}
					ok, why := models.TakeoverPolicy(a, vw.u, st)
					vals := url.Values{"_csrf": {vw.b.csrf(path)}, "state_version": {itoa(st.Version)}}
					for k, v := range policyValues[a] {
						vals[k] = v
					}
					before := countRows(t, s, "events", "session_id = ?", id)
					p := vw.b.post(path+"/"+string(a), vals)
					after := countRows(t, s, "events", "session_id = ?", id)
					switch {
					case ok && p.StatusCode != http.StatusSeeOther:
						t.Errorf("%s, %s, %s: policy allows, form answered %d\n%s", name, vw.u.Role, a, p.StatusCode, p.Body)
					case !ok && p.StatusCode == http.StatusSeeOther:
						t.Errorf("%s, %s, %s: policy refuses (%s), form accepted it", name, vw.u.Role, a, why)
					case !ok && (p.StatusCode < 400 || p.StatusCode >= 500 || after != before):
						t.Errorf("%s, %s, %s: refused with %d, %d events written", name, vw.u.Role, a, p.StatusCode, after-before)
					}
				}
			}
		}
	})
}

// freshQueue numbers the queues; the dialects' subtests run in parallel.
var freshQueue atomic.Int64

// escalatedOnFreshQueue is workerEscalated on a queue of its own, so that
// sessions queued by earlier rows of a table are never leased instead.
func escalatedOnFreshQueue(t *testing.T, s *models.Store) string {
	t.Helper()
	ctx := context.Background()
	q := "q" + strconv.FormatInt(freshQueue.Add(1), 10)
	id, did := storetest.Delegated(ctx, t, s, q)
	l, err := s.Claim(ctx, q, "w-1", "token:worker", "")
	if err != nil || l == nil {
		t.Fatalf("lease: %v %v", l, err)
	}
	if _, err := s.SubmitResult(ctx, did, "token:worker", "", models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: id, Step: "check-eligibility", ResultType: "escalated",
		NextStep: "issue-refund", Question: "Is the refund allowed?",
	}); err != nil {
		t.Fatalf("escalated result: %v", err)
	}
	return id
}

func mustStateOf(t *testing.T, s *models.Store, id string) models.State {
	t.Helper()
	row, err := s.GetSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := row.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return st
}
