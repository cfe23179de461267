package models_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// rowsText is the rows of query, as text, for comparing before and after.
func rowsText(t *testing.T, s *models.Store, query string, args ...any) string {
	t.Helper()
	rows, err := s.DB.Raw(query, args...).Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if bs, ok := v.([]byte); ok {
				v = string(bs)
			}
			if tm, ok := v.(time.Time); ok {
				v = tm.UTC().Format(time.RFC3339Nano)
			}
			fmt.Fprintf(&b, "%s=%v ", cols[i], v)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// sessionSnapshot is what a round trip must give back: the events (every
// column the chain and the feed use), the state, and the session row's
// projection columns.
func sessionSnapshot(t *testing.T, s *models.Store, sid string) string {
	t.Helper()
	return rowsText(t, s, `SELECT id, session_id, seq, type, actor, version_before, version_after, payload, idempotency_key, prev_hash, hash, created_at
		FROM events WHERE session_id = ? ORDER BY seq`, sid) +
		rowsText(t, s, `SELECT state FROM session_states WHERE session_id = ?`, sid) +
		rowsText(t, s, `SELECT id, parent_id, ticket_ref, goal, status, priority, state_version, current_step, queue, assignee, last_hash,
		escalated_at, created_at, updated_at, resume_at, join_due_at, last_seq, search_notes, input_requested_at, reason_code, next_step
		FROM sessions WHERE id = ?`, sid)
}

// TestArchiveRestoreRoundTrip: archive → verify → restore → verify gives
// back identical events, hashes, states and projection columns on both
// dialects, with checkpoints signed before, between and after; an erased
// session round-trips too; a changed file is refused and left archived; a
// second restore finds nothing; an unknown session is not found.
func TestArchiveRestoreRoundTrip(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		a := completedByWorker(ctx, t, s)
		rita := mustUser(t, s, "rita@example.com", models.RoleReviewer)
		s.Reviews = models.ReviewPolicy{DoubleShare: -1}
		b := decided(ctx, t, s, agent, "refunds")
		page, err := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: rita})
		if err != nil || len(page.Rows) != 1 {
			t.Fatalf("review queue: %+v %v", page.Rows, err)
		}
		if _, err := s.ScoreReview(ctx, rita, "", models.ScoreInput{Key: page.Rows[0].Key(), Scores: allScores(4)}); err != nil {
			t.Fatalf("score: %v", err)
		}
		c := personalSession(ctx, t, s, "T-9", secret, agent)
		tampered := completedByWorker(ctx, t, s)
		open := storetest.Session(ctx, t, s, nil)
		if _, err := s.EraseTicket(ctx, models.CLIOperator("ops"), "T-9", "request"); err != nil {
			t.Fatal(err)
		}
		key, err := models.ParseCheckpointKey(mustGenerateKey(t))
		if err != nil {
			t.Fatal(err)
		}
		cp := &models.Checkpointer{Store: s, Key: key}
		if _, _, err := cp.Write(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for _, id := range []string{a, b, c, tampered} {
			want[id] = sessionSnapshot(t, s, id)
		}
		dir := t.TempDir()
		op := models.CLIOperator("ops")
		rep, err := s.Archive(ctx, op, models.ArchiveOpts{ClosedBefore: s.Now().Add(time.Hour), Dir: dir, Checkpointer: cp})
		if err != nil || rep.Archived != 4 {
			t.Fatalf("archive: %+v, %v", rep, err)
		}
		if vr := verifyWithCheckpoints(ctx, t, s, cp); !vr.OK() {
			t.Fatalf("verify after archive: %v", vr.Problems)
		}
		if _, _, err := cp.Write(ctx, "test"); err != nil { // the tombstones of the archived sessions
			t.Fatal(err)
		}

		// Bad input.
		if _, err := s.RestoreArchive(ctx, op, models.RestoreOpts{}); err == nil {
			t.Fatal("restore without a directory accepted")
		}
		if _, err := s.RestoreArchive(ctx, op, models.RestoreOpts{Dir: dir, SessionIDs: []string{open}}); !models.IsNotFound(err) {
			t.Fatalf("restore of a session that is not archived: %v, want not found", err)
		}
		// A changed file is refused.
		var file string
		s.DB.Raw(`SELECT file FROM archived_sessions WHERE session_id = ?`, tampered).Scan(&file)
		fb, _ := os.ReadFile(filepath.Join(dir, file))
		if err := os.WriteFile(filepath.Join(dir, file), []byte(strings.Replace(string(fb), `"exported_by": "`, `"exported_by": "x`, 1)), 0o600); err != nil {
			t.Fatal(err)
		}

		// One session, then the rest.
		r1, err := s.RestoreArchive(ctx, op, models.RestoreOpts{Dir: dir, SessionIDs: []string{a}, PublicKeys: cp.PublicKeys()})
		if err != nil || r1.Restored != 1 || len(r1.Problems) != 0 {
			t.Fatalf("restore %s: %+v, %v", a, r1, err)
		}
		r2, err := s.RestoreArchive(ctx, op, models.RestoreOpts{Dir: dir, PublicKeys: cp.PublicKeys()})
		if err != nil || r2.Restored != 2 || len(r2.Problems) != 1 || r2.Problems[0].SessionID != tampered {
			t.Fatalf("restore the rest: %+v, %v; want 2 restored and the changed file refused", r2, err)
		}
		for _, id := range []string{a, b, c} {
			if got := sessionSnapshot(t, s, id); got != want[id] {
				t.Fatalf("session %s after the round trip:\n%s\nwant\n%s", id, got, want[id])
			}
		}
		if _, err := s.GetSession(ctx, tampered); !models.IsNotFound(err) {
			t.Fatalf("the session with the changed file was restored: %v", err)
		}
		if vr := verifyWithCheckpoints(ctx, t, s, cp); !vr.OK() {
			t.Fatalf("verify after restore: %v", vr.Problems)
		}
		if _, _, err := cp.Write(ctx, "test"); err != nil {
			t.Fatalf("checkpoint after restore: %v", err)
		}
		if vr := verifyWithCheckpoints(ctx, t, s, cp); !vr.OK() {
			t.Fatalf("verify after the next checkpoint: %v", vr.Problems)
		}
		if ac, err := s.VerifyArchive(ctx, dir, cp.PublicKeys()); err != nil || ac.Sessions != 1 {
			t.Fatalf("archive verify after restore: %+v, %v; want only the refused session left", ac, err)
		}
		// Nothing left to restore (the refused one stays refused).
		r3, err := s.RestoreArchive(ctx, op, models.RestoreOpts{Dir: dir, PublicKeys: cp.PublicKeys()})
		if err != nil || r3.Restored != 0 {
			t.Fatalf("second restore: %+v, %v", r3, err)
		}
		// The restored sessions archive again.
		if rep, err := s.Archive(ctx, op, models.ArchiveOpts{ClosedBefore: s.Now().Add(time.Hour), Dir: dir, Checkpointer: cp}); err != nil || rep.Archived != 3 {
			t.Fatalf("archive again: %+v, %v", rep, err)
		}
		if vr := verifyWithCheckpoints(ctx, t, s, cp); !vr.OK() {
			t.Fatalf("verify after archiving again: %v", vr.Problems)
		}
	})
}
