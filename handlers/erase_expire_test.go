package handlers_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// TestErasedSessionPages: after its ticket was erased, an escalated
// session's console page, inbox and API reads answer (without the erased
// text), a version before the erasure is a 422 naming it, and a human can
// still take the session over and complete it, with verify clean.
func TestErasedSessionPages(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{})
		ana, anaUser := agent(t, b, "Ana Agent", models.RoleAgent)
		id := escalate(t, s, 2, "T-77")
		if _, err := s.EraseTicket(ctx, models.CLIOperator("ops"), "T-77", "request 5"); err != nil {
			t.Fatal(err)
		}
		p := ana.get("/console/sessions/" + id)
		if p.StatusCode != http.StatusOK || strings.Contains(p.Body, "240 EUR") || !strings.Contains(p.Body, models.ErasedText) {
			t.Fatalf("session page: %d, erased text shown: %t", p.StatusCode, strings.Contains(p.Body, "240 EUR"))
		}
		if p := ana.get("/console/sessions/" + id + "?version=1"); p.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(p.Body, "erased") {
			t.Fatalf("state at version 1: %d", p.StatusCode)
		}
		if p := ana.get("/console/inbox"); p.StatusCode != http.StatusOK || strings.Contains(p.Body, "240 EUR") {
			t.Fatalf("inbox: %d", p.StatusCode)
		}
		e := newAPIEnv(t, s)
		wantStatus(t, e.get(e.controller, "/sessions/"+id), http.StatusOK)
		if r := wantStatus(t, e.get(e.controller, "/sessions/"+id+"/events"), http.StatusOK); strings.Contains(string(r.Body), "240 EUR") {
			t.Fatal("the events still carry the erased text")
		}
		wantFields(t, wantProblem(t, e.get(e.controller, "/sessions/"+id+"/state?version=1"), http.StatusUnprocessableEntity), "version")
		if _, err := s.ClaimEscalation(ctx, id, anaUser, "", models.ClaimInput{ExpectedVersion: storetest.Ptr(int64(2))}); err != nil {
			t.Fatalf("claim an erased session: %v", err)
		}
		if _, err := s.CompleteHuman(ctx, id, anaUser, "", models.CompleteInput{ExpectedVersion: storetest.Ptr(int64(3)), Resolution: "done"}); err != nil {
			t.Fatalf("complete an erased session: %v", err)
		}
		if vr, err := s.Verify(ctx, models.VerifyOpts{}); err != nil || !vr.OK() {
			t.Fatalf("verify: %+v %v", vr.Problems, err)
		}
	})
}

// TestExpireLeasesAPI: admin tokens only, 422 naming share for a bad share,
// 200 with the expired leases (every exchange checked against the OpenAPI
// document).
func TestExpireLeasesAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		for range 2 {
			id := e.createSession(map[string]any{"goal": "refund"})
			e.delegate(id, 1, "refunds", nil)
			e.lease("refunds", "w-1", 0)
		}
		path := "/queues/refunds/expire-leases"
		wantProblem(t, e.post(e.worker, path, map[string]any{"share": 0.5}), http.StatusForbidden)
		wantProblem(t, e.post(e.controller, path, map[string]any{"share": 0.5}), http.StatusForbidden)
		for _, bad := range []any{map[string]any{}, map[string]any{"share": 0}, map[string]any{"share": 1.01}} {
			wantFields(t, wantProblem(t, e.post(e.admin, path, bad), http.StatusUnprocessableEntity), "share")
		}
		var rep models.ExpireLeasesReport
		wantStatus(t, e.post(e.admin, path, map[string]any{"share": 0.5}), http.StatusOK).Decode(t, &rep)
		if rep.Leased != 2 || len(rep.Expired) != 1 || rep.Queue != "refunds" {
			t.Fatalf("report %+v; want 1 of 2 expired", rep)
		}
		if n := countRows(t, s, "delegations", "status = 'queued' AND attempt = 2"); n != 1 {
			t.Fatalf("%d delegations queued as attempt 2, want 1", n)
		}
	})
}

// TestAdminErase: the verify page's erase form erases a ticket (the
// session page then shows the scrubbed text), says so in a banner and the
// admin log; a missing reason or unknown ticket erases nothing and says
// why; a repeat says there is nothing left.
func TestAdminErase(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		root, _ := agent(t, b, "Root Admin", models.RoleAdmin)
		id := escalate(t, s, 2, "T-88")
		banner := func() string { return getDoc(root, "/console/admin/verify").Find(".banner").Text() }
		if p := root.submit("/console/admin/verify", "/console/admin/erase", url.Values{"ticket": {"T-88"}}); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("erase without a reason: %d", p.StatusCode)
		}
		if got := banner(); !strings.Contains(got, "Nothing was erased") || !strings.Contains(got, "reason") {
			t.Fatalf("banner without a reason: %q", got)
		}
		root.submit("/console/admin/verify", "/console/admin/erase", url.Values{"ticket": {"T-404"}, "reason": {"request 9"}})
		if got := banner(); !strings.Contains(got, "Nothing was erased") {
			t.Fatalf("banner for an unknown ticket: %q", got)
		}
		if strings.Contains(getDoc(root, "/console/sessions/"+id).Text(), models.ErasedText) {
			t.Fatal("erased before the form was sent with a reason")
		}
		root.submit("/console/admin/verify", "/console/admin/erase", url.Values{"ticket": {"T-88"}, "reason": {"request 9"}})
		if got := banner(); !strings.Contains(got, "Ticket T-88 erased: 1 sessions, 2 events") {
			t.Fatalf("banner: %q", got)
		}
		if page := getDoc(root, "/console/sessions/"+id).Text(); strings.Contains(page, "240 EUR") || !strings.Contains(page, models.ErasedText) {
			t.Fatal("the session page still shows the erased text")
		}
		root.submit("/console/admin/verify", "/console/admin/erase", url.Values{"ticket": {"T-88"}, "reason": {"request 9"}})
		if got := banner(); !strings.Contains(got, "nothing left to erase") {
			t.Fatalf("banner of a repeat: %q", got)
		}
		if got := attrs(getDoc(root, "/console/admin/audit").Find(`[data-testid="admin-log-row"]`), "data-action"); len(got) == 0 || got[0] != models.AdminErase {
			t.Fatalf("admin log = %v", got)
		}
	})
}
