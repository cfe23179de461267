package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestMerkleMatchesTlog checks our RFC 6962 tree against an independent
// implementation (the Go checksum database's tlog): the same root for every
// size, and proofs that tlog accepts and our verifier accepts, for the right
// leaf only.
func TestMerkleMatchesTlog(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 70; n++ {
		leaves := make([]models.MerkleHash, n)
		var stored []tlog.Hash
		for i := range leaves {
			data := models.CheckpointLeaf(fmt.Sprintf("ses_%03d", i), int64(i+1), strings.Repeat("ab", 32))
			leaves[i] = models.LeafHash(data)
			if tlog.Hash(leaves[i]) != tlog.RecordHash(data) {
				t.Fatalf("leaf hash differs from tlog.RecordHash")
			}
			hs, err := tlog.StoredHashes(int64(i), data, tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
				out := make([]tlog.Hash, len(idx))
				for j, k := range idx {
					out[j] = stored[k]
				}
				return out, nil
			}))
			if err != nil {
				t.Fatal(err)
			}
			stored = append(stored, hs...)
		}
		reader := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
			out := make([]tlog.Hash, len(idx))
			for j, k := range idx {
				out[j] = stored[k]
			}
			return out, nil
		})
		want, err := tlog.TreeHash(int64(n), reader)
		if err != nil {
			t.Fatal(err)
		}
		root := models.MerkleRootForTest(leaves)
		if tlog.Hash(root) != want {
			t.Fatalf("n=%d: root %x, tlog %x", n, root, want)
		}
		for m := range n {
			proof, err := models.InclusionProof(leaves, int64(m))
			if err != nil {
				t.Fatal(err)
			}
			tp := make(tlog.RecordProof, len(proof))
			for i, p := range proof {
				tp[i] = tlog.Hash(p)
			}
			if err := tlog.CheckRecord(tp, int64(n), want, int64(m), tlog.Hash(leaves[m])); err != nil {
				t.Fatalf("n=%d m=%d: tlog rejects our proof: %v", n, m, err)
			}
			if err := models.VerifyInclusion(leaves[m], int64(m), int64(n), proof, root); err != nil {
				t.Fatalf("n=%d m=%d: %v", n, m, err)
			}
			if n > 1 {
				other := (m + 1) % n
				if models.VerifyInclusion(leaves[other], int64(m), int64(n), proof, root) == nil {
					t.Fatalf("n=%d m=%d: proof accepted for another leaf", n, m)
				}
			}
		}
	}
}

