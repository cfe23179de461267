package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

func (e *apiEnv) put(token, path string, body any, headers ...string) apiResponse {
	e.t.Helper()
	return e.do(apiReq{method: http.MethodPut, path: path, token: token, body: body, headers: headers})
}

func (e *apiEnv) del(token, path string, headers ...string) apiResponse {
	e.t.Helper()
	return e.do(apiReq{method: http.MethodDelete, path: path, token: token, headers: headers})
}

// TestAPIRoutes: PUT, GET and DELETE /routes on both dialects, with bad
// input (422 naming every field, nothing written), unknown steps (404),
// roles, idempotent repeats and steps that need escaping.
func TestAPIRoutes(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		body := map[string]any{"queue": "refunds", "instructions": "Issue the refund.", "lease_seconds": 30, "max_attempts": 3}

		noWrites(t, s, func() {
			bad := func(path, b string, fields ...string) {
				t.Helper()
				wantFields(t, wantProblem(t, e.put(e.controller, path, b), http.StatusUnprocessableEntity), fields...)
			}
			bad("/routes/issue-refund", `{"queue": "bad queue", "lease_seconds": 0, "max_attempts": 21}`, "queue", "lease_seconds", "max_attempts")
			bad("/routes/issue-refund", `{"queue": "refunds", "lease_seconds": 3601, "max_attempts": 0}`, "lease_seconds", "max_attempts")
			bad("/routes/issue-refund", `{"lease_seconds": "30", "priority": 1}`, "lease_seconds", "priority", "queue")
			bad("/routes/issue-refund", `{"queue": "refunds", "instructions": "`+strings.Repeat("x", 16001)+`"}`, "instructions")
			bad("/routes/%20padded%20", `{"queue": "refunds"}`, "step")
			bad("/routes/"+strings.Repeat("s", 201), `{"queue": "refunds"}`, "step")
			wantProblem(t, e.put(e.controller, "/routes/issue-refund", ""), http.StatusBadRequest)
			wantProblem(t, e.put(e.worker, "/routes/issue-refund", body), http.StatusForbidden)
			wantProblem(t, e.del(e.worker, "/routes/issue-refund"), http.StatusForbidden)
			wantProblem(t, e.get(e.worker, "/routes/issue-refund"), http.StatusNotFound)
			wantProblem(t, e.del(e.controller, "/routes/issue-refund"), http.StatusNotFound)
		})

		r := wantReplayed(t, wantStatus(t, e.put(e.controller, "/routes/issue-refund", body, "Idempotency-Key", "r-1"), http.StatusOK), false)
		var got models.Route
		r.Decode(t, &got)
		if got.Step != "issue-refund" || got.Queue != "refunds" || got.Instructions != "Issue the refund." ||
			got.LeaseSeconds != 30 || got.MaxAttempts != 3 || got.CreatedAt.IsZero() || got.UpdatedAt.IsZero() {
			t.Fatalf("put answer %s", r.Body)
		}
		for _, k := range []string{"step", "queue", "instructions", "lease_seconds", "max_attempts", "created_at", "updated_at"} {
			if _, ok := r.JSON(t)[k]; !ok {
				t.Errorf("put answer has no %s: %s", k, r.Body)
			}
		}
		noWrites(t, s, func() {
			again := wantReplayed(t, wantStatus(t, e.put(e.controller, "/routes/issue-refund", body, "Idempotency-Key", "r-1"), http.StatusOK), true)
			if !bytes.Equal(again.Body, r.Body) {
				t.Fatalf("repeat %s, first %s", again.Body, r.Body)
			}
		})
		// Replace (admin may too); defaults fill the omitted bounds.
		r2 := wantStatus(t, e.put(e.admin, "/routes/issue-refund", map[string]any{"queue": "payments"}), http.StatusOK).JSON(t)
		if r2["queue"] != "payments" || jsonInt(t, r2, "lease_seconds") != models.DefaultLeaseSeconds || jsonInt(t, r2, "max_attempts") != models.DefaultMaxAttempts {
			t.Fatalf("replace answer %v", r2)
		}
		// A step with a slash is reached escaped.
		wantStatus(t, e.put(e.controller, "/routes/billing%2Frefund", map[string]any{"queue": "billing"}), http.StatusOK)
		if one := wantStatus(t, e.get(e.worker, "/routes/billing%2Frefund"), http.StatusOK).JSON(t); one["step"] != "billing/refund" {
			t.Fatalf("escaped step = %v", one)
		}

		var list struct{ Routes []models.Route }
		wantStatus(t, e.get(e.worker, "/routes"), http.StatusOK).Decode(t, &list)
		if len(list.Routes) != 2 || list.Routes[0].Step != "billing/refund" || list.Routes[1].Queue != "payments" {
			t.Fatalf("list = %+v", list)
		}

		wantReplayed(t, wantStatus(t, e.del(e.controller, "/routes/issue-refund", "Idempotency-Key", "d-1"), http.StatusNoContent), false)
		wantReplayed(t, wantStatus(t, e.del(e.controller, "/routes/issue-refund", "Idempotency-Key", "d-1"), http.StatusNoContent), true)
		wantProblem(t, e.del(e.controller, "/routes/issue-refund"), http.StatusNotFound)
		wantProblem(t, e.get(e.controller, "/routes/issue-refund"), http.StatusNotFound)

		// Every change is in the admin audit log: 2 puts of issue-refund
		// (the repeat is not a change), 1 of billing/refund, 1 delete.
		if n := countRows(t, s, "admin_audit", "target_kind = ?", "route"); n != 4 {
			t.Fatalf("%d route changes audited, want 4", n)
		}
	})
}

