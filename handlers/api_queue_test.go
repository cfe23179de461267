package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func TestAPIDelegate(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		sid := e.createSession(nil)
		path := "/sessions/" + sid + "/delegations"
		body := map[string]any{"queue": "refunds", "step": "check-eligibility", "instructions": "...", "expected_version": 1, "max_attempts": 3, "lease_seconds": 30}

		noWrites(t, s, func() {
			bad := func(b string, fields ...string) {
				t.Helper()
				wantFields(t, wantProblem(t, e.post(e.controller, path, b), http.StatusUnprocessableEntity), fields...)
			}
			bad(`{"queue": "refunds", "step": "s", "expected_version": 1, "lease_seconds": 0, "max_attempts": 21}`, "lease_seconds", "max_attempts")
			bad(`{"queue": "refunds", "step": "s", "expected_version": 1, "lease_seconds": 3601, "max_attempts": 0}`, "lease_seconds", "max_attempts")
			bad(`{"queue": "", "step": " ", "lease_seconds": "30"}`, "lease_seconds", "queue", "step", "expected_version")
			bad(`{"queue": "bad queue", "step": "s", "expected_version": 1, "priority": 1}`, "priority", "queue")
			p := wantProblem(t, e.post(e.controller, path, map[string]any{"queue": "refunds", "step": "s", "expected_version": 7}), http.StatusConflict)
			if p.CurrentVersion == nil || *p.CurrentVersion != 1 {
				t.Fatalf("409 = %+v", p)
			}
			wantProblem(t, e.post(e.controller, "/sessions/ses_nope/delegations", body), http.StatusNotFound)
		})

		r := wantStatus(t, e.post(e.controller, path, body, "Idempotency-Key", "d-1"), http.StatusCreated)
		m := r.JSON(t)
		did, _ := m["delegation_id"].(string)
		if len(m) != 4 || !strings.HasPrefix(did, "dlg_") || m["session_id"] != sid || jsonInt(t, m, "state_version") != 2 || m["status"] != "queued" {
			t.Fatalf("delegation answer %s", r.Body)
		}
		noWrites(t, s, func() {
			again := wantStatus(t, e.post(e.controller, path, body, "Idempotency-Key", "d-1"), http.StatusCreated)
			if !bytes.Equal(again.Body, r.Body) {
				t.Fatalf("repeat %s, first %s", again.Body, r.Body)
			}
			// Already queued: a second delegation is illegal.
			wantProblem(t, e.post(e.controller, path, map[string]any{"queue": "refunds", "step": "s", "expected_version": 2}), http.StatusUnprocessableEntity)
		})
		if n := countRows(t, s, "delegations", "session_id = ?", sid); n != 1 {
			t.Fatalf("%d delegations", n)
		}
	})
}

