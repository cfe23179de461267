package e2e

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/taskpilots/handoff/models"
)

// decided has agent claim and complete a worker escalation (escalated at
// version 4); it returns the session id.
func (e *env) decided(t *testing.T, agent models.User) string {
	t.Helper()
	ctx := context.Background()
	id := e.workerEscalated(t, []models.Evidence{{Claim: "order paid 2026-11-20", Source: "orders-db:1182"}})
	v := int64(4)
	if _, err := e.s.ClaimEscalation(ctx, id, agent, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
		t.Fatal(err)
	}
	v = 5
	if _, err := e.s.CompleteHuman(ctx, id, agent, "", models.CompleteInput{ExpectedVersion: &v, Resolution: "refunded"}); err != nil {
		t.Fatal(err)
	}
	return id
}

// awaitPromise makes Evaluate wait for the promise the expression returns.
func awaitPromise(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }

// TestReviewerScoresWithKeyboard: a reviewer opens the next item with n,
// scores the five criteria with the digit keys alone (each moves on to the
// next criterion), and saves with Enter; the score is a review.scored event
// at the escalation version.
func TestReviewerScoresWithKeyboard(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	rita := e.user(t, "Rita Reviewer", models.RoleReviewer)
	id := e.decided(t, ana)
	ctx := tab(t)
	e.login(t, ctx, rita, "/console/reviews")

	item := `[data-testid="review-item"][data-session-id="` + id + `"]`
	var focused []string
	focus := func() chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var key string
			err := chromedp.Evaluate(`(document.activeElement.closest("fieldset[data-criterion]") || document.activeElement).getAttribute("data-criterion") || document.activeElement.name`, &key).Do(ctx)
			focused = append(focused, key)
			return err
		})
	}
	run(t, ctx,
		chromedp.WaitVisible(item),
		chromedp.KeyEvent("n"),
		chromedp.WaitVisible(`[data-testid="rubric-form"]`),
		focus(),
		chromedp.KeyEvent("4"), focus(),
		chromedp.KeyEvent("5"), focus(),
		chromedp.KeyEvent("3"), focus(),
		chromedp.KeyEvent("4"), focus(),
		chromedp.KeyEvent("2"), focus(),
		chromedp.KeyEvent(kb.Enter),
		// The queue has nothing more for Rita: back to it, with the banner.
		chromedp.WaitVisible(`[data-testid="review-empty"]`),
	)
	want := "goal_clear,state_current,evidence_sufficient,risks_explicit,next_step_actionable,comment"
	if got := strings.Join(focused, ","); got != want {
		t.Errorf("focus moved through %s, want %s", got, want)
	}
	evs, err := e.s.Timeline(context.Background(), id, models.EventReviewScored)
	if err != nil || len(evs) != 1 {
		t.Fatalf("review events = %d, %v", len(evs), err)
	}
	var p models.ReviewPayload
	if err := json.Unmarshal([]byte(evs[0].Payload), &p); err != nil {
		t.Fatal(err)
	}
	wantScores := map[string]int{"goal_clear": 4, "state_current": 5, "evidence_sufficient": 3, "risks_explicit": 4, "next_step_actionable": 2}
	for k, v := range wantScores {
		if p.Scores[k] != v {
			t.Errorf("score %s = %d, want %d", k, p.Scores[k], v)
		}
	}
	if p.AtVersion != 4 || p.Reviewer != rita.Actor() || evs[0].Actor != rita.Actor() {
		t.Errorf("payload = %+v by %s", p, evs[0].Actor)
	}
}

