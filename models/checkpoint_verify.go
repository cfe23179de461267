package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// CheckpointVerifyOpts configures VerifyCheckpoints.
type CheckpointVerifyOpts struct {
	// PublicKeys are the keys whose signatures count. Empty means the keys
	// recorded in the checkpoints table, which someone who rewrote the
	// database could have replaced: the summary says so.
	PublicKeys []string
	// All checks every checkpoint's sessions against the log, not only the
	// newest validly signed one (whose entries extend all earlier ones).
	All bool
}

// CheckpointSummary says what VerifyCheckpoints checked.
type CheckpointSummary struct {
	// Checkpoints is the number of checkpoints stored; Checked, how many had
	// their sessions checked against the log.
	Checkpoints int64 `json:"checkpoints"`
	Checked     int64 `json:"checked"`
	// Latest is the newest checkpoint whose signature verifies.
	Latest *Checkpoint `json:"latest,omitempty"`
	// Untrusted counts older checkpoints signed by a key not among the
	// trusted ones (a rotated key): their signatures were not checked.
	Untrusted int64 `json:"untrusted"`
	// KeysFromDatabase is set when no public key was given and the keys
	// recorded in the database were trusted instead.
	KeysFromDatabase bool     `json:"keys_from_database"`
	PublicKeys       []string `json:"public_keys"`
}

// VerifyCheckpoints checks the checkpoints: every signature against the
// trusted keys, each row against its signed text, the sequence for gaps,
// and the newest validly signed checkpoint (all with o.All) against the log:
// its stored entries must hash to its signed root, and each of its sessions
// must still exist, with at least the recorded number of events, the event
// at that count hashing to the recorded head.
func (s *Store) VerifyCheckpoints(ctx context.Context, o CheckpointVerifyOpts) (CheckpointSummary, []Problem, error) {
	var sum CheckpointSummary
	var rows []Checkpoint
	if err := s.DB.WithContext(ctx).Order("seq").Find(&rows).Error; err != nil {
		return sum, nil, fmt.Errorf("verify checkpoints: %w", err)
	}
	sum.Checkpoints = int64(len(rows))
	keys := o.PublicKeys
	if len(keys) == 0 {
		sum.KeysFromDatabase = true
		seen := map[string]bool{}
		for _, r := range rows {
			if !seen[r.PublicKey] {
				seen[r.PublicKey] = true
				if _, err := ParsePublicKeys(r.PublicKey); err == nil {
					keys = append(keys, r.PublicKey)
				}
			}
		}
	}
	sum.PublicKeys = keys
	var probs []Problem
	add := func(seq int64, format string, args ...any) {
		probs = append(probs, Problem{Kind: ProblemCheckpoint, Checkpoint: seq, Detail: fmt.Sprintf(format, args...)})
	}
	type valid struct {
		row  Checkpoint
		text CheckpointText
	}
	var good []valid
	var want int64 = 1
	for i, r := range rows {
		if r.Seq != want {
			add(r.Seq, "checkpoints %d to %d are missing: rows were deleted from the checkpoints table", want, r.Seq-1)
		}
		want = r.Seq + 1
		text, err := OpenCheckpoint(r.Note, keys)
		switch {
		case errors.Is(err, ErrCheckpointUntrusted) && i < len(rows)-1:
			sum.Untrusted++
			continue
		case errors.Is(err, ErrCheckpointUntrusted):
			add(r.Seq, "not signed by a trusted key (it names %s): forged, or signed by a key this verifier was not given", r.PublicKey)
			continue
		case errors.Is(err, ErrCheckpointSignature):
			add(r.Seq, "the signature does not match the checkpoint's text: the note was edited")
			continue
		case err != nil:
			add(r.Seq, "unreadable note: %v", err)
			continue
		}
		if text.Seq != r.Seq || text.Sessions != r.Sessions || text.Events != r.Events || text.Root.String() != r.Root {
			add(r.Seq, "the row (seq %d, %d sessions, %d events, root %.12s…) differs from its signed text (seq %d, %d sessions, %d events, root %.12s…)",
				r.Seq, r.Sessions, r.Events, r.Root, text.Seq, text.Sessions, text.Events, text.Root.String())
		}
		good = append(good, valid{r, text})
	}
	if len(good) == 0 {
		return sum, probs, nil
	}
	latest := good[len(good)-1]
	sum.Latest = &latest.row
	check := good[len(good)-1:]
	if o.All {
		check = good
	}
	for _, v := range check {
		p, err := s.checkCheckpointEntries(ctx, v.text)
		if err != nil {
			return sum, probs, err
		}
		sum.Checked++
		probs = append(probs, p...)
	}
	return sum, probs, nil
}