// testKey makes a signing key.
func testKey(t *testing.T) *models.CheckpointKey {
	t.Helper()
	skey, err := models.GenerateCheckpointKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := models.ParseCheckpointKey(skey)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustCheckpoint(ctx context.Context, t *testing.T, s *models.Store, k *models.CheckpointKey) models.Checkpoint {
	t.Helper()
	c, written, err := s.WriteCheckpoint(ctx, k, "test")
	if err != nil || !written {
		t.Fatalf("write checkpoint = %+v, %v, %v", c, written, err)
	}
	return c
}

func verifyCheckpoints(ctx context.Context, t *testing.T, s *models.Store, keys ...string) models.VerifyReport {
	t.Helper()
	rep, err := s.Verify(ctx, models.VerifyOpts{Checkpoints: &models.CheckpointVerifyOpts{PublicKeys: keys}})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func findProblem(rep models.VerifyReport, sid, kind string) (models.Problem, bool) {
	for _, p := range rep.Problems {
		if p.SessionID == sid && p.Kind == kind {
			return p, true
		}
	}
	return models.Problem{}, false
}

// exec runs a tampering statement that must change rows.
func exec(t *testing.T, s *models.Store, sql string, args ...any) {
	t.Helper()
	res := s.DB.Exec(sql, args...)
	if res.Error != nil || res.RowsAffected == 0 {
		t.Fatalf("%s: %v (%d rows)", sql, res.Error, res.RowsAffected)
	}
}

// deleteSession removes a session and everything that points at it, as
// someone with SQL access would.
func deleteSession(t *testing.T, s *models.Store, sid string) {
	t.Helper()
	for _, q := range []string{`DELETE FROM delegations WHERE session_id = ?`, `DELETE FROM events WHERE session_id = ?`, `DELETE FROM sessions WHERE id = ?`} {
		if err := s.DB.Exec(q, sid).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// rewriteFrom changes the payload of event seq and recomputes its hash and
// every later hash of the session, and the session's last_hash, so that the
// session's own chain verifies again: only a checkpoint can tell.
func rewriteFrom(ctx context.Context, t *testing.T, s *models.Store, sid string, seq int64, payload string) {
	t.Helper()
	evs, err := s.ListEvents(ctx, sid, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	prev := ""
	for _, e := range evs {
		if e.Seq == seq {
			e.Payload = payload
		}
		if e.Seq >= seq {
			e.PrevHash = prev
			e.Hash = models.ComputeHash(e)
			exec(t, s, `UPDATE events SET payload = ?, prev_hash = ?, hash = ? WHERE id = ?`, e.Payload, e.PrevHash, e.Hash, e.ID)
		}
		prev = e.Hash
	}
	exec(t, s, `UPDATE sessions SET last_hash = ? WHERE id = ?`, prev, sid)
}

// TestCheckpointDetectsTampering signs a checkpoint, then deletes a whole
// session, cuts the last events of another, and rewrites a third with its
// hashes recomputed so that its own chain verifies: verify names each
// session, and no new checkpoint is signed over the damage.
func TestCheckpointDetectsTampering(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		key := testKey(t)
		clean := tamperable(ctx, t, s)
		deleted := tamperable(ctx, t, s)
		cut := tamperable(ctx, t, s)
		rewritten := tamperable(ctx, t, s)

		c := mustCheckpoint(ctx, t, s, key)
		if c.Seq != 1 || c.Sessions != 4 || c.Events != 20 {
			t.Fatalf("checkpoint = %+v", c)
		}
		rep := verifyCheckpoints(ctx, t, s, key.PublicKey)
		if !rep.OK() || rep.Checkpoints == nil || rep.Checkpoints.Checked != 1 || rep.Checkpoints.KeysFromDatabase {
			t.Fatalf("verify before tampering: %+v %+v", rep.Problems, rep.Checkpoints)
		}
		// A session created after the checkpoint is fine.
		later := tamperable(ctx, t, s)

		deleteSession(t, s, deleted)
		exec(t, s, `DELETE FROM events WHERE session_id = ? AND seq > 3`, cut)
		// The projection is made to agree with the shortened log.
		var h3 string
		if err := s.DB.Raw(`SELECT hash FROM events WHERE session_id = ? AND seq = 3`, cut).Scan(&h3).Error; err != nil {
			t.Fatal(err)
		}
		exec(t, s, `UPDATE sessions SET state_version = 3, last_seq = 3, last_hash = ? WHERE id = ?`, h3, cut)
		rewriteFrom(ctx, t, s, rewritten, 4, `{"reason":"nobody asked"}`)

		// The per-session chain alone cannot see the rewrite.
		chainOnly, err := s.Verify(ctx, models.VerifyOpts{SessionIDs: []string{rewritten}})
		if err != nil || hasProblem(chainOnly, rewritten, 0, models.ProblemHash) || hasProblem(chainOnly, rewritten, 0, models.ProblemChain) {
			t.Fatalf("chain check of the rewritten session: %+v, %v", chainOnly.Problems, err)
		}

		rep = verifyCheckpoints(ctx, t, s, key.PublicKey)
		p, ok := findProblem(rep, deleted, models.ProblemMissing)
		if !ok || !strings.Contains(p.String(), "session "+deleted+" missing since checkpoint 1") {
			t.Errorf("deleted session: %v (%v)", p, rep.Problems)
		}
		if p, ok := findProblem(rep, cut, models.ProblemTruncated); !ok || !strings.Contains(p.Detail, "3 events left, checkpoint 1 recorded 5 events") {
			t.Errorf("truncated session: %v (%v)", p, rep.Problems)
		}
		if p, ok := findProblem(rep, rewritten, models.ProblemRewritten); !ok || p.Seq != 5 {
			t.Errorf("rewritten session: %v (%v)", p, rep.Problems)
		}
		for _, p := range rep.Problems {
			if p.SessionID == clean || p.SessionID == later || p.Kind == models.ProblemCheckpoint {
				t.Errorf("unexpected problem: %v", p)
			}
		}

		// The next checkpoint refuses to sign over the damage, and says why.
		_, _, err = s.WriteCheckpoint(ctx, key, "test")
		var refused *models.CheckpointRefusedError
		if !errors.As(err, &refused) {
			t.Fatalf("checkpoint after tampering: %v", err)
		}
		kinds := map[string]string{}
		for _, p := range refused.Problems {
			kinds[p.SessionID] = p.Kind
		}
		if kinds[deleted] != models.ProblemMissing || kinds[cut] != models.ProblemTruncated || kinds[rewritten] != models.ProblemRewritten || len(kinds) != 3 {
			t.Fatalf("refusal names %v", refused.Problems)
		}
		if n := countRows(t, s, `SELECT count(*) FROM checkpoints`); n != 1 {
			t.Fatalf("%d checkpoints after a refusal", n)
		}
	})
}

func countRows(t *testing.T, s *models.Store, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := s.DB.Raw(q, args...).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCheckpointIncremental: nothing changed, nothing written; one session
// moved, one entry written; a new key signs even when nothing moved.
func TestCheckpointIncremental(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		key := testKey(t)
		a := tamperable(ctx, t, s)
		tamperable(ctx, t, s)
		mustCheckpoint(ctx, t, s, key)
		if c, written, err := s.WriteCheckpoint(ctx, key, "test"); err != nil || written || c.Seq != 1 {
			t.Fatalf("unchanged log: %+v %v %v", c, written, err)
		}
		if _, err := s.Transition(ctx, a, models.EventSessionPaused, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(5)}); err != nil {
			t.Fatal(err)
		}
		c := mustCheckpoint(ctx, t, s, key)
		if c.Seq != 2 || c.Sessions != 2 || c.Events != 11 {
			t.Fatalf("second checkpoint = %+v", c)
		}
		if n := countRows(t, s, `SELECT count(*) FROM checkpoint_entries WHERE checkpoint_seq = 2`); n != 1 {
			t.Fatalf("second checkpoint stored %d entries, want the one session that moved", n)
		}
		rotated := testKey(t)
		c = mustCheckpoint(ctx, t, s, rotated)
		if c.Seq != 3 || c.PublicKey != rotated.PublicKey {
			t.Fatalf("checkpoint after rotation = %+v", c)
		}
		// Trusting only the new key: the old checkpoints are counted as
		// signed by another key, not reported.
		rep := verifyCheckpoints(ctx, t, s, rotated.PublicKey)
		if !rep.OK() || rep.Checkpoints.Untrusted != 2 || rep.Checkpoints.Latest.Seq != 3 {
			t.Fatalf("verify after rotation: %v %+v", rep.Problems, rep.Checkpoints)
		}
		// All checkpoints, both keys trusted: each checked against the log.
		all, err := s.Verify(ctx, models.VerifyOpts{Checkpoints: &models.CheckpointVerifyOpts{PublicKeys: []string{key.PublicKey, rotated.PublicKey}, All: true}})
		if err != nil || !all.OK() || all.Checkpoints.Checked != 3 {
			t.Fatalf("verify all: %v %+v %v", all.Problems, all.Checkpoints, err)
		}
	})
}

// TestCheckpointForgery: a checkpoint signed by another key, a note whose
// text was edited under its signature, a row that disagrees with its note,
// a changed entry, and a deleted checkpoint are each reported.
func TestCheckpointForgery(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		key := testKey(t)
		sid := tamperable(ctx, t, s)
		c1 := mustCheckpoint(ctx, t, s, key)
		if _, err := s.Transition(ctx, sid, models.EventSessionPaused, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(5)}); err != nil {
			t.Fatal(err)
		}
		mustCheckpoint(ctx, t, s, key)

		checkpointProblem := func(rep models.VerifyReport, seq int64, detail string) bool {
			for _, p := range rep.Problems {
				if p.Kind == models.ProblemCheckpoint && p.Checkpoint == seq && strings.Contains(p.Detail, detail) {
					return true
				}
			}
			return false
		}

		// Forged: the attacker signs with a key of their own.
		forger := testKey(t)
		text, err := models.OpenCheckpoint(c1.Note, []string{key.PublicKey})
		if err != nil {
			t.Fatal(err)
		}
		forged := forgeNote(t, forger, text)
		exec(t, s, `UPDATE checkpoints SET note = ?, public_key = ? WHERE seq = 2`, forged, forger.PublicKey)
		rep := verifyCheckpoints(ctx, t, s, key.PublicKey)
		if !checkpointProblem(rep, 2, "not signed by a trusted key") {
			t.Fatalf("forged signature not reported: %v", rep.Problems)
		}
		// Without a trusted key, the forger's key in the database would be
		// believed: the report must say the keys came from the database.
		if loose := verifyCheckpoints(ctx, t, s); !loose.Checkpoints.KeysFromDatabase {
			t.Fatalf("keys from the database not flagged: %+v", loose.Checkpoints)
		}

		// Edited text under a real signature.
		edited := strings.Replace(c1.Note, "\nevents 5\n", "\nevents 4\n", 1)
		if edited == c1.Note {
			t.Fatalf("note has no events line: %q", c1.Note)
		}
		exec(t, s, `UPDATE checkpoints SET note = ? WHERE seq = 1`, edited)
		rep = verifyCheckpoints(ctx, t, s, key.PublicKey)
		if !checkpointProblem(rep, 1, "signature does not match") {
			t.Fatalf("edited note not reported: %v", rep.Problems)
		}
		exec(t, s, `UPDATE checkpoints SET note = ? WHERE seq = 1`, c1.Note)

		// The row's columns edited: they disagree with the signed text.
		exec(t, s, `UPDATE checkpoints SET events = 99 WHERE seq = 1`)
		rep = verifyCheckpoints(ctx, t, s, key.PublicKey)
		if !checkpointProblem(rep, 1, "differs from its signed text") {
			t.Fatalf("edited row not reported: %v", rep.Problems)
		}
		exec(t, s, `UPDATE checkpoints SET events = 5 WHERE seq = 1`)

		// An entry changed to match a shortened session: the root breaks.
		exec(t, s, `UPDATE checkpoint_entries SET event_count = 4 WHERE checkpoint_seq = 1`)
		exec(t, s, `DELETE FROM checkpoints WHERE seq = 2`)
		exec(t, s, `DELETE FROM checkpoint_entries WHERE checkpoint_seq = 2`)
		rep = verifyCheckpoints(ctx, t, s, key.PublicKey)
		if !checkpointProblem(rep, 1, "the checkpoint_entries table was changed") {
			t.Fatalf("changed entries not reported: %v", rep.Problems)
		}
	})
}

