package models

// Erasure: one ticket's personal data leaves the database on request (GDPR
// article 17) while every hash chain, checkpoint and transcript keeps
// verifying.
//
// How the chain survives. An event's hash is SHA-256 over one JSON object
// whose fields come in a fixed order (hashInput): session, seq, type, actor,
// versions, then the payload, then the idempotency key, prev_hash and
// created_at. SHA-256 absorbs its input in 64-byte blocks, so the hash of an
// event is fully determined by the 32-byte chaining value after the first
// 64-byte boundary past the payload's end, plus the bytes from that boundary
// on, which are all fields after the payload. Erasure replaces the payload
// with a tombstone holding that chaining value, the boundary and where in the
// trailing fields the boundary falls (Tombstone); ComputeHash recognises a
// tombstone and finishes the hash from it and the event's own trailing
// fields. The chaining value is a digest of the payload (and of the fields
// before it): it reveals nothing of the payload beyond what guessing could
// confirm, and no byte of the payload is kept, since the boundary lies after
// it. The stored hashes, prev_hash links, last_hash columns, checkpoint
// entries and signed checkpoints stay exactly as they were, so this works
// the same for events written by every release: no hash format changes.
//
// What an erased event no longer proves on its own: its type, actor, seq and
// versions were hashed before the payload, so they are covered by the
// chaining value jointly rather than rechecked field by field (seq and
// versions are still checked against their neighbours, and the prev_hash and
// created_at after it are rechecked, so a hand-edit of those, of the hash, or
// of the tombstone is still caught).
//
// Replay. An erased event cannot be applied (Apply refuses it). The erasure
// keeps the scrubbed state of the session at the last erased event
// (session_erasures.state): free text replaced by "[erased]", facts and
// outputs dropped, ids, statuses, steps, queues, versions and counts kept.
// Replay, verify and re-projection start from that state and apply the
// events written after the erasure; StateAt refuses versions before it.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// AdminErase is the admin log action of erasing one ticket's data.
const AdminErase = "ticket.erase"

// ProblemErased is a verify problem about an erasure: a tombstone without an
// erasure record, an event of an erased range that still has its payload, or
// an erasure state that does not fit the chain.
const ProblemErased = "erased"

// ErasedText replaces every free-text value of an erased state.
const ErasedText = "[erased]"

// ErrErasedEvent is returned by Apply for an erased event.
var ErrErasedEvent = errors.New("the event's payload was erased; replay starts from the erasure's state")

// SessionErasure records that a session's events up to ThroughSeq were
// erased, and the session's scrubbed state at that event.
type SessionErasure struct {
	SessionID  string `gorm:"primaryKey"`
	ErasureID  string
	TicketRef  string
	ThroughSeq int64
	State      string
	Reason     string
	ErasedBy   string
	ErasedAt   UTCTime
}

// TableName pins the table name for GORM.
func (SessionErasure) TableName() string { return "session_erasures" }

func (r *SessionErasure) decodeState() (State, error) {
	var st State
	if err := decodeJSON([]byte(r.State), &st); err != nil {
		return State{}, fmt.Errorf("session %s: decode the erasure's state: %w", r.SessionID, err)
	}
	return st, nil
}

// Tombstone is the payload of an erased event, under the key "_erased".
type Tombstone struct {
	// Erasure is the id of the erasure that wrote it.
	Erasure string `json:"erasure"`
	// ChainState is the SHA-256 chaining value (hex) after the first
	// ChainLen bytes of the event's hash input.
	ChainState string `json:"chain_state"`
	// ChainLen is a multiple of 64 past the end of the payload.
	ChainLen int64 `json:"chain_len"`
	// SuffixFrom is where the hash resumes within the fields after the
	// payload (ChainLen minus the end of the payload).
	SuffixFrom int `json:"suffix_from"`
}

type tombstonePayload struct {
	Erased Tombstone `json:"_erased"`
}

const tombstonePrefix = `{"_erased":`

// IsErasedPayload reports whether an event payload is an erasure tombstone.
func IsErasedPayload(payload string) bool {
	_, ok := parseTombstone(payload)
	return ok
}

func parseTombstone(payload string) (Tombstone, bool) {
	if !strings.HasPrefix(payload, tombstonePrefix) {
		return Tombstone{}, false
	}
	var p tombstonePayload
	dec := json.NewDecoder(strings.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Tombstone{}, false
	}
	return p.Erased, true
}

