package handlers_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

type bulkAnswer struct {
	Applied []string `json:"applied"`
	Skipped []struct {
		SessionID string `json:"session_id"`
		Detail    string `json:"detail"`
	} `json:"skipped"`
	Matched int `json:"matched"`
}

func TestAPIBulkCancel(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		a := e.createSession(nil)
		b := e.createSession(nil)
		done := e.createSession(nil)
		wantStatus(t, e.post(e.controller, "/sessions/"+done+"/cancel", map[string]any{"expected_version": 1}), http.StatusOK)

		body := map[string]any{"action": "cancel", "session_ids": []string{a, done, b}, "reason": "duplicate tickets"}
		r := wantStatus(t, e.post(e.controller, "/sessions/bulk", body, "Idempotency-Key", "bulk-1"), http.StatusOK)
		var got bulkAnswer
		r.Decode(t, &got)
		if got.Matched != 3 || !slices.Equal(got.Applied, []string{a, b}) || len(got.Skipped) != 1 ||
			got.Skipped[0].SessionID != done || got.Skipped[0].Detail != "a session that is cancelled cannot be cancelled" {
			t.Fatalf("answer %s", r.Body)
		}
		if r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first answer marked replayed")
		}
		for _, id := range []string{a, b} {
			if _, st := e.sessionState(id); st != "cancelled" {
				t.Fatalf("%s is %s", id, st)
			}
		}
		// The repeat gets the same bytes back and writes nothing.
		noWrites(t, s, func() {
			again := wantStatus(t, e.post(e.controller, "/sessions/bulk", body, "Idempotency-Key", "bulk-1"), http.StatusOK)
			if again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(r.Body) {
				t.Fatalf("replay %v %s, first %s", again.Header, again.Body, r.Body)
			}
			body["reason"] = "another"
			p := wantProblem(t, e.post(e.controller, "/sessions/bulk", body, "Idempotency-Key", "bulk-1"), http.StatusUnprocessableEntity)
			if !strings.Contains(p.Detail, "Idempotency") && !strings.Contains(p.Detail, "idempotency") {
				t.Fatalf("mismatch problem %+v", p)
			}
		})
	})
}

func TestAPIBulkFilterDryRun(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		var queued []string
		for i := 0; i < 3; i++ {
			id := e.createSession(nil)
			e.delegate(id, 1, "refunds", nil)
			queued = append(queued, id)
		}
		e.createSession(nil) // open: not matched
		body := map[string]any{"action": "pause", "filter": map[string]any{"status": "queued", "queue": "refunds"}, "dry_run": true}
		var got bulkAnswer
		noWrites(t, s, func() {
			wantStatus(t, e.post(e.admin, "/sessions/bulk", body, "Idempotency-Key", "dry"), http.StatusOK).Decode(t, &got)
		})
		if got.Matched != 3 || len(got.Applied) != 3 || len(got.Skipped) != 0 {
			t.Fatalf("dry run %+v", got)
		}
		// The listing with the same filter finds the same sessions.
		list := wantStatus(t, e.get(e.controller, "/sessions?status=queued&queue=refunds"), http.StatusOK).JSON(t)
		var listed []string
		for _, it := range list["sessions"].([]any) {
			listed = append(listed, it.(map[string]any)["session_id"].(string))
		}
		if !slices.Equal(listed, got.Applied) {
			t.Fatalf("bulk %v, list %v", got.Applied, listed)
		}
		delete(body, "dry_run")
		wantStatus(t, e.post(e.controller, "/sessions/bulk", body), http.StatusOK).Decode(t, &got)
		if len(got.Applied) != 3 {
			t.Fatalf("real run %+v", got)
		}
		for _, id := range queued {
			if _, st := e.sessionState(id); st != "paused" {
				t.Fatalf("%s is %s", id, st)
			}
		}
	})
}

func TestAPIBulkRefusals(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		sid := e.createSession(nil)
		many := make([]string, models.MaxBulkSessions+1)
		for i := range many {
			many[i] = sid
		}
		noWrites(t, s, func() {
			cases := []struct {
				body   any
				fields []string
			}{
				{map[string]any{"action": "delete", "session_ids": []string{sid}}, []string{"action"}},
				{map[string]any{"session_ids": []string{sid}}, []string{"action"}},
				{map[string]any{"action": "cancel"}, []string{"session_ids"}},
				{map[string]any{"action": "cancel", "session_ids": []string{sid}, "filter": map[string]any{"queue": "q"}}, []string{"filter"}},
				{map[string]any{"action": "cancel", "session_ids": []string{}}, []string{"session_ids"}},
				{map[string]any{"action": "cancel", "session_ids": many}, []string{"session_ids"}},
				{map[string]any{"action": "cancel", "session_ids": []string{sid, "nope"}}, []string{"session_ids[1]"}},
				{map[string]any{"action": "cancel", "session_ids": []any{sid, 7}}, []string{"session_ids[1]"}},
				{map[string]any{"action": "cancel", "filter": map[string]any{}}, []string{"filter"}},
				{map[string]any{"action": "cancel", "filter": map[string]any{"status": "finished", "colour": "red"}}, []string{"filter.status", "filter.colour"}},
				{map[string]any{"action": "cancel", "session_ids": []string{sid}, "reason": strings.Repeat("x", 2001), "force": true}, []string{"reason", "force"}},
			}
			for _, c := range cases {
				p := wantProblem(t, e.post(e.controller, "/sessions/bulk", c.body), http.StatusUnprocessableEntity)
				wantFields(t, p, c.fields...)
			}
			wantProblem(t, e.post(e.worker, "/sessions/bulk", map[string]any{"action": "cancel", "session_ids": []string{sid}}), http.StatusForbidden)
			wantProblem(t, e.post("", "/sessions/bulk", map[string]any{"action": "cancel", "session_ids": []string{sid}}), http.StatusUnauthorized)
			wantProblem(t, e.post(e.controller, "/sessions/bulk", "[]"), http.StatusBadRequest)
		})
	})
}
