package handlers_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// bulkFormValues reads the bulk form of a page as a browser would submit
// it, with the given rows ticked (checkboxes outside the form belong to it
// through their form attribute).
func bulkFormValues(t *testing.T, doc *goquery.Document, tick ...string) url.Values {
	t.Helper()
	form := doc.Find(`form[data-testid="bulk-action"]`)
	if form.Length() != 1 {
		t.Fatalf("no bulk form on the page")
	}
	v := url.Values{}
	form.Find(`input[type="hidden"]`).Each(func(_ int, in *goquery.Selection) {
		n, _ := in.Attr("name")
		val, _ := in.Attr("value")
		v.Add(n, val)
	})
	for _, id := range tick {
		box := doc.Find(`[data-testid="bulk-select"][data-session-id="` + id + `"]`)
		if f, _ := box.Attr("form"); box.Length() != 1 || f != "bulk-form" {
			t.Fatalf("no checkbox of the bulk form for %s", id)
		}
		v.Add("session_id", id)
	}
	return v
}

func TestConsoleBulkFromSessionsList(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{})
		admin, _ := agent(t, b, "Ada Admin", models.RoleAdmin)
		a := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-7"})
		c := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-7"})
		done := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-7"})
		v := int64(1)
		if _, err := s.Transition(ctx, done, models.EventSessionCancelled, "test:controller", "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}

		doc := getDoc(admin, "/console/sessions?ticket=T-7")
		if n := doc.Find(`[data-testid="bulk-select"]`).Length(); n != 3 {
			t.Fatalf("%d checkboxes, want 3", n)
		}
		var offered []string
		doc.Find(`#bulk-action-select option[value!=""]`).Each(func(_ int, o *goquery.Selection) {
			val, _ := o.Attr("value")
			offered = append(offered, val)
		})
		if strings.Join(offered, ",") != "cancel,pause,resume,escalate,release,reassign" {
			t.Fatalf("admin is offered %v", offered)
		}

		// Nothing ticked, no action: inline errors, nothing written.
		noWrites(t, s, func() {
			p := admin.post("/console/sessions/bulk", bulkFormValues(t, doc))
			if p.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("empty form: %d", p.StatusCode)
			}
			d := p.Doc(t)
			for _, f := range []string{"action", "session_ids"} {
				if d.Find(`[data-testid="field-error"][data-field="`+f+`"]`).Length() != 1 {
					t.Errorf("no inline error for %s:\n%s", f, p.Body)
				}
			}
		})

		// A preview writes nothing and offers the form again.
		form := bulkFormValues(t, doc, a, done)
		form.Set("action", "cancel")
		form.Set("reason", "duplicates")
		form.Set("dry_run", "1")
		noWrites(t, s, func() {
			d := admin.post("/console/sessions/bulk", form).Doc(t)
			if sum := d.Find(`[data-testid="bulk-summary"]`); sum.AttrOr("data-applied", "") != "1" || sum.AttrOr("data-skipped", "") != "1" {
				t.Fatalf("preview summary: %s", sum.Text())
			}
			if d.Find(`form[data-testid="bulk-action"]`).Length() != 1 {
				t.Fatal("the preview does not offer the form to apply")
			}
		})

		// Apply: one cancelled, the cancelled one skipped with the reason.
		form.Del("dry_run")
		p := admin.post("/console/sessions/bulk", form)
		if p.StatusCode != http.StatusOK {
			t.Fatalf("apply: %d\n%s", p.StatusCode, p.Body)
		}
		d := p.Doc(t)
		if got := d.Find(`[data-testid="bulk-applied"]`).AttrOr("data-session-id", ""); got != a {
			t.Fatalf("applied %q, want %s", got, a)
		}
		sk := d.Find(`[data-testid="bulk-skipped"]`)
		if sk.AttrOr("data-session-id", "") != done || !strings.Contains(sk.Text(), "cannot be cancelled") {
			t.Fatalf("skipped: %s", sk.Text())
		}
		if back := d.Find(`[data-testid="bulk-back"]`).AttrOr("href", ""); back != "/console/sessions?ticket=T-7" {
			t.Fatalf("back link %q", back)
		}
		if st := mustStatus(t, s, a); st != models.StatusCancelled {
			t.Fatalf("a is %s", st)
		}
		// A double submit of the same form acts once and shows the same answer.
		noWrites(t, s, func() {
			again := admin.post("/console/sessions/bulk", form)
			if again.StatusCode != http.StatusOK || again.Doc(t).Find(`[data-testid="bulk-applied"]`).AttrOr("data-session-id", "") != a {
				t.Fatalf("double submit: %d\n%s", again.StatusCode, again.Body)
			}
		})

		// "All matching this filter": the list's filter, through ListSessions.
		all := bulkFormValues(t, getDoc(admin, "/console/sessions?ticket=T-7"))
		all.Set("all_matching", "1")
		all.Set("action", "pause")
		d = admin.post("/console/sessions/bulk", all).Doc(t)
		if sum := d.Find(`[data-testid="bulk-summary"]`); sum.AttrOr("data-matched", "") != "3" || sum.AttrOr("data-applied", "") != "1" {
			t.Fatalf("all matching: %s", sum.Text())
		}
		if st := mustStatus(t, s, c); st != models.StatusPaused {
			t.Fatalf("c is %s", st)
		}
	})
}

