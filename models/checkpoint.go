package models

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"gorm.io/gorm"
)

// Checkpoints: tamper evidence for the log as a whole, after Certificate
// Transparency's signed tree heads. Each session's events are hash-chained,
// but the chain cannot tell that a whole session was deleted, or that its
// last events were cut off together with the projection. A checkpoint is a
// signed statement "at time T there were S sessions and E events, and the
// Merkle root over every session's (id, event count, head hash) is R". Later
// the log must still contain every session of the newest checkpoint with at
// least that many events, and the event at that count must still hash to the
// recorded head; verify reports by name each session for which that fails.
//
// The leaves are the session rows' last_seq (the event count: seq runs
// 1, 2, … with no gaps, while state_version skips audit-only events) and last_hash, which the
// write path sets in the transaction that appends the event, streamed in id
// order; only the sessions that moved since the previous checkpoint get a row
// in checkpoint_entries. Before signing, the builder checks the previous
// checkpoint against the log (the same checks as verify, for the sessions
// that moved or vanished): a checkpoint never papers over tampering.

// CheckpointOrigin is the first line of every checkpoint note: the log's
// name in the C2SP tlog-checkpoint format.
const CheckpointOrigin = "taskpilots-handoff/session-heads"

// Problem kinds found by the checkpoint checks.
const (
	ProblemCheckpoint = "checkpoint" // a checkpoint's signature, row, entries or sequence is wrong
	ProblemMissing    = "missing"    // a session of a checkpoint no longer exists
	ProblemTruncated  = "truncated"  // a session has fewer events than a checkpoint recorded
	ProblemRewritten  = "rewritten"  // the event at a checkpoint's count no longer hashes to its head
)

// checkpointBatch is how many sessions or entries a checkpoint reads per
// query.
const checkpointBatch = 1000

// Checkpoint is one signed checkpoint.
type Checkpoint struct {
	Seq       int64   `gorm:"primaryKey" json:"seq"`
	CreatedAt UTCTime `json:"created_at"`
	// CreatedBy is "maintenance", "cli" or the admin's actor.
	CreatedBy string `json:"created_by"`
	Sessions  int64  `json:"sessions"`
	Events    int64  `json:"events"`
	// Root is the hex Merkle root over the sessions' leaves.
	Root string `json:"root"`
	// PublicKey is the verifier key that signed Note.
	PublicKey string `json:"public_key"`
	// Note is the signed note: the checkpoint text and its signature.
	Note string `json:"note"`
}

// TableName pins the table name for GORM.
func (Checkpoint) TableName() string { return "checkpoints" }

// checkpointEntry is a session's leaf as of CheckpointSeq.
type checkpointEntry struct {
	SessionID     string
	CheckpointSeq int64
	EventCount    int64
	HeadHash      string
}

func (checkpointEntry) TableName() string { return "checkpoint_entries" }

// CheckpointText is the signed part of a checkpoint (C2SP tlog-checkpoint:
// origin, tree size, base64 root, then extension lines).
type CheckpointText struct {
	Seq      int64
	Time     string
	Sessions int64
	Events   int64
	Root     MerkleHash
}

// Format renders the text that is signed.
func (t CheckpointText) Format() string {
	return fmt.Sprintf("%s\n%d\n%s\nseq %d\nevents %d\ntime %s\n",
		CheckpointOrigin, t.Sessions, base64.StdEncoding.EncodeToString(t.Root[:]), t.Seq, t.Events, t.Time)
}

