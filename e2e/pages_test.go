package e2e

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/demo"
	"github.com/taskpilots/handoff/models/storetest"
)

// axeSource is axe-core, vendored (see testdata/axe/README.md): the tests
// inject it into each page, so they need no network and no npm install.
//
//go:embed testdata/axe/axe.min.js
var axeSource string

// consolePage is one page of the console that the page-wide checks visit.
type consolePage struct {
	name string
	path string
	// review, audit or admin: the pages this package checks at 390 px (the
	// inbox and the session page have their own narrow-screen tests).
	narrow bool
}

// demoEnv is the product with the demo data set (every session status, open
// escalations, decided ones scored by the demo reviewer), an admin who sees
// every page, and one webhook, so that every console page has something to
// show.
func demoEnv(t *testing.T) (*env, models.User) {
	t.Helper()
	e := newEnv(t)
	ctx := context.Background()
	if _, err := demo.Seed(ctx, e.s); err != nil {
		t.Fatalf("demo seed: %v", err)
	}
	root := e.user(t, "Root Admin", models.RoleAdmin)
	if _, _, err := e.s.CreateWebhook(ctx, root.Actor(), "", models.WebhookInput{
		URL: "https://hooks.example.com/taskpilots", Description: "helpdesk sync"}); err != nil {
		t.Fatalf("webhook: %v", err)
	}
	return e, root
}

// consolePages lists every console page with the data e holds: the session
// page once per status, the review item of a decided escalation, the admin
// pages and an error page.
func consolePages(t *testing.T, e *env) []consolePage {
	t.Helper()
	ctx := context.Background()
	page, err := e.s.ListSessions(ctx, models.SessionQuery{Limit: models.MaxSessionsLimit})
	if err != nil {
		t.Fatal(err)
	}
	byStatus := map[models.Status]string{}
	for _, r := range page.Sessions {
		if byStatus[r.Status] == "" {
			byStatus[r.Status] = r.ID
		}
	}
	var item struct {
		SessionID string
		AtVersion int64
	}
	if err := e.s.DB.Raw(`SELECT session_id, at_version FROM review_items ORDER BY decided_at LIMIT 1`).Scan(&item).Error; err != nil || item.SessionID == "" {
		t.Fatalf("no review item (%v)", err)
	}
	var hook struct{ ID string }
	if err := e.s.DB.Raw(`SELECT id FROM webhooks LIMIT 1`).Scan(&hook).Error; err != nil || hook.ID == "" {
		t.Fatalf("no webhook (%v)", err)
	}
	pages := []consolePage{
		{name: "inbox", path: "/console/inbox"},
		{name: "waiting", path: "/console/inbox/waiting"},
		{name: "sessions", path: "/console/sessions"},
		{name: "review queue", path: "/console/reviews", narrow: true},
		{name: "review statistics", path: "/console/reviews/stats", narrow: true},
		{name: "review item", path: fmt.Sprintf("/console/reviews/%s/%d", item.SessionID, item.AtVersion), narrow: true},
		{name: "audit trail", path: "/console/audit", narrow: true},
		{name: "admin", path: "/console/admin", narrow: true},
		{name: "metrics", path: "/console/admin/metrics", narrow: true},
		{name: "admin log", path: "/console/admin/audit", narrow: true},
		{name: "verify", path: "/console/admin/verify", narrow: true},
		{name: "users", path: "/console/admin/users", narrow: true},
		{name: "tokens", path: "/console/admin/tokens", narrow: true},
		{name: "queues", path: "/console/admin/queues", narrow: true},
		{name: "webhooks", path: "/console/admin/webhooks", narrow: true},
		{name: "webhook", path: "/console/admin/webhooks/" + hook.ID, narrow: true},
		{name: "password", path: "/console/account/password", narrow: true},
		{name: "error", path: "/console/sessions/ses_doesnotexist", narrow: true},
	}
	for _, st := range models.AllStatuses {
		if id := byStatus[st]; id != "" {
			pages = append(pages, consolePage{name: "session " + string(st), path: "/console/sessions/" + id})
		} else {
			t.Errorf("the demo data has no %s session", st)
		}
	}
	return pages
}

