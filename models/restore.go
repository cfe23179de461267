package models

// Restore from archive: the inverse of Archive. A session archived to a
// transcript file comes back into the database with the events exactly as
// they were (ids, payloads, hashes, times), its state and projection
// replayed from them with Apply, and its archived_sessions row removed, so
// that archive → verify → restore → verify is a round trip with identical
// hashes and states. Every file is checked first: its SHA-256 against the
// archive row, the transcript's chain (and checkpoint proof), and that it
// ends at the head the row recorded.
//
// What does not come back: the queue and review bookkeeping that archival
// deleted with the session (delegation rows, review rows, webhook
// deliveries; a closed session has none open, and its events carry the
// history) and the SLA-breach marker column. The feed keeps the positions it
// gave the events before archival; restored events are not fed again.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"gorm.io/gorm"
)

// AdminRestore is the admin log action of restoring one archived session.
const AdminRestore = "session.restore"

// RestoreOpts says what to restore from where.
type RestoreOpts struct {
	// Dir is the archive directory the files were written to.
	Dir string
	// SessionIDs restricts the restore to these archived sessions (all
	// archived sessions whose file is in Dir when empty).
	SessionIDs []string
	// PublicKeys are the checkpoint keys the transcripts' checkpoints must
	// be signed with (empty: the key in the file).
	PublicKeys []string
}

// RestoreReport is what RestoreArchive did.
type RestoreReport struct {
	Restored int              `json:"restored"`
	Events   int64            `json:"events"`
	Problems []ArchiveProblem `json:"problems"`
}

// RestoreArchive loads archived sessions back from their transcript files
// (see the comment at the top of the file). A session that fails a check
// is reported in Problems and left archived; the others are restored, each
// in its own transaction, parents before their children.
func (s *Store) RestoreArchive(ctx context.Context, operator User, o RestoreOpts) (RestoreReport, error) {
	var rep RestoreReport
	if o.Dir == "" {
		return rep, &ValidationError{Fields: []FieldError{{Field: "from", Message: "is required (the archive directory)"}}}
	}
	if st, err := os.Stat(o.Dir); err != nil || !st.IsDir() {
		return rep, fmt.Errorf("%w %s: not a readable directory", ErrArchiveDir, o.Dir)
	}
	var rows []ArchivedSession
	q := s.DB.WithContext(ctx).Order("session_id")
	if len(o.SessionIDs) > 0 {
		q = q.Where("session_id IN ?", o.SessionIDs)
	}
	if err := q.Find(&rows).Error; err != nil {
		return rep, fmt.Errorf("restore: read archived sessions: %w", err)
	}
	for _, id := range o.SessionIDs {
		if !slices.ContainsFunc(rows, func(r ArchivedSession) bool { return r.SessionID == id }) {
			return rep, &NotFoundError{Kind: "archived session", ID: id}
		}
	}
	if len(o.SessionIDs) == 0 {
		// All of them: those whose file is in this directory.
		rows = slices.DeleteFunc(rows, func(r ArchivedSession) bool {
			_, err := os.Stat(filepath.Join(o.Dir, filepath.FromSlash(r.File)))
			return err != nil
		})
	}
	by := operator.Actor()
	// Parents first: a child waits for a round in which its parent is back.
	for len(rows) > 0 {
		var waiting []ArchivedSession
		progress := false
		for _, r := range rows {
			n, err := s.restoreOne(ctx, by, o, r)
			var pe *restoreParentError
			switch {
			case errors.As(err, &pe):
				waiting = append(waiting, r)
				continue
			case errors.Is(err, errRestoreCheck):
				rep.Problems = append(rep.Problems, ArchiveProblem{SessionID: r.SessionID, File: r.File, Detail: err.Error()})
			case err != nil:
				return rep, fmt.Errorf("restore %s: %w", r.SessionID, err)
			default:
				rep.Restored++
				rep.Events += n
			}
			progress = true
		}
		if !progress {
			for _, r := range waiting {
				rep.Problems = append(rep.Problems, ArchiveProblem{SessionID: r.SessionID, File: r.File,
					Detail: "its parent session is neither in the database nor restorable from this directory"})
			}
			break
		}
		rows = waiting
	}
	return rep, nil
}

var errRestoreCheck = errors.New("not restored")

type restoreParentError struct{ parent string }