// ParseCheckpointText reads a checkpoint's text (not its signature).
func ParseCheckpointText(text string) (CheckpointText, error) {
	var t CheckpointText
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 6 || lines[0] != CheckpointOrigin {
		return t, fmt.Errorf("not a TaskPilots checkpoint (want %q and 6 lines)", CheckpointOrigin)
	}
	var err error
	if t.Sessions, err = strconv.ParseInt(lines[1], 10, 64); err != nil || t.Sessions < 0 {
		return t, fmt.Errorf("checkpoint: bad tree size %q", lines[1])
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != len(t.Root) {
		return t, fmt.Errorf("checkpoint: bad root %q", lines[2])
	}
	copy(t.Root[:], root)
	field := func(line, name string) (string, error) {
		v, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			return "", fmt.Errorf("checkpoint: want %q, found %q", name+" …", line)
		}
		return v, nil
	}
	v, err := field(lines[3], "seq")
	if err == nil {
		t.Seq, err = strconv.ParseInt(v, 10, 64)
	}
	if err != nil {
		return t, fmt.Errorf("checkpoint: bad seq: %w", err)
	}
	if v, err = field(lines[4], "events"); err == nil {
		t.Events, err = strconv.ParseInt(v, 10, 64)
	}
	if err != nil {
		return t, fmt.Errorf("checkpoint: bad events: %w", err)
	}
	if t.Time, err = field(lines[5], "time"); err != nil {
		return t, err
	}
	return t, nil
}

// Errors of OpenCheckpoint; callers report them as different problems.
var (
	// ErrCheckpointUntrusted: no trusted key signed the note.
	ErrCheckpointUntrusted = errors.New("not signed by a trusted key")
	// ErrCheckpointSignature: a trusted key's signature does not match the text.
	ErrCheckpointSignature = errors.New("signature does not match the checkpoint text")
)

// OpenCheckpoint checks a signed checkpoint note against the trusted
// public keys and returns its text.
func OpenCheckpoint(signed string, publicKeys []string) (CheckpointText, error) {
	var vs []note.Verifier
	for _, k := range publicKeys {
		v, err := note.NewVerifier(k)
		if err != nil {
			return CheckpointText{}, fmt.Errorf("public key %q: %w", k, err)
		}
		vs = append(vs, v)
	}
	n, err := note.Open([]byte(signed), note.VerifierList(vs...))
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case errors.As(err, &unverified):
		return CheckpointText{}, ErrCheckpointUntrusted
	case errors.As(err, &invalid):
		return CheckpointText{}, ErrCheckpointSignature
	case err != nil:
		return CheckpointText{}, fmt.Errorf("checkpoint note: %w", err)
	}
	return ParseCheckpointText(n.Text)
}

// LatestCheckpoint returns the newest checkpoint, or ErrNotFound.
func (s *Store) LatestCheckpoint(ctx context.Context) (Checkpoint, error) {
	var cs []Checkpoint
	if err := s.DB.WithContext(ctx).Order("seq DESC").Limit(1).Find(&cs).Error; err != nil {
		return Checkpoint{}, fmt.Errorf("latest checkpoint: %w", err)
	}
	if len(cs) == 0 {
		return Checkpoint{}, &NotFoundError{Kind: "checkpoint", ID: "(none yet)"}
	}
	return cs[0], nil
}

// GetCheckpoint returns checkpoint seq, or ErrNotFound.
func (s *Store) GetCheckpoint(ctx context.Context, seq int64) (Checkpoint, error) {
	var cs []Checkpoint
	if err := s.DB.WithContext(ctx).Where("seq = ?", seq).Limit(1).Find(&cs).Error; err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %d: %w", seq, err)
	}
	if len(cs) == 0 {
		return Checkpoint{}, &NotFoundError{Kind: "checkpoint", ID: strconv.FormatInt(seq, 10)}
	}
	return cs[0], nil
}

// CheckpointRefusedError is returned when the log no longer holds what the
// previous checkpoint recorded: signing a new one would hide it.
type CheckpointRefusedError struct {
	Seq      int64
	Problems []Problem
}

func (e *CheckpointRefusedError) Error() string {
	first := ""
	if len(e.Problems) > 0 {
		first = ": " + e.Problems[0].String()
	}
	return fmt.Sprintf("refusing to sign a checkpoint over a log that changed behind checkpoint %d (%d problems; run `taskpilots verify`)%s",
		e.Seq, len(e.Problems), first)
}

// ErrCheckpointsOff: no signing key is configured.
var ErrCheckpointsOff = errors.New("checkpoints are off: no signing key is configured (--checkpoint-key)")

// IsNotFound reports whether err is a NotFoundError.
func IsNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf)
}

// ErrCheckpointRace: another process wrote the next checkpoint first.
var ErrCheckpointRace = errors.New("another process wrote this checkpoint first")

