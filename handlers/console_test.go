package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// The console tests drive the whole server (routing, login cookie, CSRF,
// roles) over HTTP against the real database of each dialect, and assert on
// the HTML with goquery.

// agent creates a user named name with role and returns a browser logged
// in as it, on the server of b (own cookies).
func agent(t *testing.T, b *browser, name string, role models.Role) (*browser, models.User) {
	t.Helper()
	email := strings.ToLower(strings.ReplaceAll(name, " ", ".")) + "@example.com"
	u, err := b.s.CreateUser(context.Background(), models.CreateUserInput{Email: email, Name: name, Role: role, Password: testPassword})
	if err != nil {
		t.Fatal(err)
	}
	a := b.fresh()
	a.mustLogin(email, testPassword)
	return a, u
}

// getDoc GETs path and fails unless it answers 200.
func getDoc(b *browser, path string, header ...string) *goquery.Document {
	b.t.Helper()
	p := b.get(path, header...)
	if p.StatusCode != http.StatusOK {
		b.t.Fatalf("GET %s: status %d\n%s", path, p.StatusCode, p.Body)
	}
	return p.Doc(b.t)
}

// submitForm posts a form as a browser would: every field it carries (the
// hidden version, CSRF token and idempotency key, prefilled values), with
// fields overriding.
func submitForm(b *browser, form *goquery.Selection, fields map[string]string) page {
	b.t.Helper()
	if form.Length() != 1 {
		b.t.Fatalf("want one form, found %d", form.Length())
	}
	vals := url.Values{}
	form.Find("input[name], textarea[name]").Each(func(_ int, in *goquery.Selection) {
		name, _ := in.Attr("name")
		if goquery.NodeName(in) == "textarea" {
			vals.Set(name, in.Text())
			return
		}
		v, _ := in.Attr("value")
		vals.Set(name, v)
	})
	for k, v := range fields {
		vals.Set(k, v)
	}
	action, _ := form.Attr("action")
	return b.post(action, vals)
}

func squash(s *goquery.Selection) string { return strings.Join(strings.Fields(s.Text()), " ") }

func attrs(s *goquery.Selection, name string) []string {
	var out []string
	s.Each(func(_ int, e *goquery.Selection) {
		v, _ := e.Attr(name)
		out = append(out, v)
	})
	return out
}

// escalate creates a session (priority, ticket) and escalates it with a
// question; it returns the id, at version 2.
func escalate(t *testing.T, s *models.Store, prio int, ticket string) string {
	t.Helper()
	ctx := context.Background()
	id := storetest.Session(ctx, t, s, &storetest.SessionOpts{Priority: prio, TicketRef: ticket, Facts: map[string]any{"order_total": "240 EUR"}})
	v := int64(1)
	if _, err := s.Transition(ctx, id, models.EventSessionEscalated, "token:controller", "", models.TransitionInput{
		ExpectedVersion: &v, Reason: "refund above limit", Question: "Approve the 240 EUR refund?"}); err != nil {
		t.Fatalf("escalate: %v", err)
	}
	return id
}

// workerEscalated takes a session through a worker's escalated result, so
// that the package has evidence, risks, a next step and uncertainty.
func workerEscalated(t *testing.T, s *models.Store, ev []models.Evidence) string {
	t.Helper()
	ctx := context.Background()
	id, did := storetest.Delegated(ctx, t, s, "refunds")
	l, err := s.Claim(ctx, "refunds", "w-1", "token:worker", "")
	if err != nil || l == nil {
		t.Fatalf("lease: %v %v", l, err)
	}
	_, err = s.SubmitResult(ctx, did, "token:worker", "", models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: id, Step: "check-eligibility", ResultType: "escalated",
		Output: json.RawMessage(`{"eligible": "unclear"}`), Evidence: ev,
		Uncertainty: &models.Uncertainty{Level: 0.4, Notes: "currency conversion assumed"},
		NextStep:    "issue-refund", Question: "Is a refund over 200 EUR allowed for this customer?",
		Risks: []string{"customer already refunded once this year"},
	})
	if err != nil {
		t.Fatalf("escalated result: %v", err)
	}
	return id
}