// forgeNote signs t with k.
func forgeNote(t *testing.T, k *models.CheckpointKey, text models.CheckpointText) string {
	t.Helper()
	text.Root[0] ^= 1
	signed, err := note.Sign(&note.Note{Text: text.Format()}, models.SignerForTest(k))
	if err != nil {
		t.Fatal(err)
	}
	return string(signed)
}

// TestTranscriptTailCutOffline exports a transcript with its checkpoint
// and checks it offline; then cuts its tail and, as a forger would, signs a
// fresh one-leaf tree for the shortened chain with a key of their own: the
// pinned key rejects it, and without a pinned key the report says the key
// came from the file.
func TestTranscriptTailCutOffline(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid := tamperable(ctx, t, s)
		tamperable(ctx, t, s)
		tamperable(ctx, t, s)
		key := testKey(t)
		cp := &models.Checkpointer{Store: s, Key: key}
		proof, err := s.TranscriptCheckpointFor(ctx, sid, cp, "test")
		if err != nil || proof == nil || proof.TreeSize != 3 || proof.EventCount != 5 || len(proof.Proof) != 2 {
			t.Fatalf("proof = %+v, %v", proof, err)
		}
		var buf strings.Builder
		if err := s.WriteTranscript(ctx, &buf, sid, "test", proof); err != nil {
			t.Fatal(err)
		}
		rep, err := models.VerifyTranscript(strings.NewReader(buf.String()), []string{key.PublicKey})
		if err != nil || !rep.OK() || rep.Covered != 5 || rep.KeyFromFile {
			t.Fatalf("intact transcript: %+v, %v", rep, err)
		}
		// A second export with nothing changed reuses checkpoint 1.
		if again, err := s.TranscriptCheckpointFor(ctx, sid, cp, "test"); err != nil || again.Seq != 1 {
			t.Fatalf("second export: %+v %v", again, err)
		}

		var tr models.Transcript
		if err := json.Unmarshal([]byte(buf.String()), &tr); err != nil {
			t.Fatal(err)
		}
		tr.Events = tr.Events[:4]
		tr.LastHash, tr.StateVersion, tr.LastSeq = tr.Events[3].Hash, 4, 4
		rep = verifyTranscriptValue(t, tr, key.PublicKey)
		if len(rep.Problems) != 1 || rep.Problems[0].Kind != models.ProblemTruncated {
			t.Fatalf("cut transcript: %+v", rep.Problems)
		}

		forger := testKey(t)
		leaf := models.LeafHash(models.CheckpointLeaf(sid, 4, tr.LastHash))
		text := models.CheckpointText{Seq: 1, Time: "2026-01-01T00:00:00.000000Z", Sessions: 1, Events: 4, Root: leaf}
		signed, err := note.Sign(&note.Note{Text: text.Format()}, models.SignerForTest(forger))
		if err != nil {
			t.Fatal(err)
		}
		tr.Checkpoint = &models.TranscriptCheckpoint{Seq: 1, Note: string(signed), PublicKey: forger.PublicKey, LeafIndex: 0, TreeSize: 1,
			EventCount: 4, HeadHash: tr.LastHash, Proof: []string{}}
		rep = verifyTranscriptValue(t, tr, key.PublicKey)
		if len(rep.Problems) != 1 || rep.Problems[0].Kind != models.ProblemCheckpoint || !strings.Contains(rep.Problems[0].Detail, "not signed by a trusted key") {
			t.Fatalf("re-signed transcript: %+v", rep.Problems)
		}
		if rep = verifyTranscriptValue(t, tr); !rep.OK() || !rep.KeyFromFile {
			t.Fatalf("re-signed transcript without a pinned key: %+v", rep)
		}
	})
}