// sessionHeadRow is a session's head with its leaf in the previous checkpoint.
type sessionHeadRow struct {
	ID        string
	LastSeq   int64
	LastHash  string
	PrevCount *int64
	PrevHead  *string
}

// WriteCheckpoint signs a checkpoint over every session's head with key,
// unless nothing changed since the latest one (same sessions, same heads,
// same key): then it returns the latest and written false. It refuses with a
// *CheckpointRefusedError when a session of the latest checkpoint is gone,
// shorter, or rewritten; it returns ErrCheckpointRace when another process
// wrote the same sequence number first.
func (s *Store) WriteCheckpoint(ctx context.Context, key *CheckpointKey, by string) (Checkpoint, bool, error) {
	if key == nil {
		return Checkpoint{}, false, errors.New("checkpoint: no signing key configured")
	}
	latest, err := s.LatestCheckpoint(ctx)
	hasLatest := err == nil
	if err != nil && !IsNotFound(err) {
		return Checkpoint{}, false, err
	}
	var prevSessions int64
	if hasLatest {
		t, err := ParseCheckpointText(noteText(latest.Note))
		if err != nil {
			return Checkpoint{}, false, fmt.Errorf("checkpoint %d: %w", latest.Seq, err)
		}
		prevSessions = t.Sessions
	}

	var (
		tree     merkleBuilder
		events   int64
		matched  int64
		changed  []checkpointEntry // new leaves to store
		moved    []sessionHeadRow  // sessions whose head moved: check the prefix
		restored []sessionHeadRow  // sessions back from the archive: check what was recorded before
		problems []Problem
		after    string
	)
	// Each session with its leaf in the latest checkpoint (entriesAsOf's
	// condition, keyset bound on every side for the same reason).
	q := `SELECT s.id, s.last_seq, s.last_hash, e.event_count AS prev_count, e.head_hash AS prev_head
		FROM sessions s
		LEFT JOIN checkpoint_entries e ON e.session_id = s.id AND e.session_id > @after AND e.checkpoint_seq <= @seq AND NOT EXISTS (
			SELECT 1 FROM checkpoint_entries y WHERE y.session_id = e.session_id AND y.session_id > @after
				AND y.checkpoint_seq > e.checkpoint_seq AND y.checkpoint_seq <= @seq)
		WHERE s.id > @after ORDER BY s.id LIMIT @limit`
	for {
		var rows []sessionHeadRow
		if err := s.DB.WithContext(ctx).Raw(q, sql.Named("after", after), sql.Named("seq", latest.Seq), sql.Named("limit", checkpointBatch)).
			Scan(&rows).Error; err != nil {
			return Checkpoint{}, false, fmt.Errorf("checkpoint: read session heads: %w", err)
		}
		for _, r := range rows {
			tree.add(LeafHash(CheckpointLeaf(r.ID, r.LastSeq, r.LastHash)))
			events += r.LastSeq
			if r.PrevCount == nil || (*r.PrevCount == 0 && *r.PrevHead == "") {
				// New, or back from the archive after a tombstone (models/restore.go).
				if r.PrevCount != nil {
					restored = append(restored, r)
				}
				changed = append(changed, checkpointEntry{SessionID: r.ID, EventCount: r.LastSeq, HeadHash: r.LastHash})
				continue
			}
			matched++
			if *r.PrevCount == r.LastSeq && *r.PrevHead == r.LastHash {
				continue
			}
			changed = append(changed, checkpointEntry{SessionID: r.ID, EventCount: r.LastSeq, HeadHash: r.LastHash})
			moved = append(moved, r)
		}
		probs, err := s.checkMoved(ctx, latest.Seq, moved)
		if err != nil {
			return Checkpoint{}, false, err
		}
		problems = append(problems, probs...)
		if probs, err = s.checkRestored(ctx, latest.Seq, restored); err != nil {
			return Checkpoint{}, false, err
		}
		problems = append(problems, probs...)
		moved, restored = moved[:0], restored[:0]
		if len(rows) < checkpointBatch {
			break
		}
		after = rows[len(rows)-1].ID
	}
	if matched < prevSessions {
		// Some sessions of the latest checkpoint were not found: name them,
		// unless they were archived; those leave the tree with a tombstone
		// entry (event count 0), so that this checkpoint's stored leaves
		// match what it signs.
		probs, archived, err := s.missingSessions(ctx, latest.Seq, 0)
		if err != nil {
			return Checkpoint{}, false, err
		}
		problems = append(problems, probs...)
		for _, id := range archived {
			changed = append(changed, checkpointEntry{SessionID: id})
		}
	}
	if len(problems) > 0 {
		return Checkpoint{}, false, &CheckpointRefusedError{Seq: latest.Seq, Problems: problems}
	}
	if hasLatest && len(changed) == 0 && matched == prevSessions && latest.PublicKey == key.PublicKey {
		return latest, false, nil
	}

	c := Checkpoint{Seq: latest.Seq + 1, CreatedAt: NewUTCTime(s.now()), CreatedBy: by,
		Sessions: tree.n, Events: events, PublicKey: key.PublicKey}
	root := tree.root()
	c.Root = root.String()
	text := CheckpointText{Seq: c.Seq, Time: c.CreatedAt.String(), Sessions: c.Sessions, Events: c.Events, Root: root}
	signed, err := note.Sign(&note.Note{Text: text.Format()}, key.signer)
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("checkpoint: sign: %w", err)
	}
	c.Note = string(signed)
	for i := range changed {
		changed[i].CheckpointSeq = c.Seq
	}
	err = s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&c).Error; err != nil {
			if isUniqueViolation(err) {
				return ErrCheckpointRace
			}
			return fmt.Errorf("checkpoint %d: %w", c.Seq, err)
		}
		if len(changed) > 0 {
			if err := tx.CreateInBatches(changed, 500).Error; err != nil {
				return fmt.Errorf("checkpoint %d: entries: %w", c.Seq, err)
			}
		}
		return nil
	})
	if err != nil {
		return Checkpoint{}, false, err
	}
	return c, true, nil
}

