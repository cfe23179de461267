package handlers_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// TestNULIsBadInputOnEveryPath sends a NUL character (U+0000) through every
// kind of input: API query filters, ids in paths, JSON text fields (nested
// facts included), console query filters, console forms and the login email.
// PostgreSQL cannot store or compare NUL, so each used to be a 500 there;
// each must be a 4xx naming the field (404 for an id) and write nothing.
func TestNULIsBadInputOnEveryPath(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		sid := e.createSession(map[string]any{"goal": "refund order 1234"})

		t.Run("api", func(t *testing.T) {
			for _, tc := range []struct {
				path, field string
			}{
				{"/sessions?queue=refunds%00", "queue"},
				{"/sessions?ticket_ref=%00", "ticket_ref"},
				{"/sessions?q=a%00b", "q"},
				{"/sessions?parent_id=ses_%00", "parent_id"},
			} {
				wantFields(t, wantProblem(t, e.get(e.controller, tc.path), http.StatusUnprocessableEntity), tc.field)
			}
			for _, p := range []string{"/sessions/ses_%00", "/sessions/" + sid + "%00/events", "/sessions/" + sid + "%00"} {
				wantProblem(t, e.get(e.controller, p), http.StatusNotFound)
			}
			for _, tc := range []struct {
				body  map[string]any
				field string
			}{
				{map[string]any{"goal": "refund\x00order"}, "goal"},
				{map[string]any{"goal": "ok", "ticket_ref": "T-\x00"}, "ticket_ref"},
				{map[string]any{"goal": "ok", "constraints": []string{"\x00"}}, "constraints[0]"},
				{map[string]any{"goal": "ok", "resources": []map[string]any{{"name": "a\x00"}}}, "resources[0].name"},
				{map[string]any{"goal": "ok", "facts": map[string]any{"k": []any{"x\x00"}}}, "facts.k[0]"},
				{map[string]any{"goal": "ok", "facts": map[string]any{"k\x00": 1}}, "facts"},
			} {
				noWrites(t, s, func() {
					wantFields(t, wantProblem(t, e.post(e.controller, "/sessions", tc.body), http.StatusUnprocessableEntity), tc.field)
				})
			}
			noWrites(t, s, func() {
				r := e.post(e.controller, "/sessions/"+sid+"/delegations", map[string]any{
					"expected_version": 1, "queue": "refunds", "step": "pay\x00", "instructions": "x"})
				wantFields(t, wantProblem(t, r, http.StatusUnprocessableEntity), "step")
			})
		})

		t.Run("console", func(t *testing.T) {
			b := newBrowser(t, s, web.Config{})
			ana, _ := agent(t, b, "Ana Agent", models.RoleAgent)
			esc := escalate(t, s, 2, "T-NUL")
			for _, p := range []string{"/console/sessions?q=a%00b", "/console/inbox?queue=%00", "/console/sessions?status=%00"} {
				if r := ana.get(p); r.StatusCode < 400 || r.StatusCode >= 500 {
					t.Errorf("GET %s: %d, want a 4xx\n%s", p, r.StatusCode, r.Body)
				}
			}
			if r := ana.get("/console/sessions/ses_%00"); r.StatusCode != http.StatusNotFound {
				t.Errorf("session page with NUL id: %d, want 404", r.StatusCode)
			}
			row, err := s.GetSession(context.Background(), esc)
			if err != nil {
				t.Fatal(err)
			}
			path := "/console/sessions/" + esc
			noWrites(t, s, func() {
				r := ana.post(path+"/claim", url.Values{"_csrf": {ana.csrf(path)}, "state_version": {strconv.FormatInt(row.StateVersion, 10)},
					"idempotency_key": {"k\x00"}})
				// Refused inline, on the session page, like any bad field.
				if r.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(r.Body, "NUL") || !strings.Contains(r.Body, `class="form-error"`) {
					t.Errorf("console form with NUL: %d, want 422 with the form's error\n%s", r.StatusCode, r.Body)
				}
			})
			noWrites(t, s, func() {
				r := b.fresh().login("ana.agent\x00@example.com", testPassword)
				if r.StatusCode < 400 || r.StatusCode >= 500 {
					t.Errorf("login with NUL in the email: %d, want a 4xx\n%s", r.StatusCode, r.Body)
				}
			})
		})
	})
}
