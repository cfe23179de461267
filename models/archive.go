package models

// Archival: closed sessions leave the database for transcript files.
//
// A session closed (completed, rejected or cancelled) before a cut-off is
// written to DIR/<YYYY-MM>/<session id>.json as the same transcript the
// audit trail exports (every event with its hash chain, and the signed
// checkpoint that covers it with its inclusion proof when checkpoints are
// on), so that it stays verifiable offline with `taskpilots verify
// --transcript`. Only after the file is on disk (fsynced and renamed into
// place) does one transaction per session delete its rows and record an
// archived_sessions row: the head it had (event count and last hash), the
// file and the file's SHA-256. Verification keeps working across archival:
// a checkpoint that recorded the session finds it in archived_sessions
// instead of reporting it missing, and `verify --archive DIR` checks each
// archived row against its file.
//
// A run is resumable and idempotent: an archived session has no rows left to
// select, a crash between the file and the transaction leaves a file that
// the next run overwrites, and a session that changed while its file was
// written (an audit-only event after closing, such as a review score) is left
// for the next run. Sessions with children are archived after their
// children; sessions with a review still to score or a webhook delivery
// still pending are left until those finish.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// AdminArchive is the admin log action of archiving one session.
const AdminArchive = "session.archive"

// ArchivedSession records a session whose rows were deleted after its
// transcript was written to an archive file.
type ArchivedSession struct {
	SessionID  string `gorm:"primaryKey"`
	TicketRef  string
	Status     Status
	Events     int64
	LastHash   string
	ClosedAt   UTCTime
	ArchivedAt UTCTime
	ArchivedBy string
	// File is the transcript's path relative to the archive directory.
	File       string
	FileSHA256 string `gorm:"column:file_sha256"`
}

// TableName pins the table name for GORM.
func (ArchivedSession) TableName() string { return "archived_sessions" }

// ArchiveOpts says what to archive and where.
type ArchiveOpts struct {
	// ClosedBefore: sessions whose last change is older are archived.
	ClosedBefore time.Time
	// Dir receives the transcripts; it is created when missing.
	Dir string
	// Batch is how many candidates one query selects (default 200).
	Batch int
	// Limit stops after this many sessions (0: all).
	Limit int
	// DryRun counts the candidates and writes nothing.
	DryRun bool
	// Checkpointer, when it can sign, covers every transcript with a signed
	// checkpoint and its inclusion proof.
	Checkpointer *Checkpointer
	// Progress, if set, is called after each session.
	Progress func(ArchiveReport)
}

// ArchiveReport is what a run did.
type ArchiveReport struct {
	Archived int   `json:"archived"`
	Events   int64 `json:"events"`
	// Deferred counts sessions left for a later run because they changed
	// while their transcript was written.
	Deferred int `json:"deferred"`
	// Candidates is what a dry run found.
	Candidates int `json:"candidates"`
}

// ErrArchiveDir is returned when the archive directory cannot be used.
var ErrArchiveDir = errors.New("archive directory")

// archiveCandidates returns up to limit closed sessions ready to archive,
// with ids after `after`.
func (s *Store) archiveCandidates(ctx context.Context, before time.Time, after string, limit int) ([]Session, error) {
	var rows []Session
	err := s.DB.WithContext(ctx).Raw(`SELECT `+sessionColumns+` FROM sessions s
		WHERE s.status IN ? AND s.updated_at < ? AND s.id > ?
		AND NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_id = s.id)
		AND NOT EXISTS (SELECT 1 FROM review_items r WHERE r.session_id = s.id AND r.scored < r.needed)
		AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.session_id = s.id AND d.status IN ?)
		ORDER BY s.id LIMIT ?`,
		[]Status{StatusCompleted, StatusRejected, StatusCancelled}, NewUTCTime(before), after,
		[]DeliveryStatus{DeliveryPending, DeliverySending}, limit).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("archive: select closed sessions: %w", err)
	}
	return rows, nil
}

