package handlers_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestAPISubmitResults sends a batch with good, fenced, invalid and
// malformed items: each gets the answer the single endpoint would give it,
// in request order, and only the good ones write; a repeat replays them;
// the cap, an empty batch, a non-object item and the roles are refused as a
// whole. Both dialects: on SQLite the items run one after another.
func TestAPISubmitResults(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		var ls []apiLease
		for range 4 {
			sid := e.createSession(nil)
			e.delegate(sid, 1, "batch-results", nil)
			ls = append(ls, e.lease("batch-results", "w-1", 0))
		}
		item := func(i int) map[string]any {
			m := completedResult(ls[i])
			m["delegation_id"] = ls[i].DelegationID
			m["idempotency_key"] = fmt.Sprintf("batch-%d", i)
			return m
		}
		fenced := item(1)
		fenced["lease_token"] = "lt_not_the_token"
		invalid := item(2)
		delete(invalid, "evidence")
		invalid["colour"] = "blue"
		body := map[string]any{"results": []any{item(0), fenced, invalid, item(3)}}
		var ans struct {
			Results []struct {
				Status   int  `json:"status"`
				Replayed bool `json:"replayed"`
				Outcome  *struct {
					SessionID string `json:"session_id"`
					Status    string `json:"status"`
				} `json:"outcome"`
				Problem *struct {
					Errors []models.FieldError `json:"errors"`
				} `json:"problem"`
			} `json:"results"`
		}
		wantStatus(t, e.post(e.worker, "/results", body), http.StatusOK).Decode(t, &ans)
		want := []int{200, 409, 422, 200}
		if len(ans.Results) != len(want) {
			t.Fatalf("%d entries, want %d", len(ans.Results), len(want))
		}
		for i, r := range ans.Results {
			if r.Status != want[i] {
				t.Errorf("entry %d: status %d, want %d", i, r.Status, want[i])
			}
		}
		if o := ans.Results[0].Outcome; o == nil || o.SessionID != ls[0].SessionID || o.Status != "completed" {
			t.Errorf("entry 0: %+v", o)
		}
		if p := ans.Results[2].Problem; p == nil || len(p.Errors) < 2 {
			t.Errorf("invalid entry: %+v; want the unknown field and the missing evidence", p)
		}
		for i, n := range map[int]int64{0: 1, 1: 0, 2: 0, 3: 1} {
			sid := ls[i].SessionID
			if got := countRows(t, s, "events", "session_id = ? AND type = ?", sid, "result.completed"); got != n {
				t.Errorf("result %d: %d result events, want %d", i, got, n)
			}
		}
		// The repeat replays the committed ones and writes nothing.
		noWrites(t, s, func() {
			wantStatus(t, e.post(e.worker, "/results", map[string]any{"results": []any{item(0), item(3)}}), http.StatusOK).Decode(t, &ans)
		})
		for i, r := range ans.Results {
			if r.Status != 200 || !r.Replayed {
				t.Errorf("repeat entry %d: %+v", i, r)
			}
		}
		// Refused as a whole, nothing written.
		noWrites(t, s, func() {
			many := make([]any, models.MaxResultBatch+1)
			for i := range many {
				many[i] = item(1)
			}
			wantFields(t, wantProblem(t, e.post(e.worker, "/results", map[string]any{"results": many}), http.StatusUnprocessableEntity), "results")
			wantFields(t, wantProblem(t, e.post(e.worker, "/results", map[string]any{"results": []any{}}), http.StatusUnprocessableEntity), "results")
			wantFields(t, wantProblem(t, e.post(e.worker, "/results", map[string]any{"results": []any{item(1), "not an object"}}), http.StatusUnprocessableEntity), "results[1]")
			wantProblem(t, e.post(e.controller, "/results", map[string]any{"results": []any{item(1)}}), http.StatusForbidden)
			wantProblem(t, e.post("", "/results", map[string]any{"results": []any{item(1)}}), http.StatusUnauthorized)
		})
	})
}
