package models_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// completedByWorker runs a session through a worker's completed result.
func completedByWorker(ctx context.Context, t *testing.T, s *models.Store) string {
	t.Helper()
	sid, did := storetest.Delegated(ctx, t, s, "refunds")
	l, err := s.Claim(ctx, "refunds", "w-1", "token:worker", "")
	if err != nil || l == nil {
		t.Fatalf("claim: %v", err)
	}
	if _, err := s.SubmitResult(ctx, did, "token:worker", "", models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: sid, Step: "check-eligibility", ResultType: "completed",
		Output: json.RawMessage(`{"eligible": true}`), Evidence: []models.Evidence{{Claim: "paid", Source: "orders-db:1"}},
	}); err != nil {
		t.Fatalf("result: %v", err)
	}
	return sid
}

// TestArchiveKeepsTheLogVerifiable: archiving closed sessions writes a
// transcript per session that verifies offline (a review score after the
// decision, an audit-only event, included), deletes exactly those sessions,
// leaves open ones alone, and keeps `verify` and the next checkpoint clean; a
// second run does nothing; a changed archive file is caught; and deleting a
// session without archiving it is still reported.
func TestArchiveKeepsTheLogVerifiable(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		rita := mustUser(t, s, "rita@example.com", models.RoleReviewer)
		s.Reviews = models.ReviewPolicy{DoubleShare: -1}

		scored := decided(ctx, t, s, agent, "refunds")
		page, err := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: rita})
		if err != nil || len(page.Rows) != 1 {
			t.Fatalf("review queue: %+v %v", page.Rows, err)
		}
		if _, err := s.ScoreReview(ctx, rita, "", models.ScoreInput{Key: page.Rows[0].Key(), Scores: allScores(4)}); err != nil {
			t.Fatalf("score: %v", err)
		}
		done := completedByWorker(ctx, t, s)
		open := storetest.Session(ctx, t, s, nil)
		stays := completedByWorker(ctx, t, s)

		key, err := models.ParseCheckpointKey(mustGenerateKey(t))
		if err != nil {
			t.Fatal(err)
		}
		cp := &models.Checkpointer{Store: s, Key: key}
		if _, _, err := cp.Write(ctx, "test"); err != nil {
			t.Fatal(err)
		}

		dir := t.TempDir()
		op := models.CLIOperator("ops")
		o := models.ArchiveOpts{ClosedBefore: s.Now().Add(time.Hour), Dir: dir, Checkpointer: cp, Batch: 1}
		dry := o
		dry.DryRun = true
		if rep, err := s.Archive(ctx, op, dry); err != nil || rep.Candidates != 3 || rep.Archived != 0 {
			t.Fatalf("dry run: %+v, %v; want 3 candidates", rep, err)
		}
		o.Limit = 2
		rep, err := s.Archive(ctx, op, o)
		if err != nil || rep.Archived != 2 {
			t.Fatalf("archive: %+v, %v", rep, err)
		}
		archivedIDs := map[string]bool{}
		var rows []models.ArchivedSession
		if err := s.DB.Order("session_id").Find(&rows).Error; err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			archivedIDs[r.SessionID] = true
			b, err := os.ReadFile(filepath.Join(dir, r.File))
			if err != nil {
				t.Fatal(err)
			}
			tr, err := models.VerifyTranscript(strings.NewReader(string(b)), cp.PublicKeys())
			if err != nil || !tr.OK() || tr.Events != r.Events || tr.Checkpoint == 0 {
				t.Fatalf("transcript of %s: %+v, %v", r.SessionID, tr, err)
			}
			var n int64
			s.DB.Raw(`SELECT count(*) FROM events WHERE session_id = ?`, r.SessionID).Scan(&n)
			if n != 0 {
				t.Fatalf("%s archived but %d events left", r.SessionID, n)
			}
		}
		if len(rows) != 2 || archivedIDs[open] {
			t.Fatalf("archived %v; the open session %s must stay", archivedIDs, open)
		}
		// The rest, in a second run (resumable), then nothing (idempotent).
		o.Limit = 0
		if rep, err := s.Archive(ctx, op, o); err != nil || rep.Archived != 1 {
			t.Fatalf("second run: %+v, %v; want the third closed session", rep, err)
		}
		if rep, err := s.Archive(ctx, op, o); err != nil || rep.Archived != 0 {
			t.Fatalf("third run: %+v, %v; want nothing left", rep, err)
		}
		for _, id := range []string{scored, done, stays} {
			if _, err := s.GetSession(ctx, id); !models.IsNotFound(err) {
				t.Fatalf("%s still readable after archiving: %v", id, err)
			}
		}

		// The log still verifies against the checkpoint that recorded the
		// archived sessions, and the next checkpoint is signed.
		vr, err := s.Verify(ctx, models.VerifyOpts{Checkpoints: &models.CheckpointVerifyOpts{PublicKeys: cp.PublicKeys(), All: true}})
		if err != nil || !vr.OK() {
			t.Fatalf("verify after archiving: %+v, %v", vr.Problems, err)
		}
		if _, wrote, err := cp.Write(ctx, "test"); err != nil || !wrote {
			t.Fatalf("checkpoint after archiving: wrote %v, %v", wrote, err)
		}
		if ac, err := s.VerifyArchive(ctx, dir, cp.PublicKeys()); err != nil || ac.Sessions != 3 || len(ac.Problems) != 0 {
			t.Fatalf("verify archive: %+v, %v", ac, err)
		}
		var audits int64
		s.DB.Raw(`SELECT count(*) FROM admin_audit WHERE action = ? AND actor = ?`, models.AdminArchive, "cli:ops").Scan(&audits)
		if audits != 3 {
			t.Fatalf("%d archive rows in the admin log, want 3", audits)
		}

		// A changed file is caught.
		f := filepath.Join(dir, rows[0].File)
		b, _ := os.ReadFile(f)
		if err := os.WriteFile(f, []byte(strings.Replace(string(b), `"goal": "`, `"goal": "Not `, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		if ac, err := s.VerifyArchive(ctx, dir, cp.PublicKeys()); err != nil || len(ac.Problems) != 1 || ac.Problems[0].SessionID != rows[0].SessionID {
			t.Fatalf("verify archive after changing a file: %+v, %v", ac, err)
		}

		// Deleting a session by hand, without archiving it, is still found.
		cp2, _, err := cp.Write(ctx, "test")
		if err != nil {
			t.Fatal(err)
		}
		_ = cp2
		victim := completedByWorker(ctx, t, s)
		if _, _, err := cp.Write(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{`DELETE FROM delegations WHERE session_id = ?`, `DELETE FROM events WHERE session_id = ?`, `DELETE FROM sessions WHERE id = ?`} {
			if err := s.DB.Exec(q, victim).Error; err != nil {
				t.Fatal(err)
			}
		}
		vr, err = s.Verify(ctx, models.VerifyOpts{Checkpoints: &models.CheckpointVerifyOpts{PublicKeys: cp.PublicKeys(), All: true}})
		if err != nil || vr.OK() || !strings.Contains(vr.Problems[0].Detail, victim) {
			t.Fatalf("verify after deleting %s by hand: %+v, %v", victim, vr.Problems, err)
		}
	})
}

func mustGenerateKey(t *testing.T) string {
	t.Helper()
	k, err := models.GenerateCheckpointKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