func TestAPILeaseHeartbeatResult(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		start := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
		s.Now = func() time.Time { return start }

		noWrites(t, s, func() {
			// Nothing queued: 204 at once, with no body.
			r := wantStatus(t, e.post(e.worker, "/queues/lhr/lease", map[string]any{"worker": "w-1", "wait_seconds": 0}), http.StatusNoContent)
			if len(r.Body) != 0 {
				t.Fatalf("204 with body %q", r.Body)
			}
			wantStatus(t, e.post(e.worker, "/queues/lhr/lease", `{"worker": "w-1"}`), http.StatusNoContent)
			wantFields(t, wantProblem(t, e.post(e.worker, "/queues/lhr/lease", `{"wait_seconds": 31}`), http.StatusUnprocessableEntity), "worker", "wait_seconds")
			wantFields(t, wantProblem(t, e.post(e.worker, "/queues/lhr/lease", `{"worker": "w", "wait_seconds": -1}`), http.StatusUnprocessableEntity), "wait_seconds")
			wantFields(t, wantProblem(t, e.post(e.worker, "/queues/-bad/lease", `{"worker": "w", "wait": 3}`), http.StatusUnprocessableEntity), "wait", "queue")
		})

		sid := e.createSession(nil)
		did := e.delegate(sid, 1, "lhr", map[string]any{"lease_seconds": 60})
		l := e.lease("lhr", "w-1", 0)
		if l.DelegationID != did || l.SessionID != sid || l.Step != "check-eligibility" || l.Attempt != 1 || !strings.HasPrefix(l.LeaseToken, "lt_") {
			t.Fatalf("lease = %+v", l)
		}
		if exp := rfc3339UTC(t, l.LeaseExpiresAt); !exp.Equal(start.Add(60 * time.Second)) {
			t.Fatalf("lease expires %v, want %v", exp, start.Add(60*time.Second))
		}
		if l.Packet.SessionID != sid || l.Packet.BasedOnVersion != 3 || l.Packet.Step != "check-eligibility" || l.Packet.Instructions != "Check the order." {
			t.Fatalf("packet = %+v", l.Packet)
		}
		// Leased work is not leased twice.
		wantStatus(t, e.post(e.worker, "/queues/lhr/lease", map[string]any{"worker": "w-2"}), http.StatusNoContent)

		s.Now = func() time.Time { return start.Add(45 * time.Second) }
		hb := wantStatus(t, e.post(e.worker, "/delegations/"+did+"/heartbeat", map[string]any{"lease_token": l.LeaseToken}), http.StatusOK).JSON(t)
		if exp := rfc3339UTC(t, hb["lease_expires_at"].(string)); !exp.Equal(start.Add(105 * time.Second)) {
			t.Fatalf("heartbeat expiry %v", exp)
		}

		result := "/delegations/" + did + "/result"
		noWrites(t, s, func() {
			p := wantProblem(t, e.post(e.worker, "/delegations/"+did+"/heartbeat", map[string]any{"lease_token": "lt_wrong"}), http.StatusConflict)
			if p.CurrentVersion == nil || *p.CurrentVersion != 3 {
				t.Fatalf("heartbeat 409 = %+v", p)
			}
			wantProblem(t, e.post(e.worker, "/delegations/dlg_nope/heartbeat", map[string]any{"lease_token": l.LeaseToken}), http.StatusNotFound)
			wantFields(t, wantProblem(t, e.post(e.worker, "/delegations/"+did+"/heartbeat", `{}`), http.StatusUnprocessableEntity), "lease_token")
			wantFields(t, wantProblem(t, e.post(e.worker, "/delegations/"+did+"/heartbeat", `{"lease_token": 5, "x": 1}`), http.StatusUnprocessableEntity), "lease_token", "x")

			// Every contract violation in one 422; the lease stays usable.
			bad := completedResult(l)
			delete(bad, "evidence")
			bad["uncertainty"] = map[string]any{"level": 2}
			bad["failure"] = map[string]any{"class": "transient"}
			bad["result_type"] = "completed"
			wantFields(t, wantProblem(t, e.post(e.worker, result, bad), http.StatusUnprocessableEntity), "evidence", "uncertainty.level", "failure")
			bad = map[string]any{"result_type": "failed", "failure": map[string]any{"class": "flaky", "msg": "x"}, "evidence": []any{map[string]any{"source": "s"}}}
			wantFields(t, wantProblem(t, e.post(e.worker, result, bad), http.StatusUnprocessableEntity),
				"failure.msg", "lease_token", "session_id", "step", "evidence[0].claim", "failure.class")
			bad = map[string]any{"result_type": "needs_input", "lease_token": l.LeaseToken, "session_id": sid, "step": l.Step}
			wantFields(t, wantProblem(t, e.post(e.worker, result, bad), http.StatusUnprocessableEntity), "next_step")
			bad = completedResult(l)
			bad["session_id"] = "ses_other"
			bad["step"] = "other-step"
			wantFields(t, wantProblem(t, e.post(e.worker, result, bad), http.StatusUnprocessableEntity), "session_id", "step")
			// Mismatches with the delegation come with the other violations.
			delete(bad, "evidence")
			wantFields(t, wantProblem(t, e.post(e.worker, result, bad), http.StatusUnprocessableEntity), "session_id", "step", "evidence")
			bad = completedResult(l)
			bad["lease_token"] = "lt_wrong"
			p = wantProblem(t, e.post(e.worker, result, bad), http.StatusConflict)
			if p.CurrentVersion == nil || *p.CurrentVersion != 3 {
				t.Fatalf("result 409 = %+v", p)
			}
			wantProblem(t, e.post(e.worker, "/delegations/dlg_nope/result", completedResult(l)), http.StatusNotFound)
		})

		r := wantStatus(t, e.post(e.worker, result, completedResult(l)), http.StatusOK).JSON(t)
		if len(r) != 3 || r["session_id"] != sid || r["status"] != "completed" || jsonInt(t, r, "state_version") != 4 {
			t.Fatalf("result answer %v", r)
		}
		noWrites(t, s, func() {
			// The lease ended with the result.
			wantProblem(t, e.post(e.worker, result, completedResult(l)), http.StatusConflict)
			wantProblem(t, e.post(e.worker, "/delegations/"+did+"/heartbeat", map[string]any{"lease_token": l.LeaseToken}), http.StatusConflict)
		})
	})
}

