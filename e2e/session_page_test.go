package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/taskpilots/handoff/models"
)

// TestNotesVisibleToNextAgent: Ana writes a note and hands the session
// back; after the worker escalates again, Ben opens it and reads her note
// in the package (and the worker got it in its packet).
func TestNotesVisibleToNextAgent(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	ben := e.user(t, "Ben Agent", models.RoleAgent)
	id := e.workerEscalated(t, nil)
	ctx := tab(t)
	e.login(t, ctx, ana, "/console/sessions/"+id)
	note := "Customer confirmed by phone: refund to the original card only."
	run(t, ctx,
		chromedp.Click(`[data-testid="action-note"] summary`),
		chromedp.SendKeys(`#note-text`, note),
		chromedp.Click(`[data-testid="action-note"] button[type="submit"]`),
		chromedp.WaitVisible(`[data-testid="event-row"][data-type="human.noted"]`),
		chromedp.Click(`[data-testid="action-hand-back"] summary`),
		chromedp.Click(`[data-testid="action-hand-back"] button[type="submit"]:not([name])`),
		chromedp.WaitVisible(`[data-testid="event-row"][data-type="human.handed_back"]`),
	)
	// The next worker's packet carries the note.
	bg := context.Background()
	l, err := e.s.Claim(bg, "refunds", "w-2", "token:worker", "")
	if err != nil || l == nil {
		t.Fatalf("lease: %v %v", l, err)
	}
	packet, _ := json.Marshal(l.Packet)
	if !strings.Contains(string(packet), note) {
		t.Errorf("the worker's packet lacks the note: %s", packet)
	}
	if _, err := e.s.SubmitResult(bg, l.DelegationID, "token:worker", "", models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: id, Step: l.Step, ResultType: "escalated",
		Output: json.RawMessage(`{}`), Question: "Card expired; refund how?",
	}); err != nil {
		t.Fatal(err)
	}
	ctx2 := tab(t)
	e.login(t, ctx2, ben, "/console/sessions/"+id)
	var text, by string
	run(t, ctx2,
		chromedp.Text(`[data-testid="escalation-package"] [data-testid="note-row"] [data-testid="note-text"]`, &text),
		chromedp.Text(`[data-testid="escalation-package"] [data-testid="note-row"] [data-testid="note-by"]`, &by),
	)
	if text != note || by != "Ana Agent" {
		t.Fatalf("note row = %q by %q", text, by)
	}
	// The timeline says it in words, the note inline.
	var line string
	run(t, ctx2, chromedp.Text(`[data-testid="event-row"][data-type="human.noted"]`, &line))
	if !strings.Contains(line, "Ana Agent added a note") || !strings.Contains(line, note) {
		t.Errorf("timeline row = %q", line)
	}
}

// TestChangeNoticeKeepsTypedText: while Ana types a note, Bo claims the
// session; the page tells her so, and her text is still in the form.
func TestChangeNoticeKeepsTypedText(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	bo := e.user(t, "Bo Agent", models.RoleAgent)
	id := e.workerEscalated(t, nil)
	ctx := tab(t)
	e.login(t, ctx, ana, "/console/sessions/"+id)
	typed := "Half-written thought about the refund"
	run(t, ctx,
		chromedp.Click(`[data-testid="action-note"] summary`),
		chromedp.SendKeys(`#note-text`, typed),
	)
	v := int64(4)
	if _, err := e.s.ClaimEscalation(context.Background(), id, bo, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
		t.Fatal(err)
	}
	var notice, value string
	run(t, ctx,
		chromedp.WaitVisible(`[data-testid="change-notice"]`),
		chromedp.Text(`[data-testid="change-notice"]`, &notice),
		chromedp.Value(`#note-text`, &value),
	)
	if !strings.Contains(notice, "v5: claimed by Bo Agent") || !strings.Contains(notice, "reload") {
		t.Errorf("notice = %q", notice)
	}
	if value != typed {
		t.Errorf("typed text = %q, want %q", value, typed)
	}
}

