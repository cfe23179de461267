package handlers_test

import (
	"net/http"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// awaitingViaAPI takes a new session through delegate, lease and a
// needs_input result: it waits in awaiting_input at version 4.
func (e *apiEnv) awaitingViaAPI(question string) string {
	e.t.Helper()
	id := e.createSession(nil)
	e.delegate(id, 1, "refunds", nil)
	l := e.lease("refunds", "w-1", 0)
	wantStatus(e.t, e.post(e.worker, "/delegations/"+l.DelegationID+"/result", map[string]any{
		"lease_token": l.LeaseToken, "session_id": id, "step": l.Step, "result_type": "needs_input", "question": question,
	}), http.StatusOK)
	if v, st := e.sessionState(id); v != 4 || st != "awaiting_input" {
		e.t.Fatalf("session at v%d %s, want v4 awaiting_input", v, st)
	}
	return id
}

// TestAPIProvideInput covers POST /sessions/{id}/input: refusals that write
// nothing (validation naming every field, a worker token, a stale version,
// an unknown session), the answer that delegates the next step in the same
// transaction, its idempotent repeat, and a second answer.
func TestAPIProvideInput(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		id := e.awaitingViaAPI("Which card was charged?")
		path := "/sessions/" + id + "/input"

		noWrites(t, s, func() {
			p := wantProblem(t, e.post(e.controller, path, map[string]any{
				"expected_version": 4,
				"delegate":         map[string]any{"queue": "bad queue!", "lease_seconds": 0, "colour": "red"},
			}), http.StatusUnprocessableEntity)
			wantFields(t, p, "delegate.colour", "answer", "delegate.queue", "delegate.step", "delegate.lease_seconds")
			p = wantProblem(t, e.post(e.controller, path, map[string]any{
				"expected_version": 4, "answer": "Visa", "delegate": map[string]any{"queue": "payments"},
			}), http.StatusUnprocessableEntity)
			wantFields(t, p, "delegate.step")
			wantProblem(t, e.post(e.worker, path, map[string]any{"expected_version": 4, "answer": "Visa"}), http.StatusForbidden)
			r := e.post(e.controller, path, map[string]any{"expected_version": 3, "answer": "Visa",
				"delegate": map[string]any{"queue": "payments", "step": "issue-refund"}})
			wantProblem(t, r, http.StatusConflict)
			if jsonInt(t, r.JSON(t), "current_version") != 4 {
				t.Fatalf("409 body %s", r.Body)
			}
			wantProblem(t, e.post(e.controller, "/sessions/ses_missing/input", map[string]any{"expected_version": 1, "answer": "x"}), http.StatusNotFound)
		})

		body := map[string]any{
			"expected_version": 4, "answer": "Visa ending 4242", "facts": map[string]any{"card": "visa"},
			"delegate": map[string]any{"queue": "payments", "step": "issue-refund", "instructions": "Refund to the card.", "lease_seconds": 60},
		}
		first := wantStatus(t, e.post(e.controller, path, body, "Idempotency-Key", "answer-1"), http.StatusOK)
		m := first.JSON(t)
		if m["session_id"] != id || m["status"] != "queued" || jsonInt(t, m, "state_version") != 6 || len(m) != 3 {
			t.Fatalf("answer body %s", first.Body)
		}
		var evs struct {
			Events []struct {
				Type    string         `json:"type"`
				Payload map[string]any `json:"payload"`
			} `json:"events"`
		}
		wantStatus(t, e.get(e.controller, "/sessions/"+id+"/events?after_seq=4"), http.StatusOK).Decode(t, &evs)
		if len(evs.Events) != 2 || evs.Events[0].Type != "input.provided" || evs.Events[1].Type != "delegation.created" {
			t.Fatalf("events after the answer: %+v", evs.Events)
		}
		if p := evs.Events[0].Payload; p["answer"] != "Visa ending 4242" || p["question"] != "Which card was charged?" {
			t.Fatalf("input.provided payload %v", p)
		}
		if n := countRows(t, s, "delegations", "session_id = ? AND status = 'queued' AND queue = 'payments' AND lease_seconds = 60", id); n != 1 {
			t.Fatalf("%d queued delegations on payments", n)
		}
		var pk models.Packet
		wantStatus(t, e.get(e.worker, "/sessions/"+id+"/packet"), http.StatusOK).Decode(t, &pk)
		if len(pk.OpenQuestions) != 0 || pk.Step != "issue-refund" {
			t.Fatalf("packet after the answer: open questions %v, step %q", pk.OpenQuestions, pk.Step)
		}

		// A repeat with the same key answers the same bytes and writes nothing.
		noWrites(t, s, func() {
			again := wantStatus(t, e.post(e.controller, path, body, "Idempotency-Key", "answer-1"), http.StatusOK)
			if string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("repeat %s (replayed %q), first %s", again.Body, again.Header.Get("Idempotent-Replayed"), first.Body)
			}
			wantProblem(t, e.post(e.controller, path, map[string]any{"expected_version": 4, "answer": "other"}, "Idempotency-Key", "answer-1"),
				http.StatusUnprocessableEntity)
			// A second answer: the session no longer waits for input.
			r := e.post(e.admin, path, map[string]any{"expected_version": 6, "answer": "again"})
			wantProblem(t, r, http.StatusUnprocessableEntity)
			if jsonInt(t, r.JSON(t), "current_version") != 6 {
				t.Fatalf("422 body %s", r.Body)
			}
		})

		// Without delegate the session opens; an admin token may answer.
		id2 := e.awaitingViaAPI("Which order?")
		m = wantStatus(t, e.post(e.admin, "/sessions/"+id2+"/input", map[string]any{"expected_version": 4, "facts": map[string]any{"order_id": "1182"}}), http.StatusOK).JSON(t)
		if m["status"] != "open" || jsonInt(t, m, "state_version") != 5 {
			t.Fatalf("answer without delegate: %v", m)
		}
	})
}