// axeViolation is what the test reports of one axe violation.
type axeViolation struct {
	ID      string   `json:"id"`
	Impact  string   `json:"impact"`
	Help    string   `json:"help"`
	Targets []string `json:"targets"`
	Summary string   `json:"summary"`
}

// runAxe injects axe-core into the page and returns its serious and critical
// violations.
func runAxe(t *testing.T, ctx context.Context) []axeViolation {
	t.Helper()
	var got []axeViolation
	run(t, ctx,
		chromedp.Evaluate(axeSource, nil),
		chromedp.Evaluate(`axe.run(document, {resultTypes: ["violations"]}).then(r =>
			r.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v => ({
				id: v.id, impact: v.impact, help: v.help,
				targets: v.nodes.slice(0, 5).map(n => n.target.join(" ")),
				summary: (v.nodes[0] && v.nodes[0].failureSummary) || "",
			})))`, &got, awaitPromise),
	)
	return got
}

// TestAccessibility: axe-core finds no serious or critical violation on any
// console page, the login page included.
func TestAccessibility(t *testing.T) {
	e, root := demoEnv(t)
	pages := consolePages(t, e)
	ctx := tabWithin(t, 5*time.Minute)

	check := func(name string) {
		t.Helper()
		for _, v := range runAxe(t, ctx) {
			t.Errorf("%s: %s (%s): %s\n  at %s\n  %s", name, v.ID, v.Impact, v.Help,
				strings.Join(v.Targets, " | "), strings.ReplaceAll(v.Summary, "\n", "\n  "))
		}
	}
	run(t, ctx, chromedp.Navigate(e.base+"/login"), chromedp.WaitVisible(`[data-testid="login-form"]`))
	check("login")
	run(t, ctx,
		chromedp.SetValue(`#email`, root.Email),
		chromedp.SetValue(`#password`, "not the password"),
		chromedp.Submit(`[data-testid="login-form"]`),
		chromedp.WaitVisible(`[data-testid="login-error"]`),
	)
	check("login with an error")
	e.login(t, ctx, root, "/console/inbox")
	for _, p := range pages {
		run(t, ctx, chromedp.Navigate(e.base+p.path), chromedp.WaitVisible(`main#main`, chromedp.ByQuery))
		check(p.name + " (" + p.path + ")")
	}

	// The states that only interaction reaches: a form with inline errors
	// on the session page, the rubric of a claimed review item, and the
	// rubric with errors.
	escalated := sessionByTicket(t, e, "T-1182")
	run(t, ctx,
		chromedp.Navigate(e.base+"/console/sessions/"+escalated),
		chromedp.WaitVisible(`[data-testid="action-complete"]`),
		chromedp.Click(`[data-testid="action-complete"] button.btn-primary`),
		chromedp.WaitVisible(`[data-testid="action-complete"] .field-error`),
	)
	check("session page, complete form with an error")
	run(t, ctx,
		chromedp.Navigate(e.base+"/console/audit"),
		chromedp.Click(`[data-testid="audit-row"] summary`),
		chromedp.WaitVisible(`[data-testid="audit-row"] [data-testid="audit-json"]`),
	)
	check("audit trail, a row expanded")
	var item struct {
		SessionID string
		AtVersion int64
	}
	if err := e.s.DB.Raw(`SELECT session_id, at_version FROM review_items WHERE scored < needed ORDER BY decided_at LIMIT 1`).Scan(&item).Error; err != nil || item.SessionID == "" {
		t.Fatalf("no review item left to score (%v)", err)
	}
	run(t, ctx,
		chromedp.Navigate(fmt.Sprintf("%s/console/reviews/%s/%d", e.base, item.SessionID, item.AtVersion)),
		chromedp.Click(`[data-testid="review-claim"]`),
		chromedp.WaitVisible(`[data-testid="rubric-form"]`),
	)
	check("review item, claimed")
	run(t, ctx,
		chromedp.Click(`[data-testid="review-submit"]`),
		chromedp.WaitVisible(`[data-testid="rubric-form"] [data-testid="field-error"]`),
	)
	check("review item, rubric with errors")
}