// TestAdminFiltersAuditAndExportsCSV: an admin filters the audit trail by
// ticket and event type, expands a row to its JSON, and downloads the CSV
// of the filtered view (fetched by the page itself, with its cookies).
func TestAdminFiltersAuditAndExportsCSV(t *testing.T) {
	e := newEnv(t)
	root := e.user(t, "Root Admin", models.RoleAdmin)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	id := e.decided(t, ana)
	e.decided(t, ana) // another session, filtered out by the session filter
	ctx := tab(t)
	e.login(t, ctx, root, "/console/audit")

	var rows int
	var rowJSON, csvText string
	run(t, ctx,
		chromedp.WaitVisible(`[data-testid="audit-filter-form"]`),
		chromedp.SetValue(`#audit-session`, id),
		chromedp.SetValue(`#audit-type`, "human.completed"),
		chromedp.Click(`[data-testid="audit-filter"]`),
		// The unfiltered page has human.completed rows too: wait until the
		// other session's rows are gone, then for the filtered list.
		chromedp.WaitNotPresent(fmt.Sprintf(`[data-testid="audit-row"]:not([data-session-id=%q])`, id)),
		chromedp.WaitVisible(`[data-testid="audit-row"][data-type="human.completed"]`),
		chromedp.Evaluate(`document.querySelectorAll('[data-testid="audit-row"]').length`, &rows),
		chromedp.Click(`[data-testid="audit-row"] summary`),
		chromedp.WaitVisible(`[data-testid="audit-row"] [data-testid="audit-json"]`),
		chromedp.Text(`[data-testid="audit-row"] [data-testid="audit-json"]`, &rowJSON),
		chromedp.Evaluate(`fetch(document.querySelector('[data-testid="export-csv"]').href).then(r => {
			if (!r.ok || !r.headers.get("content-type").startsWith("text/csv")) { throw new Error("status " + r.status); }
			return r.text();
		})`, &csvText, awaitPromise),
	)
	if rows != 1 {
		t.Fatalf("filtered rows = %d, want 1", rows)
	}
	var ev map[string]any
	if err := json.Unmarshal([]byte(rowJSON), &ev); err != nil || ev["session_id"] != id || ev["type"] != "human.completed" {
		t.Fatalf("row JSON = %q (%v)", rowJSON, err)
	}
	recs, err := csv.NewReader(strings.NewReader(csvText)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0][0] != "created_at" || recs[1][2] != id || recs[1][4] != "human.completed" {
		t.Fatalf("csv = %v", recs)
	}
}

// TestDisabledUserCannotLogIn: an admin disables a user from the users
// page; the user's open login ends, and logging in again is refused.
func TestDisabledUserCannotLogIn(t *testing.T) {
	e := newEnv(t)
	root := e.user(t, "Root Admin", models.RoleAdmin)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	anaTab, rootTab := tab(t), tab(t)
	e.login(t, anaTab, ana, "/console/sessions")
	e.login(t, rootTab, root, "/console/admin/users")

	row := `[data-testid="user-row"][data-email="` + ana.Email + `"]`
	var status string
	run(t, rootTab,
		chromedp.WaitVisible(row),
		// The disable form asks for confirmation; answer yes for the test.
		chromedp.Evaluate(`window.confirm = () => true`, nil),
		chromedp.Click(row+` [data-testid="disable-user"]`),
		chromedp.WaitVisible(row+` [data-testid="enable-user"]`),
		chromedp.Text(row+` [data-field="status"]`, &status),
	)
	if strings.TrimSpace(status) != "disabled" {
		t.Fatalf("status after disabling = %q", status)
	}
	var loginError string
	run(t, anaTab,
		// Her open login ends on the next page she opens.
		chromedp.Navigate(e.base+"/console/sessions"),
		chromedp.WaitVisible(`[data-testid="login-form"]`),
		chromedp.SetValue(`#email`, ana.Email),
		chromedp.SetValue(`#password`, password),
		chromedp.Submit(`[data-testid="login-form"]`),
		chromedp.WaitVisible(`[data-testid="login-error"]`),
		chromedp.Text(`[data-testid="login-error"]`, &loginError),
	)
	if loginError == "" {
		t.Fatal("no login error shown")
	}
	if u, err := e.s.GetUser(context.Background(), ana.ID); err != nil || !u.Disabled {
		t.Fatalf("user = %+v, %v", u, err)
	}
}