func TestConsoleInbox(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		ana, _ := agent(t, b, "Ana Agent", models.RoleAgent)
		ben, benUser := agent(t, b, "Ben Agent", models.RoleAgent)
		ctx := context.Background()

		low := escalate(t, s, 4, "T-100")
		urgent := escalate(t, s, 1, "T-200")
		mid := escalate(t, s, 2, "T-300")
		held := escalate(t, s, 3, "T-400")
		storetest.Session(ctx, t, s, &storetest.SessionOpts{Priority: 1, TicketRef: "T-500"}) // open: not in the inbox
		v := int64(2)
		if _, err := s.ClaimEscalation(ctx, held, benUser, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}

		doc := getDoc(ana, "/console")
		rows := doc.Find(`[data-testid="inbox-row"]`)
		if got, want := attrs(rows, "data-session-id"), []string{urgent, mid, held, low}; !slices.Equal(got, want) {
			t.Fatalf("inbox order = %v, want %v", got, want)
		}
		if !strings.Contains(squash(rows.Eq(2)), "Ben Agent") {
			t.Errorf("held row does not name its holder: %q", squash(rows.Eq(2)))
		}
		count := func(doc *goquery.Document, testid string) string {
			return squash(doc.Find(`[data-testid="` + testid + `"] [data-testid="filter-count"]`))
		}
		for testid, want := range map[string]string{
			"filter-status-all": "4", "filter-status-escalated": "3", "filter-status-human_active": "1",
			"filter-assigned-any": "4", "filter-assigned-me": "0", "filter-assigned-unassigned": "3",
		} {
			if got := count(doc, testid); got != want {
				t.Errorf("count %s = %q, want %q", testid, got, want)
			}
		}
		if !strings.HasPrefix(squash(doc.Find(`[data-testid="inbox-total"]`)), "4") {
			t.Errorf("total = %q", squash(doc.Find(`[data-testid="inbox-total"]`)))
		}

		for _, tc := range []struct {
			query string
			want  []string
		}{
			{"status=human_active", []string{held}},
			{"status=escalated&priority=2", []string{mid}},
			{"assigned=unassigned", []string{urgent, mid, low}},
			{"assigned=me", nil},
			{"q=T-300", []string{mid}},
			{"q=" + low, []string{low}},
			{"q=T-500", nil},
		} {
			doc := getDoc(ana, "/console/inbox?"+tc.query)
			if got := attrs(doc.Find(`[data-testid="inbox-row"]`), "data-session-id"); !slices.Equal(got, tc.want) {
				t.Errorf("%s: rows = %v, want %v", tc.query, got, tc.want)
			}
		}
		// Ben's "assigned to me" shows what he holds; the counts follow the user.
		doc = getDoc(ben, "/console/inbox?assigned=me")
		if got := attrs(doc.Find(`[data-testid="inbox-row"]`), "data-session-id"); !slices.Equal(got, []string{held}) {
			t.Errorf("ben's rows = %v", got)
		}
		if got := count(doc, "filter-assigned-me"); got != "1" {
			t.Errorf("ben's mine count = %q", got)
		}
		// Facet counts respect the other active filters.
		doc = getDoc(ana, "/console/inbox?priority=1")
		if got := count(doc, "filter-status-escalated"); got != "1" {
			t.Errorf("escalated count within P1 = %q", got)
		}

		// The live refresh gets the list alone, with its filters in the poll URL.
		fp := ana.get("/console/inbox?status=escalated", "HX-Request", "true")
		frag := fp.Doc(t)
		if fp.StatusCode != http.StatusOK || frag.Find("h1").Length() != 0 || frag.Find("#inbox-list").Length() != 1 {
			t.Fatalf("fragment: status %d, %d h1, %d lists", fp.StatusCode, frag.Find("h1").Length(), frag.Find("#inbox-list").Length())
		}
		if poll, _ := frag.Find("#inbox-list").Attr("hx-get"); poll != "/console/inbox?status=escalated" {
			t.Errorf("poll url = %q", poll)
		}
		if n := frag.Find(`[data-testid="inbox-row"]`).Length(); n != 3 {
			t.Errorf("fragment rows = %d", n)
		}
		// With it, out of band, everything that counts, from the same reading:
		// the chips, the tabs, the total, the selects, and the page title.
		for _, sel := range []string{"#inbox-chips", "#inbox-tabs", "#inbox-total", "#inbox-queue", "#inbox-priority", "#inbox-reason"} {
			if oob, _ := frag.Find(sel).Attr("hx-swap-oob"); oob != "true" {
				t.Errorf("fragment: %s is not swapped out of band", sel)
			}
		}
		if got := count(frag, "filter-status-escalated"); got != "3" {
			t.Errorf("fragment escalated chip = %q", got)
		}
		if title := squash(frag.Find("title")); title != "(3) Inbox · TaskPilots Handoff" {
			t.Errorf("fragment title = %q", title)
		}
		if got := squash(frag.Find(`[data-testid="inbox-count"]`)); got != "3" {
			t.Errorf("fragment count = %q", got)
		}
		// Under a search the chips count what the rows show.
		doc = getDoc(ana, "/console/inbox?q=T-300")
		if got := count(doc, "filter-status-all"); got != "1" {
			t.Errorf("all chip under a search = %q, want 1", got)
		}
		if got := squash(doc.Find(`[data-testid="inbox-count"]`)); got != "1" {
			t.Errorf("count under a search = %q, want 1", got)
		}
		// A search the inbox cannot run is a 422 with the problem beside the
		// search box, the text kept, and nothing listed.
		long := strings.Repeat("refund ", 40)
		bad := ana.get("/console/inbox?q=" + url.QueryEscape(long))
		bdoc := bad.Doc(t)
		if bad.StatusCode != http.StatusUnprocessableEntity || bdoc.Find(`[data-testid="inbox-search-error"]`).Length() != 1 ||
			bdoc.Find(`[data-testid="inbox-row"]`).Length() != 0 {
			t.Errorf("long search: status %d, error %q", bad.StatusCode, squash(bdoc.Find(`[data-testid="inbox-search-error"]`)))
		}
		if v, _ := bdoc.Find("#inbox-q").Attr("value"); v != strings.TrimSpace(long) {
			t.Errorf("long search: the box lost the text: %q", v)
		}

		// Keyset pages through the handler.
		for range 60 {
			escalate(t, s, 5, "")
		}
		doc = getDoc(ana, "/console/inbox")
		if n := doc.Find(`[data-testid="inbox-row"]`).Length(); n != models.DefaultInboxLimit {
			t.Fatalf("first page rows = %d", n)
		}
		next, ok := doc.Find(`[data-testid="next-page"]`).Attr("href")
		if !ok {
			t.Fatal("no next page link")
		}
		doc2 := getDoc(ana, next)
		if n := doc2.Find(`[data-testid="inbox-row"]`).Length(); n != 64-models.DefaultInboxLimit {
			t.Fatalf("second page rows = %d", n)
		}
		if doc2.Find(`[data-testid="next-page"]`).Length() != 0 || doc2.Find(`[data-testid="first-page"]`).Length() != 1 {
			t.Errorf("second page pager is wrong")
		}

		if p := ana.get("/console/inbox?priority=high"); p.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("bad priority: status %d", p.StatusCode)
		}
		rev, _ := agent(t, b, "Rita Reviewer", models.RoleReviewer)
		if p := rev.get("/console/inbox"); p.StatusCode != http.StatusForbidden {
			t.Errorf("reviewer inbox: status %d", p.StatusCode)
		}
	})
}

func TestConsoleSessionPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		// A fixed clock makes the SLA and waiting times exact.
		var at atomic.Int64 // read by the server's goroutines
		at.Store(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC).UnixMicro())
		s.Now = func() time.Time { return time.UnixMicro(at.Load()).UTC() }
		b := newBrowser(t, s, web.Config{})
		ana, _ := agent(t, b, "Ana Agent", models.RoleAgent)
		id := workerEscalated(t, s, []models.Evidence{{Claim: "order paid 2026-11-20", Source: "orders-db:1182"}})
		at.Add((25 * time.Minute).Microseconds())
		inbox := getDoc(ana, "/console")
		if got := squash(inbox.Find(`[data-testid="inbox-row"] [data-testid="sla-due"]`)); got != "in 3h 35m" {
			t.Errorf("inbox SLA due = %q, want the P3 SLA of 4h less 25m", got)
		}
		if !strings.Contains(squash(inbox.Find(`[data-testid="inbox-row"]`)), "25m") {
			t.Errorf("inbox row does not say it waits for 25m: %q", squash(inbox.Find(`[data-testid="inbox-row"]`)))
		}

		doc := getDoc(ana, "/console/sessions/"+id)
		// The heading is the goal a human recognises; the id is secondary,
		// and no page that worked shows a request id.
		row, err := s.GetSession(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := row.Decode()
		if got := squash(doc.Find("h1")); got != st.Goal || st.Goal == "" {
			t.Errorf("page heading = %q, want the goal %q", got, st.Goal)
		}
		if strings.Contains(squash(doc.Find("h1")), id) {
			t.Errorf("page heading shows the id: %q", squash(doc.Find("h1")))
		}
		if strings.Contains(strings.ToLower(squash(doc.Find("footer"))), "request") {
			t.Errorf("footer shows a request id: %q", squash(doc.Find("footer")))
		}
		// The escalation package comes first, in the order of the spec, then
		// the packet, the related sessions and the timeline.
		order := []string{"session-header", "pkg-goal", "pkg-question", "pkg-state", "pkg-evidence", "pkg-risks", "pkg-next",
			"packet", "relations", "timeline", "history"}
		var seen []string
		doc.Find("[data-testid]").Each(func(_ int, e *goquery.Selection) {
			v, _ := e.Attr("data-testid")
			if slices.Contains(order, v) && !slices.Contains(seen, v) {
				seen = append(seen, v)
			}
		})
		if !slices.Equal(seen, order) {
			t.Fatalf("section order = %v, want %v", seen, order)
		}
		for testid, want := range map[string]string{
			"session-id":      id,
			"state-version":   "4",
			"pkg-question":    "Is a refund over 200 EUR allowed for this customer?",
			"pkg-evidence":    "order paid 2026-11-20",
			"evidence-source": "orders-db:1182",
			"pkg-risks":       "customer already refunded once this year",
			"pkg-next":        "issue-refund",
			"pkg-uncertainty": "Worker's uncertainty: 40% — currency conversion assumed",
		} {
			if got := squash(doc.Find(`[data-testid="` + testid + `"]`)); !strings.Contains(got, want) {
				t.Errorf("%s = %q, want it to contain %q", testid, got, want)
			}
		}
		if got := squash(doc.Find(`[data-testid="escalated-since"]`)); got != "25m ago" {
			t.Errorf("escalated since = %q", got)
		}
		if got := squash(doc.Find(`[data-testid="session-header"] [data-testid="sla-due"]`)); got != "in 3h 35m" {
			t.Errorf("session SLA due = %q", got)
		}
		// Newest first, in words, with the raw event behind details.
		if got := attrs(doc.Find(`[data-testid="event-row"]`), "data-type"); !slices.Equal(got, []string{
			"result.escalated", "delegation.leased", "delegation.created", "session.created"}) {
			t.Errorf("timeline = %v", got)
		}
		if got := squash(doc.Find(`[data-testid="event-row"]`).First().Find(`[data-testid="event-words"]`)); got != "worker w-1 escalated" {
			t.Errorf("escalation in words = %q", got)
		}
		if doc.Find(`[data-testid="timeline-older"]`).Length() != 0 {
			t.Errorf("a 4-event session offers older events")
		}
		if doc.Find(`[data-testid="event-row"] details pre`).Length() != 4 {
			t.Errorf("events lack their expandable payload")
		}
		if !strings.Contains(doc.Find(`[data-testid="packet-json"]`).Text(), `"based_on_version": 4`) {
			t.Errorf("packet preview = %q", doc.Find(`[data-testid="packet-json"]`).Text())
		}
		// An escalated session offers the claim, the decisions (each claims
		// it in the same transaction), the recommended step and a note.
		if got := attrs(doc.Find(`form.action-form`), "data-testid"); !slices.Equal(got, []string{"action-accept-recommendation", "action-claim",
			"action-complete", "action-resume", "action-hand-back", "action-request-input", "action-reject", "action-note"}) {
			t.Errorf("forms = %v", got)
		}

		doc = getDoc(ana, "/console/sessions/"+id+"?type=delegation.leased")
		if got := attrs(doc.Find(`[data-testid="event-row"]`), "data-type"); !slices.Equal(got, []string{"delegation.leased"}) {
			t.Errorf("filtered timeline = %v", got)
		}
		doc = getDoc(ana, "/console/sessions/"+id+"?version=1")
		if !strings.Contains(doc.Find(`[data-testid="state-at"]`).Text(), `"status": "open"`) {
			t.Errorf("state at 1 = %q", doc.Find(`[data-testid="state-at"]`).Text())
		}
		doc = getDoc(ana, "/console/sessions/"+id+"?from=1&to=4")
		kinds := map[string]string{}
		doc.Find(`[data-testid="diff-row"]`).Each(func(_ int, r *goquery.Selection) {
			p, _ := r.Attr("data-path")
			k, _ := r.Attr("data-kind")
			kinds[p] = k
		})
		if kinds["status"] != "changed" || kinds["escalation.question"] != "added" || kinds["version"] != "changed" {
			t.Errorf("diff = %v", kinds)
		}
		p := ana.get("/console/sessions/" + id + "?version=99")
		doc = p.Doc(t)
		if p.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(squash(doc.Find(`[data-testid="history-error"]`)), "between 1 and 4") {
			t.Errorf("version 99: %d %q", p.StatusCode, squash(doc.Find(`[data-testid="history-error"]`)))
		}
		if p := ana.get("/console/sessions/ses_nope"); p.StatusCode != http.StatusNotFound {
			t.Errorf("unknown session: %d", p.StatusCode)
		}
		// Reviewers read the page but get no forms.
		rev, _ := agent(t, b, "Rita Reviewer", models.RoleReviewer)
		doc = getDoc(rev, "/console/sessions/"+id)
		if doc.Find("form.action-form").Length() != 0 || doc.Find(`[data-testid="no-actions"]`).Length() != 1 {
			t.Errorf("reviewer sees takeover forms")
		}
	})
}