// TestAPIExpiredLease: a worker that stops heartbeating loses its lease to
// the rescuer; its late heartbeat and result are fenced off.
func TestAPIExpiredLease(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		ctx := context.Background()
		now := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
		s.Now = func() time.Time { return now }
		sid := e.createSession(nil)
		did := e.delegate(sid, 1, "expiry", map[string]any{"lease_seconds": 30})
		first := e.lease("expiry", "w-1", 0)

		now = now.Add(31 * time.Second)
		rep, err := s.Maintain(ctx)
		if err != nil || rep.Rescued != 1 {
			t.Fatalf("maintain = %+v, %v", rep, err)
		}
		second := e.lease("expiry", "w-2", 0)
		if second.DelegationID != did || second.Attempt != 2 || second.LeaseToken == first.LeaseToken {
			t.Fatalf("re-lease = %+v", second)
		}
		v, status := e.sessionState(sid)
		if v != 5 || status != "running" {
			t.Fatalf("session at %d %s, want 5 running", v, status)
		}

		noWrites(t, s, func() {
			p := wantProblem(t, e.post(e.worker, "/delegations/"+did+"/heartbeat", map[string]any{"lease_token": first.LeaseToken}), http.StatusConflict)
			if p.CurrentVersion == nil || *p.CurrentVersion != 5 {
				t.Fatalf("late heartbeat = %+v", p)
			}
			p = wantProblem(t, e.post(e.worker, "/delegations/"+did+"/result", completedResult(first), "Idempotency-Key", "late"), http.StatusConflict)
			if p.CurrentVersion == nil || *p.CurrentVersion != 5 {
				t.Fatalf("late result = %+v", p)
			}
		})
		if v2, status2 := e.sessionState(sid); v2 != v || status2 != status {
			t.Fatalf("fenced writes moved the session to %d %s", v2, status2)
		}

		r := wantStatus(t, e.post(e.worker, "/delegations/"+did+"/result", completedResult(second)), http.StatusOK).JSON(t)
		if r["status"] != "completed" || jsonInt(t, r, "state_version") != 6 {
			t.Fatalf("result of attempt 2 = %v", r)
		}
	})
}

func TestAPIResultIdempotent(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		sid := e.createSession(nil)
		did := e.delegate(sid, 1, "idem-result", nil)
		l := e.lease("idem-result", "w-1", 0)
		path := "/delegations/" + did + "/result"

		// A 422 first does not use up the key or the lease.
		bad := completedResult(l)
		delete(bad, "evidence")
		wantProblem(t, e.post(e.worker, path, bad, "Idempotency-Key", "res-1"), http.StatusUnprocessableEntity)

		first := wantStatus(t, e.post(e.worker, path, completedResult(l), "Idempotency-Key", "res-1"), http.StatusOK)
		noWrites(t, s, func() {
			again := e.post(e.worker, path, completedResult(l), "Idempotency-Key", "res-1")
			if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) {
				t.Fatalf("repeat %d %s, first %d %s", again.Status, again.Body, first.Status, first.Body)
			}
			other := completedResult(l)
			other["output"] = map[string]any{"eligible": false}
			p := wantProblem(t, e.post(e.worker, path, other, "Idempotency-Key", "res-1"), http.StatusUnprocessableEntity)
			if p.Type != "https://taskpilots.dev/problems/idempotency" {
				t.Fatalf("type %q", p.Type)
			}
		})
		if n := countRows(t, s, "events", "session_id = ? AND type = ?", sid, "result.completed"); n != 1 {
			t.Fatalf("%d result events, want 1", n)
		}
	})
}

