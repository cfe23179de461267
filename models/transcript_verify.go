package models

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// A transcript carries the newest checkpoint that covers its session, with
// the session's leaf and its Merkle inclusion proof, so that anyone holding
// the public key can check offline that the transcript is not shorter than
// what was signed: cutting its tail and fixing last_hash keeps the chain
// intact, but no longer reaches the signed head.

// TranscriptCheckpointRecipe says how to check a transcript's checkpoint.
var TranscriptCheckpointRecipe = []string{
	"1. note is a signed note (golang.org/x/mod/sumdb/note, C2SP signed-note): check its Ed25519 signature with the public key " +
		"you trust (`taskpilots checkpoint pubkey` on the server; public_key here is only a convenience).",
	"2. The note's text is: origin, number of sessions (tree size), base64 Merkle root, then lines `seq N`, `events N`, `time T`.",
	"3. The session's leaf is the text \"<session_id>\\n<event_count>\\n<head_hash>\\n\"; its leaf hash is SHA-256(0x00 || leaf).",
	"4. proof is the RFC 6962 audit path of leaf leaf_index in a tree of tree_size leaves (node hash SHA-256(0x01 || left || right)); " +
		"following it (RFC 9162, section 2.1.3.2) must give the signed root.",
	"5. The transcript must have at least event_count events, and event number event_count must have hash head_hash.",
}

// TranscriptCheckpoint is the checkpoint part of a transcript.
type TranscriptCheckpoint struct {
	Seq        int64    `json:"seq"`
	Note       string   `json:"note"`
	PublicKey  string   `json:"public_key"`
	LeafIndex  int64    `json:"leaf_index"`
	TreeSize   int64    `json:"tree_size"`
	EventCount int64    `json:"event_count"`
	HeadHash   string   `json:"head_hash"`
	Proof      []string `json:"proof"`
	Recipe     []string `json:"recipe"`
}

