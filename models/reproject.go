package models

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

// StateFormat is the format of the states this binary's Apply derives. Raise
// it whenever Apply starts deriving something new from the same events: the
// stored states of existing sessions are then re-projected once, so that
// replay keeps matching them (invariant 1) and verify stays clean.
//
//	1  every release before v1.1
//	2  v1.1: run reasons, fact versions, step evidence, joined children,
//	   escalation reason codes and failures, resolved risks
const StateFormat = 2

// reprojectBatch is how many sessions one re-projection transaction rewrites.
const reprojectBatch = 200

// ReprojectReport counts what Reproject did.
type ReprojectReport struct {
	From, To  int
	Sessions  int
	Rewritten int
}

// Reproject brings the stored states up to StateFormat: when the database
// records an older format, every session is replayed from its events with
// this binary's Apply and its state and projection columns are rewritten.
// Events and their hashes are never touched. A session written concurrently
// (its last seq moved on) is skipped: its writer stored a current-format state.
// Several processes may run it at once; the work is idempotent.
func (s *Store) Reproject(ctx context.Context) (ReprojectReport, error) {
	var r ReprojectReport
	if err := s.DB.WithContext(ctx).Raw(`SELECT version FROM state_format WHERE id = 1`).Scan(&r.From).Error; err != nil {
		return r, fmt.Errorf("reproject: read state format: %w", err)
	}
	r.To = StateFormat
	if r.From >= StateFormat {
		return r, nil
	}
	s.Logger.Info("re-projecting session states from their events", "from_format", r.From, "to_format", StateFormat)
	after := ""
	for {
		var rows []Session
		if err := s.DB.WithContext(ctx).Raw(`SELECT s.*, coalesce(st.state, '') AS state FROM sessions s
			LEFT JOIN session_states st ON st.session_id = s.id WHERE s.id > ? ORDER BY s.id LIMIT ?`, after, reprojectBatch).
			Scan(&rows).Error; err != nil {
			return r, fmt.Errorf("reproject: list sessions: %w", err)
		}
		if len(rows) == 0 {
			break
		}
		for _, row := range rows {
			changed, err := s.reprojectSession(ctx, row)
			if err != nil {
				return r, err
			}
			r.Sessions++
			if changed {
				r.Rewritten++
			}
		}
		after = rows[len(rows)-1].ID
	}
	if err := s.DB.WithContext(ctx).Exec(`UPDATE state_format SET version = ? WHERE id = 1 AND version < ?`, StateFormat, StateFormat).Error; err != nil {
		return r, fmt.Errorf("reproject: record state format: %w", err)
	}
	s.Logger.Info("re-projected session states", "sessions", r.Sessions, "rewritten", r.Rewritten)
	return r, nil
}

// reprojectSession rewrites one session's state and projection columns from
// its events, guarded by its last seq. It reports whether anything changed.
func (s *Store) reprojectSession(ctx context.Context, row Session) (bool, error) {
	var (
		st      State
		lastSeq int64
		last    Event
	)
	er, err := s.sessionErasure(ctx, row.ID)
	if err != nil {
		return false, err
	}
	for {
		evs, err := s.ListEvents(ctx, row.ID, lastSeq, 1000)
		if err != nil {
			return false, fmt.Errorf("reproject %s: %w", row.ID, err)
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			next, err := replayEvent(st, e, er)
			if err != nil {
				// Leave it as it is: verify names the broken event.
				s.Logger.Warn("session does not replay; left as stored", "session", row.ID, "seq", e.Seq, "err", err)
				return false, nil
			}
			st, last, lastSeq = next, e, e.Seq
		}
	}
	if lastSeq != row.LastSeq {
		return false, nil // written concurrently, or broken: verify tells
	}
	body, err := EncodeState(st)
	if err != nil {
		return false, fmt.Errorf("reproject %s: encode state: %w", row.ID, err)
	}
	p := projection(st, string(body), lastSeq, last.Hash, row.UpdatedAt)
	if string(body) == row.State && p.SearchNotes == row.SearchNotes && p.ReasonCode == row.ReasonCode &&
		p.NextStep == row.NextStep {
		return false, nil
	}
	requested := row.InputRequestedAt
	if p.InputRequestedAt.Valid && !requested.Valid {
		requested = NullTime{Time: last.CreatedAt, Valid: true}
	} else if !p.InputRequestedAt.Valid {
		requested = NullTime{}
	}
	// The projection columns and the state change together, guarded by the
	// last seq: a session written meanwhile keeps what its writer stored.
	err = s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec(`UPDATE sessions SET search_notes = ?, reason_code = ?, next_step = ?,
		input_requested_at = ? WHERE id = ? AND last_seq = ?`,
			p.SearchNotes, p.ReasonCode, p.NextStep, requested, row.ID, row.LastSeq)
		if res.Error != nil || res.RowsAffected != 1 {
			return res.Error
		}
		return tx.Exec(`INSERT INTO session_states (session_id, state) VALUES (?, ?)
		ON CONFLICT (session_id) DO UPDATE SET state = excluded.state`, row.ID, string(body)).Error
	})
	if err != nil {
		return false, fmt.Errorf("reproject %s: %w", row.ID, err)
	}
	return true, nil
}