// TestAPILongPollWakes: a waiting lease returns the work as soon as it is
// delegated, because the delegation wakes it. The poll waits 30 s and its
// periodic re-check is set to an hour, and the work is queued only once the
// poll has looked and found nothing: so the lease can arrive only through
// the wake-up, or through the poll's last look at its 30 s deadline, which
// the broker's wake count tells apart.
//
// To see it fail, switch wake-ups off: comment out s.Wake.Notify(queue) in
// Store.announce (models/notify.go). The poll then sleeps to its deadline,
// leases the work in its last look and the test fails on the wake count.
func TestAPILongPollWakes(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		s.LeaseRecheck = time.Hour
		e := newAPIEnv(t, s)
		sid := e.createSession(nil)
		done := make(chan apiResponse, 1)
		go func() {
			done <- e.post(e.worker, "/queues/longpoll/lease", map[string]any{"worker": "w-1", "wait_seconds": 30})
		}()
		waitParked(t, s, "longpoll")
		did := e.delegate(sid, 1, "longpoll", nil)
		var l apiLease
		wantStatus(t, <-done, http.StatusOK).Decode(t, &l)
		if l.DelegationID != did || l.SessionID != sid || l.Attempt != 1 {
			t.Fatalf("lease = %+v", l)
		}
		if n := s.Wake.Wakes("longpoll"); n != 1 {
			t.Fatalf("the poll leased the work after %d wake-ups; want 1: it found the work at its deadline, not when it was queued", n)
		}
	})
}

// waitParked waits until a lease long poll on queue has looked for work,
// found none and waits: work queued from then on reaches it only by a
// wake-up (or a re-check).
func waitParked(t *testing.T, s *models.Store, queue string) {
	t.Helper()
	// A guard against a poll that never starts, not a timing assertion.
	for deadline := time.Now().Add(20 * time.Second); s.Wake.Parked(queue) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no long poll waits on queue %s", queue)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAPILongPollHonoursCancellation: a poll whose caller goes away stops
// waiting and leases nothing.
func TestAPILongPollHonoursCancellation(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		hr := httptest.NewRequestWithContext(ctx, http.MethodPost, "/api/v1/queues/gone/lease", strings.NewReader(`{"worker": "w-1", "wait_seconds": 10}`))
		hr.Header.Set("Authorization", "Bearer "+e.worker)
		rec := httptest.NewRecorder()
		start := time.Now()
		e.h.ServeHTTP(rec, hr)
		if rec.Code != http.StatusNoContent || time.Since(start) > 8*time.Second {
			t.Fatalf("cancelled poll: %d after %v: %s", rec.Code, time.Since(start), rec.Body)
		}
		sid := e.createSession(nil)
		did := e.delegate(sid, 1, "gone", nil)
		if l := e.lease("gone", "w-2", 0); l.DelegationID != did {
			t.Fatalf("lease = %+v", l)
		}
	})
}

func TestAPIBodyLimit(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		big, _ := json.Marshal(map[string]any{"goal": strings.Repeat("g", 2<<20)})
		noWrites(t, s, func() {
			wantProblem(t, e.post(e.controller, "/sessions", big), http.StatusRequestEntityTooLarge)
			// Without a Content-Length the limit still holds while reading.
			hr, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/api/v1/sessions", struct{ *bytes.Reader }{bytes.NewReader(big)})
			hr.Header.Set("Authorization", "Bearer "+e.controller)
			hr.ContentLength = -1
			resp, err := e.srv.Client().Do(hr)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("chunked body: status %d", resp.StatusCode)
			}
		})
	})
}
