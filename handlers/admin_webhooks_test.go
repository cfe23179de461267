package handlers_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// TestAdminWebhooksPage: register with inline errors, the secret shown
// once, the delivery log with redeliver, rotation (new secret shown once,
// grace stated), delete.
func TestAdminWebhooksPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		root, _ := agent(t, b, "Root Admin", models.RoleAdmin)

		p := root.submit("/console/admin/webhooks", "/console/admin/webhooks", url.Values{"url": {"ftp://x"}, "types": {"session.escalated, session.exploded"}})
		doc := p.Doc(t)
		if p.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("invalid webhook: %d", p.StatusCode)
		}
		errs := map[string]string{}
		doc.Find(`[data-testid="field-error"]`).Each(func(_ int, e *goquery.Selection) {
			f, _ := e.Attr("data-field")
			errs[f] = e.Text()
		})
		if len(errs) != 2 || errs["url"] == "" || !strings.Contains(errs["types"], "session.exploded") {
			t.Fatalf("inline errors = %v", errs)
		}
		if v, _ := doc.Find(`input[name="types"]`).Attr("value"); v != "session.escalated, session.exploded" {
			t.Errorf("the form lost its input: %q", v)
		}
		if ws, _ := s.ListWebhooks(t.Context()); len(ws) != 0 {
			t.Fatalf("an invalid form wrote %v", ws)
		}

		p = root.submit("/console/admin/webhooks", "/console/admin/webhooks", url.Values{"url": {"https://receiver.test/h"}, "types": {"session.created"}, "description": {"ops bot"}})
		secret := squash(p.Doc(t).Find(`[data-testid="secret-value"]`))
		if p.StatusCode != http.StatusOK || !strings.HasPrefix(secret, "whsec_") {
			t.Fatalf("register: %d %q", p.StatusCode, secret)
		}
		doc = getDoc(root, "/console/admin/webhooks")
		if strings.Contains(doc.Text(), secret) {
			t.Fatal("the list shows the secret")
		}
		id, ok := doc.Find(`[data-testid="webhook-row"]`).Attr("data-webhook-id")
		if !ok {
			t.Fatal("no webhook row")
		}

		storetest.Session(t.Context(), t, s, nil)
		if _, err := s.SequenceFeed(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.EnqueueWebhookDeliveries(t.Context(), 100); err != nil {
			t.Fatal(err)
		}
		page := "/console/admin/webhooks/" + id
		row := getDoc(root, page).Find(`[data-testid="delivery-row"]`)
		ev, _ := row.Attr("data-event-id")
		if row.Length() != 1 || ev == "" {
			t.Fatalf("delivery log rows: %d", row.Length())
		}
		if st, _ := row.Attr("data-status"); st != "pending" {
			t.Errorf("status %q", st)
		}
		p = root.submit(page, page+"/deliveries/"+ev+"/redeliver", nil)
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("redeliver: %d", p.StatusCode)
		}

		p = root.submit(page, page+"/rotate-secret", nil)
		d := p.Doc(t)
		rotated := squash(d.Find(`[data-testid="secret-value"]`))
		if p.StatusCode != http.StatusOK || !strings.HasPrefix(rotated, "whsec_") || rotated == secret || d.Find(`[data-testid="rotation-grace"]`).Length() != 1 {
			t.Fatalf("rotate: %d %q", p.StatusCode, rotated)
		}

		p = root.submit("/console/admin/webhooks", page+"/delete", nil)
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("delete: %d", p.StatusCode)
		}
		if ws, _ := s.ListWebhooks(t.Context()); len(ws) != 0 {
			t.Fatalf("after delete: %v", ws)
		}
		if resp := root.get(page); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("deleted webhook page: %d", resp.StatusCode)
		}
	})
}

// TestAdminQueuesPage: the queue flow control form shows invalid fields
// inline (and writes nothing), saves with a flash, lists the queue with its
// settings and in-flight count, and its Edit link prefills the form; the
// change is in the admin log as the admin user.
func TestAdminQueuesPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		root, _ := agent(t, b, "Root Admin", models.RoleAdmin)

		p := root.submit("/console/admin/queues", "/console/admin/queues", url.Values{"queue": {"refunds"}, "max_in_flight": {"0"}, "max_leases_per_second": {"fast"}})
		if p.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("invalid form: %d", p.StatusCode)
		}
		doc := p.Doc(t)
		errs := map[string]string{}
		doc.Find(`[data-testid="field-error"]`).Each(func(_ int, e *goquery.Selection) {
			f, _ := e.Attr("data-field")
			errs[f] = e.Text()
		})
		if len(errs) != 2 || !strings.Contains(errs["max_in_flight"], "between 1 and") || !strings.Contains(errs["max_leases_per_second"], "number") {
			t.Fatalf("inline errors = %v", errs)
		}
		if v, _ := doc.Find(`input[name="max_leases_per_second"]`).Attr("value"); v != "fast" {
			t.Errorf("the form lost its input: %q", v)
		}
		if fs, _ := s.ListQueueFlows(t.Context()); len(fs) != 0 {
			t.Fatalf("an invalid form wrote %+v", fs)
		}

		p = root.submit("/console/admin/queues", "/console/admin/queues", url.Values{"queue": {"refunds"}, "max_in_flight": {"4"}, "max_leases_per_second": {"2.5"}})
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("save: %d", p.StatusCode)
		}
		doc = getDoc(root, "/console/admin/queues")
		if !strings.Contains(doc.Text(), "Saved the flow control of refunds") {
			t.Errorf("no flash after saving")
		}
		row := doc.Find(`[data-testid="queue-row"][data-queue="refunds"]`)
		if row.Length() != 1 || squash(row.Find(`[data-field="max_in_flight"]`)) != "4" ||
			squash(row.Find(`[data-field="max_leases_per_second"]`)) != "2.5" || squash(row.Find(`[data-field="in_flight"]`)) != "0" {
			t.Fatalf("queue row: %q", squash(row))
		}
		doc = getDoc(root, "/console/admin/queues?queue=refunds")
		if v, _ := doc.Find(`input[name="max_in_flight"]`).Attr("value"); v != "4" {
			t.Errorf("edit prefill max_in_flight = %q", v)
		}
		page, err := s.ListAdminAudit(t.Context(), models.AdminAuditOpts{})
		if err != nil || len(page.Rows) == 0 || page.Rows[0].Action != models.AdminQueueFlowPut || !strings.HasPrefix(page.Rows[0].Actor, "user:") {
			t.Fatalf("admin log = %+v, %v", page.Rows, err)
		}
	})
}