// TestAPIRoutedResult: through the API, a completed result whose next_step
// has a route answers status queued; the session's events show the
// delegation by system:router, and its worker can lease it at once. A
// result naming an unrouted step leaves the session open, counted as
// stalled by GET /metrics.
func TestAPIRoutedResult(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		wantStatus(t, e.put(e.controller, "/routes/issue-refund", map[string]any{"queue": "payments", "instructions": "Refund it."}), http.StatusOK)

		finish := func(queue, next string) (string, map[string]any) {
			t.Helper()
			var l struct {
				DelegationID string `json:"delegation_id"`
				SessionID    string `json:"session_id"`
				Step         string `json:"step"`
				LeaseToken   string `json:"lease_token"`
				Packet       struct {
					Instructions string `json:"instructions"`
				} `json:"packet"`
			}
			wantStatus(t, e.post(e.worker, "/queues/"+queue+"/lease", map[string]any{"worker": "w-1"}), http.StatusOK).Decode(t, &l)
			res := map[string]any{"lease_token": l.LeaseToken, "session_id": l.SessionID, "step": l.Step, "result_type": "completed",
				"output": map[string]any{"ok": true}, "evidence": []any{map[string]any{"claim": "done"}}}
			if next != "" {
				res["next_step"] = next
			}
			out := wantStatus(t, e.post(e.worker, "/delegations/"+l.DelegationID+"/result", res), http.StatusOK).JSON(t)
			return l.Packet.Instructions, out
		}

		sid := e.createSession(nil)
		e.delegate(sid, 1, "refunds", nil)
		if _, out := finish("refunds", "issue-refund"); out["status"] != "queued" || jsonInt(t, out, "state_version") != 5 {
			t.Fatalf("routed result answer %v", out)
		}
		var evs struct {
			Events []struct {
				Type  models.EventType `json:"type"`
				Actor string           `json:"actor"`
			} `json:"events"`
		}
		wantStatus(t, e.get(e.controller, "/sessions/"+sid+"/events"), http.StatusOK).Decode(t, &evs)
		last := evs.Events[len(evs.Events)-1]
		if len(evs.Events) != 5 || last.Type != models.EventDelegationCreated || last.Actor != models.RouterActor {
			t.Fatalf("events = %+v", evs.Events)
		}
		if instr, out := finish("payments", "notify-customer"); instr != "Refund it." || out["status"] != "open" {
			t.Fatalf("second step: instructions %q, answer %v", instr, out)
		}
		var pm struct {
			Stalled models.StalledStats `json:"stalled"`
		}
		wantStatus(t, e.get(e.controller, "/metrics?window=24h"), http.StatusOK).Decode(t, &pm)
		if pm.Stalled.Sessions != 1 || pm.Stalled.ByStep["notify-customer"] != 1 {
			t.Fatalf("metrics stalled = %+v", pm.Stalled)
		}
	})
}