// sessionByTicket is the id of the (top-level) session of ticket ref.
func sessionByTicket(t *testing.T, e *env, ref string) string {
	t.Helper()
	page, err := e.s.ListSessions(context.Background(), models.SessionQuery{Limit: models.MaxSessionsLimit})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Sessions {
		if r.TicketRef == ref && r.ParentID == nil {
			return r.ID
		}
	}
	t.Fatalf("no session for %s", ref)
	return ""
}

// TestNarrowScreen: at 390 px (a phone) the review, audit and admin pages
// fit the width: the document never scrolls sideways (wide tables scroll in
// their own box).
func TestNarrowScreen(t *testing.T) {
	e, root := demoEnv(t)
	pages := consolePages(t, e)
	ctx := tabWithin(t, 3*time.Minute)
	run(t, ctx, chromedp.EmulateViewport(390, 844))
	e.login(t, ctx, root, "/console/inbox")
	checked := 0
	for _, p := range pages {
		if !p.narrow {
			continue
		}
		run(t, ctx, chromedp.Navigate(e.base+p.path), chromedp.WaitVisible(`main#main`, chromedp.ByQuery))
		noSidewaysScroll(t, ctx, p.name+" ("+p.path+")")
		checked++
	}
	if checked < 10 {
		t.Fatalf("checked %d pages", checked)
	}
	// The rubric of a claimed review item, with its errors.
	var item struct {
		SessionID string
		AtVersion int64
	}
	if err := e.s.DB.Raw(`SELECT session_id, at_version FROM review_items WHERE scored < needed ORDER BY decided_at LIMIT 1`).Scan(&item).Error; err != nil || item.SessionID == "" {
		t.Fatalf("no review item left to score (%v)", err)
	}
	run(t, ctx,
		chromedp.Navigate(fmt.Sprintf("%s/console/reviews/%s/%d", e.base, item.SessionID, item.AtVersion)),
		chromedp.Click(`[data-testid="review-claim"]`),
		chromedp.WaitVisible(`[data-testid="rubric-form"]`),
		chromedp.Click(`[data-testid="review-submit"]`),
		chromedp.WaitVisible(`[data-testid="rubric-form"] [data-testid="field-error"]`),
	)
	noSidewaysScroll(t, ctx, "review item, rubric with errors")
}

// noSidewaysScroll fails the test when the page in ctx is wider than its
// viewport (document.scrollingElement.scrollWidth > clientWidth), naming the
// elements that stick out.
func noSidewaysScroll(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var m struct {
		Scroll int    `json:"scroll"`
		Client int    `json:"client"`
		Widest string `json:"widest"`
	}
	run(t, ctx, chromedp.Evaluate(`(() => {
		const d = document.scrollingElement;
		// The outermost elements that reach past the right edge, not
		// clipped by a box that scrolls on its own, to name in a failure.
		// An absolutely positioned element escapes every box up to its
		// positioned ancestor, the one that contains it.
		const clipped = el => {
			let abs = getComputedStyle(el).position === "absolute";
			for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
				const cs = getComputedStyle(a);
				if (abs && cs.position === "static") { continue; }
				if (cs.overflowX !== "visible") { return true; }
				abs = cs.position === "absolute";
			}
			return false;
		};
		const out = [];
		for (const el of document.querySelectorAll("body *")) {
			const r = el.getBoundingClientRect().right;
			if (r > d.clientWidth + 0.5 && !clipped(el) && !out.some(o => o.el.contains(el))) {
				out.push({el, r});
			}
		}
		const name = el => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
			(typeof el.className === "string" && el.className.trim() ? "." + el.className.trim().split(/\s+/).join(".") : "");
		return {scroll: d.scrollWidth, client: d.clientWidth,
			widest: out.slice(0, 4).map(o => name(o.el) + " (" + Math.round(o.r) + "px)").join(", ")};
	})()`, &m))
	if m.Client != 390 {
		// Headless Chromium overlays scrollbars: the viewport is what the
		// test set, or the check measures something else.
		t.Fatalf("%s: viewport %d px wide, want 390", name, m.Client)
	}
	if m.Scroll > m.Client {
		t.Errorf("%s scrolls sideways at 390 px: scrollWidth %d > clientWidth %d; sticking out: %s", name, m.Scroll, m.Client, m.Widest)
	}
}