func (e *restoreParentError) Error() string { return "parent " + e.parent + " is not in the database" }

func restoreCheck(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errRestoreCheck, fmt.Sprintf(format, args...))
}

// restoreOne checks and restores one archived session; it returns the
// number of events restored.
func (s *Store) restoreOne(ctx context.Context, by string, o RestoreOpts, r ArchivedSession) (int64, error) {
	path := filepath.Join(o.Dir, filepath.FromSlash(r.File))
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, restoreCheck("cannot read the archive file: %v", err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != r.FileSHA256 {
		return 0, restoreCheck("file SHA-256 %.12s… differs from the recorded %.12s…: the file was changed", got, r.FileSHA256)
	}
	tr, err := VerifyTranscript(bytes.NewReader(b), o.PublicKeys)
	if err != nil {
		return 0, restoreCheck("not a transcript: %v", err)
	}
	if !tr.OK() {
		return 0, restoreCheck("transcript does not verify: %s", tr.Problems[0].Detail)
	}
	var t Transcript
	if err := json.Unmarshal(b, &t); err != nil {
		return 0, restoreCheck("not a transcript: %v", err)
	}
	if t.SessionID != r.SessionID || int64(len(t.Events)) != r.Events || t.LastHash != r.LastHash {
		return 0, restoreCheck("file holds %s with %d events ending %.12s…, the archive row %s with %d ending %.12s…",
			t.SessionID, len(t.Events), t.LastHash, r.SessionID, r.Events, r.LastHash)
	}
	evs := make([]Event, len(t.Events))
	for i, x := range t.Events {
		if evs[i], err = eventOfExport(x); err != nil {
			return 0, restoreCheck("event %d: %v", x.Seq, err)
		}
	}
	er, err := s.sessionErasure(ctx, r.SessionID)
	if err != nil {
		return 0, err
	}
	var st State
	for _, e := range evs {
		if st, err = replayEvent(st, e, er); err != nil {
			return 0, restoreCheck("event %d does not replay: %v", e.Seq, err)
		}
	}
	body, err := EncodeState(st)
	if err != nil {
		return 0, err
	}
	last := evs[len(evs)-1]
	p := projection(st, string(body), last.Seq, last.Hash, r.ClosedAt)
	p.CreatedAt = evs[0].CreatedAt
	if st.ParentID != "" {
		var n int64
		if err := s.DB.WithContext(ctx).Raw(`SELECT count(*) FROM sessions WHERE id = ?`, st.ParentID).Scan(&n).Error; err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, &restoreParentError{parent: st.ParentID}
		}
	}
	err = s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var n int64
		if err := tx.Raw(`SELECT count(*) FROM sessions WHERE id = ?`, r.SessionID).Scan(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return restoreCheck("a session with this id is in the database")
		}
		if err := tx.Exec(insertSession, append([]any{p.ID, p.CreatedAt}, p.projectionValues()...)...).Error; err != nil {
			return fmt.Errorf("insert session: %w", err)
		}
		if err := tx.Exec(insertState, p.State, p.ID).Error; err != nil {
			return fmt.Errorf("insert state: %w", err)
		}
		// feed_xid 0: below every sequencer horizon, so the events keep the
		// feed positions they had (or none) and are not fed twice. The
		// columns are the transcript's (and the chain's); any other column
		// of events takes its default.
		for _, e := range evs {
			if err := tx.Exec(`INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload,
				idempotency_key, prev_hash, hash, created_at, feed_xid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)`,
				e.ID, e.SessionID, e.Seq, e.Type, e.Actor, e.VersionBefore, e.VersionAfter, e.Payload,
				e.IdempotencyKey, e.PrevHash, e.Hash, e.CreatedAt).Error; err != nil {
				return fmt.Errorf("insert event %d: %w", e.Seq, err)
			}
		}
		if err := tx.Exec(`DELETE FROM archived_sessions WHERE session_id = ?`, r.SessionID).Error; err != nil {
			return err
		}
		return s.recordAdmin(tx, by, AdminRestore, "session", r.SessionID, map[string]any{"file": r.File, "sha256": r.FileSHA256},
			map[string]any{"events": len(evs), "last_hash": last.Hash})
	})
	if err != nil {
		return 0, err
	}
	return int64(len(evs)), nil
}
