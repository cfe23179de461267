package models

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"gorm.io/gorm"
)

// Session is the projection row of a session: its latest valid state and the
// columns the console filters and sorts on.
type Session struct {
	ID           string `gorm:"primaryKey"`
	ParentID     *string
	TicketRef    string
	Goal         string
	Status       Status
	Priority     int
	StateVersion int64
	CurrentStep  string
	Queue        string
	Assignee     string
	// State is the session's latest state (canonical JSON). It is stored
	// in session_states, not in the sessions row (migration 20): readers
	// that need it join the two (sessionRowSQL); GORM never writes it.
	State       string `gorm:"->"`
	LastHash    string
	EscalatedAt NullTime
	CreatedAt   UTCTime
	UpdatedAt   UTCTime
	// ResumeAt and JoinDueAt are the timers of the maintenance pass (a
	// snoozed session's wake-up, a waiting parent's join timeout), derived
	// from the state (PausedUntil, Join.DueAt).
	ResumeAt  NullTime
	JoinDueAt NullTime
	// LastSeq is the seq of the session's newest event. It runs ahead of
	// StateVersion once audit-only events were appended (invariant 10):
	// the write path numbers the next event from it and guards its update
	// with it.
	LastSeq int64
	// SearchNotes is the text of the state's notes, one per line, for the
	// word search of ListSessions (derived from State.Notes).
	SearchNotes string
	// InputRequestedAt is when the question of a session waiting for input
	// was asked, for the inbox's "Waiting on input" view (see waitsForInput).
	InputRequestedAt NullTime
	// ReasonCode is the code of the session's escalation (State.Escalation),
	// empty when it has none, for the inbox filter.
	ReasonCode ReasonCode
	// NextStep is the state's next_step: with status open it names the step
	// the session waits for, and without a route for it the session is
	// stalled (models/routes.go).
	NextStep string
	// SLABreachedFor is the escalated_at of the escalation whose SLA breach
	// was recorded. It is written by the breach's effect, not by the
	// projection, and keeps judged escalations out of the maintenance
	// pass's index (slaPendingSQL).
	SLABreachedFor NullTime `gorm:"column:sla_breached_for"`
}

// TableName pins the table name for GORM.
func (Session) TableName() string { return "sessions" }

// Decode returns the stored state.
func (s Session) Decode() (State, error) {
	var st State
	if err := decodeJSON([]byte(s.State), &st); err != nil {
		return State{}, fmt.Errorf("session %s: decode state: %w", s.ID, err)
	}
	return st, nil
}

// Command is one state-changing request on a session. Every write of the
// product, from the API, the console, the queue, the rescuer and the demo
// seed, is a Command executed by Store.Execute.
type Command struct {
	// SessionID is the target; for EventSessionCreated it is the id to create.
	SessionID string
	Type      EventType
	Actor     string
	// ExpectedVersion, when set, must equal the current state version.
	ExpectedVersion *int64
	Payload         any
	// IdempotencyKey makes a repeat return the first outcome. Keys are scoped
	// to the actor.
	IdempotencyKey string
	// Fingerprint identifies "the same request" for IdempotencyKey; by default
	// a hash of the session, type, expected version and payload.
	Fingerprint string
	// Prepare runs in the transaction after the session is locked and before
	// the event is built. It checks fences (leases) and may return a payload
	// computed from the current state; a nil payload keeps Command.Payload.
	Prepare func(tx *Tx, cur State) (payload any, err error)
	// Effect runs in the same transaction after the event is appended: the
	// queue changes that must commit or roll back with it. Its result, if not
	// nil, becomes Outcome.Data.
	Effect func(tx *Tx, next State, ev Event) (data any, err error)
	// Then, if set, runs after Effect and may return a follow-up command on
	// the same session, executed in the same transaction on the state this
	// command produced (an answer that also delegates the next step, a
	// completed result whose next step has a route). The follow-up names no
	// expected version and takes no lock of its own: the session is locked
	// already and its version is the one just written. Its event gets the
	// next seq; the Outcome reports the state after the last command.
	Then func(tx *Tx, next State, ev Event) (*Command, error)
	// lock, if set, finds and locks the session row in place of the lookup
	// by SessionID, so that a command can read what it needs with the lock
	// in one round trip (a result reads its delegation) or take a row its
	// own statement locked already (a claim).
	lock func(tx *Tx) (Session, error)
}