// noteText is the text of a signed note without its signatures.
func noteText(signed string) string {
	if i := strings.Index(signed, "\n\n"); i >= 0 {
		return signed[:i+1]
	}
	return signed
}

// checkMoved checks sessions whose head differs from their leaf in
// checkpoint seq: the log must extend that leaf, not replace it.
func (s *Store) checkMoved(ctx context.Context, seq int64, rows []sessionHeadRow) ([]Problem, error) {
	var probs []Problem
	var ask []headProbe
	for _, r := range rows {
		switch {
		case r.LastSeq < *r.PrevCount:
			probs = append(probs, truncated(seq, r.ID, r.LastSeq, *r.PrevCount))
		case r.LastSeq == *r.PrevCount:
			probs = append(probs, rewritten(seq, r.ID, *r.PrevCount, r.LastHash, *r.PrevHead))
		default:
			ask = append(ask, headProbe{SessionID: r.ID, Seq: *r.PrevCount, Want: *r.PrevHead})
		}
	}
	more, err := s.probeHeads(ctx, seq, ask)
	return append(probs, more...), err
}

// checkRestored checks sessions restored from the archive after a
// checkpoint recorded their archival (a tombstone): the log must extend
// the head recorded before the tombstone.
func (s *Store) checkRestored(ctx context.Context, seq int64, rows []sessionHeadRow) ([]Problem, error) {
	var probs []Problem
	var ask []headProbe
	for _, r := range rows {
		var before []struct {
			EventCount int64
			HeadHash   string
		}
		if err := s.DB.WithContext(ctx).Raw(`SELECT event_count, head_hash FROM checkpoint_entries
			WHERE session_id = ? AND checkpoint_seq <= ? AND event_count > 0 ORDER BY checkpoint_seq DESC LIMIT 1`, r.ID, seq).
			Scan(&before).Error; err != nil {
			return nil, fmt.Errorf("checkpoint: read the head before archival: %w", err)
		}
		switch {
		case len(before) == 0:
		case r.LastSeq < before[0].EventCount:
			probs = append(probs, truncated(seq, r.ID, r.LastSeq, before[0].EventCount))
		default:
			ask = append(ask, headProbe{SessionID: r.ID, Seq: before[0].EventCount, Want: before[0].HeadHash})
		}
	}
	more, err := s.probeHeads(ctx, seq, ask)
	return append(probs, more...), err
}