func TestConsoleParentAndChildren(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		ana, _ := agent(t, b, "Ana Agent", models.RoleAgent)
		parent := storetest.Session(context.Background(), t, s, nil)
		// A child names its parent; the fan-out write path is another
		// package's, so the link is made in the projection directly.
		child := storetest.Session(context.Background(), t, s, &storetest.SessionOpts{Goal: "Check the carrier"})
		if err := s.DB.Exec(`UPDATE sessions SET parent_id = ? WHERE id = ?`, parent, child).Error; err != nil {
			t.Fatal(err)
		}
		doc := getDoc(ana, "/console/sessions/"+parent)
		if href, _ := doc.Find(`[data-testid="child-link"] a`).Attr("href"); href != "/console/sessions/"+child {
			t.Errorf("child link = %q", href)
		}
		doc = getDoc(ana, "/console/sessions/"+child)
		if href, _ := doc.Find(`[data-testid="parent-link"] a`).Attr("href"); href != "/console/sessions/"+parent {
			t.Errorf("parent link = %q", href)
		}
	})
}

func TestConsoleEscapesWorkerEvidence(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		ana, _ := agent(t, b, "Ana Agent", models.RoleAgent)
		payload := `<script>alert("xss")</script><img src=x onerror=alert(1)>`
		id := workerEscalated(t, s, []models.Evidence{{Claim: payload, Source: `javascript:alert(2)"><b>bold</b>`}})

		raw := getDoc(ana, "/console/sessions/"+id)
		if got := squash(raw.Find(`[data-testid="evidence-claim"]`)); got != strings.Join(strings.Fields(payload), " ") {
			t.Errorf("claim text = %q", got)
		}
		main := raw.Find("main")
		scripts := main.Find("script").FilterFunction(func(_ int, e *goquery.Selection) bool {
			src, _ := e.Attr("src")
			return !strings.HasPrefix(src, "/static/") || strings.TrimSpace(e.Text()) != ""
		})
		if scripts.Length() != 0 || main.Find("img").Length() != 0 || main.Find("b").Length() != 0 {
			t.Fatalf("the payload became markup: %d script, %d img, %d b", scripts.Length(), main.Find("img").Length(), main.Find("b").Length())
		}
		if main.Find(`a[href^="javascript"]`).Length() != 0 {
			t.Fatal("the source became a javascript: link")
		}
	})
}
