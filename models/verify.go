package models

import (
	"context"
	"fmt"
	"time"
)

// Problem kinds found by Verify.
const (
	ProblemHash       = "hash"       // an event's stored hash is not the hash of its content
	ProblemChain      = "chain"      // an event's prev_hash is not its predecessor's hash
	ProblemSeq        = "seq"        // seq does not run 1..n, or a version_before is not its predecessor's version_after
	ProblemReplay     = "replay"     // Apply rejected the event during replay
	ProblemProjection = "projection" // replayed state differs from the stored state
)

// Problem is one mismatch found by Verify.
type Problem struct {
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
	Kind      string `json:"kind"`
	Detail    string `json:"detail"`
	// Checkpoint is the checkpoint a checkpoint problem is about (0 for the
	// problems of a session's own chain).
	Checkpoint int64 `json:"checkpoint,omitempty"`
}

func (p Problem) String() string {
	switch {
	case p.SessionID == "":
		return fmt.Sprintf("checkpoint %d: %s: %s", p.Checkpoint, p.Kind, p.Detail)
	case p.Checkpoint != 0:
		// The detail names the session, the count and the checkpoint.
		return fmt.Sprintf("%s: %s", p.Kind, p.Detail)
	}
	return fmt.Sprintf("session %s seq %d: %s: %s", p.SessionID, p.Seq, p.Kind, p.Detail)
}

// VerifyReport summarises a verification run.
type VerifyReport struct {
	Sessions int64         `json:"sessions"`
	Events   int64         `json:"events"`
	Problems []Problem     `json:"problems"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	// Checkpoints is what the checkpoint checks covered (nil when they did
	// not run).
	Checkpoints *CheckpointSummary `json:"checkpoints,omitempty"`
}

// OK reports whether nothing was wrong.
func (r VerifyReport) OK() bool { return len(r.Problems) == 0 }

// VerifyOpts configures Verify.
type VerifyOpts struct {
	// Progress, if set, is called after each batch of sessions with the
	// number of sessions checked so far and the total.
	Progress func(done, total int64)
	// SessionIDs limits the check to these sessions.
	SessionIDs []string
	// Checkpoints, if set, also checks the signed checkpoints against the
	// log (VerifyCheckpoints); not with SessionIDs, since a checkpoint is
	// about the log as a whole.
	Checkpoints *CheckpointVerifyOpts
}

const verifyBatch = 200

// Verify replays every session with Apply, compares the result with the
// stored projection, and recomputes every hash chain.
func (s *Store) Verify(ctx context.Context, o VerifyOpts) (VerifyReport, error) {
	start := time.Now()
	var rep VerifyReport
	var total int64
	if len(o.SessionIDs) > 0 {
		total = int64(len(o.SessionIDs))
	} else if err := s.DB.WithContext(ctx).Model(&Session{}).Count(&total).Error; err != nil {
		return rep, fmt.Errorf("verify: count sessions: %w", err)
	}
	after := ""
	for {
		var rows []Session
		// A left join: a session whose state row is missing is a
		// projection problem to report, not a session to skip.
		q := s.DB.WithContext(ctx).Table("sessions s").Select("s.*, coalesce(st.state, '') AS state").
			Joins("LEFT JOIN session_states st ON st.session_id = s.id").Order("s.id").Limit(verifyBatch)
		if len(o.SessionIDs) > 0 {
			q = q.Where("s.id IN ?", o.SessionIDs)
		}
		if err := q.Where("s.id > ?", after).Scan(&rows).Error; err != nil {
			return rep, fmt.Errorf("verify: list sessions: %w", err)
		}
		if len(rows) == 0 {
			break
		}
		for _, row := range rows {
			n, probs, err := s.verifySession(ctx, row)
			if err != nil {
				return rep, err
			}
			rep.Sessions++
			rep.Events += n
			rep.Problems = append(rep.Problems, probs...)
		}
		after = rows[len(rows)-1].ID
		if o.Progress != nil {
			o.Progress(rep.Sessions, total)
		}
	}
	if o.Checkpoints != nil && len(o.SessionIDs) == 0 {
		sum, probs, err := s.VerifyCheckpoints(ctx, *o.Checkpoints)
		if err != nil {
			return rep, err
		}
		rep.Checkpoints = &sum
		rep.Problems = append(rep.Problems, probs...)
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// verifySession checks one session, reading its events in pages.
func (s *Store) verifySession(ctx context.Context, row Session) (int64, []Problem, error) {
	var (
		probs    []Problem
		st       State
		prevHash string
		lastSeq  int64
		lastVer  int64
		replayOK = true
		count    int64
	)
	add := func(seq int64, kind, format string, args ...any) {
		probs = append(probs, Problem{SessionID: row.ID, Seq: seq, Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	for {
		evs, err := s.ListEvents(ctx, row.ID, lastSeq, 1000)
		if err != nil {
			return count, nil, err
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			count++
			// Seq always runs on; the version moves by the event type's rule
			// (invariant 10), which replay checks below.
			if e.Seq != lastSeq+1 || e.VersionBefore != lastVer {
				add(e.Seq, ProblemSeq, "expected seq %d from version %d, found seq %d with versions %d→%d",
					lastSeq+1, lastVer, e.Seq, e.VersionBefore, e.VersionAfter)
			}
			if got := ComputeHash(e); got != e.Hash {
				add(e.Seq, ProblemHash, "stored hash %.12s…, content hashes to %.12s…", e.Hash, got)
			}
			if e.PrevHash != prevHash {
				add(e.Seq, ProblemChain, "prev_hash %.12s… does not match the previous event's hash %.12s…", e.PrevHash, prevHash)
			}
			if replayOK {
				next, err := Apply(st, e)
				if err != nil {
					add(e.Seq, ProblemReplay, "%v", err)
					replayOK = false
				} else {
					st = next
				}
			}
			prevHash = e.Hash
			lastSeq = e.Seq
			lastVer = e.VersionAfter
		}
	}
	if !replayOK {
		return count, probs, nil
	}
	want, err := EncodeState(st)
	if err != nil {
		return count, nil, err
	}
	if string(want) != row.State {
		add(lastSeq, ProblemProjection, "stored state differs from the state replayed from %d events", count)
	}
	proj := projection(st, string(want), lastSeq, prevHash, row.UpdatedAt)
	switch {
	case row.StateVersion != st.Version:
		add(lastSeq, ProblemProjection, "state_version column %d, replay gives %d", row.StateVersion, st.Version)
	case row.LastSeq != lastSeq:
		add(lastSeq, ProblemProjection, "last_seq column %d, the last event has seq %d", row.LastSeq, lastSeq)
	case row.Status != proj.Status:
		add(lastSeq, ProblemProjection, "status column %s, replay gives %s", row.Status, proj.Status)
	case row.LastHash != prevHash:
		add(lastSeq, ProblemProjection, "last_hash column does not match the last event's hash")
	case row.CurrentStep != proj.CurrentStep || row.Assignee != proj.Assignee || row.Priority != proj.Priority ||
		row.TicketRef != proj.TicketRef || row.Goal != proj.Goal || row.Queue != proj.Queue ||
		row.SearchNotes != proj.SearchNotes || row.ReasonCode != proj.ReasonCode || row.NextStep != proj.NextStep:
		add(lastSeq, ProblemProjection, "projection columns differ from the replayed state")
	}
	return count, probs, nil
}