// headProbe asks whether the event Seq of a session still hashes to Want.
type headProbe struct {
	SessionID string
	Seq       int64
	Want      string
}

// probeHeads reads the events at the probes' seqs in one query per batch
// and reports each that is missing or hashes to something else.
func (s *Store) probeHeads(ctx context.Context, seq int64, ps []headProbe) ([]Problem, error) {
	var probs []Problem
	for len(ps) > 0 {
		n := min(len(ps), 500)
		batch := ps[:n]
		ps = ps[n:]
		// A VALUES list joined to the (session_id, seq) index: PostgreSQL
		// plans 500 OR-ed conditions in a quarter second, this in a millisecond.
		vals := make([]string, len(batch))
		args := make([]any, 0, 2*len(batch))
		for i, p := range batch {
			vals[i] = "(?, ?)"
			args = append(args, p.SessionID, strconv.FormatInt(p.Seq, 10))
		}
		var found []struct {
			SessionID string
			Seq       int64
			Hash      string
		}
		if err := s.DB.WithContext(ctx).Raw(`WITH v(sid, seq) AS (VALUES `+strings.Join(vals, ", ")+`)
			SELECT e.session_id, e.seq, e.hash FROM v JOIN events e ON e.session_id = v.sid AND e.seq = CAST(v.seq AS bigint)`, args...).
			Scan(&found).Error; err != nil {
			return nil, fmt.Errorf("checkpoint: read head events: %w", err)
		}
		got := make(map[string]string, len(found))
		for _, f := range found {
			got[f.SessionID] = f.Hash
		}
		var lost []string
		for _, p := range batch {
			h, ok := got[p.SessionID]
			switch {
			case !ok:
				lost = append(lost, p.SessionID)
			case h != p.Want:
				probs = append(probs, rewritten(seq, p.SessionID, p.Seq, h, p.Want))
			}
		}
		if len(lost) > 0 {
			// The event at the recorded count is gone: say how many are left.
			var counts []struct {
				SessionID string
				N         int64
			}
			if err := s.DB.WithContext(ctx).Raw(`SELECT session_id, count(*) AS n FROM events WHERE session_id IN ? GROUP BY session_id`, lost).
				Scan(&counts).Error; err != nil {
				return nil, fmt.Errorf("checkpoint: count events: %w", err)
			}
			have := make(map[string]int64, len(counts))
			for _, c := range counts {
				have[c.SessionID] = c.N
			}
			var exist []string
			if err := s.DB.WithContext(ctx).Raw(`SELECT id FROM sessions WHERE id IN ?`, lost).Scan(&exist).Error; err != nil {
				return nil, fmt.Errorf("checkpoint: find sessions: %w", err)
			}
			exists := make(map[string]bool, len(exist))
			for _, id := range exist {
				exists[id] = true
			}
			archived, err := s.archivedHeads(ctx, lost)
			if err != nil {
				return nil, err
			}
			for _, p := range batch {
				if _, ok := got[p.SessionID]; ok {
					continue
				}
				a, ok := archived[p.SessionID]
				if !exists[p.SessionID] && coveredByArchive(a, ok, p.Seq, p.Want) {
					continue // archived with at least these events (models/archive.go)
				}
				if !exists[p.SessionID] {
					probs = append(probs, missing(seq, p.SessionID, p.Seq))
				} else {
					probs = append(probs, truncated(seq, p.SessionID, have[p.SessionID], p.Seq))
				}
			}
		}
	}
	return probs, nil
}