// The takeover policy decides in the console: an agent is offered release
// only, a cancel from an agent is refused whole (403, nothing written), a
// reviewer gets no checkboxes and cannot post.
func TestConsoleBulkFollowsPolicy(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{})
		ann, annU := agent(t, b, "Ann Agent", models.RoleAgent)
		rev, _ := agent(t, b, "Rita Reviewer", models.RoleReviewer)
		sid := storetest.Session(ctx, t, s, nil)
		v := int64(1)
		if _, err := s.Transition(ctx, sid, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		v = 2
		if _, err := s.ClaimEscalation(ctx, sid, annU, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}

		doc := getDoc(ann, "/console/inbox")
		if opts := doc.Find(`#bulk-action-select option[value!=""]`); opts.Length() != 1 || opts.AttrOr("value", "") != "release" {
			t.Fatalf("agent offered %d actions", opts.Length())
		}
		form := bulkFormValues(t, doc, sid)
		form.Set("action", "cancel")
		noWrites(t, s, func() {
			p := ann.post("/console/sessions/bulk", form)
			if p.StatusCode != http.StatusForbidden || p.Doc(t).Find(`[data-testid="bulk-problem"]`).Length() != 1 {
				t.Fatalf("agent cancel: %d\n%s", p.StatusCode, p.Body)
			}
		})
		form.Set("action", "release")
		d := ann.post("/console/sessions/bulk", form).Doc(t)
		if d.Find(`[data-testid="bulk-applied"]`).AttrOr("data-session-id", "") != sid {
			t.Fatalf("agent release: %s", d.Find(`[data-testid="bulk-summary"]`).Text())
		}
		if st := mustStatus(t, s, sid); st != models.StatusEscalated {
			t.Fatalf("released session is %s", st)
		}

		// An admin hands it back to Ann: the form lists the people who
		// can take over sessions, not the reviewer.
		root, _ := agent(t, b, "Ada Admin", models.RoleAdmin)
		doc = getDoc(root, "/console/inbox")
		if doc.Find(`#bulk-to option[value="`+annU.ID+`"]`).Length() != 1 || strings.Contains(doc.Find(`#bulk-to`).Text(), "Rita") {
			t.Fatalf("reassign choices: %q", doc.Find(`#bulk-to`).Text())
		}
		form = bulkFormValues(t, doc, sid)
		form.Set("action", "reassign")
		noWrites(t, s, func() {
			if p := root.post("/console/sessions/bulk", form); p.StatusCode != http.StatusUnprocessableEntity ||
				p.Doc(t).Find(`[data-testid="field-error"][data-field="to"]`).Length() != 1 {
				t.Fatalf("reassign to nobody: %d\n%s", p.StatusCode, p.Body)
			}
		})
		form.Set("to", annU.ID)
		if d := root.post("/console/sessions/bulk", form).Doc(t); d.Find(`[data-testid="bulk-applied"]`).AttrOr("data-session-id", "") != sid {
			t.Fatalf("reassign: %s", d.Find("main").Text())
		}
		if row, _ := s.GetSession(ctx, sid); row.Status != models.StatusHumanActive || row.Assignee != annU.Actor() {
			t.Fatalf("after reassign: %s %q", row.Status, row.Assignee)
		}

		if n := getDoc(rev, "/console/sessions").Find(`[data-testid="bulk-select"], [data-testid="bulk-action"]`).Length(); n != 0 {
			t.Fatalf("a reviewer sees %d bulk controls", n)
		}
		noWrites(t, s, func() {
			f := url.Values{"action": {"cancel"}, "session_id": {sid}, "_csrf": {rev.csrf("/console/sessions")}}
			if p := rev.post("/console/sessions/bulk", f); p.StatusCode != http.StatusForbidden {
				t.Fatalf("reviewer: %d", p.StatusCode)
			}
		})
	})
}

func mustStatus(t *testing.T, s *models.Store, id string) models.Status {
	t.Helper()
	row, err := s.GetSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return row.Status
}
