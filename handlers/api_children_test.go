package handlers_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func TestAPIChildren(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		pid := e.createSession(nil)
		path := "/sessions/" + pid + "/children"
		body := map[string]any{
			"expected_version": 1,
			"join":             map[string]any{"policy": "quorum", "quorum": 2, "timeout_seconds": 600},
			"children": []any{
				map[string]any{"goal": "Check payment", "queue": "fan-pay", "step": "check-payment", "instructions": "Look it up."},
				map[string]any{"goal": "Check shipping", "queue": "fan-ship", "step": "check-shipping", "instructions": "Ask the carrier."},
			},
		}

		noWrites(t, s, func() {
			wantFields(t, wantProblem(t, e.post(e.controller, path, `{"join": {"policy": "some", "quorum": 1, "timeout_seconds": 0}, "children": [{"goal": "", "queue": "q", "step": "s", "color": 1}]}`), http.StatusUnprocessableEntity),
				"children[0].color", "expected_version", "join.policy", "join.quorum", "join.timeout_seconds", "children[0].goal")
			wantFields(t, wantProblem(t, e.post(e.controller, path, `{"expected_version": 1, "join": {"policy": "all"}, "children": []}`), http.StatusUnprocessableEntity),
				"children")
			wantProblem(t, e.post(e.controller, path, `{"expected_version": 1,`), http.StatusBadRequest)
			p := wantProblem(t, e.post(e.controller, path, map[string]any{"expected_version": 4, "join": body["join"], "children": body["children"]}), http.StatusConflict)
			if p.CurrentVersion == nil || *p.CurrentVersion != 1 {
				t.Fatalf("409 = %+v", p)
			}
			wantProblem(t, e.post(e.controller, "/sessions/ses_nope/children", body), http.StatusNotFound)
			wantProblem(t, e.post(e.worker, path, body), http.StatusForbidden)
			wantProblem(t, e.post("", path, body), http.StatusUnauthorized)
		})

		r := wantStatus(t, e.post(e.controller, path, body, "Idempotency-Key", "fan-1"), http.StatusCreated)
		m := r.JSON(t)
		kids, _ := m["children"].([]any)
		if len(kids) != 2 || jsonInt(t, m, "state_version") != 2 || m["status"] != "waiting_children" || m["session_id"] != pid {
			t.Fatalf("answer %s", r.Body)
		}
		for _, k := range kids {
			id, _ := k.(map[string]any)["session_id"].(string)
			if !strings.HasPrefix(id, "ses_") {
				t.Fatalf("child %v", k)
			}
			child := wantStatus(t, e.get(e.worker, "/sessions/"+id), http.StatusOK).JSON(t)
			if child["parent_id"] != pid || child["status"] != "queued" {
				t.Fatalf("child session %v", child)
			}
		}
		noWrites(t, s, func() {
			again := wantStatus(t, e.post(e.controller, path, body, "Idempotency-Key", "fan-1"), http.StatusCreated)
			if !bytes.Equal(again.Body, r.Body) {
				t.Fatalf("repeat %s, first %s", again.Body, r.Body)
			}
			// Already waiting for children: a second fan-out is illegal.
			wantProblem(t, e.post(e.controller, path, map[string]any{"expected_version": 2, "join": body["join"], "children": body["children"]}), http.StatusUnprocessableEntity)
		})

		// Two of two children complete: the quorum is met and the parent is
		// open again.
		for _, q := range []string{"fan-pay", "fan-ship"} {
			l := e.lease(q, "w-"+q, 0)
			wantStatus(t, e.post(e.worker, "/delegations/"+l.DelegationID+"/result", completedResult(l)), http.StatusOK)
		}
		if v, status := e.sessionState(pid); status != "open" || v != 3 {
			t.Fatalf("parent %s at %d", status, v)
		}
		if n := countRows(t, s, "events", "session_id = ? AND type = ?", pid, models.EventChildrenJoined); n != 1 {
			t.Fatalf("%d joins", n)
		}
	})
}