// missingSessions names the sessions of checkpoint seq that no longer
// exist (at most limit; 0: all).
func (s *Store) missingSessions(ctx context.Context, seq int64, limit int) (probs []Problem, archivedIDs []string, err error) {
	var rows []struct {
		SessionID string
		N         int64
		HeadHash  string
	}
	// Per gone session, its newest entry (event counts only grow), unless
	// an earlier checkpoint already recorded its archival (a tombstone).
	q := s.DB.WithContext(ctx).Raw(`SELECT e.session_id, e.event_count AS n, e.head_hash FROM checkpoint_entries e
		WHERE e.checkpoint_seq <= ? AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = e.session_id)
		AND NOT EXISTS (SELECT 1 FROM checkpoint_entries y WHERE y.session_id = e.session_id
			AND y.checkpoint_seq <= ? AND (y.event_count > e.event_count OR y.event_count = 0))
		ORDER BY e.session_id`, seq, seq)
	if err := q.Scan(&rows).Error; err != nil {
		return nil, nil, fmt.Errorf("checkpoint: find missing sessions: %w", err)
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.SessionID
	}
	archived, err := s.archivedHeads(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range rows {
		if a, ok := archived[r.SessionID]; coveredByArchive(a, ok, r.N, r.HeadHash) {
			archivedIDs = append(archivedIDs, r.SessionID) // archived with at least these events
			continue
		}
		if limit == 0 || len(probs) < limit {
			probs = append(probs, missing(seq, r.SessionID, r.N))
		}
	}
	return probs, archivedIDs, nil
}

func missing(seq int64, sid string, n int64) Problem {
	return Problem{SessionID: sid, Seq: n, Kind: ProblemMissing, Checkpoint: seq,
		Detail: fmt.Sprintf("session %s missing since checkpoint %d, which recorded %s", sid, seq, countText(n))}
}

func truncated(seq int64, sid string, have, want int64) Problem {
	return Problem{SessionID: sid, Seq: want, Kind: ProblemTruncated, Checkpoint: seq,
		Detail: fmt.Sprintf("session %s truncated: %s left, checkpoint %d recorded %s", sid, countText(have), seq, countText(want))}
}

func rewritten(seq int64, sid string, at int64, got, want string) Problem {
	return Problem{SessionID: sid, Seq: at, Kind: ProblemRewritten, Checkpoint: seq,
		Detail: fmt.Sprintf("session %s rewritten: event %d hashes to %.12s…, checkpoint %d recorded %.12s…", sid, at, got, seq, want)}
}

func countText(n int64) string {
	if n == 1 {
		return "1 event"
	}
	return strconv.FormatInt(n, 10) + " events"
}

// Checkpointer writes checkpoints with one key: periodically from the
// maintenance pass and on demand. Its zero Key means checkpoints are off.
type Checkpointer struct {
	Store *Store
	Key   *CheckpointKey
	// Every is the period of the maintenance pass's checkpoint; 0 means on
	// demand only.
	Every time.Duration

	mu      sync.Mutex
	lastTry time.Time
}

// Enabled reports whether a signing key is configured.
func (c *Checkpointer) Enabled() bool { return c != nil && c.Key != nil }

// PublicKeys are the keys a verifier should trust: this key's.
func (c *Checkpointer) PublicKeys() []string {
	if !c.Enabled() {
		return nil
	}
	return []string{c.Key.PublicKey}
}

// Write signs a checkpoint now if anything changed (see WriteCheckpoint);
// one at a time per process. Losing a race to another process is not an
// error: its checkpoint is returned.
func (c *Checkpointer) Write(ctx context.Context, by string) (Checkpoint, bool, error) {
	if !c.Enabled() {
		return Checkpoint{}, false, ErrCheckpointsOff
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, written, err := c.Store.WriteCheckpoint(ctx, c.Key, by)
	if errors.Is(err, ErrCheckpointRace) {
		cp, err = c.Store.LatestCheckpoint(ctx)
		return cp, false, err
	}
	return cp, written, err
}

// Tick is the maintenance pass's part: a checkpoint at most every Every.
// A failed attempt waits for the next period too, so a refused checkpoint
// (tampering found) is logged once per period, not every pass.
func (c *Checkpointer) Tick(ctx context.Context) (Checkpoint, bool, error) {
	if !c.Enabled() || c.Every <= 0 {
		return Checkpoint{}, false, nil
	}
	c.mu.Lock()
	due := c.lastTry.IsZero() || c.Store.Now().Sub(c.lastTry) >= c.Every
	if due {
		c.lastTry = c.Store.Now()
	}
	c.mu.Unlock()
	if !due {
		return Checkpoint{}, false, nil
	}
	return c.Write(ctx, "maintenance")
}