// Outcome is what a command did. For an idempotent repeat it is the first
// call's outcome, with Replayed set.
type Outcome struct {
	SessionID    string          `json:"session_id"`
	Status       Status          `json:"status"`
	StateVersion int64           `json:"state_version"`
	EventID      string          `json:"event_id,omitempty"`
	Seq          int64           `json:"seq,omitempty"`
	Data         json.RawMessage `json:"data,omitempty"`
	Replayed     bool            `json:"-"`
}

// Execute runs cmd through the single write path, in one transaction: check
// the idempotency key, lock the session, check the expected version, run
// Prepare, build and hash the event, Apply it, append it, update the
// projection, run Effect, record the idempotent outcome.
func (s *Store) Execute(ctx context.Context, cmd Command) (Outcome, error) {
	if cmd.Actor == "" {
		return Outcome{}, fmt.Errorf("execute %s: command has no actor", cmd.Type)
	}
	fp := cmd.Fingerprint
	if fp == "" && cmd.IdempotencyKey != "" {
		var err error
		if fp, err = Fingerprint(cmd.SessionID, cmd.Type, cmd.ExpectedVersion, cmd.Payload); err != nil {
			return Outcome{}, fmt.Errorf("execute %s: %w", cmd.Type, err)
		}
	}
	var (
		notify    []string
		trace     execTrace
		parentID  string
		committed State
	)
	out, err := s.Idempotent(ctx, cmd.Actor, cmd.IdempotencyKey, fp, func(tx *Tx) (Outcome, error) {
		trace = execTrace{}
		out, queues, next, err := s.executeTx(tx, cmd, &trace)
		notify, parentID, committed = queues, "", next
		if err == nil && next.ParentID != "" && next.Status.Terminal() {
			parentID = next.ParentID
		}
		return out, err
	})
	if err != nil {
		if !errors.Is(err, errSkip) && !errors.Is(err, errNoWork) {
			s.rejected(ctx, cmd.Type, err, trace.queue)
		}
		return out, err
	}
	if out.Replayed {
		s.rejected(ctx, cmd.Type, errReplayed, trace.queue)
		return out, nil
	}
	for _, q := range notify {
		s.announce(q)
	}
	s.timersOf(committed, s.now())
	if s.Observer != nil {
		for _, c := range trace.events {
			s.Observer.Committed(c.ev, c.status, c.queue)
		}
	}
	if parentID != "" {
		s.onChildDone(ctx, parentID)
	}
	return out, nil
}

// fingerprintFor is Fingerprint when key is set and "" otherwise: without a
// key nothing compares fingerprints, so the hot path skips the hashing.
func fingerprintFor(key string, parts ...any) (string, error) {
	if key == "" {
		return "", nil
	}
	return Fingerprint(parts...)
}