// hashInputBytes is the exact input ComputeHash hashes for an event with
// the given payload.
func hashInputBytes(e Event, key string, payload json.RawMessage) []byte {
	return appendHashInput(nil, e, key, payload)
}

// hashSuffix is the part of an event's hash input after the payload. (A
// raw quote cannot occur inside an encoded string, so the marker is found
// only where the encoder wrote it.)
func hashSuffix(e Event, key string) []byte {
	b := hashInputBytes(e, key, json.RawMessage("null"))
	const marker = `"payload":null,"idempotency_key":`
	i := bytes.Index(b, []byte(marker))
	if i < 0 {
		panic("models: hash input without a payload field")
	}
	return b[i+len(`"payload":null`):]
}

const sha256Magic = "sha\x03" // crypto/sha256's marshalled state

// newTombstone computes the tombstone of e (whose payload is still there).
func newTombstone(e Event, erasureID string) (Tombstone, error) {
	key := ""
	if e.IdempotencyKey != nil {
		key = *e.IdempotencyKey
	}
	payload := json.RawMessage(e.Payload)
	if !json.Valid(payload) {
		return Tombstone{}, fmt.Errorf("event %d: payload is not JSON", e.Seq)
	}
	b := hashInputBytes(e, key, payload)
	end := len(b) - len(hashSuffix(e, key))
	chainLen := (end + 63) / 64 * 64
	if chainLen >= len(b) {
		return Tombstone{}, fmt.Errorf("event %d: hash input too short to erase", e.Seq)
	}
	h := sha256.New()
	h.Write(b[:chainLen])
	st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return Tombstone{}, err
	}
	if len(st) != len(sha256Magic)+32+64+8 || string(st[:4]) != sha256Magic {
		return Tombstone{}, errors.New("unexpected SHA-256 state format")
	}
	if !bytes.Equal(st[36:100], make([]byte, 64)) {
		// The buffer would hold input bytes; at a block boundary it is empty.
		return Tombstone{}, errors.New("SHA-256 state not at a block boundary")
	}
	return Tombstone{Erasure: erasureID, ChainState: hex.EncodeToString(st[4:36]), ChainLen: int64(chainLen), SuffixFrom: chainLen - end}, nil
}

// hash finishes an erased event's hash from its tombstone and the event's
// trailing fields. An unusable tombstone hashes to a value no event has.
func (t Tombstone) hash(e Event, key string) string {
	const broken = "erased-event-with-an-unusable-tombstone"
	cv, err := hex.DecodeString(t.ChainState)
	suffix := hashSuffix(e, key)
	if err != nil || len(cv) != 32 || t.ChainLen <= 0 || t.ChainLen%64 != 0 || t.SuffixFrom < 0 || t.SuffixFrom >= len(suffix) {
		return broken
	}
	st := make([]byte, 0, 108)
	st = append(st, sha256Magic...)
	st = append(st, cv...)
	st = append(st, make([]byte, 64)...)
	st = binary.BigEndian.AppendUint64(st, uint64(t.ChainLen))
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(st); err != nil {
		return broken
	}
	h.Write(suffix[t.SuffixFrom:])
	return hex.EncodeToString(h.Sum(nil))
}

func tombstoneJSON(t Tombstone) (string, error) {
	b, err := Canonical(tombstonePayload{Erased: t})
	return string(b), err
}

// Keys of a state whose string values are structure, not free text: ids,
// statuses, step and queue names, codes and times. Everything else that is
// a string becomes ErasedText; droppedStateKeys go altogether (their keys
// are free-form too).
var (
	keptStateKeys = map[string]bool{
		"session_id": true, "parent_id": true, "ticket_ref": true, "status": true, "step": true,
		"current_step": true, "queue": true, "next_step": true, "assignee": true, "id": true,
		"delegation_id": true, "by": true, "worker": true, "result_type": true, "reason_code": true,
		"policy": true, "result": true, "kind": true, "class": true, "paused_from": true,
		"paused_until": true, "due_at": true, "children": true, "conflict_keys": true,
		"completed_steps": true,
	}
	droppedStateKeys = map[string]bool{"facts": true, "fact_versions": true, "output": true}
)

