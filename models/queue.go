package models

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"regexp"
	"strings"
	"time"
)

// DelegationStatus is where a delegation stands in the queue.
type DelegationStatus string

// The delegation statuses.
const (
	DelegationQueued    DelegationStatus = "queued"    // available from available_at
	DelegationLeased    DelegationStatus = "leased"    // held by a worker until lease_expires_at
	DelegationHeld      DelegationStatus = "held"      // session paused; not claimable
	DelegationDone      DelegationStatus = "done"      // a result ended it
	DelegationFailed    DelegationStatus = "failed"    // failed for good (bad input, permanent, exhausted)
	DelegationCancelled DelegationStatus = "cancelled" // session cancelled or escalated by a controller
)

// Bounds and defaults of a delegation (README "JSON API").
const (
	DefaultLeaseSeconds = 30
	MaxLeaseSeconds     = 3600
	DefaultMaxAttempts  = 3
	MaxMaxAttempts      = 20
	MaxWaitSeconds      = 30
	// RetryBaseDelay is the first transient retry's delay; it doubles per
	// attempt, with full jitter, up to RetryMaxDelay.
	RetryBaseDelay = 2 * time.Second
	RetryMaxDelay  = 5 * time.Minute
)

// Delegation is one queued unit of work for a step of a session.
type Delegation struct {
	ID             string `gorm:"primaryKey"`
	SessionID      string
	Queue          string
	Step           string
	Instructions   string
	Status         DelegationStatus
	Priority       int
	Attempt        int
	MaxAttempts    int
	LeaseSeconds   int
	LeaseToken     *string
	LeasedBy       string
	LeaseExpiresAt NullTime
	AvailableAt    UTCTime
	CreatedAt      UTCTime
	UpdatedAt      UTCTime
	// Traceparent and Tracestate are the W3C trace context of the request
	// that created the delegation (models/trace.go), "" for none.
	Traceparent string
	Tracestate  string
}

// TableName pins the table name for GORM.
func (Delegation) TableName() string { return "delegations" }

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// DelegateInput asks for a step of a session to be worked from a queue.
type DelegateInput struct {
	Queue           string         `json:"queue"`
	Step            string         `json:"step"`
	Instructions    string         `json:"instructions"`
	ExpectedVersion *int64         `json:"expected_version"`
	MaxAttempts     *int           `json:"max_attempts"`
	LeaseSeconds    *int           `json:"lease_seconds"`
	Facts           map[string]any `json:"facts"`
	// AvailableAt (RFC 3339) or DelaySeconds schedule the delegation for
	// later; it is not claimable before then. At most one may be given.
	AvailableAt  string `json:"available_at"`
	DelaySeconds *int   `json:"delay_seconds"`
	// PacketMaxBytes is the byte budget of the delegation's context packet
	// (MinPacketMaxBytes–MaxPacketMaxBytes; default DefaultPacketMaxBytes).
	PacketMaxBytes *int `json:"packet_max_bytes"`
}

// Validate lists every problem with the input.
func (in DelegateInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	validateDelegation(v, in.Queue, in.Step, in.Instructions, in.MaxAttempts, in.LeaseSeconds)
	if in.ExpectedVersion == nil {
		v.Add("expected_version", "is required")
	}
	validateFacts(v, "facts", in.Facts)
	validateSchedule(v, in.AvailableAt, in.DelaySeconds)
	validatePacketMaxBytes(v, "packet_max_bytes", in.PacketMaxBytes)
	return v.Err()
}

