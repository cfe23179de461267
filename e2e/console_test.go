package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/taskpilots/handoff/models"
)

func sessionRow(id string) string {
	return `[data-testid="inbox-row"][data-session-id="` + id + `"]`
}

// TestAgentClaimsAndCompletes: log in, find the escalation in the inbox, open
// it and claim it with the keyboard, complete it with the form, and see the
// event in the timeline, written as the agent under the same session id.
func TestAgentClaimsAndCompletes(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	id := e.workerEscalated(t, []models.Evidence{{Claim: "order paid 2026-11-20", Source: "orders-db:1182"}})
	ctx := tab(t)

	e.login(t, ctx, ana, "/console")
	var helpOpen, helpClosed bool
	run(t, ctx,
		chromedp.WaitVisible(sessionRow(id)),
		// ? toggles the shortcuts help.
		chromedp.KeyEvent("?"),
		chromedp.Evaluate(`document.getElementById("shortcuts-help").open`, &helpOpen),
		chromedp.KeyEvent("?"),
		chromedp.Evaluate(`!document.getElementById("shortcuts-help").open`, &helpClosed),
		// j selects the first row, Enter opens it.
		chromedp.KeyEvent("j"),
		chromedp.WaitVisible(sessionRow(id)+`.is-selected`),
		chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(`[data-testid="escalation-package"]`),
		// c claims. The complete form is offered before claiming too (a
		// decision claims in the same transaction), so wait for the holder
		// line that only the page after the claim shows; otherwise the form
		// found could be the old page's, replaced mid-typing.
		chromedp.KeyEvent("c"),
		chromedp.WaitVisible(`[data-testid="holder"]`),
		chromedp.WaitVisible(`[data-testid="action-complete"]`),
		chromedp.SendKeys(`#complete-resolution`, "Refund approved: paid order, within policy"),
		chromedp.Click(`[data-testid="action-complete"] button[type="submit"]`),
		chromedp.WaitVisible(`[data-testid="event-row"][data-type="human.completed"]`),
	)
	if !helpOpen || !helpClosed {
		t.Errorf("? did not toggle the help dialog (open %v, closed again %v)", helpOpen, helpClosed)
	}
	st := e.state(t, id)
	if st.Status != models.StatusCompleted || st.Outcome != "Refund approved: paid order, within policy" {
		t.Fatalf("state after completing: %s %q", st.Status, st.Outcome)
	}
	evs, err := e.s.Timeline(context.Background(), id, models.EventHumanClaimed, models.EventHumanCompleted)
	if err != nil || len(evs) != 2 || evs[0].Actor != ana.Actor() || evs[1].Actor != ana.Actor() {
		t.Fatalf("human events = %+v, %v", evs, err)
	}
}

// TestClaimRace: two agents open the same escalation; the second claim is
// refused and shows who holds it. Exactly one holds it.
func TestClaimRace(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	ben := e.user(t, "Ben Agent", models.RoleAgent)
	id := e.workerEscalated(t, nil)
	anaTab, benTab := tab(t), tab(t)
	e.login(t, anaTab, ana, "/console/sessions/"+id)
	e.login(t, benTab, ben, "/console/sessions/"+id)

	claim := `[data-testid="action-claim"] button[type="submit"]`
	run(t, anaTab, chromedp.WaitVisible(claim))
	run(t, benTab, chromedp.Click(claim), chromedp.WaitVisible(`[data-testid="holder"]`))
	var holder, held string
	run(t, anaTab,
		chromedp.Click(claim),
		chromedp.WaitVisible(`[data-testid="conflict-banner"]`),
		chromedp.Text(`[data-testid="conflict-holder"]`, &holder),
		chromedp.Text(`[data-testid="holder"]`, &held),
	)
	if holder != "Ben Agent" {
		t.Errorf("conflict names %q as the holder", holder)
	}
	if want := "Held by Ben Agent since"; !strings.Contains(held, want) {
		t.Errorf("holder line = %q", held)
	}
	if st := e.state(t, id); st.Assignee != ben.Actor() {
		t.Fatalf("assignee = %q, want %q", st.Assignee, ben.Actor())
	}
	claims, err := e.s.Timeline(context.Background(), id, models.EventHumanClaimed)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claims = %d, %v", len(claims), err)
	}
}

// TestStaleFormKeepsText: an agent types a resolution while the session
// moves on; the submit is refused with the conflict banner and the text is
// still in the form.
func TestStaleFormKeepsText(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	id := e.workerEscalated(t, nil)
	v := int64(4)
	if _, err := e.s.ClaimEscalation(context.Background(), id, ana, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
		t.Fatal(err)
	}
	ctx := tab(t)
	e.login(t, ctx, ana, "/console/sessions/"+id)
	const typed = "Refund approved after checking the carrier's tracking"
	run(t, ctx, chromedp.SendKeys(`#complete-resolution`, typed))

	// Meanwhile the session moves on (a note from another tab).
	v = 5
	if _, err := e.s.AddNote(context.Background(), id, ana, "", models.NoteInput{ExpectedVersion: &v, Text: "carrier says delivered"}); err != nil {
		t.Fatal(err)
	}

	var kept, banner string
	run(t, ctx,
		chromedp.Click(`[data-testid="action-complete"] button[type="submit"]`),
		chromedp.WaitVisible(`[data-testid="conflict-banner"]`),
		chromedp.Text(`[data-testid="conflict-banner"]`, &banner),
		chromedp.Value(`#complete-resolution`, &kept),
	)
	if kept != typed {
		t.Errorf("resolution after the conflict = %q, want %q", kept, typed)
	}
	if !strings.Contains(banner, "human.noted") || !strings.Contains(banner, "Nothing was saved") {
		t.Errorf("banner = %q", banner)
	}
	if st := e.state(t, id); st.Status != models.StatusHumanActive || st.Version != 6 {
		t.Fatalf("the stale submit wrote: %s v%d", st.Status, st.Version)
	}
}

// TestEvidenceIsText: markup in a worker's evidence is shown as text; it
// never becomes elements and never runs.
func TestEvidenceIsText(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	const claim = `<img src=x onerror="alert('img')"><script>alert('script')</script>`
	const source = `"><svg onload=alert('svg')>`
	id := e.workerEscalated(t, []models.Evidence{{Claim: claim, Source: source}})
	ctx := tab(t)
	e.login(t, ctx, ana, "/console/sessions/"+id)

	var got struct {
		Claim    string `json:"claim"`
		Source   string `json:"source"`
		Injected int    `json:"injected"`
	}
	run(t, ctx,
		chromedp.WaitVisible(`[data-testid="evidence-claim"]`),
		chromedp.Evaluate(`({
			claim: document.querySelector('[data-testid="evidence-claim"]').textContent,
			source: document.querySelector('[data-testid="evidence-source"]').textContent,
			injected: document.querySelectorAll('main img, main svg, [data-testid="escalation-package"] script').length
		})`, &got),
	)
	if got.Claim != claim || got.Source != source {
		t.Errorf("evidence shown as %q / %q", got.Claim, got.Source)
	}
	if got.Injected != 0 {
		t.Errorf("%d injected elements in the page", got.Injected)
	}
}