// entriesAsOf is the query of checkpoint seq's leaves: per session, its
// newest entry at or before seq (no newer one up to seq), in id order, a
// batch at a time. Both sides carry the keyset bound: without it on the
// anti-joined side PostgreSQL merges from the first session for every batch.
// A newest entry with event_count 0 is a tombstone: the session was archived
// before that checkpoint (models/archive.go) and is not one of its leaves.
const entriesAsOf = `SELECT e.session_id, e.checkpoint_seq, e.event_count, e.head_hash FROM checkpoint_entries e
	WHERE e.session_id > @after AND e.checkpoint_seq <= @seq AND e.event_count > 0 AND NOT EXISTS (
		SELECT 1 FROM checkpoint_entries y WHERE y.session_id = e.session_id AND y.session_id > @after
			AND y.checkpoint_seq > e.checkpoint_seq AND y.checkpoint_seq <= @seq)
	ORDER BY e.session_id LIMIT @limit`

// eachCheckpointEntry calls fn with checkpoint seq's leaves, a batch at a
// time, in tree order.
func (s *Store) eachCheckpointEntry(ctx context.Context, seq int64, fn func([]checkpointEntry) error) error {
	after := ""
	for {
		var batch []checkpointEntry
		if err := s.DB.WithContext(ctx).Raw(entriesAsOf, sql.Named("after", after), sql.Named("seq", seq), sql.Named("limit", checkpointBatch)).Scan(&batch).Error; err != nil {
			return fmt.Errorf("checkpoint %d: read entries: %w", seq, err)
		}
		if len(batch) > 0 {
			if err := fn(batch); err != nil {
				return err
			}
		}
		if len(batch) < checkpointBatch {
			return nil
		}
		after = batch[len(batch)-1].SessionID
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// checkCheckpointEntries rebuilds checkpoint t's tree from its stored
// entries and checks each entry against the log.
func (s *Store) checkCheckpointEntries(ctx context.Context, t CheckpointText) ([]Problem, error) {
	var (
		tree   merkleBuilder
		events int64
		probs  []Problem
	)
	err := s.eachCheckpointEntry(ctx, t.Seq, func(batch []checkpointEntry) error {
		ps := make([]headProbe, len(batch))
		for i, e := range batch {
			tree.add(LeafHash(CheckpointLeaf(e.SessionID, e.EventCount, e.HeadHash)))
			events += e.EventCount
			ps[i] = headProbe{SessionID: e.SessionID, Seq: e.EventCount, Want: e.HeadHash}
		}
		p, err := s.probeHeads(ctx, t.Seq, ps)
		probs = append(probs, p...)
		return err
	})
	if err != nil {
		return nil, err
	}
	if root := tree.root(); root != t.Root || tree.n != t.Sessions || events != t.Events {
		probs = append(probs, Problem{Kind: ProblemCheckpoint, Checkpoint: t.Seq, Detail: fmt.Sprintf(
			"its stored session heads (%d sessions, %d events, root %.12s…) do not match its signed text (%d sessions, %d events, root %.12s…): "+
				"the checkpoint_entries table was changed", tree.n, events, root.String(), t.Sessions, t.Events, t.Root.String())})
	}
	return probs, nil
}