func verifyTranscriptValue(t *testing.T, tr models.Transcript, keys ...string) models.TranscriptReport {
	t.Helper()
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := models.VerifyTranscript(strings.NewReader(string(b)), keys)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestCheckpointTick: the maintenance pass signs at its first tick, then at
// most once per period, and only when something changed.
func TestCheckpointTick(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		s.Now = func() time.Time { return now }
		sid := storetest.Session(ctx, t, s, nil)
		cp := &models.Checkpointer{Store: s, Key: testKey(t), Every: 10 * time.Minute}
		tick := func(wantWritten bool, wantSeq int64) {
			t.Helper()
			c, written, err := cp.Tick(ctx)
			if err != nil || written != wantWritten || (wantSeq != 0 && c.Seq != wantSeq) {
				t.Fatalf("tick at %s = %+v, %v, %v; want written %v seq %d", now, c, written, err, wantWritten, wantSeq)
			}
		}
		tick(true, 1)
		if _, err := s.Transition(ctx, sid, models.EventSessionPaused, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(1)}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(9 * time.Minute)
		tick(false, 0) // not due yet
		now = now.Add(time.Minute)
		tick(true, 2)
		now = now.Add(10 * time.Minute)
		tick(false, 2) // due, but nothing changed
		if (&models.Checkpointer{Store: s}).Enabled() {
			t.Fatal("a checkpointer without a key is enabled")
		}
	})
}

