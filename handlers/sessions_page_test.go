package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// sessionRow is one row of the sessions table, by its data-field cells.
type sessionRow struct {
	ID, Ticket, Status, Version, Priority, Step string
	Href                                        string
}

func sessionRows(t *testing.T, doc *goquery.Document) []sessionRow {
	t.Helper()
	var rows []sessionRow
	doc.Find(`[data-testid="sessions-table"] tbody tr`).Each(func(_ int, tr *goquery.Selection) {
		cell := func(f string) string { return strings.TrimSpace(tr.Find(`[data-field="` + f + `"]`).Text()) }
		href, _ := tr.Find(`[data-field="id"]`).Attr("href")
		status, _ := tr.Find(`[data-field="status"] [data-status]`).Attr("data-status")
		rows = append(rows, sessionRow{
			ID: cell("id"), Ticket: cell("ticket_ref"), Status: status, Version: cell("state_version"),
			Priority: cell("priority"), Step: cell("current_step"), Href: href,
		})
	})
	return rows
}

func TestSessionsPage(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		newUser(t, s, "agent@example.com", models.RoleAgent)
		open := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-1", Priority: 1})
		queued, _ := storetest.Delegated(ctx, t, s, "refunds")
		other := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-2"})

		b := newBrowser(t, s, web.Config{})
		b.mustLogin("agent@example.com", testPassword)
		p := b.get("/console/sessions")
		if p.StatusCode != http.StatusOK {
			t.Fatalf("status %d\n%s", p.StatusCode, p.Body)
		}
		doc := p.Doc(t)
		rows := sessionRows(t, doc)
		if len(rows) != 3 {
			t.Fatalf("%d rows, want 3", len(rows))
		}
		// Newest first.
		if rows[0].ID != other || rows[1].ID != queued || rows[2].ID != open {
			t.Fatalf("order %s %s %s", rows[0].ID, rows[1].ID, rows[2].ID)
		}
		want := sessionRow{ID: open, Ticket: "T-1", Status: "open", Version: "1", Priority: "1", Step: "—", Href: "/console/sessions/" + open}
		if rows[2] != want {
			t.Errorf("row %+v, want %+v", rows[2], want)
		}
		if r := rows[1]; r.Status != "queued" || r.Version != "2" || r.Step != "check-eligibility" {
			t.Errorf("delegated row %+v", r)
		}
		if cur, _ := doc.Find(`nav.main-nav a[aria-current="page"]`).Attr("href"); cur != "/console/sessions" {
			t.Errorf("current nav link %q", cur)
		}
		// An agent sees the inbox and sessions, not the admin pages.
		nav := doc.Find("nav.main-nav").Text()
		if !strings.Contains(nav, "Inbox") || strings.Contains(nav, "Admin") || strings.Contains(nav, "Audit") {
			t.Errorf("agent's navigation: %q", nav)
		}

		// Counts per status.
		count := func(d *goquery.Document, status string) string {
			return strings.TrimSpace(d.Find(`[data-testid="status-filters"] a[data-status="` + status + `"] .count`).Text())
		}
		if count(doc, "open") != "2" || count(doc, "queued") != "1" || count(doc, "escalated") != "0" {
			t.Errorf("counts open=%s queued=%s escalated=%s", count(doc, "open"), count(doc, "queued"), count(doc, "escalated"))
		}

		// Status filter.
		doc = b.get("/console/sessions?status=queued").Doc(t)
		if rows := sessionRows(t, doc); len(rows) != 1 || rows[0].ID != queued {
			t.Fatalf("status filter: %+v", rows)
		}
		if cur, _ := doc.Find(`[data-testid="status-filters"] a[aria-current="true"]`).Attr("data-status"); cur != "queued" {
			t.Errorf("current filter %q", cur)
		}
		// Ticket filter.
		if rows := sessionRows(t, b.get("/console/sessions?ticket=T-2").Doc(t)); len(rows) != 1 || rows[0].ID != other {
			t.Fatalf("ticket filter: %+v", rows)
		}
		// Nothing matches: a calm empty state.
		if d := b.get("/console/sessions?status=escalated").Doc(t); d.Find(`[data-testid="sessions-empty"]`).Length() != 1 {
			t.Error("no empty state")
		}
		// An unknown status is a clear 400.
		if p := b.get("/console/sessions?status=bogus"); p.StatusCode != http.StatusBadRequest || !strings.Contains(p.Body, "bogus") {
			t.Errorf("unknown status: %d", p.StatusCode)
		}
	})
}