// maxPageBytes is the most a console page may weigh (its HTML, before any
// compression): the console must stay quick on a poor connection whatever
// the amount of data behind it.
const maxPageBytes = 150 * 1024

// TestPagesUnder150KB: with realistic volumes (the demo data, a full inbox
// of 150 open escalations, a session with 400 events), every console page's
// HTML stays under 150 KB.
func TestPagesUnder150KB(t *testing.T) {
	e, root := demoEnv(t)
	ctx := context.Background()
	escalate := func(i int) string {
		id := storetest.Session(ctx, t, e.s, &storetest.SessionOpts{
			Goal:      fmt.Sprintf("Refund order %d: the customer reports a damaged item and asks for the money back", 5000+i),
			TicketRef: fmt.Sprintf("T-%d", 5000+i), Priority: 1 + i%5,
			Facts: map[string]any{"order_id": fmt.Sprint(5000 + i), "order_total": "129.90 EUR"},
		})
		v := int64(1)
		if _, err := e.s.Transition(ctx, id, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{
			ExpectedVersion: &v, Reason: "refund above the automatic limit",
			Question: "Approve the refund of 129.90 EUR to the original payment method?"}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	for i := 0; i < 150; i++ {
		escalate(i)
	}
	// A long-running escalation: an agent's claim and many notes with
	// evidence, 400 events in all.
	long := escalate(150)
	v := int64(2)
	if _, err := e.s.ClaimEscalation(ctx, long, root, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
		t.Fatal(err)
	}
	for v = 3; v < 400; v++ {
		if _, err := e.s.AddNote(ctx, long, root, "", models.NoteInput{ExpectedVersion: &v,
			Text:          fmt.Sprintf("Call %d with the carrier: the parcel is still at the depot; they will call back tomorrow.", v),
			EvidenceClaim: "carrier ticket updated", EvidenceSource: fmt.Sprintf("carrier-portal:case/%d", v)}); err != nil {
			t.Fatal(err)
		}
	}
	pages := append(consolePages(t, e),
		consolePage{name: "long session", path: "/console/sessions/" + long},
		consolePage{name: "long session, older events", path: "/console/sessions/" + long + "?before=300"},
	)

	// The login page, as someone not logged in gets it.
	resp, err := http.Get(e.base + "/login")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(body) > maxPageBytes {
		t.Errorf("login page: status %d, %d bytes, %v", resp.StatusCode, len(body), err)
	}

	tb := tab(t)
	e.login(t, tb, root, "/console/inbox")
	for _, p := range pages {
		var got struct {
			Status int `json:"status"`
			Bytes  int `json:"bytes"`
		}
		run(t, tb, chromedp.Evaluate(fmt.Sprintf(`fetch(%q, {credentials: "same-origin"}).then(r =>
			r.arrayBuffer().then(b => ({status: r.status, bytes: b.byteLength})))`, p.path), &got, awaitPromise))
		if got.Status != 200 && p.name != "error" {
			t.Errorf("%s (%s): status %d", p.name, p.path, got.Status)
		}
		t.Logf("%-24s %7d bytes", p.name, got.Bytes)
		if got.Bytes > maxPageBytes {
			t.Errorf("%s (%s) is %d bytes, more than %d", p.name, p.path, got.Bytes, maxPageBytes)
		}
	}
}