// Fingerprint hashes the parts of a command that make it "the same request".
func Fingerprint(parts ...any) (string, error) {
	b, err := Canonical(parts)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

type idempotencyRow struct {
	Scope       string
	Key         string
	Fingerprint string
	Outcome     string
	CreatedAt   UTCTime
}

func (idempotencyRow) TableName() string { return "idempotency_keys" }

// Idempotent runs fn in a transaction and records its outcome under (scope,
// key). When the key was already used, the transaction is rolled back and
// the stored outcome returned (same fingerprint) or ErrIdempotencyMismatch:
// nothing new is written either way. When fn fails and the stored outcome
// cannot be read, that read's error is returned, never fn's. An empty key
// always runs fn.
//
// The key is not looked up first: repeats are rare, and the unique key on
// idempotency_keys catches them at the end of the transaction, which saves a
// round trip on every first call. A repeat may do the work again inside the
// transaction, but it can never commit it.
func (s *Store) Idempotent(ctx context.Context, scope, key, fingerprint string, fn func(tx *Tx) (Outcome, error)) (Outcome, error) {
	if HasNUL(key) {
		// The API refuses such a header already; a console form's hidden
		// key is checked here, before it reaches a text column.
		return Outcome{}, &ValidationError{Fields: []FieldError{{Field: "idempotency_key", Message: NULMessage}}}
	}
	var out Outcome
	err := s.Write(ctx, func(tx *Tx) error {
		var err error
		if out, err = fn(tx); err != nil {
			return err
		}
		if key == "" {
			return nil
		}
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		tx.Later(failWith("idempotency key %q", key),
			`INSERT INTO idempotency_keys (scope, key, fingerprint, outcome, created_at) VALUES (?, ?, ?, ?, ?)`,
			scope, key, fingerprint, string(b), NewUTCTime(s.now()))
		return nil
	})
	if err != nil && key != "" && ErrorCode(err) != EIDEMPOTENCY {
		// The key was used before (unique violation), or an earlier call with
		// it already moved the session on, making this one fail (stale
		// version, lost lease): answer with the first outcome.
		prev, found, lerr := lookupIdempotency(s.DB.WithContext(ctx), scope, key, fingerprint)
		switch {
		case lerr != nil:
			// Whether the key was used is unknown (the database went away
			// between the write and the lookup, as in a restart). err would
			// tell the repeat of a request that went through that it failed
			// (a fenced result: 409); the lookup's error is the true answer,
			// and when the database is unreachable it is a retryable 503.
			return Outcome{}, lerr
		case found:
			noteReplay(ctx)
			return prev, nil
		}
	}
	return out, err
}

// replayNoteKey keys the flag of NoteReplay in a context.
type replayNoteKey struct{}

// NoteReplay returns a context under which a write records in *replayed
// that it answered with the stored outcome of an earlier call with the same
// idempotency key instead of writing (the API then sets
// Idempotent-Replayed). The session commands, which return an Outcome, say
// it with Outcome.Replayed; the route and webhook commands return their own
// types and say it this way.
func NoteReplay(ctx context.Context) (_ context.Context, replayed *bool) {
	replayed = new(bool)
	return context.WithValue(ctx, replayNoteKey{}, replayed), replayed
}

// noteReplay sets the flag of NoteReplay, if ctx carries one.
func noteReplay(ctx context.Context) {
	if p, ok := ctx.Value(replayNoteKey{}).(*bool); ok {
		*p = true
	}
}

func lookupIdempotency(db *gorm.DB, scope, key, fingerprint string) (Outcome, bool, error) {
	var rows []idempotencyRow
	if err := db.Where("scope = ? AND key = ?", scope, key).Limit(1).Find(&rows).Error; err != nil {
		return Outcome{}, false, fmt.Errorf("idempotency key %q: %w", key, err)
	}
	if len(rows) == 0 {
		return Outcome{}, false, nil
	}
	if rows[0].Fingerprint != fingerprint {
		return Outcome{}, true, fmt.Errorf("idempotency key %q: %w", key, ErrIdempotencyMismatch)
	}
	var out Outcome
	if err := json.Unmarshal([]byte(rows[0].Outcome), &out); err != nil {
		return Outcome{}, true, fmt.Errorf("idempotency key %q: decode outcome: %w", key, err)
	}
	out.Replayed = true
	return out, true, nil
}

// forUpdate is the row-locking clause of the dialect: SQLite has none and
// needs none, since its single connection serialises writers.
func (s *Store) forUpdate() string {
	if s.Dialect == Postgres {
		return ` FOR UPDATE`
	}
	return ""
}

// sessionRowSQL reads whole session rows: the projection columns of
// sessions and the state from session_states (alias s for sessions). The
// state is kept apart so that the row every write rewrites stays narrow
// (migrations/postgres/00020_session_states.sql).
var sessionRowSQL = `SELECT ` + sessionColumns + `, st.state FROM sessions s JOIN session_states st ON st.session_id = s.id`

// sessionColumns are the columns of sessions (alias s) that a Session
// holds: all of them but search_doc (migration 00033), the word search's
// tsvector, which only the search's predicate reads and which would
// otherwise travel with every write's read of its session.
var sessionColumns = "s.id, s.created_at, s." + strings.Join(projectionColumns, ", s.") + ", s.sla_breached_for"

// forUpdateOfSession locks the rows of a sessionRowSQL query on
// PostgreSQL, the session's and its state's. Both, not only the session's:
// a writer that waited for the lock must read the state the previous
// writer committed, and under READ COMMITTED PostgreSQL fetches the newest
// version after the wait only of the rows it locks (a join's unlocked side
// would be the version from before the wait, one write behind its session
// row). Every writer locks the two in the same order, session first.
func (s *Store) forUpdateOfSession() string {
	if s.Dialect == Postgres {
		return ` FOR UPDATE OF s, st`
	}
	return ""
}

// lockSession reads a session's projection row, locking it on PostgreSQL.
// (SQLite serialises writers on its single connection.)
func (s *Store) lockSession(tx *Tx, id string) (Session, error) {
	rows, err := selectTx[Session](tx, sessionRowSQL+` WHERE s.id = ?`+s.forUpdateOfSession(), id)
	if err != nil {
		return Session{}, fmt.Errorf("session %s: %w", id, err)
	}
	if len(rows) == 0 {
		return Session{}, &NotFoundError{Kind: "session", ID: id}
	}
	return rows[0], nil
}

// ExecuteTx is Execute's body inside a caller's transaction, for writes that
// must share a transaction with other statements (the lease claim). It
// returns the queues to wake after commit.
func (s *Store) ExecuteTx(tx *Tx, cmd Command) (Outcome, []string, error) {
	out, wake, _, err := s.executeTx(tx, cmd, nil)
	return out, wake, err
}

// committed is one event a command wrote, the status and queue it left, for
// the Observer once the transaction commits.
type committed struct {
	ev     Event
	status Status
	queue  string
}

// execTrace is what executeTx reports besides its result: the events it
// wrote (for the Observer after commit) and the queue of the session it
// locked, which a rejection is counted under even though the transaction
// that read it rolls back.
type execTrace struct {
	events []committed
	queue  string
}

// executeTx is ExecuteTx that also reports to trace (when not nil) and
// returns the final state, for Execute's observers and chained commands.
func (s *Store) executeTx(tx *Tx, cmd Command, trace *execTrace) (Outcome, []string, State, error) {
	var (
		row     Session
		cur     State
		err     error
		creates = cmd.Type == EventSessionCreated
	)
	if creates {
		if cmd.SessionID == "" {
			cmd.SessionID = NewID("ses")
		}
	} else {
		if cmd.lock != nil {
			row, err = cmd.lock(tx)
			cmd.SessionID = row.ID
		} else {
			row, err = s.lockSession(tx, cmd.SessionID)
		}
		if err != nil {
			return Outcome{}, nil, State{}, err
		}
		if trace != nil {
			trace.queue = row.Queue
		}
		if cur, err = row.Decode(); err != nil {
			return Outcome{}, nil, State{}, err
		}
	}
	if cmd.ExpectedVersion != nil && *cmd.ExpectedVersion != cur.Version {
		return Outcome{}, nil, State{}, &ConflictError{SessionID: cmd.SessionID, ExpectedVersion: *cmd.ExpectedVersion, CurrentVersion: cur.Version}
	}
	var out Outcome
	for depth := 0; ; depth++ {
		var (
			next State
			ev   Event
			data any
		)
		next, ev, row, data, err = s.step(tx, cmd, creates, row, cur)
		if err != nil {
			return Outcome{}, nil, State{}, err
		}
		if trace != nil {
			trace.events = append(trace.events, committed{ev: ev, status: next.Status, queue: next.Queue})
		}
		prevData := out.Data
		out = Outcome{SessionID: cmd.SessionID, Status: next.Status, StateVersion: next.Version, EventID: ev.ID, Seq: ev.Seq, Data: prevData}
		if data != nil {
			if out.Data, err = json.Marshal(data); err != nil {
				return Outcome{}, nil, State{}, err
			}
		}
		var follow *Command
		if cmd.Then != nil {
			if follow, err = cmd.Then(tx, next, ev); err != nil {
				return Outcome{}, nil, State{}, err
			}
		}
		if follow == nil {
			var wake []string
			if next.Status == StatusQueued && next.Delegation != nil {
				wake = append(wake, next.Delegation.Queue)
			}
			return out, wake, next, nil
		}
		if depth >= maxChain {
			return Outcome{}, nil, State{}, fmt.Errorf("session %s: %s chains more than %d commands", cmd.SessionID, cmd.Type, maxChain)
		}
		follow.SessionID, follow.lock, follow.ExpectedVersion = cmd.SessionID, nil, nil
		cmd, cur, creates = *follow, next, false
	}
}

// maxChain bounds the follow-up commands one command may chain (Command.Then),
// so that a routing loop cannot grow one transaction without end.
const maxChain = 4

// step builds, hashes, applies and appends one event of cmd on cur (the
// session row is locked already) and runs the command's Effect. It returns
// the new state, the event, the projection as it will be after the queued
// writes (for a chained command) and the Effect's data.
func (s *Store) step(tx *Tx, cmd Command, creates bool, row Session, cur State) (State, Event, Session, any, error) {
	payload := cmd.Payload
	if cmd.Prepare != nil {
		// Prepare runs before the transition check so that a fenced writer
		// (a lost lease) hears "conflict", not "illegal"; it writes nothing.
		p, err := cmd.Prepare(tx, cur)
		if err != nil {
			return State{}, Event{}, Session{}, nil, err
		}
		if p != nil {
			payload = p
		}
	}
	if !creates && !Allowed(cur.Status, cmd.Type) {
		return State{}, Event{}, Session{}, nil, &IllegalTransitionError{SessionID: cmd.SessionID, From: cur.Status, Event: cmd.Type, CurrentVersion: cur.Version}
	}
	body, err := Canonical(payload)
	if err != nil {
		return State{}, Event{}, Session{}, nil, fmt.Errorf("session %s: encode %s payload: %w", cmd.SessionID, cmd.Type, err)
	}
	now := NewUTCTime(s.now())
	// The next seq always; the next version only for work (invariant 10).
	ev := Event{
		ID: NewID("evt"), SessionID: cmd.SessionID, Seq: row.LastSeq + 1, Type: cmd.Type, Actor: cmd.Actor,
		VersionBefore: cur.Version, VersionAfter: cur.Version + VersionStep(cmd.Type), Payload: string(body),
		PrevHash: row.LastHash, CreatedAt: now,
	}
	if tc := TraceFrom(tx.ctx); !tc.IsZero() {
		ev.Traceparent, ev.Tracestate = tc.Traceparent, tc.Tracestate
	}
	if cmd.IdempotencyKey != "" {
		k := cmd.IdempotencyKey
		ev.IdempotencyKey = &k
	}
	ev.Hash = ComputeHash(ev)
	next, err := Apply(cur, ev)
	if err != nil {
		return State{}, Event{}, Session{}, nil, err
	}
	stateJSON, err := EncodeState(next)
	if err != nil {
		return State{}, Event{}, Session{}, nil, fmt.Errorf("session %s: encode state: %w", cmd.SessionID, err)
	}
	proj := projection(next, string(stateJSON), ev.Seq, ev.Hash, now)
	if creates {
		proj.CreatedAt = now
	} else {
		proj.CreatedAt = row.CreatedAt
		if row.EscalatedAt.Valid && inHumanHands(cur.Status) && inHumanHands(next.Status) {
			// Claims, releases and notes do not restart the escalation clock.
			proj.EscalatedAt = row.EscalatedAt
		}
		if row.InputRequestedAt.Valid && waitsForInput(cur) && waitsForInput(next) {
			// Notes, scores, a pause and resume: still the same question.
			proj.InputRequestedAt = row.InputRequestedAt
		}
	}
	s.appendEvent(tx, creates, proj, row.LastSeq, ev)
	if !creates && cur.Escalation != nil && slices.Contains(DecisionEvents, cmd.Type) {
		// A human decided an escalation: it is due for review, in the
		// transaction of the decision (reads never write the queue).
		s.queueReviewItem(tx, row, cur, ev)
	}
	var data any
	if cmd.Effect != nil {
		if data, err = cmd.Effect(tx, next, ev); err != nil {
			return State{}, Event{}, Session{}, nil, err
		}
	}
	return next, ev, proj, data, nil
}

// projectionColumns are the session row's columns that every write sets
// from the state, besides id and created_at, and projectionValues their
// values in the same order: the insert and the conditional update below are
// both derived from this one list, so a new projection column is added here
// (and in projection) only.
var projectionColumns = []string{"parent_id", "ticket_ref", "goal", "status", "priority", "state_version",
	"current_step", "queue", "assignee", "last_hash", "escalated_at", "updated_at", "resume_at",
	"join_due_at", "search_notes", "input_requested_at", "reason_code", "next_step", "last_seq"}

func (p Session) projectionValues() []any {
	return []any{p.ParentID, p.TicketRef, p.Goal, p.Status, p.Priority, p.StateVersion, p.CurrentStep, p.Queue,
		p.Assignee, p.LastHash, p.EscalatedAt, p.UpdatedAt, p.ResumeAt, p.JoinDueAt, p.SearchNotes,
		p.InputRequestedAt, p.ReasonCode, p.NextStep, p.LastSeq}
}

// The update is conditional on the seq read, not the version: an audit-only
// event leaves the version alone, so only the seq tells one chain position
// from the next.
var updateSessionSet = `UPDATE sessions SET ` + strings.Join(projectionColumns, " = ?, ") + ` = ?
	WHERE id = ? AND last_seq = ?`

// feed_xid bounds the feed sequencer's scan for events to number
// (models/feed.go): the writing transaction's id on PostgreSQL, the highest
// feed_xid so far plus one on SQLite (one writer at a time: write order is
// commit order).
const insertEventCols = `(id, session_id, seq, type, actor, version_before, version_after, payload, idempotency_key, prev_hash, hash, created_at, traceparent, tracestate, feed_xid)`

// appendEvent queues the projection write (an insert, or an update
// conditional on the seq read, beforeSeq) and the event. On PostgreSQL the two are
// one statement; the event is inserted only when the update matched the
// expected seq, and otherwise the statement fails, so the condition is
// the server's (Tx.Later). On SQLite, where statements run one at a time
// before anything commits, a missed update is seen by its row count.
// Either way a lost race ends in a ConflictError when the statements are
// sent.
func (s *Store) appendEvent(tx *Tx, creates bool, p Session, beforeSeq int64, ev Event) {
	tx.appended = true
	// Another writer appended first (the row lock makes this rare); its
	// version is not known here, only that the session moved on.
	conflict := &ConflictError{SessionID: ev.SessionID, ExpectedVersion: ev.VersionBefore, CurrentVersion: ev.VersionBefore + 1}
	if creates {
		conflict = &ConflictError{SessionID: ev.SessionID, CurrentVersion: 1}
	}
	onErr := func(err error) error {
		if isUniqueViolation(err) || isNotNullViolation(err) {
			return conflict
		}
		return fmt.Errorf("session %s: append event %d: %w", ev.SessionID, ev.Seq, err)
	}
	check := func(rows int64, err error) error {
		switch {
		case err != nil:
			return onErr(err)
		case rows != 1:
			return conflict
		}
		return nil
	}
	evArgs := []any{ev.ID, ev.SessionID, ev.Seq, ev.Type, ev.Actor, ev.VersionBefore, ev.VersionAfter,
		ev.Payload, ev.IdempotencyKey, ev.PrevHash, ev.Hash, ev.CreatedAt, ev.Traceparent, ev.Tracestate}
	var args []any
	if creates {
		args = append([]any{p.ID, p.CreatedAt}, p.projectionValues()...)
	} else {
		args = append(p.projectionValues(), p.ID, beforeSeq)
	}
	if s.Dialect == Postgres {
		q := updateSessionWithEvent
		if creates {
			q = insertSessionWithEvent
		}
		args = append(args, p.State)
		tx.Later(onErr, q, append(append(args, evArgs[0]), evArgs[2:]...)...)
		return
	}
	q, sq := updateSessionSet, updateState
	if creates {
		q, sq = insertSession, insertState
	}
	tx.laterChecked(check, q, args...)
	tx.laterChecked(check, sq, p.State, p.ID)
	tx.laterChecked(check, insertEvent, evArgs...)
}

// The projection, state and event statements. On PostgreSQL the three are
// one statement: when the update misses (another writer moved the version
// on), the subqueries yield NULL, the state is left alone and the event
// insert fails on events' NOT NULL session_id, so the statement itself
// fails and nothing queued with it can commit (the COMMIT may be in the
// same batch). The state has a table of its own (session_states), whose
// updates change no indexed column and so can be heap-only.
var (
	insertSession = `INSERT INTO sessions (id, created_at, ` + strings.Join(projectionColumns, ", ") + `)
	VALUES (?, ?` + strings.Repeat(", ?", len(projectionColumns)) + `)`
	insertState            = `INSERT INTO session_states (state, session_id) VALUES (?, ?)`
	updateState            = `UPDATE session_states SET state = ? WHERE session_id = ?`
	insertEvent            = `INSERT INTO events ` + insertEventCols + ` VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT coalesce(max(feed_xid), 0) + 1 FROM events))`
	withEvent              = `INSERT INTO events ` + insertEventCols + ` VALUES (?, (SELECT id FROM w), ?::bigint, ?, ?, ?::bigint, ?::bigint, ?, ?, ?, ?, ?::timestamptz, ?, ?, pg_current_xact_id()::text::bigint)`
	insertSessionWithEvent = `WITH w AS (` + insertSession + ` RETURNING id), ws AS (INSERT INTO session_states (session_id, state) SELECT id, ?::text FROM w) ` + withEvent
	updateSessionWithEvent = `WITH w AS (` + updateSessionSet + ` RETURNING id), ws AS (UPDATE session_states SET state = ?::text WHERE session_id = (SELECT id FROM w)) ` + withEvent
)

// NotifyChannel is the PostgreSQL channel on which queue names are announced
// when work becomes available.
const NotifyChannel = "taskpilots_queue"

// projection derives the session row from a state.
func projection(st State, stateJSON string, lastSeq int64, lastHash string, now UTCTime) Session {
	p := Session{
		ID: st.SessionID, TicketRef: st.TicketRef, Goal: st.Goal, Status: st.Status,
		Priority: st.Priority, StateVersion: st.Version, LastSeq: lastSeq, CurrentStep: st.CurrentStep,
		Assignee: st.Assignee, State: stateJSON, LastHash: lastHash, UpdatedAt: now, NextStep: st.NextStep,
		SearchNotes: searchNotes(st),
	}
	if st.ParentID != "" {
		pid := st.ParentID
		p.ParentID = &pid
	}
	p.Queue = st.Queue
	if st.Status == StatusEscalated || st.Status == StatusHumanActive {
		p.EscalatedAt = NullTime{Time: now, Valid: true}
	}
	if st.Status == StatusPaused {
		p.ResumeAt = stateTime(st.PausedUntil)
	}
	if st.Status == StatusWaitingChildren && st.Join != nil {
		p.JoinDueAt = stateTime(st.Join.DueAt)
	}
	if waitsForInput(st) {
		p.InputRequestedAt = NullTime{Time: now, Valid: true}
	}
	if st.Escalation != nil {
		p.ReasonCode = st.Escalation.ReasonCode
	}
	return p
}

// waitsForInput reports whether a session waits for an answer: in
// awaiting_input, or paused from there.
func waitsForInput(st State) bool {
	return st.Status == StatusAwaitingInput || (st.Status == StatusPaused && st.PausedFrom == StatusAwaitingInput)
}

func inHumanHands(s Status) bool { return s == StatusEscalated || s == StatusHumanActive }

// DecodeData decodes Outcome.Data into v.
func (o Outcome) DecodeData(v any) error {
	if len(o.Data) == 0 {
		return fmt.Errorf("outcome of %s has no data", o.SessionID)
	}
	return decodeJSON(o.Data, v)
}
