package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// TestConsoleStatusExplains: every status says on the session page what the
// session waits for and since when, and an admin pauses, resumes, escalates
// and cancels from the page (what the policy allows), each step explained.
func TestConsoleStatusExplains(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{})
		ada, _ := agent(t, b, "Ada Admin", models.RoleAdmin)
		explain := func(id string) (string, string) {
			t.Helper()
			sel := getDoc(ada, "/console/sessions/"+id).Find(`[data-testid="status-explanation"]`)
			kind, _ := sel.Attr("data-kind")
			return kind, squash(sel)
		}
		want := func(id, kind string, parts ...string) {
			t.Helper()
			k, got := explain(id)
			if k != kind {
				t.Errorf("kind = %q, want %q (%q)", k, kind, got)
			}
			for _, p := range parts {
				if !strings.Contains(got, p) {
					t.Errorf("explanation %q lacks %q", got, p)
				}
			}
		}

		// Queued: waiting for a worker on its queue.
		queued, _ := storetest.Delegated(ctx, t, s, "parked")
		want(queued, "queued", "Waiting for a worker on queue parked", "step check-eligibility", "since ", "UTC")

		// The admin pauses it from the page with a reason.
		path := "/console/sessions/" + queued
		d := getDoc(ada, path)
		if p := submitForm(ada, form(d, "pause"), map[string]string{"reason": "waiting for the warehouse"}); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("pause: %d\n%s", p.StatusCode, p.Body)
		}
		want(queued, "paused", "Paused by Ada Admin", "waiting for the warehouse")
		d = getDoc(ada, path)
		if form(d, "pause").Length() != 0 || form(d, "unpause").Length() != 1 {
			t.Fatalf("paused page offers %v", panelForms(d))
		}
		if p := submitForm(ada, form(d, "unpause"), nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("unpause: %d\n%s", p.StatusCode, p.Body)
		}
		want(queued, "queued", "Waiting for a worker on queue parked")

		// Escalate pulls it into human hands; cancel closes it.
		d = getDoc(ada, path)
		if p := submitForm(ada, form(d, "escalate"), map[string]string{"reason": "customer called twice"}); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("escalate: %d\n%s", p.StatusCode, p.Body)
		}
		want(queued, "escalated", "Waiting for a human", "customer called twice")
		d = getDoc(ada, path)
		if p := submitForm(ada, form(d, "cancel"), map[string]string{"reason": "duplicate"}); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("cancel: %d\n%s", p.StatusCode, p.Body)
		}
		want(queued, "cancelled", "Cancelled by Ada Admin", "duplicate")
		if st := mustStateOf(t, s, queued); st.Status != models.StatusCancelled {
			t.Fatalf("status = %s", st.Status)
		}

		// Awaiting input: the question.
		want(awaitingSession(t, s, "Which card was charged?"), "awaiting_input", "Waiting for an answer", "Which card was charged?")

		// Stalled: the step with no route.
		stalled, did := storetest.Delegated(ctx, t, s, "stall")
		l, err := s.Claim(ctx, "stall", "w", "test:worker", "")
		if err != nil || l == nil || l.DelegationID != did {
			t.Fatal(l, err)
		}
		if _, err := s.SubmitResult(ctx, did, "test:worker", "", models.ResultInput{LeaseToken: l.LeaseToken, SessionID: stalled,
			Step: l.Step, ResultType: models.ResultCompleted, Output: json.RawMessage(`{}`),
			Evidence: []models.Evidence{{Claim: "ok"}}, NextStep: "notify-customer"}); err != nil {
			t.Fatal(err)
		}
		want(stalled, "stalled", "Stalled: no route for notify-customer")
	})
}
