package e2e

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestAgentAnswersInput: an agent finds a session in the inbox's "Waiting on
// input" view, opens it, answers the worker's question and delegates the
// next step from the form; both events are written as the agent and the
// step is queued.
func TestAgentAnswersInput(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	ctx := context.Background()
	id, did := storetest.Delegated(ctx, t, e.s, "refunds")
	l, err := e.s.Claim(ctx, "refunds", "w-1", "token:worker", "")
	if err != nil || l == nil {
		t.Fatalf("lease: %v %v", l, err)
	}
	if _, err := e.s.SubmitResult(ctx, did, "token:worker", "", models.ResultInput{LeaseToken: l.LeaseToken, SessionID: id,
		Step: "check-eligibility", ResultType: models.ResultNeedsInput, Question: "Which card was charged?"}); err != nil {
		t.Fatal(err)
	}
	b := tab(t)
	e.login(t, b, ana, "/console/inbox/waiting")
	row := `[data-testid="waiting-row"][data-session-id="` + id + `"] a`
	form := `[data-testid="action-provide-input"]`
	run(t, b,
		chromedp.WaitVisible(row),
		chromedp.Click(row),
		chromedp.WaitVisible(form),
		chromedp.SendKeys(`#provide-input-answer`, "Visa ending 4242"),
		chromedp.Click(form+` details summary`),
		chromedp.SendKeys(form+` [name="delegate.queue"]`, "payments"),
		chromedp.SendKeys(form+` [name="delegate.step"]`, "issue-refund"),
		chromedp.Click(form+` button[type="submit"]`),
		chromedp.WaitVisible(`[data-testid="event-row"][data-type="input.provided"]`),
	)
	st := e.state(t, id)
	if st.Status != models.StatusQueued || st.Facts[models.FactInputAnswer] != "Visa ending 4242" || st.Delegation == nil || st.Delegation.Queue != "payments" {
		t.Fatalf("state after the answer: %s %v %+v", st.Status, st.Facts, st.Delegation)
	}
	evs, err := e.s.Timeline(ctx, id, models.EventInputProvided, models.EventDelegationCreated)
	if err != nil || len(evs) != 3 || evs[1].Actor != ana.Actor() || evs[2].Actor != ana.Actor() {
		t.Fatalf("events = %+v, %v", evs, err)
	}
}