// TestCheckpointGap: a checkpoint deleted from the middle of the sequence
// is reported (deleting the newest ones cannot be told from their never
// having been signed; README, "Tamper evidence", says so).
func TestCheckpointGap(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		key := testKey(t)
		sid := storetest.Session(ctx, t, s, nil)
		mustCheckpoint(ctx, t, s, key)
		for _, v := range []int64{1, 2} {
			et := models.EventSessionPaused
			if v == 2 {
				et = models.EventSessionResumed
			}
			if _, err := s.Transition(ctx, sid, et, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(v)}); err != nil {
				t.Fatal(err)
			}
			mustCheckpoint(ctx, t, s, key)
		}
		exec(t, s, `DELETE FROM checkpoints WHERE seq = 2`)
		rep := verifyCheckpoints(ctx, t, s, key.PublicKey)
		if len(rep.Problems) != 1 || rep.Problems[0].Checkpoint != 3 || !strings.Contains(rep.Problems[0].String(), "checkpoint 3: checkpoint: checkpoints 2 to 2 are missing") {
			t.Fatalf("gap: %v", rep.Problems)
		}
	})
}

// TestCheckpointCountsAuditEvents: a checkpoint's leaf counts a session's
// events (last_seq), not its version, which audit-only events leave behind
// (invariant 10). Signing from the version would record a head at a seq
// whose hash is not the session's last hash, and verify would then report
// an untouched session as rewritten.
func TestCheckpointCountsAuditEvents(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		key := testKey(t)
		sid := auditedAfterVersion(ctx, t, s)
		row, err := s.GetSession(ctx, sid)
		if err != nil || row.LastSeq <= row.StateVersion {
			t.Fatalf("want a session whose audit events put last_seq %d ahead of version %d (%v)", row.LastSeq, row.StateVersion, err)
		}
		c := mustCheckpoint(ctx, t, s, key)
		if c.Events < row.LastSeq {
			t.Fatalf("checkpoint counts %d events, the session alone has %d", c.Events, row.LastSeq)
		}
		rep := verifyCheckpoints(ctx, t, s, key.PublicKey)
		if !rep.OK() {
			t.Fatalf("verify of an untouched log with audit events: %v", rep.Problems)
		}
	})
}