// TestConsoleStalled: the session page says what a stalled session waits
// on, the sessions list has a Stalled view with its count, and the admin
// metrics page counts stalled sessions by step.
func TestConsoleStalled(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		newUser(t, s, "admin@example.com", models.RoleAdmin)
		stalled, did := storetest.Delegated(ctx, t, s, "refunds")
		l, err := s.Claim(ctx, "refunds", "w", "test:worker", "")
		if err != nil || l == nil || l.DelegationID != did {
			t.Fatal(l, err)
		}
		if _, err := s.SubmitResult(ctx, did, "test:worker", "", models.ResultInput{LeaseToken: l.LeaseToken, SessionID: stalled,
			Step: l.Step, ResultType: models.ResultCompleted, Output: json.RawMessage(`{}`),
			Evidence: []models.Evidence{{Claim: "ok"}}, NextStep: "notify-customer"}); err != nil {
			t.Fatal(err)
		}
		other := storetest.Session(ctx, t, s, nil)

		b := newBrowser(t, s, web.Config{})
		b.mustLogin("admin@example.com", testPassword)
		doc := b.get("/console/sessions/" + stalled).Doc(t)
		if got := squash(doc.Find(`[data-testid="stalled"]`)); !strings.Contains(got, "stalled: no route for notify-customer") {
			t.Fatalf("session page stalled line = %q", got)
		}
		if got := doc.Find(`[data-testid="stalled"]`).Length(); b.get("/console/sessions/"+other).Doc(t).Find(`[data-testid="stalled"]`).Length() != 0 || got != 1 {
			t.Fatalf("stalled line shown on a session that is not stalled")
		}

		list := b.get("/console/sessions?stalled=1").Doc(t)
		rows := sessionRows(t, list)
		if len(rows) != 1 || rows[0].ID != stalled {
			t.Fatalf("stalled view rows = %+v", rows)
		}
		if got := strings.TrimSpace(list.Find(`[data-testid="stalled-count"]`).Text()); got != "1" {
			t.Fatalf("stalled count = %q", got)
		}
		if cur, _ := list.Find(`[data-testid="status-filters"] a[aria-current="true"]`).Attr("data-filter"); cur != "stalled" {
			t.Fatalf("current filter = %q", cur)
		}
		if p := b.get("/console/sessions?stalled=maybe"); p.StatusCode != http.StatusBadRequest {
			t.Fatalf("bad stalled filter = %d", p.StatusCode)
		}

		// Routing the step ends the stall (without delegating the session).
		if _, err := s.PutRoute(ctx, "test:controller", "", "notify-customer", models.RouteInput{Queue: "mail"}); err != nil {
			t.Fatal(err)
		}
		if rows := sessionRows(t, b.get("/console/sessions?stalled=1").Doc(t)); len(rows) != 0 {
			t.Fatalf("stalled view after routing = %+v", rows)
		}
		if _, err := s.DeleteRoute(ctx, "test:controller", "", "notify-customer"); err != nil {
			t.Fatal(err)
		}
		// Route changes are in the admin log.
		if log := squash(b.get("/console/admin/audit").Doc(t).Find("main")); !strings.Contains(log, "route.put") || !strings.Contains(log, "route.delete") {
			t.Fatalf("admin log does not show the route changes: %s", log)
		}
		m := b.get("/console/admin/metrics").Doc(t)
		if got := squash(m.Find(`[data-testid="stalled-value"]`)); got != "1" {
			t.Fatalf("metrics page stalled = %q", got)
		}
		if got := squash(m.Find(`[data-testid="stalled-steps"]`)); !strings.Contains(got, "notify-customer: 1 session") {
			t.Fatalf("metrics page stalled steps = %q", got)
		}
	})
}

// TestAPIDrainRoute: POST /routes/{step}/drain delegates the sessions that
// stalled before the route existed; bad limits and unknown fields are 422s
// naming them, a worker is refused, an unknown route is a 404, and nothing
// is written on any of them.
func TestAPIDrainRoute(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		e := newAPIEnv(t, s)
		id, did := storetest.Delegated(ctx, t, s, "refunds")
		l, err := s.Claim(ctx, "refunds", "w", "test:worker", "")
		if err != nil || l == nil || l.DelegationID != did {
			t.Fatal(l, err)
		}
		if _, err := s.SubmitResult(ctx, did, "test:worker", "", models.ResultInput{LeaseToken: l.LeaseToken, SessionID: id,
			Step: l.Step, ResultType: models.ResultCompleted, Output: json.RawMessage(`{}`),
			Evidence: []models.Evidence{{Claim: "ok"}}, NextStep: "notify-customer"}); err != nil {
			t.Fatal(err)
		}
		noWrites(t, s, func() {
			wantProblem(t, e.post(e.controller, "/routes/notify-customer/drain", `{}`), http.StatusNotFound)
			wantProblem(t, e.post(e.worker, "/routes/notify-customer/drain", `{}`), http.StatusForbidden)
		})
		wantStatus(t, e.put(e.controller, "/routes/notify-customer", map[string]any{"queue": "mail"}), http.StatusOK)
		noWrites(t, s, func() {
			wantFields(t, wantProblem(t, e.post(e.controller, "/routes/notify-customer/drain", `{"limit": 0}`), http.StatusUnprocessableEntity), "limit")
			wantFields(t, wantProblem(t, e.post(e.controller, "/routes/notify-customer/drain", `{"limit": 501, "queue": "q"}`), http.StatusUnprocessableEntity), "limit", "queue")
			wantFields(t, wantProblem(t, e.post(e.controller, "/routes/notify-customer/drain", `{"limit": "x"}`), http.StatusUnprocessableEntity), "limit")
			wantProblem(t, e.post(e.controller, "/routes/notify-customer/drain", ""), http.StatusBadRequest)
		})
		r := wantReplayed(t, wantStatus(t, e.post(e.controller, "/routes/notify-customer/drain", `{"limit": 10}`, "Idempotency-Key", "dr-1"), http.StatusOK), false)
		var res models.DrainResult
		r.Decode(t, &res)
		if res.Step != "notify-customer" || len(res.Delegated) != 1 || res.Delegated[0].SessionID != id || res.More {
			t.Fatalf("drain answer %s", r.Body)
		}
		again := wantReplayed(t, wantStatus(t, e.post(e.controller, "/routes/notify-customer/drain", `{"limit": 10}`, "Idempotency-Key", "dr-1"), http.StatusOK), true)
		if !bytes.Equal(again.Body, r.Body) {
			t.Fatalf("repeat %s, first %s", again.Body, r.Body)
		}
		if row, _ := s.GetSession(ctx, id); row.Status != models.StatusQueued || row.Queue != "mail" {
			t.Fatalf("drained session = %s on %s", row.Status, row.Queue)
		}
	})
}
