package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func bulkBox(id string) string {
	return `[data-testid="bulk-select"][data-session-id="` + id + `"]`
}

// TestBulkCancelWithSkip: an admin ticks three sessions of the sessions
// list, one of them completed already, and cancels them in bulk. The two
// open ones are cancelled; the summary names the completed one as skipped,
// with the reason, and it is left as it was.
func TestBulkCancelWithSkip(t *testing.T) {
	e := newEnv(t)
	root := e.user(t, "Root Admin", models.RoleAdmin)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	done := e.decided(t, ana)
	ctx := context.Background()
	a := storetest.Session(ctx, t, e.s, nil)
	b, _ := storetest.Delegated(ctx, t, e.s, "refunds")
	doneVersion := e.state(t, done).Version

	tc := tab(t)
	e.login(t, tc, root, "/console/sessions")
	var summary, skipped, skippedID string
	var applied int
	run(t, tc,
		chromedp.WaitVisible(`[data-testid="bulk-action"]`),
		// "Select all on this page" (app.js) ticks the three rows.
		chromedp.WaitVisible(`[data-bulk-select-all]`),
		chromedp.Click(`[data-bulk-select-all]`),
		chromedp.WaitVisible(`[data-bulk-count]`),
		chromedp.SetValue(`#bulk-action-select`, "cancel"),
		chromedp.SendKeys(`#bulk-reason`, "duplicate tickets"),
		// The Apply button asks for confirmation; answer yes.
		chromedp.Evaluate(`window.confirm = function () { return true; }`, nil),
		chromedp.Click(`[data-testid="bulk-apply"]`),
		chromedp.WaitVisible(`[data-testid="bulk-summary"]`),
		chromedp.Text(`[data-testid="bulk-summary"] .bulk-headline`, &summary),
		chromedp.Evaluate(`document.querySelectorAll('[data-testid="bulk-applied"]').length`, &applied),
		chromedp.Text(`[data-testid="bulk-skipped"]`, &skipped),
		chromedp.AttributeValue(`[data-testid="bulk-skipped"]`, "data-session-id", &skippedID, nil),
	)
	if applied != 2 || skippedID != done || !strings.Contains(skipped, "a session that is completed cannot be cancelled") {
		t.Fatalf("summary %q: %d applied, skipped %s %q", summary, applied, skippedID, skipped)
	}
	if !strings.Contains(summary, "2 of 3") {
		t.Errorf("headline %q", summary)
	}
	for _, id := range []string{a, b} {
		st := e.state(t, id)
		if st.Status != models.StatusCancelled || !strings.Contains(st.Outcome, "duplicate tickets") {
			t.Fatalf("%s: %s %q", id, st.Status, st.Outcome)
		}
	}
	if st := e.state(t, done); st.Status != models.StatusCompleted || st.Version != doneVersion {
		t.Fatalf("the skipped session changed: %s v%d", st.Status, st.Version)
	}
	// Back to the list: the cancelled sessions show as cancelled.
	var status string
	run(t, tc,
		chromedp.Click(`[data-testid="bulk-back"]`),
		chromedp.WaitVisible(bulkBox(a)),
		chromedp.AttributeValue(`tr[data-session-id="`+a+`"] [data-field="status"] [data-status]`, "data-status", &status, nil),
	)
	if status != "cancelled" {
		t.Fatalf("list shows %s", status)
	}
}
