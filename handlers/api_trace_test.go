package handlers_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestAPITraceContext: a valid traceparent (and tracestate) is stored with
// the events a request causes, travels with the delegation to the lease
// answer, and the worker's result carrying it records it on the result's
// event; an invalid one is ignored (the request succeeds, nothing is
// stored); the hash chains still verify.
func TestAPITraceContext(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		const (
			create = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			ctl    = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			state  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
			worker = "00-4bf92f3577b34da6a3ce929d0e0e4736-53995c3f42cd8ad8-01"
		)
		m := wantStatus(t, e.post(e.controller, "/sessions", map[string]any{"goal": "Refund order 1182"}, "traceparent", create), http.StatusCreated).JSON(t)
		sid := m["session_id"].(string)
		m = wantStatus(t, e.post(e.controller, "/sessions/"+sid+"/delegations",
			map[string]any{"queue": "traced", "step": "check", "expected_version": 1},
			"traceparent", ctl, "tracestate", state+", "), http.StatusCreated).JSON(t)
		did := m["delegation_id"].(string)

		var l struct {
			apiLease
			Traceparent string `json:"traceparent"`
			Tracestate  string `json:"tracestate"`
		}
		wantStatus(t, e.post(e.worker, "/queues/traced/lease", map[string]any{"worker": "w-1"}), http.StatusOK).Decode(t, &l)
		if l.DelegationID != did || l.Traceparent != ctl || l.Tracestate != state {
			t.Fatalf("lease = %+v; want the delegation's trace context %s / %s", l, ctl, state)
		}
		wantStatus(t, e.post(e.worker, "/delegations/"+did+"/result", completedResult(l.apiLease), "traceparent", worker), http.StatusOK)

		var page struct {
			Events []struct {
				Type        string `json:"type"`
				Traceparent string `json:"traceparent"`
				Tracestate  string `json:"tracestate"`
			} `json:"events"`
		}
		wantStatus(t, e.get(e.worker, "/sessions/"+sid+"/events"), http.StatusOK).Decode(t, &page)
		want := map[string][2]string{
			"session.created": {create, ""}, "delegation.created": {ctl, state},
			"delegation.leased": {"", ""}, "result.completed": {worker, ""},
		}
		if len(page.Events) != len(want) {
			t.Fatalf("events %+v", page.Events)
		}
		for _, ev := range page.Events {
			if w := want[ev.Type]; ev.Traceparent != w[0] || ev.Tracestate != w[1] {
				t.Errorf("%s: traceparent %q tracestate %q; want %q %q", ev.Type, ev.Traceparent, ev.Tracestate, w[0], w[1])
			}
		}

		// Invalid headers are ignored, never an error.
		for _, bad := range []string{
			"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", // uppercase
			"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
			"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
			"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero parent id
			"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
			"not a traceparent",
		} {
			m := wantStatus(t, e.post(e.controller, "/sessions", map[string]any{"goal": "Refund"}, "traceparent", bad, "tracestate", state), http.StatusCreated).JSON(t)
			var p struct {
				Events []struct {
					Traceparent string `json:"traceparent"`
				} `json:"events"`
			}
			wantStatus(t, e.get(e.worker, "/sessions/"+m["session_id"].(string)+"/events"), http.StatusOK).Decode(t, &p)
			if len(p.Events) != 1 || p.Events[0].Traceparent != "" {
				t.Errorf("traceparent %q: events %+v; want it ignored", bad, p.Events)
			}
		}
		if n := countRows(t, s, "events", "traceparent <> '' OR tracestate <> ''"); n != 3 {
			t.Errorf("%d events with trace context; want 3", n)
		}
		if rep, err := s.Verify(context.Background(), models.VerifyOpts{}); err != nil || !rep.OK() {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}