// ScrubState returns st with its personal data erased: every free-text
// string replaced by ErasedText, facts and outputs dropped; ids, statuses,
// steps, queues, codes, versions and counts kept, so the session still
// reads (and accepts the events a closed session still takes).
func ScrubState(st State) (State, error) {
	b, err := EncodeState(st)
	if err != nil {
		return State{}, err
	}
	var v any
	if err := decodeJSON(b, &v); err != nil {
		return State{}, err
	}
	v = scrubValue(v, false)
	out, err := json.Marshal(v)
	if err != nil {
		return State{}, err
	}
	var scrubbed State
	if err := decodeJSON(out, &scrubbed); err != nil {
		return State{}, fmt.Errorf("scrubbed state does not decode: %w", err)
	}
	return scrubbed, nil
}

func scrubValue(v any, keep bool) any {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if droppedStateKeys[k] {
				delete(x, k)
				continue
			}
			x[k] = scrubValue(val, keptStateKeys[k])
		}
		return x
	case []any:
		for i := range x {
			x[i] = scrubValue(x[i], keep)
		}
		return x
	case string:
		if keep || x == "" {
			return x
		}
		return ErasedText
	}
	return v
}

// EraseReport is what EraseTicket did.
type EraseReport struct {
	ErasureID string `json:"erasure_id"`
	TicketRef string `json:"ticket_ref"`
	// Sessions are the ticket's sessions (and their descendants) in the
	// database.
	Sessions []string `json:"sessions"`
	// Events is how many events this run erased; AlreadyErased how many
	// were erased by an earlier run.
	Events        int64 `json:"events"`
	AlreadyErased int64 `json:"already_erased"`
	// Changed counts the sessions this run changed (0 on a repeat).
	Changed int `json:"changed"`
	// Archived are sessions of the ticket already archived to files: their
	// transcripts are outside the database and must be deleted there.
	Archived []ArchivedSession `json:"archived,omitempty"`
}

// ErrEraseRefused is returned when a session's chain does not verify: an
// erasure would hide the tampering, so it stops before changing anything
// in that session.
var ErrEraseRefused = errors.New("erasure refused")

// EraseTicket erases the personal data of every session of a ticket (and of
// their child sessions): each event's payload becomes a tombstone that keeps
// the chain verifiable, the state and the free-text columns (goal, notes,
// delegation instructions, stored idempotent responses) are scrubbed, a
// session_erasures row keeps the scrubbed state for replay, and the admin
// log records who, when and why. Ticket refs and ids stay (they are what
// finds the erasure again). It is idempotent: a second run changes nothing
// unless events were added since, which it then erases too.
func (s *Store) EraseTicket(ctx context.Context, operator User, ticket, reason string) (EraseReport, error) {
	ticket, reason = strings.TrimSpace(ticket), strings.TrimSpace(reason)
	rep := EraseReport{TicketRef: ticket, ErasureID: NewID("era")}
	var fe []FieldError
	if ticket == "" {
		fe = append(fe, FieldError{Field: "ticket", Message: "is required"})
	}
	if reason == "" {
		fe = append(fe, FieldError{Field: "reason", Message: "is required (the request it answers)"})
	}
	if len(fe) > 0 {
		return rep, &ValidationError{Fields: fe}
	}
	db := s.DB.WithContext(ctx)
	var ids []string
	if err := db.Raw(`SELECT id FROM sessions WHERE ticket_ref = ? ORDER BY id`, ticket).Scan(&ids).Error; err != nil {
		return rep, fmt.Errorf("erase: find sessions: %w", err)
	}
	// Children carry their parent's goal (parent_goal): erase them too.
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	for frontier := ids; len(frontier) > 0; {
		var kids []string
		if err := db.Raw(`SELECT id FROM sessions WHERE parent_id IN ? ORDER BY id`, frontier).Scan(&kids).Error; err != nil {
			return rep, fmt.Errorf("erase: find child sessions: %w", err)
		}
		frontier = nil
		for _, k := range kids {
			if !seen[k] {
				seen[k] = true
				ids = append(ids, k)
				frontier = append(frontier, k)
			}
		}
	}
	if err := db.Where("ticket_ref = ?", ticket).Order("session_id").Find(&rep.Archived).Error; err != nil {
		return rep, fmt.Errorf("erase: find archived sessions: %w", err)
	}
	if len(ids) == 0 && len(rep.Archived) == 0 {
		return rep, &NotFoundError{Kind: "ticket", ID: ticket}
	}
	rep.Sessions = ids
	by := operator.Actor()
	for _, id := range ids {
		erased, already, changed, err := s.eraseSession(ctx, id, ticket, reason, by, rep.ErasureID)
		if err != nil {
			return rep, err
		}
		rep.Events += erased
		rep.AlreadyErased += already
		if changed {
			rep.Changed++
		}
	}
	if rep.Changed == 0 {
		return rep, nil
	}
	if s.Dialect == SQLite {
		// Merge the full-text index's segments so the old terms are gone
		// from it, not only marked deleted.
		if err := db.Exec(`INSERT INTO sessions_fts(sessions_fts) VALUES ('optimize')`).Error; err != nil {
			return rep, fmt.Errorf("erase: rebuild the search index: %w", err)
		}
	}
	if err := s.recordAdmin(db, by, AdminErase, "ticket", ticket, nil, map[string]any{
		"erasure": rep.ErasureID, "reason": reason, "sessions": ids, "events": rep.Events,
	}); err != nil {
		return rep, err
	}
	return rep, nil
}