// Archive writes the transcripts of closed sessions to o.Dir and deletes
// their rows, a session at a time (see the comment at the top of the file).
func (s *Store) Archive(ctx context.Context, operator User, o ArchiveOpts) (ArchiveReport, error) {
	var rep ArchiveReport
	if o.Batch <= 0 {
		o.Batch = 200
	}
	if o.ClosedBefore.IsZero() {
		return rep, &ValidationError{Fields: []FieldError{{Field: "closed_before", Message: "is required"}}}
	}
	if !o.DryRun {
		if err := os.MkdirAll(o.Dir, 0o750); err != nil {
			return rep, fmt.Errorf("%w %s: %v", ErrArchiveDir, o.Dir, err)
		}
	}
	by := operator.Actor()
	after := ""
	for {
		rows, err := s.archiveCandidates(ctx, o.ClosedBefore, after, o.Batch)
		if err != nil {
			return rep, err
		}
		if len(rows) == 0 {
			return rep, nil
		}
		after = rows[len(rows)-1].ID
		if o.DryRun {
			rep.Candidates += len(rows)
			continue
		}
		// One checkpoint per batch covers every transcript of the batch, so
		// that TranscriptCheckpointFor finds it instead of signing one per
		// session.
		if o.Checkpointer.Enabled() {
			if _, _, err := o.Checkpointer.Write(ctx, by); err != nil {
				return rep, fmt.Errorf("archive: sign a checkpoint: %w", err)
			}
		}
		for _, row := range rows {
			if o.Limit > 0 && rep.Archived >= o.Limit {
				return rep, nil
			}
			done, err := s.archiveOne(ctx, operator, row, o)
			if err != nil {
				return rep, fmt.Errorf("archive %s: %w", row.ID, err)
			}
			if done {
				rep.Archived++
				rep.Events += row.LastSeq
			} else {
				rep.Deferred++
			}
			if o.Progress != nil {
				o.Progress(rep)
			}
		}
	}
}

// archiveOne writes one transcript and, if the session did not change
// meanwhile, deletes its rows. It reports whether the session was archived.
func (s *Store) archiveOne(ctx context.Context, operator User, row Session, o ArchiveOpts) (bool, error) {
	by := operator.Actor()
	var proof *TranscriptCheckpoint
	if o.Checkpointer.Enabled() {
		p, err := s.TranscriptCheckpointFor(ctx, row.ID, o.Checkpointer, by)
		if err != nil {
			return false, err
		}
		proof = p
	}
	rel := filepath.Join(row.UpdatedAt.Time.UTC().Format("2006-01"), row.ID+".json")
	sum, head, err := s.writeArchiveFile(ctx, filepath.Join(o.Dir, rel), row.ID, by, proof)
	if err != nil {
		return false, err
	}
	rec := ArchivedSession{SessionID: row.ID, TicketRef: row.TicketRef, Status: row.Status,
		Events: head.LastSeq, LastHash: head.LastHash, ClosedAt: row.UpdatedAt, ArchivedAt: NewUTCTime(s.now()),
		ArchivedBy: by, File: filepath.ToSlash(rel), FileSHA256: sum}
	archived := false
	err = s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var cur Session
		q := tx
		if s.Dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		if err := q.Where("id = ?", row.ID).Take(&cur).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return nil // archived by another run meanwhile
			}
			return err
		}
		if cur.LastSeq != head.LastSeq || cur.LastHash != head.LastHash || !cur.Status.Terminal() {
			return nil // changed while the file was written: next run
		}
		if err := tx.Create(&rec).Error; err != nil {
			return fmt.Errorf("record: %w", err)
		}
		// The session's scores leave the statistics with it.
		if err := unrollReviewScores(tx, row.ID); err != nil {
			return err
		}
		for _, del := range []string{
			`DELETE FROM webhook_deliveries WHERE session_id = ?`,
			`DELETE FROM review_claims WHERE session_id = ?`,
			`DELETE FROM review_scores WHERE session_id = ?`,
			`DELETE FROM review_items WHERE session_id = ?`,
			`DELETE FROM delegations WHERE session_id = ?`,
			`DELETE FROM events WHERE session_id = ?`,
			`DELETE FROM session_states WHERE session_id = ?`,
			`DELETE FROM sessions WHERE id = ?`,
		} {
			if err := tx.Exec(del, row.ID).Error; err != nil {
				return fmt.Errorf("%s: %w", del, err)
			}
		}
		archived = true
		return s.recordAdmin(tx, by, AdminArchive, "session", row.ID, nil,
			map[string]any{"file": rec.File, "sha256": sum, "events": rec.Events, "last_hash": rec.LastHash})
	})
	return archived, err
}

