package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func TestAPIAuthentication(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		ctx := context.Background()
		revoked := e.token("gone", models.RoleAdmin)
		if _, err := s.AdminRevokeToken(ctx, models.CLIOperator("test"), "gone"); err != nil {
			t.Fatal(err)
		}
		body := map[string]any{"goal": "g"}
		noWrites(t, s, func() {
			for _, c := range []struct {
				name, auth, challenge string
			}{
				{"missing", "", `Bearer realm="taskpilots"`},
				{"not bearer", "Basic dXNlcjpwYXNz", `Bearer realm="taskpilots"`},
				{"empty bearer", "Bearer ", `Bearer realm="taskpilots"`},
				{"unknown", "Bearer tpk_not-a-real-token", `error="invalid_token"`},
				{"no prefix", "Bearer abc", `error="invalid_token"`},
				{"revoked", "Bearer " + revoked, `error="invalid_token"`},
			} {
				r := e.do(apiReq{method: http.MethodPost, path: "/sessions", body: body, headers: []string{"Authorization", c.auth}})
				wantProblem(t, r, http.StatusUnauthorized)
				if got := r.Header.Get("WWW-Authenticate"); !strings.Contains(got, c.challenge) {
					t.Errorf("%s: WWW-Authenticate %q, want it to contain %q", c.name, got, c.challenge)
				}
			}
			// Authentication comes before the body is looked at.
			wantProblem(t, e.post("", "/sessions", "{not json"), http.StatusUnauthorized)
			wantProblem(t, e.get("", "/sessions/ses_x"), http.StatusUnauthorized)
			wantProblem(t, e.get("", "/metrics"), http.StatusUnauthorized)
		})

		// The scheme name is case-insensitive.
		r := e.do(apiReq{method: http.MethodPost, path: "/sessions", body: body, headers: []string{"Authorization", "bearer " + e.controller}})
		wantStatus(t, r, http.StatusCreated)

		// The public document needs no token.
		r = wantStatus(t, e.get("", "/openapi.json"), http.StatusOK)
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("openapi content type %q", r.Header.Get("Content-Type"))
		}
		for _, tok := range []string{e.worker, e.controller, e.admin} {
			wantStatus(t, e.get(tok, "/metrics"), http.StatusOK)
		}
	})
}

func TestAPIRoles(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		sid := e.createSession(nil)
		did := e.delegate(sid, 1, "roles", nil)
		transition := map[string]any{"expected_version": 2}

		// Wrong role: 403 whatever the body, and nothing written.
		noWrites(t, s, func() {
			for _, c := range []struct {
				token, path string
				body        any
			}{
				{e.worker, "/sessions", map[string]any{"goal": "g"}},
				{e.worker, "/sessions/" + sid + "/pause", transition},
				{e.worker, "/sessions/" + sid + "/resume", transition},
				{e.worker, "/sessions/" + sid + "/escalate", transition},
				{e.worker, "/sessions/" + sid + "/cancel", transition},
				{e.worker, "/sessions/" + sid + "/delegations", map[string]any{"queue": "q", "step": "s", "expected_version": 2}},
				{e.controller, "/queues/roles/lease", map[string]any{"worker": "w-1"}},
				{e.controller, "/delegations/" + did + "/heartbeat", map[string]any{"lease_token": "x"}},
				{e.controller, "/delegations/" + did + "/result", map[string]any{"lease_token": "x"}},
			} {
				p := wantProblem(t, e.post(c.token, c.path, c.body), http.StatusForbidden)
				if !strings.Contains(p.Detail, "may not") {
					t.Errorf("%s: detail %q", c.path, p.Detail)
				}
			}
		})

		// Reads are open to workers and controllers.
		for _, tok := range []string{e.worker, e.controller, e.admin} {
			for _, path := range []string{"/sessions/" + sid, "/sessions/" + sid + "/events", "/sessions/" + sid + "/state?version=1", "/sessions/" + sid + "/packet"} {
				wantStatus(t, e.get(tok, path), http.StatusOK)
			}
		}

		// Admin may do everything, and the event actor is the token.
		adminSession := wantStatus(t, e.post(e.admin, "/sessions", map[string]any{"goal": "by admin"}), http.StatusCreated).JSON(t)["session_id"].(string)
		l := leaseAs(t, e, e.admin, "roles", "w-admin")
		if l.DelegationID != did {
			t.Fatalf("admin leased %s, want %s", l.DelegationID, did)
		}
		evs := wantStatus(t, e.get(e.worker, "/sessions/"+adminSession+"/events"), http.StatusOK).JSON(t)["events"].([]any)
		if actor := evs[0].(map[string]any)["actor"]; actor != "token:admin" {
			t.Fatalf("actor %v, want token:admin", actor)
		}
		evs = wantStatus(t, e.get(e.worker, "/sessions/"+sid+"/events"), http.StatusOK).JSON(t)["events"].([]any)
		for i, wantActor := range []string{"token:ctl", "token:ctl", "token:admin"} {
			if actor := evs[i].(map[string]any)["actor"]; actor != wantActor {
				t.Fatalf("event %d actor %v, want %s", i+1, actor, wantActor)
			}
		}
	})
}

func leaseAs(t *testing.T, e *apiEnv, token, queue, worker string) apiLease {
	t.Helper()
	var l apiLease
	wantStatus(t, e.post(token, "/queues/"+queue+"/lease", map[string]any{"worker": worker}), http.StatusOK).Decode(t, &l)
	return l
}
