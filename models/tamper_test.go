package models_test

import (
	"context"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// tamperable builds a session with five events (created, delegated, leased,
// paused, resumed).
func tamperable(ctx context.Context, t *testing.T, s *models.Store) string {
	t.Helper()
	queue := "tq-" + strings.ToLower(models.RandomSecret(6))
	queue = strings.NewReplacer("_", "x", "-", "x").Replace(queue)
	sid, _ := storetest.Delegated(ctx, t, s, queue)
	if l, err := s.Claim(ctx, queue, "w-1", "test:worker", ""); err != nil || l == nil {
		t.Fatalf("claim: %v %v", l, err)
	}
	for i, et := range []models.EventType{models.EventSessionPaused, models.EventSessionResumed} {
		if _, err := s.Transition(ctx, sid, et, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(int64(3 + i))}); err != nil {
			t.Fatal(err)
		}
	}
	return sid
}

func hasProblem(rep models.VerifyReport, sid string, seq int64, kind string) bool {
	for _, p := range rep.Problems {
		if p.SessionID == sid && p.Kind == kind && (seq == 0 || p.Seq == seq) {
			return true
		}
	}
	return false
}

// TestTamperDetected changes the stored log and projection behind the
// write path's back, one kind of tampering per session, and checks that
// Verify names each session, sequence number and kind, and nothing else.
func TestTamperDetected(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clean := tamperable(ctx, t, s)
		payload := tamperable(ctx, t, s)
		chain := tamperable(ctx, t, s)
		proj := tamperable(ctx, t, s)
		deleted := tamperable(ctx, t, s)
		broken := tamperable(ctx, t, s)
		spaced := tamperable(ctx, t, s)

		rep, err := s.Verify(ctx, models.VerifyOpts{})
		if err != nil || !rep.OK() || rep.Sessions != 7 || rep.Events != 35 {
			t.Fatalf("verify before tampering = %+v, %v", rep, err)
		}

		exec := func(sql string, args ...any) {
			t.Helper()
			res := s.DB.Exec(sql, args...)
			if res.Error != nil || res.RowsAffected != 1 {
				t.Fatalf("%s: %v (%d rows)", sql, res.Error, res.RowsAffected)
			}
		}
		// An event's payload rewritten: its hash no longer matches.
		exec(`UPDATE events SET payload = ? WHERE session_id = ? AND seq = 4`, `{"reason":"nobody asked"}`, payload)
		// A payload corrupted into invalid JSON, once compact (its bytes are
		// hashed as they are) and once with spaces (hashed as a JSON
		// string): a hash mismatch either way, and replay stops there.
		exec(`UPDATE events SET payload = ? WHERE session_id = ? AND seq = 4`, `{"reason":"nobody asked"`, broken)
		exec(`UPDATE events SET payload = ? WHERE session_id = ? AND seq = 4`, `{ "reason": "nobody asked"`, spaced)
		// A prev_hash broken: the chain no longer links.
		exec(`UPDATE events SET prev_hash = ? WHERE session_id = ? AND seq = 3`, strings.Repeat("0", 64), chain)
		// The projection edited: the stored state is not what the log replays to.
		exec(`UPDATE session_states SET state = replace(state, '"priority":3', '"priority":1') WHERE session_id = ?`, proj)
		// The last event deleted: the log is one short of the state.
		exec(`DELETE FROM events WHERE session_id = ? AND seq = 5`, deleted)

		rep, err = s.Verify(ctx, models.VerifyOpts{})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []struct {
			sid  string
			seq  int64
			kind string
		}{
			{payload, 4, models.ProblemHash},
			{broken, 4, models.ProblemHash},
			{broken, 4, models.ProblemReplay},
			{spaced, 4, models.ProblemHash},
			{spaced, 4, models.ProblemReplay},
			{chain, 3, models.ProblemChain},
			{proj, 5, models.ProblemProjection},
			{deleted, 4, models.ProblemProjection},
		} {
			if !hasProblem(rep, want.sid, want.seq, want.kind) {
				t.Errorf("no %s problem at seq %d of %s; problems: %v", want.kind, want.seq, want.sid, rep.Problems)
			}
		}
		for _, p := range rep.Problems {
			if p.SessionID == clean {
				t.Errorf("untouched session reported: %v", p)
			}
			if p.SessionID == proj && p.Kind != models.ProblemProjection {
				t.Errorf("projection tampering misreported: %v", p)
			}
		}
		// Limiting Verify to one session reports only that session.
		one, err := s.Verify(ctx, models.VerifyOpts{SessionIDs: []string{clean, chain}})
		if err != nil || one.Sessions != 2 || !hasProblem(one, chain, 3, models.ProblemChain) || hasProblem(one, clean, 0, models.ProblemHash) {
			t.Fatalf("verify two sessions = %+v, %v", one, err)
		}
	})
}

// TestTamperStatusColumn edits only a filter column of the projection: the
// console would show a wrong status, so Verify must say so.
func TestTamperStatusColumn(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid := tamperable(ctx, t, s)
		if err := s.DB.Exec(`UPDATE sessions SET status = 'completed' WHERE id = ?`, sid).Error; err != nil {
			t.Fatal(err)
		}
		rep, err := s.Verify(ctx, models.VerifyOpts{})
		if err != nil || !hasProblem(rep, sid, 5, models.ProblemProjection) {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}