// eraseSession erases one session in one transaction, under its row lock.
func (s *Store) eraseSession(ctx context.Context, id, ticket, reason, by, erasureID string) (erased, already int64, changed bool, err error) {
	err = s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		erased, already, changed = 0, 0, false
		var row Session
		q := tx
		if s.Dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		if err := q.Where("id = ?", id).Take(&row).Error; err != nil {
			return fmt.Errorf("erase %s: %w", id, err)
		}
		var stateJSON string
		if err := tx.Raw(`SELECT state FROM session_states WHERE session_id = ?`, id).Scan(&stateJSON).Error; err != nil {
			return fmt.Errorf("erase %s: read state: %w", id, err)
		}
		var evs []Event
		if err := tx.Where("session_id = ?", id).Order("seq").Find(&evs).Error; err != nil {
			return fmt.Errorf("erase %s: read events: %w", id, err)
		}
		var last int64
		for _, e := range evs {
			last = e.Seq
			if got := ComputeHash(e); got != e.Hash {
				return fmt.Errorf("%w: session %s event %d does not match its hash; run `taskpilots verify` and investigate first", ErrEraseRefused, id, e.Seq)
			}
			if IsErasedPayload(e.Payload) {
				already++
				continue
			}
			t, err := newTombstone(e, erasureID)
			if err != nil {
				return fmt.Errorf("erase %s: %w", id, err)
			}
			body, err := tombstoneJSON(t)
			if err != nil {
				return err
			}
			e.Payload = body
			if ComputeHash(e) != e.Hash { // never: the tombstone is checked before it is stored
				return fmt.Errorf("erase %s: tombstone of event %d does not reproduce its hash", id, e.Seq)
			}
			if err := tx.Exec(`UPDATE events SET payload = ? WHERE id = ?`, body, e.ID).Error; err != nil {
				return fmt.Errorf("erase %s: event %d: %w", id, e.Seq, err)
			}
			erased++
		}
		if last != row.LastSeq {
			return fmt.Errorf("erase %s: the session's last seq is %d, its events end at %d; run `taskpilots verify`", id, row.LastSeq, last)
		}
		st := State{}
		if err := decodeJSON([]byte(stateJSON), &st); err != nil {
			return fmt.Errorf("erase %s: decode state: %w", id, err)
		}
		scrubbed, err := ScrubState(st)
		if err != nil {
			return fmt.Errorf("erase %s: %w", id, err)
		}
		body, err := EncodeState(scrubbed)
		if err != nil {
			return err
		}
		p := projection(scrubbed, string(body), row.LastSeq, row.LastHash, row.UpdatedAt)
		if string(body) != stateJSON || p.Goal != row.Goal || p.SearchNotes != row.SearchNotes {
			changed = true
			if err := tx.Exec(`UPDATE session_states SET state = ? WHERE session_id = ?`, string(body), id).Error; err != nil {
				return fmt.Errorf("erase %s: state: %w", id, err)
			}
			if err := tx.Exec(`UPDATE sessions SET goal = ?, search_notes = ? WHERE id = ?`, p.Goal, p.SearchNotes, id).Error; err != nil {
				return fmt.Errorf("erase %s: session row: %w", id, err)
			}
		}
		res := tx.Exec(`UPDATE delegations SET instructions = '' WHERE session_id = ? AND instructions <> ''`, id)
		if res.Error != nil {
			return fmt.Errorf("erase %s: delegations: %w", id, res.Error)
		}
		if res.RowsAffected > 0 {
			changed = true
		}
		n, err := scrubIdempotentOutcomes(tx, id)
		if err != nil {
			return fmt.Errorf("erase %s: %w", id, err)
		}
		if n > 0 {
			changed = true
		}
		if erased > 0 {
			changed = true
		}
		var prev SessionErasure
		found := tx.Where("session_id = ?", id).Limit(1).Find(&prev)
		if found.Error != nil {
			return fmt.Errorf("erase %s: read erasure: %w", id, found.Error)
		}
		if found.RowsAffected == 1 && prev.ThroughSeq == last && prev.State == string(body) && !changed {
			return nil // erased already, nothing new
		}
		changed = true
		rec := SessionErasure{SessionID: id, ErasureID: erasureID, TicketRef: ticket, ThroughSeq: last,
			State: string(body), Reason: reason, ErasedBy: by, ErasedAt: NewUTCTime(s.now())}
		return tx.Clauses(clause.OnConflict{UpdateAll: true}).Create(&rec).Error
	})
	return erased, already, changed, err
}