// TestSessionPageAt390px: on a 390 px wide screen the session page does not
// scroll sideways, and the takeover panel comes before the package.
func TestSessionPageAt390px(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	id := e.workerEscalated(t, []models.Evidence{{
		Claim:  "order paid " + strings.Repeat("with-a-very-long-unbroken-reference-", 6),
		Source: "orders-db:" + strings.Repeat("0123456789abcdef", 8),
	}})
	ctx := tab(t)
	var scroll, client int
	var takeoverTop, packageTop float64
	run(t, ctx, chromedp.EmulateViewport(390, 844))
	e.login(t, ctx, ana, "/console/sessions/"+id)
	run(t, ctx,
		chromedp.WaitVisible(`[data-testid="escalation-package"]`),
		// Open every disclosure: the payloads and forms must wrap too.
		chromedp.Evaluate(`document.querySelectorAll("details").forEach(d => d.open = true)`, nil),
		chromedp.Evaluate(`document.documentElement.scrollWidth`, &scroll),
		chromedp.Evaluate(`document.documentElement.clientWidth`, &client),
		chromedp.Evaluate(`document.querySelector('[data-testid="takeover"]').getBoundingClientRect().top`, &takeoverTop),
		chromedp.Evaluate(`document.querySelector('[data-testid="escalation-package"]').getBoundingClientRect().top`, &packageTop),
	)
	if scroll > client {
		var wide string
		run(t, ctx, chromedp.Evaluate(`Array.from(document.querySelectorAll("body *")).filter(el => el.getBoundingClientRect().right > document.documentElement.clientWidth + 1).slice(0, 5).map(el => el.tagName + "." + el.className + "#" + (el.dataset.testid || "")).join(", ")`, &wide))
		t.Errorf("the page is %d px wide in a %d px viewport; too wide: %s", scroll, client, wide)
	}
	if takeoverTop >= packageTop {
		t.Errorf("takeover at %.0f px, package at %.0f px: the takeover panel should come first", takeoverTop, packageTop)
	}
}

// TestUnknownQueueAsksFirst: handing back to a queue that nothing serves
// shows the known queues and asks for a tick, keeping what was typed; ticked,
// the hand-back goes through.
func TestUnknownQueueAsksFirst(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	id := e.workerEscalated(t, nil)
	ctx := tab(t)
	e.login(t, ctx, ana, "/console/sessions/"+id)
	var known, kept string
	run(t, ctx,
		chromedp.Click(`[data-testid="action-hand-back"] summary`),
		chromedp.SendKeys(`#hand-back-queue`, "refundz"),
		chromedp.Click(`[data-testid="action-hand-back"] button[type="submit"]:not([name])`),
		chromedp.WaitVisible(`[data-testid="queue-confirm"]`),
		chromedp.Text(`[data-testid="known-queues"]`, &known),
		chromedp.Value(`#hand-back-queue`, &kept),
	)
	if !strings.Contains(known, "refunds") || kept != "refundz" {
		t.Fatalf("known queues %q, kept %q", known, kept)
	}
	if st := e.state(t, id); st.Status != models.StatusEscalated {
		t.Fatalf("something was written: %s", st.Status)
	}
	run(t, ctx,
		chromedp.Click(`[data-testid="confirm-queue"]`),
		chromedp.Click(`[data-testid="action-hand-back"] button[type="submit"]:not([name])`),
		chromedp.WaitVisible(`[data-testid="event-row"][data-type="human.handed_back"]`),
	)
	if st := e.state(t, id); st.Delegation == nil || st.Delegation.Queue != "refundz" {
		t.Fatalf("after confirming: %+v", st.Delegation)
	}
}

// TestTimesInBrowserZone: a browser in Tokyo reads the timeline in Tokyo
// time, with UTC on hover.
func TestTimesInBrowserZone(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	id := e.workerEscalated(t, nil)
	ctx := tab(t)
	run(t, ctx, emulation.SetTimezoneOverride("Asia/Tokyo"))
	e.login(t, ctx, ana, "/console/sessions/"+id)
	var text, title, zone string
	sel := `[data-testid="event-row"][data-type="session.created"] time`
	run(t, ctx,
		chromedp.WaitVisible(sel+`[data-local]`),
		chromedp.Text(sel, &text),
		chromedp.AttributeValue(sel, "title", &title, nil),
		chromedp.AttributeValue(sel, "data-local", &zone, nil),
	)
	evs, err := e.s.Timeline(context.Background(), id, models.EventSessionCreated)
	if err != nil || len(evs) != 1 {
		t.Fatal(err)
	}
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	at := evs[0].CreatedAt.Time
	if zone != "Asia/Tokyo" || !strings.Contains(text, at.In(tokyo).Format("15:04")) || !strings.Contains(text, "GMT+9") {
		t.Errorf("time in Tokyo = %q (zone %q), want %s GMT+9", text, zone, at.In(tokyo).Format("15:04"))
	}
	if title != at.UTC().Format("2006-01-02 15:04:05")+" UTC" {
		t.Errorf("title = %q, want the UTC time", title)
	}
}
