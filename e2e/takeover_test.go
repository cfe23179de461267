package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/taskpilots/handoff/models"
)

// openFromInbox opens session id from the inbox the way an agent does:
// select its row, press Enter.
func (e *env) openFromInbox(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	run(t, ctx,
		chromedp.Navigate(e.base+"/console"),
		chromedp.WaitVisible(sessionRow(id)),
		chromedp.Click(sessionRow(id)+` a`),
		chromedp.WaitVisible(`[data-testid="escalation-package"]`),
	)
}

// claimAndDecision checks that the session's human events are the user's
// claim immediately followed by decision (one transaction).
func (e *env) claimAndDecision(t *testing.T, id string, u models.User, decision models.EventType) {
	t.Helper()
	evs, err := e.s.Timeline(context.Background(), id)
	if err != nil || len(evs) < 2 {
		t.Fatalf("timeline: %d events, %v", len(evs), err)
	}
	claim, dec := evs[len(evs)-2], evs[len(evs)-1]
	if claim.Type != models.EventHumanClaimed || dec.Type != decision || dec.Seq != claim.Seq+1 ||
		claim.Actor != u.Actor() || dec.Actor != u.Actor() {
		t.Fatalf("last events: %s #%d by %s, %s #%d by %s", claim.Type, claim.Seq, claim.Actor, dec.Type, dec.Seq, dec.Actor)
	}
}

// TestDecideInTwoInteractions: from the inbox, open an unclaimed escalation
// and record a decision with two interactions: type the resolution, click
// Complete. No separate claim.
func TestDecideInTwoInteractions(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	id := e.workerEscalated(t, nil)
	ctx := tab(t)
	e.login(t, ctx, ana, "/console")
	e.openFromInbox(t, ctx, id)
	run(t, ctx,
		chromedp.SendKeys(`#complete-resolution`, "Refund approved within policy"), // 1
		chromedp.Click(`[data-testid="action-complete"] button.btn-primary`),       // 2
		chromedp.WaitVisible(`[data-testid="event-row"][data-type="human.completed"]`),
	)
	if st := e.state(t, id); st.Status != models.StatusCompleted || st.Outcome != "Refund approved within policy" {
		t.Fatalf("after deciding: %s %q", st.Status, st.Outcome)
	}
	e.claimAndDecision(t, id, ana, models.EventHumanCompleted)
}

// TestAcceptRecommendationOneClick: the worker recommended issue-refund; one
// click queues it on the session's queue, claiming the escalation with it.
func TestAcceptRecommendationOneClick(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	id := e.workerEscalated(t, nil)
	ctx := tab(t)
	e.login(t, ctx, ana, "/console")
	e.openFromInbox(t, ctx, id)
	var label string
	run(t, ctx,
		chromedp.Text(`[data-testid="action-accept-recommendation"] button.btn-primary`, &label),
		chromedp.Click(`[data-testid="action-accept-recommendation"] button.btn-primary`), // 1
		chromedp.WaitVisible(`[data-testid="event-row"][data-type="human.resumed"]`),
	)
	if !strings.Contains(label, "issue-refund") {
		t.Errorf("button = %q, want it to name the step", label)
	}
	st := e.state(t, id)
	if st.Status != models.StatusQueued || st.Delegation == nil || st.Delegation.Step != "issue-refund" || st.Delegation.Queue != "refunds" {
		t.Fatalf("after accepting: %s %+v", st.Status, st.Delegation)
	}
	e.claimAndDecision(t, id, ana, models.EventHumanResumed)
}

// TestSubmitAndNext: a decision sent with Ctrl+Enter (the keyboard path of
// "Submit and next") opens the next escalation instead of the closed one;
// the button on the last one goes back to the inbox.
func TestSubmitAndNext(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	first := e.workerEscalated(t, nil)
	second := e.workerEscalated(t, nil)
	ctx := tab(t)
	e.login(t, ctx, ana, "/console")
	e.openFromInbox(t, ctx, first)
	var loc string
	run(t, ctx,
		chromedp.SendKeys(`#complete-resolution`, "done"),
		chromedp.KeyEvent(kb.Enter, chromedp.KeyModifiers(input.ModifierCtrl)),
		// The page is replaced by the next one; wait for it, not for the
		// hooks both pages have.
		chromedp.WaitVisible(`form[action="/console/sessions/`+second+`/complete"]`),
		chromedp.Location(&loc),
	)
	if !strings.HasSuffix(loc, "/console/sessions/"+second) {
		t.Fatalf("after submit and next on %s: at %s, want %s", first, loc, second)
	}
	if st := e.state(t, first); st.Status != models.StatusCompleted {
		t.Fatalf("first session: %s", st.Status)
	}
	run(t, ctx,
		chromedp.SendKeys(`#complete-resolution`, "done too"),
		chromedp.Click(`[data-testid="action-complete"] [data-testid="action-next"]`),
		chromedp.WaitVisible(`#inbox-list`),
		chromedp.Location(&loc),
	)
	if !strings.HasSuffix(loc, "/console/inbox") {
		t.Fatalf("after the last one: at %s, want the inbox", loc)
	}
	if st := e.state(t, second); st.Status != models.StatusCompleted {
		t.Fatalf("second session: %s", st.Status)
	}
}