// CheckpointProof returns checkpoint seq with the leaf of sessionID and its
// inclusion proof, or a NotFoundError when the checkpoint does not cover
// the session. The tree is rebuilt from the stored entries (32 bytes a
// session in memory).
func (s *Store) CheckpointProof(ctx context.Context, seq int64, sessionID string) (*TranscriptCheckpoint, error) {
	c, err := s.GetCheckpoint(ctx, seq)
	if err != nil {
		return nil, err
	}
	var (
		leaves []MerkleHash
		found  *checkpointEntry
		index  int64
	)
	err = s.eachCheckpointEntry(ctx, seq, func(batch []checkpointEntry) error {
		for _, e := range batch {
			if e.SessionID == sessionID {
				found, index = &e, int64(len(leaves))
			}
			leaves = append(leaves, LeafHash(CheckpointLeaf(e.SessionID, e.EventCount, e.HeadHash)))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, &NotFoundError{Kind: "session in checkpoint " + strconv.FormatInt(seq, 10), ID: sessionID}
	}
	proof, err := InclusionProof(leaves, index)
	if err != nil {
		return nil, err
	}
	tc := &TranscriptCheckpoint{Seq: c.Seq, Note: c.Note, PublicKey: c.PublicKey, LeafIndex: index, TreeSize: int64(len(leaves)),
		EventCount: found.EventCount, HeadHash: found.HeadHash, Proof: make([]string, len(proof)), Recipe: TranscriptCheckpointRecipe}
	for i, p := range proof {
		tc.Proof[i] = p.String()
	}
	return tc, nil
}

// TranscriptCheckpointFor returns the newest checkpoint covering the
// session, with its proof, for a transcript. When cp can sign and the newest
// checkpoint does not cover the session's current version, it signs one
// first (a checkpoint is an ordinary maintenance write; the export is
// already an audited admin action), so that the whole exported chain is
// covered. It returns nil, nil when no checkpoint covers the session.
func (s *Store) TranscriptCheckpointFor(ctx context.Context, sessionID string, cp *Checkpointer, by string) (*TranscriptCheckpoint, error) {
	row, err := s.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	covered := func() (int64, int64, error) {
		latest, err := s.LatestCheckpoint(ctx)
		if IsNotFound(err) {
			return 0, 0, nil
		}
		if err != nil {
			return 0, 0, err
		}
		var counts []int64
		if err := s.DB.WithContext(ctx).Raw(`SELECT event_count FROM checkpoint_entries WHERE session_id = ? AND checkpoint_seq <= ?
			ORDER BY checkpoint_seq DESC LIMIT 1`, sessionID, latest.Seq).Scan(&counts).Error; err != nil {
			return 0, 0, fmt.Errorf("transcript checkpoint: %w", err)
		}
		if len(counts) == 0 {
			return latest.Seq, 0, nil
		}
		return latest.Seq, counts[0], nil
	}
	seq, n, err := covered()
	if err != nil {
		return nil, err
	}
	if n < row.LastSeq && cp.Enabled() {
		if _, _, err := cp.Write(ctx, by); err != nil {
			// A refused checkpoint (the log changed behind the last one) is
			// for verify to report; the transcript carries the older one.
			if s.Logger != nil {
				s.Logger.Warn("no fresh checkpoint for a transcript", "session_id", sessionID, "err", err)
			}
		}
		if seq, n, err = covered(); err != nil {
			return nil, err
		}
	}
	if n == 0 {
		return nil, nil
	}
	return s.CheckpointProof(ctx, seq, sessionID)
}

// TranscriptReport is the result of VerifyTranscript.
type TranscriptReport struct {
	SessionID string    `json:"session_id"`
	Events    int64     `json:"events"`
	Problems  []Problem `json:"problems"`
	// Checkpoint is the checkpoint that was checked (0: none); Covered, the
	// number of events it covers.
	Checkpoint int64 `json:"checkpoint"`
	Covered    int64 `json:"covered"`
	// KeyFromFile is set when no public key was given and the one in the
	// transcript was used: that proves nothing against someone who re-signed.
	KeyFromFile bool     `json:"key_from_file"`
	Notes       []string `json:"notes"`
}

// OK reports whether nothing was wrong.
func (r TranscriptReport) OK() bool { return len(r.Problems) == 0 }

// VerifyTranscript checks a transcript without a database: its hash chain,
// its head, and, when it carries a checkpoint, the checkpoint's signature
// (against publicKeys; empty: the key in the file, flagged), the session's
// inclusion in the signed tree, and that the transcript reaches the signed
// event count and head.
func VerifyTranscript(r io.Reader, publicKeys []string) (TranscriptReport, error) {
	var rep TranscriptReport
	var t Transcript
	if err := json.NewDecoder(r).Decode(&t); err != nil {
		return rep, fmt.Errorf("read transcript: %w", err)
	}
	if t.Format != TranscriptFormat {
		return rep, fmt.Errorf("not a transcript: format %q, want %q", t.Format, TranscriptFormat)
	}
	rep.SessionID = t.SessionID
	rep.Events = int64(len(t.Events))
	add := func(seq int64, kind, format string, args ...any) {
		rep.Problems = append(rep.Problems, Problem{SessionID: t.SessionID, Seq: seq, Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	prev := ""
	var ver int64
	for i, x := range t.Events {
		// Seq always runs on; the version moves by the event type's rule
		// (invariant 10: audit-only events such as review scores leave it),
		// as Verify checks it in the database.
		want := int64(i + 1)
		step := VersionStep(x.Type)
		if legacyAuditEvent(Event{Type: x.Type, Seq: x.Seq, VersionBefore: x.VersionBefore, VersionAfter: x.VersionAfter}) {
			step = 1
		}
		if x.Seq != want || x.VersionBefore != ver || x.VersionAfter != ver+step {
			add(x.Seq, ProblemSeq, "expected seq %d with versions %d→%d, found seq %d with %d→%d", want, ver, ver+step, x.Seq, x.VersionBefore, x.VersionAfter)
		}
		ver = x.VersionAfter
		if x.SessionID != t.SessionID {
			add(x.Seq, ProblemChain, "event of session %s in the transcript of %s", x.SessionID, t.SessionID)
		}
		e, err := eventOfExport(x)
		if err != nil {
			add(x.Seq, ProblemHash, "unreadable event: %v", err)
		} else if got := ComputeHash(e); got != x.Hash {
			add(x.Seq, ProblemHash, "stored hash %.12s…, content hashes to %.12s…", x.Hash, got)
		}
		if x.PrevHash != prev {
			add(x.Seq, ProblemChain, "prev_hash %.12s… does not match the previous event's hash %.12s…", x.PrevHash, prev)
		}
		prev = x.Hash
	}
	// last_seq counts the events; transcripts from before it existed carry
	// only state_version, which then counted them too.
	want := t.LastSeq
	if want == 0 {
		want = t.StateVersion
	}
	if prev != t.LastHash || rep.Events != want {
		add(rep.Events, ProblemChain, "the head says %d events with last_hash %.12s…, the events end at %d with %.12s…",
			want, t.LastHash, rep.Events, prev)
	}
	cp := t.Checkpoint
	if cp == nil {
		rep.Notes = append(rep.Notes, "the transcript carries no checkpoint: only its chain was checked, so a cut tail would not show")
		return rep, nil
	}
	rep.Checkpoint = cp.Seq
	keys := publicKeys
	if len(keys) == 0 {
		rep.KeyFromFile = true
		keys = []string{cp.PublicKey}
		rep.Notes = append(rep.Notes, "no public key given: the checkpoint was checked with the key in the file ("+cp.PublicKey+
			"); compare it with `taskpilots checkpoint pubkey` or pass --checkpoint-pubkey")
	}
	cadd := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, Problem{SessionID: t.SessionID, Seq: cp.EventCount, Kind: ProblemCheckpoint, Checkpoint: cp.Seq,
			Detail: fmt.Sprintf(format, args...)})
	}
	text, err := OpenCheckpoint(cp.Note, keys)
	if err != nil {
		cadd("checkpoint %d: %v", cp.Seq, err)
		return rep, nil
	}
	if text.Seq != cp.Seq || text.Sessions != cp.TreeSize {
		cadd("checkpoint %d: the signed text says seq %d with %d sessions, the transcript says seq %d with %d", cp.Seq, text.Seq, text.Sessions, cp.Seq, cp.TreeSize)
		return rep, nil
	}
	proof := make([]MerkleHash, len(cp.Proof))
	for i, p := range cp.Proof {
		if proof[i], err = ParseMerkleHash(p); err != nil {
			cadd("checkpoint %d: proof: %v", cp.Seq, err)
			return rep, nil
		}
	}
	leaf := LeafHash(CheckpointLeaf(t.SessionID, cp.EventCount, cp.HeadHash))
	if err := VerifyInclusion(leaf, cp.LeafIndex, text.Sessions, proof, text.Root); err != nil {
		cadd("checkpoint %d: session %s with %s and head %.12s… is not in the signed tree: %v",
			cp.Seq, t.SessionID, countText(cp.EventCount), cp.HeadHash, err)
		return rep, nil
	}
	rep.Covered = cp.EventCount
	switch {
	case rep.Events < cp.EventCount:
		rep.Problems = append(rep.Problems, truncated(cp.Seq, t.SessionID, rep.Events, cp.EventCount))
	case t.Events[cp.EventCount-1].Hash != cp.HeadHash:
		rep.Problems = append(rep.Problems, rewritten(cp.Seq, t.SessionID, cp.EventCount, t.Events[cp.EventCount-1].Hash, cp.HeadHash))
	case rep.Events > cp.EventCount:
		rep.Notes = append(rep.Notes, fmt.Sprintf("events %d to %d are newer than checkpoint %d: only their chain was checked",
			cp.EventCount+1, rep.Events, cp.Seq))
	}
	return rep, nil
}

// eventOfExport turns an exported event back into an Event for hashing.
func eventOfExport(x ExportEvent) (Event, error) {
	var t UTCTime
	if err := t.Scan(x.CreatedAt); err != nil {
		return Event{}, fmt.Errorf("created_at %q: %w", x.CreatedAt, err)
	}
	return Event{ID: x.ID, SessionID: x.SessionID, Seq: x.Seq, Type: x.Type, Actor: x.Actor, VersionBefore: x.VersionBefore,
		VersionAfter: x.VersionAfter, Payload: x.Payload, IdempotencyKey: x.IdempotencyKey, PrevHash: x.PrevHash, Hash: x.Hash, CreatedAt: t}, nil
}
