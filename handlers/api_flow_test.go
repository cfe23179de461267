package handlers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestAPIQueueFlow: PUT /queues/{queue} is for admins, refuses bad settings
// naming the field with nothing written, and the settings hold on the
// lease endpoint: a throttled long poll waits and answers 204, not an
// error; GET shows the settings and the in-flight count to every role.
func TestAPIQueueFlow(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		noWrites(t, s, func() {
			wantProblem(t, e.put(e.worker, "/queues/refunds", `{"max_in_flight": 1}`), http.StatusForbidden)
			wantProblem(t, e.put(e.controller, "/queues/refunds", `{"max_in_flight": 1}`), http.StatusForbidden)
			bad := func(path, body string, fields ...string) {
				t.Helper()
				wantFields(t, wantProblem(t, e.put(e.admin, path, body), http.StatusUnprocessableEntity), fields...)
			}
			bad("/queues/refunds", `{"max_in_flight": -1}`, "max_in_flight")
			bad("/queues/refunds", `{"max_in_flight": 0, "max_leases_per_second": 0}`, "max_in_flight", "max_leases_per_second")
			bad("/queues/refunds", `{"max_in_flight": 100001, "max_leases_per_second": 10001}`, "max_in_flight", "max_leases_per_second")
			bad("/queues/refunds", `{"max_in_flight": 2.5}`, "max_in_flight")
			bad("/queues/refunds", `{"max_in_flight": "3"}`, "max_in_flight")
			bad("/queues/refunds", `{"max_leases_per_second": -0.1, "burst": 3}`, "burst", "max_leases_per_second")
			bad("/queues/-bad", `{}`, "queue")
			wantFields(t, wantProblem(t, e.get(e.worker, "/queues/-bad"), http.StatusUnprocessableEntity), "queue")
		})

		m := wantStatus(t, e.put(e.admin, "/queues/refunds", `{"max_in_flight": 1, "max_leases_per_second": 2.5}`), http.StatusOK).JSON(t)
		if m["queue"] != "refunds" || jsonInt(t, m, "max_in_flight") != 1 || m["max_leases_per_second"].(interface{ String() string }).String() != "2.5" ||
			m["burst"].(interface{ String() string }).String() != "3" || jsonInt(t, m, "in_flight") != 0 {
			t.Fatalf("put answer %v", m)
		}
		if n := countRows(t, s, "admin_audit", "action = ? AND target_id = ?", models.AdminQueueFlowPut, "refunds"); n != 1 {
			t.Fatalf("%d admin log rows", n)
		}
		for range 2 {
			e.delegate(e.createSession(nil), 1, "refunds", nil)
		}
		l := e.lease("refunds", "w-1", 0)
		start := time.Now()
		r := wantStatus(t, e.post(e.worker, "/queues/refunds/lease", map[string]any{"worker": "w-2", "wait_seconds": 1}), http.StatusNoContent)
		if waited := time.Since(start); waited < 900*time.Millisecond || len(r.Body) != 0 {
			t.Fatalf("throttled poll answered after %v with %q; want 204 at the end of its wait", waited, r.Body)
		}
		wantStatus(t, e.post(e.worker, "/queues/refunds/lease", map[string]any{"worker": "w-2", "max": 5}), http.StatusNoContent)
		g := wantStatus(t, e.get(e.worker, "/queues/refunds"), http.StatusOK).JSON(t)
		if jsonInt(t, g, "in_flight") != 1 || jsonInt(t, g, "max_in_flight") != 1 {
			t.Fatalf("get = %v", g)
		}
		wantStatus(t, e.post(e.worker, "/delegations/"+l.DelegationID+"/result", completedResult(l)), http.StatusOK)
		e.lease("refunds", "w-2", 1)

		// Clearing: an empty body (or nulls) is no limit.
		m = wantStatus(t, e.put(e.admin, "/queues/refunds", `{"max_in_flight": null}`), http.StatusOK).JSON(t)
		if m["max_in_flight"] != nil || m["max_leases_per_second"] != nil || m["burst"] != nil {
			t.Fatalf("cleared = %v", m)
		}
		list := wantStatus(t, e.get(e.controller, "/queues"), http.StatusOK).JSON(t)
		qs, _ := list["queues"].([]any)
		if len(qs) != 1 || qs[0].(map[string]any)["queue"] != "refunds" {
			t.Fatalf("list = %v", list)
		}
		g = wantStatus(t, e.get(e.worker, "/queues/never-configured"), http.StatusOK).JSON(t)
		if g["max_in_flight"] != nil || jsonInt(t, g, "in_flight") != 0 {
			t.Fatalf("unconfigured = %v", g)
		}
	})
}