// scrubIdempotentOutcomes drops the response data (packets, packages) that
// stored idempotent outcomes hold for the session; a repeated request is
// then answered with the outcome's status and version only.
func scrubIdempotentOutcomes(tx *gorm.DB, id string) (int, error) {
	var rows []idempotencyRow
	if err := tx.Where("outcome LIKE ?", `%"session_id":"`+id+`"%`).Find(&rows).Error; err != nil {
		return 0, fmt.Errorf("idempotency keys: %w", err)
	}
	n := 0
	for _, r := range rows {
		var o Outcome
		if err := json.Unmarshal([]byte(r.Outcome), &o); err != nil || o.SessionID != id || len(o.Data) == 0 {
			continue
		}
		o.Data = nil
		b, err := json.Marshal(o)
		if err != nil {
			return n, err
		}
		if err := tx.Exec(`UPDATE idempotency_keys SET outcome = ? WHERE scope = ? AND key = ?`, string(b), r.Scope, r.Key).Error; err != nil {
			return n, fmt.Errorf("idempotency keys: %w", err)
		}
		n++
	}
	return n, nil
}

// sessionErasure returns the session's erasure record, or nil.
func (s *Store) sessionErasure(ctx context.Context, id string) (*SessionErasure, error) {
	var rows []SessionErasure
	if err := s.DB.WithContext(ctx).Where("session_id = ?", id).Limit(1).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("session %s: read erasure: %w", id, err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &rows[0], nil
}

// erasuresOf returns the erasure records of the given sessions by id.
func (s *Store) erasuresOf(ctx context.Context, ids []string) (map[string]*SessionErasure, error) {
	out := map[string]*SessionErasure{}
	for len(ids) > 0 {
		n := min(len(ids), 500)
		var rows []SessionErasure
		if err := s.DB.WithContext(ctx).Where("session_id IN ?", ids[:n]).Find(&rows).Error; err != nil {
			return nil, fmt.Errorf("read erasures: %w", err)
		}
		for i := range rows {
			out[rows[i].SessionID] = &rows[i]
		}
		ids = ids[n:]
	}
	return out, nil
}

// replayEvent is Apply for sessions that may have been erased: the events
// of the erased range are not applied, the erasure's state stands for them.
// It consumes st (applyOwned): callers replay from a state of their own and
// keep only the result.
func replayEvent(st State, e Event, er *SessionErasure) (State, error) {
	if er != nil && e.Seq <= er.ThroughSeq {
		if e.Seq < er.ThroughSeq {
			return st, nil
		}
		next, err := er.decodeState()
		if err != nil {
			return st, err
		}
		if next.Version != e.VersionAfter {
			return st, fmt.Errorf("erasure state has version %d, event %d ends at version %d", next.Version, e.Seq, e.VersionAfter)
		}
		return next, nil
	}
	return applyOwned(st, e)
}