// writeArchiveFile writes the transcript to path through a temporary file,
// fsynced and renamed into place, and returns its SHA-256 and head.
func (s *Store) writeArchiveFile(ctx context.Context, path, sessionID, by string, proof *TranscriptCheckpoint) (string, transcriptHead, error) {
	var head transcriptHead
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return "", head, fmt.Errorf("%w: %v", ErrArchiveDir, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".archive-*")
	if err != nil {
		return "", head, fmt.Errorf("%w: %v", ErrArchiveDir, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	h := sha256.New()
	if err := s.WriteTranscript(ctx, io.MultiWriter(f, h), sessionID, by, proof); err != nil {
		f.Close()
		return "", head, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", head, err
	}
	if err := f.Close(); err != nil {
		return "", head, err
	}
	// The head says which events the file holds (the transaction checks the
	// session still ends there).
	if head, err = readTranscriptHead(tmp); err != nil {
		return "", head, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", head, err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync() // make the rename durable before the rows go
		d.Close()
	}
	return hex.EncodeToString(h.Sum(nil)), head, nil
}

func readTranscriptHead(path string) (transcriptHead, error) {
	var t transcriptHead
	f, err := os.Open(path)
	if err != nil {
		return t, err
	}
	defer f.Close()
	if err := json.NewDecoder(bufio.NewReader(f)).Decode(&t); err != nil {
		return t, fmt.Errorf("read back %s: %w", path, err)
	}
	return t, nil
}

// archivedHeads returns the archived rows of the given sessions by id.
func (s *Store) archivedHeads(ctx context.Context, ids []string) (map[string]ArchivedSession, error) {
	out := map[string]ArchivedSession{}
	if len(ids) == 0 {
		return out, nil
	}
	for len(ids) > 0 {
		n := min(len(ids), 500) // bind parameters are limited (65,535 on PostgreSQL)
		var rows []ArchivedSession
		if err := s.DB.WithContext(ctx).Where("session_id IN ?", ids[:n]).Find(&rows).Error; err != nil {
			return nil, fmt.Errorf("read archived sessions: %w", err)
		}
		for _, r := range rows {
			out[r.SessionID] = r
		}
		ids = ids[n:]
	}
	return out, nil
}

// coveredByArchive reports whether a checkpoint's record of a session (n
// events ending in hash) is accounted for by its archive row: the archive
// holds at least those events, and the same head when the count is equal.
// (Events between a checkpoint and the archival are in the file, which
// `verify --archive` checks against the checkpoint.)
func coveredByArchive(a ArchivedSession, ok bool, n int64, hash string) bool {
	if !ok || a.Events < n {
		return false
	}
	return a.Events > n || a.LastHash == hash
}

// ArchiveProblem is what VerifyArchive found wrong with one archived session.
type ArchiveProblem struct {
	SessionID string `json:"session_id"`
	File      string `json:"file"`
	Detail    string `json:"detail"`
}

// ArchiveCheck is the result of VerifyArchive.
type ArchiveCheck struct {
	Sessions int              `json:"sessions"`
	Problems []ArchiveProblem `json:"problems"`
}

// VerifyArchive checks every archived_sessions row against its file in dir:
// the file exists, has the recorded SHA-256, verifies as a transcript
// (chain, and checkpoint proof against publicKeys when it carries one), and
// ends at the recorded head.
func (s *Store) VerifyArchive(ctx context.Context, dir string, publicKeys []string) (ArchiveCheck, error) {
	var out ArchiveCheck
	after := ""
	for {
		var rows []ArchivedSession
		if err := s.DB.WithContext(ctx).Where("session_id > ?", after).Order("session_id").Limit(500).Find(&rows).Error; err != nil {
			return out, fmt.Errorf("read archived sessions: %w", err)
		}
		for _, r := range rows {
			out.Sessions++
			if detail := checkArchiveFile(filepath.Join(dir, filepath.FromSlash(r.File)), r, publicKeys); detail != "" {
				out.Problems = append(out.Problems, ArchiveProblem{SessionID: r.SessionID, File: r.File, Detail: detail})
			}
		}
		if len(rows) < 500 {
			return out, nil
		}
		after = rows[len(rows)-1].SessionID
	}
}

func checkArchiveFile(path string, r ArchivedSession, publicKeys []string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("cannot read the archive file: %v", err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != r.FileSHA256 {
		return fmt.Sprintf("file SHA-256 %.12s… differs from the recorded %.12s…: the file was changed", got, r.FileSHA256)
	}
	rep, err := VerifyTranscript(bytes.NewReader(b), publicKeys)
	if err != nil {
		return fmt.Sprintf("not a transcript: %v", err)
	}
	if !rep.OK() {
		return fmt.Sprintf("transcript does not verify: %s", rep.Problems[0].Detail)
	}
	if rep.SessionID != r.SessionID || rep.Events != r.Events {
		return fmt.Sprintf("file holds %s with %d events, the archive row %s with %d", rep.SessionID, rep.Events, r.SessionID, r.Events)
	}
	return ""
}