func validateDelegation(v *ValidationError, queue, step, instructions string, maxAttempts, leaseSeconds *int) {
	if queue == "" {
		v.Add("queue", "is required")
	} else if !namePattern.MatchString(queue) {
		v.Add("queue", "must be 1-64 letters, digits, '.', '_' or '-'")
	}
	if strings.TrimSpace(step) == "" {
		v.Add("step", "is required")
	} else if len(step) > 200 {
		v.Add("step", "must be at most 200 bytes")
	}
	if len(instructions) > 16000 {
		v.Add("instructions", "must be at most 16000 bytes")
	}
	CheckNUL(v, "step", step)
	CheckNUL(v, "instructions", instructions)
	if maxAttempts != nil && (*maxAttempts < 1 || *maxAttempts > MaxMaxAttempts) {
		v.Add("max_attempts", "must be between 1 and %d", MaxMaxAttempts)
	}
	if leaseSeconds != nil && (*leaseSeconds < 1 || *leaseSeconds > MaxLeaseSeconds) {
		v.Add("lease_seconds", "must be between 1 and %d", MaxLeaseSeconds)
	}
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// Delegate queues a step of a session. The delegation row is written in the
// same transaction as the delegation.created event.
func (s *Store) Delegate(ctx context.Context, sessionID, actor, idemKey string, in DelegateInput) (Outcome, error) {
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	fp, err := fingerprintFor(idemKey, "delegate", sessionID, in)
	if err != nil {
		return Outcome{}, err
	}
	cmd, err := s.delegateCommand(sessionID, actor, in)
	if err != nil {
		return Outcome{}, err
	}
	cmd.ExpectedVersion, cmd.IdempotencyKey, cmd.Fingerprint = in.ExpectedVersion, idemKey, fp
	return s.Execute(ctx, cmd)
}

// delegateCommand is the delegation.created command of a validated
// DelegateInput, with the Effect that inserts the delegation row. Delegate
// executes it; an answer to a request for input chains it (Command.Then), so
// both queue a step exactly the same way.
func (s *Store) delegateCommand(sessionID, actor string, in DelegateInput) (Command, error) {
	at, err := s.scheduledAt(in.AvailableAt, in.DelaySeconds)
	if err != nil {
		return Command{}, err
	}
	p := DelegationPayload{
		DelegationID: NewID("dlg"), Queue: in.Queue, Step: strings.TrimSpace(in.Step), Instructions: in.Instructions,
		MaxAttempts: intOr(in.MaxAttempts, DefaultMaxAttempts), LeaseSeconds: intOr(in.LeaseSeconds, DefaultLeaseSeconds),
		Facts: in.Facts, AvailableAt: formatScheduled(at), PacketMaxBytes: intOr(in.PacketMaxBytes, 0),
	}
	return Command{
		SessionID: sessionID, Type: EventDelegationCreated, Actor: actor,
		Payload: p, Effect: s.insertDelegation(p, at),
	}, nil
}

// DelegationCreated is Outcome.Data of a command that queued a delegation.
type DelegationCreated struct {
	DelegationID string `json:"delegation_id"`
}

func (s *Store) insertDelegation(p DelegationPayload, availableAt time.Time) func(tx *Tx, next State, ev Event) (any, error) {
	return func(tx *Tx, next State, ev Event) (any, error) {
		// No other delegation of the session can be open here: delegations are
		// created only from statuses in which the state holds none (open,
		// awaiting_input, human_active), and every path that leaves running
		// or queued ends its delegation row in the same transaction.
		now := ev.CreatedAt
		avail := now
		if !availableAt.IsZero() {
			avail = NewUTCTime(availableAt)
		}
		d := Delegation{
			ID: p.DelegationID, SessionID: next.SessionID, Queue: p.Queue, Step: p.Step,
			Instructions: p.Instructions, Status: DelegationQueued, Priority: next.Priority, Attempt: 1,
			MaxAttempts: p.MaxAttempts, LeaseSeconds: p.LeaseSeconds, AvailableAt: avail,
			CreatedAt: now, UpdatedAt: now, Traceparent: ev.Traceparent, Tracestate: ev.Tracestate,
		}
		tx.Later(failWith("delegation %s: insert", d.ID),
			`INSERT INTO delegations (id, session_id, queue, step, instructions, status, priority, attempt, max_attempts,
				lease_seconds, lease_token, leased_by, lease_expires_at, available_at, created_at, updated_at, traceparent, tracestate)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			d.ID, d.SessionID, d.Queue, d.Step, d.Instructions, d.Status, d.Priority, d.Attempt, d.MaxAttempts,
			d.LeaseSeconds, d.LeaseToken, d.LeasedBy, d.LeaseExpiresAt, d.AvailableAt, d.CreatedAt, d.UpdatedAt,
			d.Traceparent, d.Tracestate)
		return DelegationCreated{DelegationID: d.ID}, nil
	}
}

// endDelegation ends whatever delegation of the session is still open (the
// lease, if any, is fenced off with it).
func (s *Store) endDelegation(status DelegationStatus) func(tx *Tx, next State, ev Event) (any, error) {
	return func(tx *Tx, next State, ev Event) (any, error) {
		tx.Later(failWith("session %s: end delegations", next.SessionID),
			`UPDATE delegations SET status = ?, lease_token = NULL, lease_expires_at = NULL, updated_at = ?
			WHERE session_id = ? AND status IN ('queued', 'leased', 'held')`, status, ev.CreatedAt, next.SessionID)
		return nil, nil
	}
}

// holdDelegation takes a paused session's delegation out of the queue and
// revokes its lease.
func (s *Store) holdDelegation(tx *Tx, next State, ev Event) (any, error) {
	tx.Later(failWith("session %s: hold delegation", next.SessionID),
		`UPDATE delegations SET status = 'held', lease_token = NULL, lease_expires_at = NULL, leased_by = '', updated_at = ?
		WHERE session_id = ? AND status IN ('queued', 'leased')`, ev.CreatedAt, next.SessionID)
	return nil, nil
}

// releaseHeldDelegation puts a resumed session's delegation back in the queue.
func (s *Store) releaseHeldDelegation(tx *Tx, next State, ev Event) (any, error) {
	// A delegation scheduled for later keeps its time.
	tx.Later(failWith("session %s: release delegation", next.SessionID),
		`UPDATE delegations SET status = 'queued', updated_at = ?,
		available_at = CASE WHEN available_at > ? THEN available_at ELSE ? END
		WHERE session_id = ? AND status = 'held'`, ev.CreatedAt, ev.CreatedAt, ev.CreatedAt, next.SessionID)
	return nil, nil
}

// Lease is a worker's claim on a delegation, with its context packet.
type Lease struct {
	DelegationID   string    `json:"delegation_id"`
	SessionID      string    `json:"session_id"`
	Step           string    `json:"step"`
	Attempt        int       `json:"attempt"`
	LeaseToken     string    `json:"lease_token"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	Packet         Packet    `json:"packet"`
	// Traceparent and Tracestate are the trace context of the request that
	// created the delegation, for the worker to continue ("" for none).
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// LeaseInput is a worker asking for work.
type LeaseInput struct {
	Worker      string `json:"worker"`
	WaitSeconds *int   `json:"wait_seconds"`
	// Max, when set, asks for up to Max leases (1 to MaxLeaseBatch) in one
	// claim; the answer is then a list (ClaimBatch).
	Max *int `json:"max"`
}

// MaxLeaseBatch bounds LeaseInput.Max: a batch holds one lock per session
// until it commits, and every packet is in the one response.
const MaxLeaseBatch = 100

// Validate lists every problem with the input.
func (in LeaseInput) Validate(queue string) error {
	v := &ValidationError{}
	if !namePattern.MatchString(queue) {
		v.Add("queue", "must be 1-64 letters, digits, '.', '_' or '-'")
	}
	if strings.TrimSpace(in.Worker) == "" {
		v.Add("worker", "is required")
	} else if len(in.Worker) > 200 {
		v.Add("worker", "must be at most 200 bytes")
	}
	if in.WaitSeconds != nil && (*in.WaitSeconds < 0 || *in.WaitSeconds > MaxWaitSeconds) {
		v.Add("wait_seconds", "must be between 0 and %d", MaxWaitSeconds)
	}
	if in.Max != nil && (*in.Max < 1 || *in.Max > MaxLeaseBatch) {
		v.Add("max", "must be between 1 and %d", MaxLeaseBatch)
	}
	return v.Err()
}

// errNoWork rolls back an empty claim so that it leaves no idempotency record.
var errNoWork = errors.New("no work available")

func newLeaseToken() string {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "lt_" + base64.RawURLEncoding.EncodeToString(b)
}

// claimedRow is the claim statement's row. Its columns are prefixed, as
// the PostgreSQL statement also returns the session's columns.
type claimedRow struct {
	ID             string  `gorm:"column:claimed_id" db:"claimed_id"`
	SessionID      string  `gorm:"column:claimed_session_id" db:"claimed_session_id"`
	Step           string  `gorm:"column:claimed_step" db:"claimed_step"`
	Attempt        int     `gorm:"column:claimed_attempt" db:"claimed_attempt"`
	Instructions   string  `gorm:"column:claimed_instructions" db:"claimed_instructions"`
	LeaseExpiresAt UTCTime `gorm:"column:claimed_lease_expires_at" db:"claimed_lease_expires_at"`
	// LeaseToken is the claimed delegation's own token (batch claims only).
	LeaseToken string `gorm:"column:claimed_lease_token" db:"claimed_lease_token"`
	// Traceparent and Tracestate are the W3C trace context of the request
	// that created the delegation, handed to the worker with the lease.
	Traceparent string `gorm:"column:claimed_traceparent" db:"claimed_traceparent"`
	Tracestate  string `gorm:"column:claimed_tracestate" db:"claimed_tracestate"`
	// RN is the delegation's place in a batch claim (1, 2, ...).
	RN int64 `gorm:"column:claimed_rn" db:"claimed_rn"`
	// Session is the claimed delegation's session row, which on PostgreSQL
	// the claim statement locks and returns too.
	Session
}

// pgFlowSQL is the flow-control part of the PostgreSQL claim statements
// (models/flow.go says why it is race-free): f locks the queue's
// queue_flow row, when the queue has a limit, and computes the free slots
// and the bucket's tokens now; pgFlowLimitSQL is how many of the picked
// delegations may be leased (the wanted number, or fewer); pgFlowUpdateSQL
// writes the row back when the claim granted anything. A queue without a
// row may lease all it wanted, as before. Arguments: now, now, queue.
//
// The cap is applied where the picked rows are updated, not as the pick's
// LIMIT: a LIMIT the planner cannot know is estimated as a tenth of the
// queue, which turns the update's join into a scan of delegations
// (TestClaimPlansWithFlow). The pick keeps its constant LIMIT and the
// index read; rows picked beyond the cap stay locked, unchanged, until
// the claim's transaction ends (on a limited queue the next claim waits
// for the queue's row anyway). The cap is evaluated before the first
// update (a one-time filter, or the first row's check), so the in-flight
// count never sees this statement's own leases.
const pgFlowSQL = `f AS MATERIALIZED (
	SELECT queue,
	    CASE WHEN max_in_flight IS NOT NULL
	        THEN max_in_flight - taskpilots_queue_in_flight(queue, ?::timestamptz) END AS slots,
	    CASE WHEN max_leases_per_second IS NOT NULL
	        THEN least(burst, tokens + max_leases_per_second *
	            greatest(0, extract(epoch FROM (?::timestamptz - tokens_at))::float8)) END AS tokens_now
	FROM queue_flow
	WHERE queue = ? AND (max_in_flight IS NOT NULL OR max_leases_per_second IS NOT NULL)
	FOR UPDATE
)`

// pgFlowLimitSQL is the number of leases the claim may grant; argument:
// the wanted number (four times).
const pgFlowLimitSQL = `(SELECT coalesce(min(greatest(0, least(coalesce(f.slots, ?::int),
	coalesce(floor(f.tokens_now)::int, ?::int), ?::int))), ?::int) FROM f)`

// pgFlowUpdateSQL writes the queue's row back after a grant; argument: now.
const pgFlowUpdateSQL = `fu AS (
	UPDATE queue_flow AS q
	SET tokens = coalesce(f.tokens_now - (SELECT count(*) FROM c), q.tokens),
	    tokens_at = greatest(q.tokens_at, ?::timestamptz),
	    leases_granted = q.leases_granted + (SELECT count(*) FROM c)
	FROM f WHERE q.queue = f.queue AND EXISTS (SELECT 1 FROM c)
)`

// pgClaimArgs are the arguments of claimSQL (batch false: token is the
// lease token) or claimBatchSQL (batch: token is the array of tokens) on
// PostgreSQL, in the order the statements take them.
func pgClaimArgs(batch bool, queue, token, worker string, now UTCTime, want int) []any {
	args := []any{now, now, queue, queue, now} // f, then the pick
	if batch {
		args = append(args, want) // the pick's LIMIT
	}
	return append(args, token, worker, now, now, want, want, want, want, now) // c's SET, the cap, fu
}

// claimSQL claims the next available delegation of a queue in one
// statement; on PostgreSQL the same statement locks the session row too, so
// a claim costs one round trip before its writes. The queue's flow limits
// (models/flow.go) are checked in the same statement.
func (s *Store) claimSQL() string {
	if s.Dialect == Postgres {
		return `WITH ` + pgFlowSQL + `, next AS (
	SELECT id FROM delegations
	WHERE queue = ? AND status = 'queued' AND available_at <= ?::timestamptz
	ORDER BY priority, available_at, id
	LIMIT 1
	FOR UPDATE SKIP LOCKED
), c AS (
	UPDATE delegations AS d
	SET status = 'leased', lease_token = ?, leased_by = ?, updated_at = ?::timestamptz,
	    lease_expires_at = ?::timestamptz + make_interval(secs => d.lease_seconds)
	FROM next WHERE d.id = next.id AND ` + pgFlowLimitSQL + ` >= 1
	RETURNING d.id AS claimed_id, d.session_id AS claimed_session_id, d.step AS claimed_step,
	    d.attempt AS claimed_attempt, d.instructions AS claimed_instructions,
	    d.lease_expires_at AS claimed_lease_expires_at,
	    d.traceparent AS claimed_traceparent, d.tracestate AS claimed_tracestate
), ` + pgFlowUpdateSQL + `
SELECT c.*, ` + sessionColumns + `, st.state FROM c JOIN sessions s ON s.id = c.claimed_session_id
JOIN session_states st ON st.session_id = s.id FOR UPDATE OF s, st`
	}
	// SQLite: the LIMIT is 0 when the queue's flow limits allow no lease
	// now (1 without a queue_flow row); the trigger delegations_lease_flow
	// takes the token. The subquery runs under the write lock the UPDATE
	// holds, so it sees every lease committed before.
	return `UPDATE delegations
SET status = 'leased', lease_token = ?, leased_by = ?, updated_at = ?,
    lease_expires_at = strftime('%Y-%m-%dT%H:%M:%f', ?, '+' || lease_seconds || ' seconds') || '000Z'
WHERE id IN (
	SELECT id FROM delegations
	WHERE queue = ? AND status = 'queued' AND available_at <= ?
	ORDER BY priority, available_at, id
	LIMIT coalesce((SELECT max(0, min(
		coalesce(f.max_in_flight - (SELECT count(*) FROM delegations l
			WHERE l.queue = f.queue AND l.status = 'leased' AND l.lease_expires_at > ?), 1),
		coalesce(CAST(min(f.burst, f.tokens + f.max_leases_per_second *
			max(0, (julianday(?) - julianday(f.tokens_at)) * 86400.0)) AS INTEGER), 1),
		1)) FROM queue_flow f WHERE f.queue = ?), 1)
)
RETURNING id AS claimed_id, session_id AS claimed_session_id, step AS claimed_step, attempt AS claimed_attempt,
	instructions AS claimed_instructions, lease_expires_at AS claimed_lease_expires_at,
	traceparent AS claimed_traceparent, tracestate AS claimed_tracestate`
}

// claimArgs are claimSQL's arguments.
func (s *Store) claimArgs(queue, token, worker string, now UTCTime) []any {
	if s.Dialect == Postgres {
		return pgClaimArgs(false, queue, token, worker, now, 1)
	}
	return []any{token, worker, now, now.String(), queue, now, now, now.String(), queue}
}

// Claim leases the next available delegation of queue to worker, or returns
// (nil, nil) when there is none right now. The claim and the
// delegation.leased event commit together.
func (s *Store) Claim(ctx context.Context, queue, worker, actor, idemKey string) (*Lease, error) {
	fp, err := fingerprintFor(idemKey, "lease", queue, worker)
	if err != nil {
		return nil, err
	}
	var (
		leased Event // for the Observer
		lease  Lease
	)
	out, err := s.Idempotent(ctx, actor, idemKey, fp, func(tx *Tx) (Outcome, error) {
		now := NewUTCTime(s.now())
		token := newLeaseToken()
		c, lock, err := s.claimNext(tx, s.claimArgs(queue, token, worker, now))
		if err != nil {
			return Outcome{}, fmt.Errorf("claim from queue %s: %w", queue, err)
		}
		if c == nil {
			return Outcome{}, errNoWork
		}
		out, _, err := s.ExecuteTx(tx, Command{
			SessionID: c.SessionID, Type: EventDelegationLeased, Actor: actor, lock: lock,
			Payload: LeasePayload{DelegationID: c.ID, Attempt: c.Attempt, Worker: worker},
			Effect: func(tx *Tx, next State, ev Event) (any, error) {
				leased = ev
				lease = Lease{
					DelegationID: c.ID, SessionID: c.SessionID, Step: c.Step, Attempt: c.Attempt,
					LeaseToken: token, LeaseExpiresAt: c.LeaseExpiresAt.Time,
					Packet:      BuildPacket(next, c.Instructions),
					Traceparent: c.Traceparent, Tracestate: c.Tracestate,
				}
				return lease, nil
			},
		})
		return out, err
	})
	if errors.Is(err, errNoWork) {
		return nil, nil
	}
	switch {
	case err != nil:
		s.rejected(ctx, EventDelegationLeased, err, queue)
	case out.Replayed:
		s.rejected(ctx, EventDelegationLeased, errReplayed, queue)
	case s.Observer != nil:
		s.Observer.Committed(leased, out.Status, queue)
	}
	if err != nil {
		return nil, err
	}
	if !out.Replayed {
		s.timerSet(lease.LeaseExpiresAt)
		return &lease, nil
	}
	var l Lease
	if err := decodeJSON(out.Data, &l); err != nil {
		return nil, fmt.Errorf("claim from queue %s: decode lease: %w", queue, err)
	}
	return &l, nil
}

// claimNext runs the claim statement. It returns the claimed delegation, or
// nil when the queue has nothing available, and on PostgreSQL the session
// row the statement locked, as the command's lock.
func (s *Store) claimNext(tx *Tx, args []any) (*claimedRow, func(*Tx) (Session, error), error) {
	rows, err := selectTx[claimedRow](tx, s.claimSQL(), args...)
	if err != nil || len(rows) == 0 {
		return nil, nil, err
	}
	c := &rows[0]
	if s.Dialect != Postgres {
		return c, nil, nil
	}
	return c, func(*Tx) (Session, error) { return c.Session, nil }, nil
}

// claimBatchSQL claims up to n delegations of a queue in one statement on
// PostgreSQL: the same SKIP LOCKED pick as claimSQL with LIMIT n, each
// delegation given its own lease token from an array (numbered in claim
// order), and every claimed delegation's session locked and returned, in
// claim order.
var claimBatchSQL = `WITH ` + pgFlowSQL + `, next AS (
	SELECT id, priority, available_at FROM delegations
	WHERE queue = ? AND status = 'queued' AND available_at <= ?::timestamptz
	ORDER BY priority, available_at, id
	LIMIT ?
	FOR UPDATE SKIP LOCKED
), numbered AS (
	SELECT id, row_number() OVER (ORDER BY priority, available_at, id) AS rn FROM next
), c AS (
	UPDATE delegations AS d
	SET status = 'leased', lease_token = (?::text[])[numbered.rn], leased_by = ?, updated_at = ?::timestamptz,
	    lease_expires_at = ?::timestamptz + make_interval(secs => d.lease_seconds)
	FROM numbered WHERE d.id = numbered.id AND numbered.rn <= ` + pgFlowLimitSQL + `
	RETURNING numbered.rn AS claimed_rn, d.id AS claimed_id, d.session_id AS claimed_session_id, d.step AS claimed_step,
	    d.attempt AS claimed_attempt, d.instructions AS claimed_instructions,
	    d.lease_expires_at AS claimed_lease_expires_at, d.lease_token AS claimed_lease_token,
	    d.traceparent AS claimed_traceparent, d.tracestate AS claimed_tracestate
), ` + pgFlowUpdateSQL + `
SELECT c.*, ` + sessionColumns + `, st.state FROM c JOIN sessions s ON s.id = c.claimed_session_id
JOIN session_states st ON st.session_id = s.id ORDER BY c.claimed_rn FOR UPDATE OF s, st`

// ClaimBatch leases up to max (1 to MaxLeaseBatch) available delegations
// of queue to worker in one transaction, or returns none when there is no
// work right now. On PostgreSQL one statement picks, leases and locks them
// all (claimBatchSQL); on SQLite, whose single writer makes the claims
// serial anyway, the one-delegation claim runs up to max times in the
// transaction. Every lease is a lease of its own, exactly as Claim makes
// it: its own token, its own delegation.leased event in its session's
// chain, its own expiry. Two batches never share a delegation (SKIP LOCKED
// on PostgreSQL, the single writer on SQLite), and a session has at most
// one open delegation, so never a session either.
func (s *Store) ClaimBatch(ctx context.Context, queue, worker, actor, idemKey string, max int) ([]Lease, error) {
	if max < 1 || max > MaxLeaseBatch {
		return nil, &ValidationError{Fields: []FieldError{{Field: "max", Message: fmt.Sprintf("must be between 1 and %d", MaxLeaseBatch)}}}
	}
	fp, err := fingerprintFor(idemKey, "lease", queue, worker, max)
	if err != nil {
		return nil, err
	}
	var (
		leased []committed // for the Observer
		leases []Lease
	)
	out, err := s.Idempotent(ctx, actor, idemKey, fp, func(tx *Tx) (Outcome, error) {
		leased, leases = nil, nil
		now := NewUTCTime(s.now())
		var claimed []*claimedRow
		if s.Dialect == Postgres {
			tokens := make([]string, max)
			for i := range tokens {
				tokens[i] = newLeaseToken()
			}
			// An array literal, as one text argument (a Go slice would be
			// expanded into a list); tokens are base64url, nothing to quote.
			arr := "{" + strings.Join(tokens, ",") + "}"
			args := pgClaimArgs(true, queue, arr, worker, now, max)
			rows, err := selectTx[claimedRow](tx, claimBatchSQL, args...)
			if err != nil {
				return Outcome{}, fmt.Errorf("claim from queue %s: %w", queue, err)
			}
			for i := range rows {
				claimed = append(claimed, &rows[i])
			}
		} else {
			for range max {
				token := newLeaseToken()
				c, _, err := s.claimNext(tx, s.claimArgs(queue, token, worker, now))
				if err != nil {
					return Outcome{}, fmt.Errorf("claim from queue %s: %w", queue, err)
				}
				if c == nil {
					break
				}
				c.LeaseToken = token
				claimed = append(claimed, c)
			}
		}
		if len(claimed) == 0 {
			return Outcome{}, errNoWork
		}
		var last Outcome
		for _, c := range claimed {
			var lock func(*Tx) (Session, error)
			if s.Dialect == Postgres {
				lock = func(*Tx) (Session, error) { return c.Session, nil }
			}
			o, _, err := s.ExecuteTx(tx, Command{
				SessionID: c.SessionID, Type: EventDelegationLeased, Actor: actor, lock: lock,
				Payload: LeasePayload{DelegationID: c.ID, Attempt: c.Attempt, Worker: worker},
				Effect: func(tx *Tx, next State, ev Event) (any, error) {
					leased = append(leased, committed{ev: ev, status: next.Status})
					l := Lease{
						DelegationID: c.ID, SessionID: c.SessionID, Step: c.Step, Attempt: c.Attempt,
						LeaseToken: c.LeaseToken, LeaseExpiresAt: c.LeaseExpiresAt.Time,
						Packet:      BuildPacket(next, c.Instructions),
						Traceparent: c.Traceparent, Tracestate: c.Tracestate,
					}
					leases = append(leases, l)
					return nil, nil
				},
			})
			if err != nil {
				return Outcome{}, err
			}
			last = o
		}
		// The idempotent outcome is the list; SessionID and the version
		// are the last lease's, which nothing reads for a batch.
		b, err := json.Marshal(leases)
		if err != nil {
			return Outcome{}, err
		}
		last.Data = b
		return last, nil
	})
	if errors.Is(err, errNoWork) {
		return nil, nil
	}
	switch {
	case err != nil:
		s.rejected(ctx, EventDelegationLeased, err, queue)
	case out.Replayed:
		s.rejected(ctx, EventDelegationLeased, errReplayed, queue)
	case s.Observer != nil:
		for _, c := range leased {
			s.Observer.Committed(c.ev, c.status, queue)
		}
	}
	if err != nil {
		return nil, err
	}
	if !out.Replayed {
		for _, l := range leases {
			s.timerSet(l.LeaseExpiresAt)
		}
		return leases, nil
	}
	var ls []Lease
	if err := decodeJSON(out.Data, &ls); err != nil {
		return nil, fmt.Errorf("claim from queue %s: decode leases: %w", queue, err)
	}
	return ls, nil
}

// ClaimBatchWait is ClaimBatch as a long poll, as ClaimWait is Claim's: it
// answers as soon as at least one lease is granted.
func (s *Store) ClaimBatchWait(ctx context.Context, queue, worker, actor, idemKey string, max int, wait time.Duration) ([]Lease, error) {
	var leases []Lease
	_, err := s.claimWait(ctx, queue, worker, wait, func() (bool, error) {
		var err error
		leases, err = s.ClaimBatch(ctx, queue, worker, actor, idemKey, max)
		return len(leases) > 0, err
	})
	return leases, err
}

// DefaultLeaseRecheck is how often a waiting lease long poll looks at its
// queue again without being woken: for retries whose backoff ends and leases
// the rescuer frees, which announce nothing. New work wakes polls at once.
const DefaultLeaseRecheck = time.Second

// ClaimWait is Claim as a long poll: it waits up to wait for work, waking as
// soon as work is announced on the queue (and re-checking every
// s.LeaseRecheck, for retries whose backoff ends and leases the rescuer
// frees).
func (s *Store) ClaimWait(ctx context.Context, queue, worker, actor, idemKey string, wait time.Duration) (*Lease, error) {
	var lease *Lease
	_, err := s.claimWait(ctx, queue, worker, wait, func() (bool, error) {
		var err error
		lease, err = s.Claim(ctx, queue, worker, actor, idemKey)
		return lease != nil, err
	})
	return lease, err
}

// claimWait runs claim until it grants something, fails, or wait is over.
func (s *Store) claimWait(ctx context.Context, queue, worker string, wait time.Duration, claim func() (bool, error)) (bool, error) {
	deadline := time.Now().Add(wait)
	recheck := s.LeaseRecheck
	if recheck <= 0 {
		recheck = DefaultLeaseRecheck
	}
	// Subscribed before the first look, so that work queued between a look
	// and the wait still wakes this poll (the channel keeps one signal).
	ch, unsubscribe := s.Wake.Subscribe(queue)
	defer unsubscribe()
	for first := true; ; first = false {
		got, err := claim()
		if err != nil || got {
			return got, err
		}
		if first && wait > 0 {
			// A queue with flow limits frees up without any announcement
			// (a token refills, a lease ends): look again sooner.
			if d := s.flowRecheck(ctx, queue); d > 0 && d < recheck {
				recheck = d
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		t := time.NewTimer(min(left, recheck))
		unpark := s.Wake.park(queue)
		// The multi-process wake-up test reads these two lines: the first
		// before it queues work through another process, the second to
		// tell a wake-up from the last look at the deadline.
		s.Logger.Debug("lease poll waiting", "queue", queue, "worker", worker)
		woken := false
		select {
		case <-ctx.Done():
			t.Stop()
			unpark(false)
			return false, ctx.Err()
		case <-ch:
			t.Stop()
			woken = true
			s.Logger.Debug("lease poll woken", "queue", queue, "worker", worker)
		case <-t.C:
		}
		unpark(woken)
	}
}

// lockDelegation reads a delegation row, locking it on PostgreSQL.
func (s *Store) lockDelegation(tx *Tx, id string) (Delegation, error) {
	rows, err := selectTx[Delegation](tx, `SELECT * FROM delegations WHERE id = ?`+s.forUpdate(), id)
	if err != nil {
		return Delegation{}, fmt.Errorf("delegation %s: %w", id, err)
	}
	if len(rows) == 0 {
		return Delegation{}, &NotFoundError{Kind: "delegation", ID: id}
	}
	return rows[0], nil
}

// GetDelegation returns a delegation row.
func (s *Store) GetDelegation(ctx context.Context, id string) (Delegation, error) {
	var rows []Delegation
	if err := s.DB.WithContext(ctx).Where("id = ?", id).Limit(1).Find(&rows).Error; err != nil {
		return Delegation{}, fmt.Errorf("delegation %s: %w", id, err)
	}
	if len(rows) == 0 {
		return Delegation{}, &NotFoundError{Kind: "delegation", ID: id}
	}
	return rows[0], nil
}

// leaseProblem says why token does not hold d's lease at now, or "".
func leaseProblem(d Delegation, token string, now time.Time) string {
	switch {
	case d.LeaseToken == nil || *d.LeaseToken != token:
		return "superseded"
	case d.Status != DelegationLeased:
		return "not_leased"
	case !d.LeaseExpiresAt.Valid || !d.LeaseExpiresAt.Time.After(now):
		return "expired"
	}
	return ""
}

// Heartbeat extends a held lease by its lease_seconds and returns the new
// expiry. Heartbeats are not events: they change no session state.
func (s *Store) Heartbeat(ctx context.Context, delegationID, token string) (time.Time, error) {
	if token == "" {
		return time.Time{}, &ValidationError{Fields: []FieldError{{Field: "lease_token", Message: "is required"}}}
	}
	var expires time.Time
	err := s.Write(ctx, func(tx *Tx) error {
		d, err := s.lockDelegation(tx, delegationID)
		if err != nil {
			return err
		}
		now := s.now()
		if why := leaseProblem(d, token, now); why != "" {
			return s.leaseError(tx, d, why)
		}
		expires = now.Add(time.Duration(d.LeaseSeconds) * time.Second)
		tx.Later(failWith("delegation %s: heartbeat", d.ID),
			`UPDATE delegations SET lease_expires_at = ?, updated_at = ? WHERE id = ?`, NewUTCTime(expires), NewUTCTime(now), d.ID)
		return nil
	})
	return expires, err
}

func (s *Store) leaseError(tx *Tx, d Delegation, why string) error {
	le := &LeaseError{DelegationID: d.ID, SessionID: d.SessionID, Reason: why}
	if v, err := selectTx[int64](tx, `SELECT state_version FROM sessions WHERE id = ?`, d.SessionID); err == nil && len(v) == 1 {
		le.CurrentVersion = v[0]
	}
	return le
}

// Result types of the return contract.
const (
	ResultCompleted  = "completed"
	ResultNeedsInput = "needs_input"
	ResultRejected   = "rejected"
	ResultEscalated  = "escalated"
	ResultFailed     = "failed"
)

var resultEvents = map[string]EventType{
	ResultCompleted: EventResultCompleted, ResultNeedsInput: EventResultNeedsInput,
	ResultRejected: EventResultRejected, ResultEscalated: EventResultEscalated, ResultFailed: EventResultFailed,
}

// backoff returns the delay before retry number attempt (1-based) with full
// jitter: uniformly random up to the capped exponential delay.
func backoff(attempt int, r *mathrand.Rand) time.Duration {
	d := RetryBaseDelay << max(0, attempt-1)
	if d <= 0 || d > RetryMaxDelay {
		d = RetryMaxDelay
	}
	return d/2 + time.Duration(r.Int64N(int64(d/2)+1))
}

// SubmitResult applies a worker's return contract. The contract is checked
// first (a 422 leaves the lease usable); then, under the session lock, the
// lease is checked (409 when expired or superseded) and the event, the
// delegation change and any retry commit together.
func (s *Store) SubmitResult(ctx context.Context, delegationID, actor, idemKey string, in ResultInput) (Outcome, error) {
	if err := in.Validate(); err != nil {
		return Outcome{}, s.contractError(ctx, delegationID, in, err)
	}
	fp, err := fingerprintFor(idemKey, "result", delegationID, in)
	if err != nil {
		return Outcome{}, err
	}
	var (
		d       Delegation
		retryAt time.Time
		// route is the route of a completed result's next_step, read in the
		// lock's batch: routing adds a statement but no round trip.
		route []Route
	)
	next := ""
	if in.ResultType == ResultCompleted {
		next = routeStep(in.NextStep)
	}
	return s.Execute(ctx, Command{
		SessionID: in.SessionID, Type: resultEvents[in.ResultType], Actor: actor,
		IdempotencyKey: idemKey, Fingerprint: fp,
		// The session (found through the delegation) and the delegation are
		// read and locked in one round trip, in the order every write locks
		// them: session first.
		lock: func(tx *Tx) (Session, error) {
			var sessions []Session
			var dels []Delegation
			selectLater(tx, &sessions, sessionRowSQL+` WHERE s.id = (SELECT session_id FROM delegations WHERE id = ?)`+s.forUpdateOfSession(), delegationID)
			selectLater(tx, &dels, `SELECT * FROM delegations WHERE id = ?`+s.forUpdate(), delegationID)
			route = nil
			if next != "" {
				selectLater(tx, &route, `SELECT * FROM routes WHERE step = ?`, next)
			}
			if err := tx.flush(); err != nil {
				return Session{}, fmt.Errorf("delegation %s: %w", delegationID, err)
			}
			if len(dels) == 0 {
				return Session{}, &NotFoundError{Kind: "delegation", ID: delegationID}
			}
			d = dels[0]
			if err := matchDelegation(d, in, &ValidationError{}); err != nil {
				return Session{}, err
			}
			if len(sessions) == 0 {
				return Session{}, &NotFoundError{Kind: "session", ID: d.SessionID}
			}
			return sessions[0], nil
		},
		Prepare: func(tx *Tx, cur State) (any, error) {
			retryAt = time.Time{}
			now := s.now()
			if why := leaseProblem(d, in.LeaseToken, now); why != "" {
				return nil, &LeaseError{DelegationID: d.ID, SessionID: d.SessionID, Reason: why, CurrentVersion: cur.Version}
			}
			p := ResultPayload{
				DelegationID: d.ID, Attempt: d.Attempt, Step: d.Step, ResultType: in.ResultType,
				Output: in.Output, Evidence: in.Evidence, Uncertainty: in.Uncertainty, NextStep: in.NextStep,
				Question: in.Question, Risks: in.Risks, Failure: in.Failure, Usage: in.Usage,
				ResolvedRisks: in.ResolvedRisks,
			}
			if len(in.ResolvedRisks) > 0 {
				// Checked under the lock, after the lease: a fenced writer
				// hears "conflict" first, and a 422 leaves the lease usable.
				v := &ValidationError{}
				openRiskErrors(v, "resolved_risks", in.ResolvedRisks, cur)
				if err := v.Err(); err != nil {
					return nil, err
				}
			}
			if in.Failure != nil && in.Failure.Class == FailureTransient && d.Attempt < d.MaxAttempts {
				p.Retry = true
				p.NextAttempt = d.Attempt + 1
				r := mathrand.New(mathrand.NewPCG(uint64(now.UnixNano()), uint64(len(d.ID))))
				retryAt = now.Add(backoff(d.Attempt, r))
				p.RetryAt = NewUTCTime(retryAt).String()
			}
			return p, nil
		},
		Effect: func(tx *Tx, next State, ev Event) (any, error) {
			check := failWith("delegation %s: record result", delegationID)
			switch {
			case !retryAt.IsZero():
				tx.Later(check, `UPDATE delegations SET status = 'queued', attempt = attempt + 1, lease_token = NULL,
					lease_expires_at = NULL, leased_by = '', available_at = ?, updated_at = ? WHERE id = ?`,
					NewUTCTime(retryAt), ev.CreatedAt, delegationID)
			case in.ResultType == ResultFailed:
				tx.Later(check, `UPDATE delegations SET status = 'failed', lease_token = NULL, lease_expires_at = NULL, updated_at = ? WHERE id = ?`,
					ev.CreatedAt, delegationID)
			default:
				tx.Later(check, `UPDATE delegations SET status = 'done', lease_token = NULL, lease_expires_at = NULL, updated_at = ? WHERE id = ?`,
					ev.CreatedAt, delegationID)
			}
			return nil, nil
		},
		// A completed result whose next_step has a route is delegated on in
		// the same transaction, as RouterActor (models/routes.go).
		Then: func(tx *Tx, st State, ev Event) (*Command, error) {
			if len(route) == 0 || st.Status != StatusOpen {
				return nil, nil
			}
			return s.routeFollowUp(route[0]), nil
		},
	})
}

// contractError answers a result that breaks the contract: every problem is
// listed at once, mismatches with the delegation included when it exists.
func (s *Store) contractError(ctx context.Context, delegationID string, in ResultInput, err error) error {
	v := &ValidationError{}
	if !errors.As(err, &v) {
		return err
	}
	d, err := s.GetDelegation(ctx, delegationID)
	switch {
	case err == nil:
		_ = matchDelegation(d, in, v)
	case ErrorCode(err) != ENOTFOUND:
		return err
	}
	return v
}

// matchDelegation adds to v where a result names another session or step
// than its delegation, and returns v's error.
func matchDelegation(d Delegation, in ResultInput, v *ValidationError) error {
	if in.SessionID != "" && in.SessionID != d.SessionID {
		v.Add("session_id", "does not match the delegation's session %s", d.SessionID)
	}
	if strings.TrimSpace(in.Step) != "" && in.Step != d.Step {
		v.Add("step", "does not match the delegation's step %q", d.Step)
	}
	return v.Err()
}

// errSkip aborts a rescue whose lease changed since it was seen.
var errSkip = errors.New("skip")

// RescuerActor is the actor of events the rescuer writes.
const RescuerActor = "system:rescuer"

// RescueExpired finds leases that ran out and makes their delegations
// available again as attempt+1 (or escalates when attempts are exhausted).
// Several processes may run it at once: each rescue re-checks the lease under
// the session and delegation locks, so a lease is rescued exactly once.
func (s *Store) RescueExpired(ctx context.Context, limit int) (int, error) {
	n, _, err := s.rescueExpired(ctx, limit)
	return n, err
}

// rescueExpired is RescueExpired that also returns how many expired leases
// it found.
func (s *Store) rescueExpired(ctx context.Context, limit int) (int, int, error) {
	if limit <= 0 {
		limit = 100
	}
	var due []Delegation
	if err := s.DB.WithContext(ctx).Where("status = ? AND lease_expires_at < ?", DelegationLeased, NewUTCTime(s.now())).
		Order("lease_expires_at").Limit(limit).Find(&due).Error; err != nil {
		return 0, 0, fmt.Errorf("find expired leases: %w", err)
	}
	n := 0
	for _, seen := range due {
		err := s.rescueLease(ctx, seen, time.Time{})
		switch {
		case err == nil:
			n++
		case errors.Is(err, errSkip), ErrorCode(err) == EILLEGAL:
			// Another process rescued it, or a result or pause got there first.
		default:
			return n, len(due), fmt.Errorf("rescue delegation %s: %w", seen.ID, err)
		}
	}
	return n, len(due), nil
}

// rescueLease records the expiry of seen's lease (which must still be the
// delegation's, and run out) and queues it again as the next attempt, or
// escalates when the attempts are exhausted. The worker's last sign of
// life is seenAt when given (a lease fault injection knows it), else the
// expiry minus the lease length.
func (s *Store) rescueLease(ctx context.Context, seen Delegation, seenAt time.Time) error {
	_, err := s.Execute(ctx, Command{
		SessionID: seen.SessionID, Type: EventDelegationExpired, Actor: RescuerActor,
		Prepare: func(tx *Tx, cur State) (any, error) {
			d, err := s.lockDelegation(tx, seen.ID)
			if err != nil {
				return nil, err
			}
			if d.Status != DelegationLeased || d.LeaseToken == nil || seen.LeaseToken == nil ||
				*d.LeaseToken != *seen.LeaseToken || d.LeaseExpiresAt.Time.After(s.now()) {
				return nil, errSkip
			}
			// Heartbeats are not events, so the expiry records the
			// worker's last sign of life for the recovery time: a claim
			// and every heartbeat set the expiry to now + lease_seconds
			// (which never changes on a delegation), so the last of
			// them was exactly lease_seconds before the expiry.
			lastSeen := d.LeaseExpiresAt.Time.Add(-time.Duration(d.LeaseSeconds) * time.Second)
			if !seenAt.IsZero() {
				lastSeen = seenAt
			}
			return ExpiredPayload{
				DelegationID: d.ID, Attempt: d.Attempt, Worker: d.LeasedBy,
				NextAttempt: d.Attempt + 1, Exhausted: d.Attempt >= d.MaxAttempts,
				LastSeenAt: NewUTCTime(lastSeen).String(),
			}, nil
		},
		Effect: func(tx *Tx, next State, ev Event) (any, error) {
			q := `UPDATE delegations SET status = 'queued', attempt = attempt + 1, lease_token = NULL,
				lease_expires_at = NULL, leased_by = '', available_at = ?, updated_at = ? WHERE id = ?`
			args := []any{ev.CreatedAt, ev.CreatedAt, seen.ID}
			if next.Status == StatusEscalated {
				q = `UPDATE delegations SET status = 'failed', lease_token = NULL, lease_expires_at = NULL, updated_at = ? WHERE id = ?`
				args = []any{ev.CreatedAt, seen.ID}
			}
			tx.Later(failWith("delegation %s: rescue", seen.ID), q, args...)
			return nil, nil
		},
	})
	return err
}
