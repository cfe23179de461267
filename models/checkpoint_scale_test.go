package models_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestCheckpointScale checks and times a checkpoint over many sessions,
// more than one batch of every query: 3,000 sessions by default, and as
// many as TASKPILOTS_CHECKPOINT_SCALE says for a measurement (README,
// "Tamper evidence": TASKPILOTS_CHECKPOINT_SCALE=100000 go test -run
// TestCheckpointScale -v ./models/). The sessions are inserted in SQL with
// one event each whose hash is the session's head, so the checks find
// nothing.
func TestCheckpointScale(t *testing.T) {
	n := 3000
	if v, err := strconv.Atoi(os.Getenv("TASKPILOTS_CHECKPOINT_SCALE")); err == nil && v >= 100 {
		n = v
	}
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		var q string
		if s.Dialect == models.Postgres {
			q = fmt.Sprintf(`INSERT INTO sessions (id, goal, status, state_version, last_seq, last_hash, created_at, updated_at)
			SELECT 'ses_' || lpad(g::text, 10, '0'), 'g', 'open', 1, 1, md5(g::text) || md5(g::text), now(), now() FROM generate_series(1, %d) g`, n)
		} else {
			q = fmt.Sprintf(`WITH RECURSIVE c(g) AS (SELECT 1 UNION ALL SELECT g+1 FROM c WHERE g < %d)
			INSERT INTO sessions (id, goal, status, state_version, last_seq, last_hash, created_at, updated_at)
			SELECT 'ses_' || printf('%%010d', g), 'g', 'open', 1, 1, hex(randomblob(32)), '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z' FROM c`, n)
		}
		if err := s.DB.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB.Exec(`INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, prev_hash, hash, created_at)
			SELECT 'evt_' || id, id, 1, 'session.created', 'x', 0, 1, '{}', '', last_hash, created_at FROM sessions`).Error; err != nil {
			t.Fatal(err)
		}
		key := testKey(t)
		st := time.Now()
		c, _, err := s.WriteCheckpoint(ctx, key, "t")
		if err != nil || c.Sessions != int64(n) {
			t.Fatalf("first checkpoint: %+v %v", c, err)
		}
		t.Logf("%s: first checkpoint over %d sessions (writes %d entries): %v", s.Dialect, c.Sessions, n, time.Since(st))
		st = time.Now()
		if _, w, err := s.WriteCheckpoint(ctx, key, "t"); err != nil || w {
			t.Fatalf("unchanged: %v %v", w, err)
		}
		t.Logf("%s: periodic pass with nothing changed: %v", s.Dialect, time.Since(st))
		st = time.Now()
		_, probs, err := s.VerifyCheckpoints(ctx, models.CheckpointVerifyOpts{PublicKeys: []string{key.PublicKey}})
		if err != nil || len(probs) != 0 {
			t.Fatalf("verify: %v %v", probs[:min(3, len(probs))], err)
		}
		t.Logf("%s: verify against the checkpoint: %v", s.Dialect, time.Since(st))
		st = time.Now()
		p, err := s.CheckpointProof(ctx, 1, "ses_0000000077")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: inclusion proof for a transcript (%d hashes): %v", s.Dialect, len(p.Proof), time.Since(st))
	})
}