func TestSessionsPagePagination(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		newUser(t, s, "admin@example.com", models.RoleAdmin)
		total := handlers.SessionsPageSize + 5
		created := map[string]bool{}
		for i := 0; i < total; i++ {
			created[storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: fmt.Sprintf("T-%d", i)})] = true
		}
		b := newBrowser(t, s, web.Config{})
		b.mustLogin("admin@example.com", testPassword)

		doc := b.get("/console/sessions").Doc(t)
		first := sessionRows(t, doc)
		if len(first) != handlers.SessionsPageSize {
			t.Fatalf("first page: %d rows", len(first))
		}
		next, ok := doc.Find(`[data-testid="next-page"]`).Attr("href")
		if !ok {
			t.Fatal("no next page link")
		}
		if doc.Find(`[data-testid="first-page"]`).Length() != 0 {
			t.Error("first page links to the first page")
		}
		doc = b.get(next).Doc(t)
		second := sessionRows(t, doc)
		if len(second) != 5 {
			t.Fatalf("second page: %d rows", len(second))
		}
		if doc.Find(`[data-testid="next-page"]`).Length() != 0 {
			t.Error("last page has a next link")
		}
		if doc.Find(`[data-testid="first-page"]`).Length() != 1 {
			t.Error("no link back to the newest")
		}
		seen := map[string]bool{}
		all := append(first, second...)
		for i, r := range all {
			if seen[r.ID] || !created[r.ID] {
				t.Fatalf("row %d: %s repeated or unknown", i, r.ID)
			}
			seen[r.ID] = true
			if i > 0 && all[i-1].ID <= r.ID {
				t.Fatalf("not newest first at %d", i)
			}
		}
		// The admin sees every section.
		nav := doc.Find("nav.main-nav").Text()
		for _, l := range []string{"Inbox", "Sessions", "Reviews", "Audit", "Admin"} {
			if !strings.Contains(nav, l) {
				t.Errorf("admin's navigation lacks %s", l)
			}
		}
	})
}

// TestSessionsPageSearch checks the console's search box: it finds sessions
// by words of goal, ticket and notes through models.ListSessions (the
// function behind GET /api/v1/sessions), keeps the search across status
// filters and pages, and explains a search it cannot run next to the box.
func TestSessionsPageSearch(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		agentUser := newUser(t, s, "search-agent@example.com", models.RoleAgent)
		refund := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-1182", Goal: "Refund order 1182 if eligible"})
		blender := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-2001", Goal: "Replace the damaged blender"})
		noted := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-3000", Goal: "Audit the ledger"})
		v := int64(1)
		if _, err := s.Transition(ctx, noted, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddNote(ctx, noted, agentUser, "", models.NoteInput{ExpectedVersion: storetest.Ptr(int64(2)), Text: "Customer mentioned a chargeback."}); err != nil {
			t.Fatal(err)
		}

		b := newBrowser(t, s, web.Config{})
		b.mustLogin("search-agent@example.com", testPassword)
		for _, tc := range []struct {
			path string
			want []string
		}{
			{"/console/sessions?q=blender", []string{blender}},
			{"/console/sessions?q=t-1182", []string{refund}},
			{"/console/sessions?q=chargeback", []string{noted}},
			{"/console/sessions?q=chargeback&status=open", nil},
			{"/console/sessions?q=order+refund", []string{refund}},
		} {
			p := b.get(tc.path)
			if p.StatusCode != http.StatusOK {
				t.Fatalf("%s: status %d", tc.path, p.StatusCode)
			}
			doc := p.Doc(t)
			var got []string
			for _, r := range sessionRows(t, doc) {
				got = append(got, r.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("%s: %v, want %v", tc.path, got, tc.want)
			}
			// The box shows the search; status filters keep it.
			q, _ := doc.Find(`input[name="q"]`).Attr("value")
			href, _ := doc.Find(`[data-testid="status-filters"] a[data-status="open"]`).Attr("href")
			if q == "" || !strings.Contains(href, "q=") {
				t.Errorf("%s: box %q, status link %q", tc.path, q, href)
			}
		}
		// The search keeps across pages.
		for range handlers.SessionsPageSize {
			storetest.Session(ctx, t, s, &storetest.SessionOpts{Goal: "Refund a parcel"})
		}
		doc := b.get("/console/sessions?q=refund").Doc(t)
		next, ok := doc.Find(`[data-testid="next-page"]`).Attr("href")
		if !ok || !strings.Contains(next, "q=refund") {
			t.Fatalf("next link %q", next)
		}
		if rows := sessionRows(t, b.get(next).Doc(t)); len(rows) != 1 || rows[0].ID != refund {
			t.Fatalf("second page %+v", rows)
		}
		// A search without a word, or a stale page link: an inline error.
		for _, path := range []string{"/console/sessions?q=%21%21%21", "/console/sessions?after=bogus"} {
			p := b.get(path)
			if p.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("%s: status %d", path, p.StatusCode)
			}
			if msg := strings.TrimSpace(p.Doc(t).Find(`[data-testid="search-error"]`).Text()); msg == "" {
				t.Errorf("%s: no inline error", path)
			}
		}
	})
}
