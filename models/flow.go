package models

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"time"
)

// Per-queue flow control.
//
// A queue may bound how many of its delegations are leased at once
// (max_in_flight: leased and unexpired) and how fast leases are granted
// (max_leases_per_second, a token bucket of burst max(1, ceil(rate))
// tokens). Both are enforced inside the one claim statement (claimSQL,
// claimBatchSQL), so they hold across any number of server replicas and
// cost a queue without limits nothing: its claim is the same single
// statement, which finds no queue_flow row.
//
// Why it is race-free:
//
//   - PostgreSQL (READ COMMITTED). The claim statement first locks the
//     queue's queue_flow row (SELECT … FOR UPDATE, CTE f). The in-flight
//     count is computed in that CTE by taskpilots_queue_in_flight, a
//     VOLATILE function, whose query takes a snapshot of its own rather
//     than the statement's. Every claim that grants a lease on a limited
//     queue also writes the row back (CTE fu: tokens, leases_granted) in
//     the same statement. So a concurrent claim on the queue either waits
//     for the row lock and then, because the row was updated by a committed
//     transaction, re-reads it (EvalPlanQual) and re-runs the count with a
//     fresh snapshot that includes the other claim's leases; or it runs
//     after that commit to begin with. Claims on one limited queue are thus
//     serialised on one row for the length of their transaction; claims on
//     other queues are not affected. Leases end (results, expiry, pauses)
//     without touching the row: a count that misses such an end only ever
//     counts too many, never too few. Both pieces are needed: without the
//     write-back a waiting claim keeps the count it made before the lock,
//     and a count in the statement's own snapshot misses leases committed
//     while it waited (TestFlowConcurrentMaxInFlight and
//     TestFlowMultiProcess then see 7 to 12 leases out with a limit of 3).
//   - SQLite has one writer at a time: the claim is an UPDATE, so it holds
//     the write lock while its subquery counts and reads the bucket, and
//     the trigger delegations_lease_flow takes the token in the same
//     statement.
//
// The bucket's clock is the claiming server's (s.Now), as for lease
// expiries; a replica whose clock is behind the last grant's refills
// nothing rather than a negative amount.

// Bounds of the flow settings.
const (
	MaxFlowInFlight        = 100000
	MinFlowLeasesPerSecond = 0.001 // one lease per 1000 s
	MaxFlowLeasesPerSecond = 10000.0
)

// QueueFlowInput is the body of PUT /queues/{queue}. PUT replaces both
// settings: an omitted or null one is no limit.
type QueueFlowInput struct {
	MaxInFlight        *int     `json:"max_in_flight"`
	MaxLeasesPerSecond *float64 `json:"max_leases_per_second"`
}

// Validate lists every problem with the settings of queue.
func (in QueueFlowInput) Validate(queue string) error {
	v := &ValidationError{}
	if !namePattern.MatchString(queue) {
		v.Add("queue", "must be 1-64 letters, digits, '.', '_' or '-'")
	}
	if in.MaxInFlight != nil && (*in.MaxInFlight < 1 || *in.MaxInFlight > MaxFlowInFlight) {
		v.Add("max_in_flight", "must be between 1 and %d, or null for no limit", MaxFlowInFlight)
	}
	if r := in.MaxLeasesPerSecond; r != nil && (math.IsNaN(*r) || *r < MinFlowLeasesPerSecond || *r > MaxFlowLeasesPerSecond) {
		v.Add("max_leases_per_second", "must be between %g and %g, or null for no limit", MinFlowLeasesPerSecond, MaxFlowLeasesPerSecond)
	}
	return v.Err()
}

// flowBurst is the bucket size of a rate: one second's leases, at least one.
func flowBurst(rate float64) float64 { return max(1, math.Ceil(rate)) }

// QueueFlow is a queue's flow settings with its current in-flight count.
type QueueFlow struct {
	Queue              string   `json:"queue"`
	MaxInFlight        *int     `json:"max_in_flight"`
	MaxLeasesPerSecond *float64 `json:"max_leases_per_second"`
	// Burst is the token bucket's size (max(1, ceil(rate))), null without
	// a rate.
	Burst *float64 `json:"burst"`
	// InFlight counts the queue's leased, unexpired delegations now.
	InFlight  int64    `json:"in_flight"`
	UpdatedBy string   `json:"updated_by,omitempty"`
	UpdatedAt *UTCTime `json:"updated_at,omitempty"`
}

// Limited reports whether the queue has a limit.
func (f QueueFlow) Limited() bool { return f.MaxInFlight != nil || f.MaxLeasesPerSecond != nil }

// queueFlowRow is a queue_flow row.
type queueFlowRow struct {
	Queue              string   `gorm:"column:queue;primaryKey" db:"queue"`
	MaxInFlight        *int     `gorm:"column:max_in_flight" db:"max_in_flight"`
	MaxLeasesPerSecond *float64 `gorm:"column:max_leases_per_second" db:"max_leases_per_second"`
	Burst              float64  `gorm:"column:burst" db:"burst"`
	Tokens             float64  `gorm:"column:tokens" db:"tokens"`
	TokensAt           UTCTime  `gorm:"column:tokens_at" db:"tokens_at"`
	LeasesGranted      int64    `gorm:"column:leases_granted" db:"leases_granted"`
	CreatedBy          string   `gorm:"column:created_by" db:"created_by"`
	UpdatedBy          string   `gorm:"column:updated_by" db:"updated_by"`
	CreatedAt          UTCTime  `gorm:"column:created_at" db:"created_at"`
	UpdatedAt          UTCTime  `gorm:"column:updated_at" db:"updated_at"`
}

// TableName pins the table name for GORM.
func (queueFlowRow) TableName() string { return "queue_flow" }

func (r queueFlowRow) view(inFlight int64) QueueFlow {
	f := QueueFlow{Queue: r.Queue, MaxInFlight: r.MaxInFlight, MaxLeasesPerSecond: r.MaxLeasesPerSecond,
		InFlight: inFlight, UpdatedBy: r.UpdatedBy}
	if r.MaxLeasesPerSecond != nil {
		b := r.Burst
		f.Burst = &b
	}
	at := r.UpdatedAt
	f.UpdatedAt = &at
	return f
}

// auditView is the settings as the admin log records them.
func (r queueFlowRow) auditView() map[string]any {
	return map[string]any{"queue": r.Queue, "max_in_flight": r.MaxInFlight, "max_leases_per_second": r.MaxLeasesPerSecond}
}

// AdminQueueFlowPut is the admin log action of a change of a queue's flow
// settings.
const AdminQueueFlowPut = "queue.flow_put"

// PutQueueFlow sets (replaces) the flow settings of queue and records the
// change in the admin log, in one transaction. Changing the rate refills
// the bucket. An idempotency key replays the first answer.
func (s *Store) PutQueueFlow(ctx context.Context, actor, idemKey, queue string, in QueueFlowInput) (QueueFlow, error) {
	if err := in.Validate(queue); err != nil {
		return QueueFlow{}, err
	}
	fp, err := fingerprintFor(idemKey, "queue.flow_put", queue, in)
	if err != nil {
		return QueueFlow{}, err
	}
	out, err := s.Idempotent(ctx, actor, idemKey, fp, func(tx *Tx) (Outcome, error) {
		prev, err := selectTx[queueFlowRow](tx, `SELECT * FROM queue_flow WHERE queue = ?`+s.forUpdate(), queue)
		if err != nil {
			return Outcome{}, fmt.Errorf("queue %q: flow: %w", queue, err)
		}
		inFlight, err := selectTx[int64](tx, `SELECT count(*) FROM delegations WHERE queue = ? AND status = 'leased' AND lease_expires_at > ?`,
			queue, NewUTCTime(s.now()))
		if err != nil {
			return Outcome{}, fmt.Errorf("queue %q: in flight: %w", queue, err)
		}
		now := NewUTCTime(s.now())
		r := queueFlowRow{
			Queue: queue, MaxInFlight: in.MaxInFlight, MaxLeasesPerSecond: in.MaxLeasesPerSecond,
			TokensAt: now, CreatedBy: actor, UpdatedBy: actor, CreatedAt: now, UpdatedAt: now,
		}
		if in.MaxLeasesPerSecond != nil {
			r.Burst = flowBurst(*in.MaxLeasesPerSecond)
			r.Tokens = r.Burst
		}
		var before any
		if len(prev) == 1 {
			p := prev[0]
			before = p.auditView()
			r.CreatedBy, r.CreatedAt, r.LeasesGranted = p.CreatedBy, p.CreatedAt, p.LeasesGranted
			if sameRate(p.MaxLeasesPerSecond, in.MaxLeasesPerSecond) {
				// The same rate keeps its bucket as it is.
				r.Tokens, r.TokensAt = p.Tokens, p.TokensAt
			}
		}
		tx.Later(failWith("queue %q: save flow", queue),
			`INSERT INTO queue_flow (queue, max_in_flight, max_leases_per_second, burst, tokens, tokens_at, leases_granted,
				created_by, updated_by, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (queue) DO UPDATE SET max_in_flight = excluded.max_in_flight,
				max_leases_per_second = excluded.max_leases_per_second, burst = excluded.burst,
				tokens = excluded.tokens, tokens_at = excluded.tokens_at,
				updated_by = excluded.updated_by, updated_at = excluded.updated_at`,
			r.Queue, r.MaxInFlight, r.MaxLeasesPerSecond, r.Burst, r.Tokens, r.TokensAt, r.LeasesGranted,
			r.CreatedBy, r.UpdatedBy, r.CreatedAt, r.UpdatedAt)
		if err := s.adminLater(tx, actor, AdminQueueFlowPut, "queue", queue, before, r.auditView()); err != nil {
			return Outcome{}, err
		}
		var n int64
		if len(inFlight) == 1 {
			n = inFlight[0]
		}
		b, err := json.Marshal(r.view(n))
		if err != nil {
			return Outcome{}, err
		}
		return Outcome{Data: b}, nil
	})
	if err != nil {
		return QueueFlow{}, err
	}
	var f QueueFlow
	if err := out.DecodeData(&f); err != nil {
		return QueueFlow{}, fmt.Errorf("queue %q: %w", queue, err)
	}
	return f, nil
}

func sameRate(a, b *float64) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// GetQueueFlow returns the flow settings of queue (no limits when none were
// ever set) with its in-flight count.
func (s *Store) GetQueueFlow(ctx context.Context, queue string) (QueueFlow, error) {
	v := &ValidationError{}
	if !namePattern.MatchString(queue) {
		v.Add("queue", "must be 1-64 letters, digits, '.', '_' or '-'")
		return QueueFlow{}, v
	}
	db := s.DB.WithContext(ctx)
	var rows []queueFlowRow
	if err := db.Where("queue = ?", queue).Limit(1).Find(&rows).Error; err != nil {
		return QueueFlow{}, fmt.Errorf("queue %q: flow: %w", queue, err)
	}
	var n int64
	if err := db.Raw(`SELECT count(*) FROM delegations WHERE queue = ? AND status = 'leased' AND lease_expires_at > ?`,
		queue, NewUTCTime(s.now())).Scan(&n).Error; err != nil {
		return QueueFlow{}, fmt.Errorf("queue %q: in flight: %w", queue, err)
	}
	if len(rows) == 0 {
		return QueueFlow{Queue: queue, InFlight: n}, nil
	}
	return rows[0].view(n), nil
}

// ListQueueFlows lists, by name, every queue that has flow settings or
// leased delegations, with its in-flight count. Two grouped reads: the
// settings table and the leased-by-queue partial index.
func (s *Store) ListQueueFlows(ctx context.Context) ([]QueueFlow, error) {
	db := s.DB.WithContext(ctx)
	var rows []queueFlowRow
	if err := db.Order("queue").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("queue flows: %w", err)
	}
	var counts []struct {
		Queue string
		N     int64
	}
	if err := db.Raw(`SELECT queue, count(*) AS n FROM delegations WHERE status = 'leased' AND lease_expires_at > ? GROUP BY queue`,
		NewUTCTime(s.now())).Scan(&counts).Error; err != nil {
		return nil, fmt.Errorf("queue flows: in flight: %w", err)
	}
	n := map[string]int64{}
	for _, c := range counts {
		n[c.Queue] = c.N
	}
	out := []QueueFlow{}
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.Queue] = true
		out = append(out, r.view(n[r.Queue]))
	}
	for q, c := range n {
		if !seen[q] {
			out = append(out, QueueFlow{Queue: q, InFlight: c})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out, nil
}

// QueueFlowGauge is a queue's limits for the Prometheus gauges.
type QueueFlowGauge struct {
	Queue              string
	MaxInFlight        *int
	MaxLeasesPerSecond *float64
	Tokens             float64
	LeasesGranted      int64
}

// QueueFlowGauges reads every queue_flow row (one small table scan), for
// the scrape.
func (s *Store) QueueFlowGauges(ctx context.Context) ([]QueueFlowGauge, error) {
	var rows []queueFlowRow
	if err := s.DB.WithContext(ctx).Order("queue").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("queue flow gauges: %w", err)
	}
	now := s.now()
	out := make([]QueueFlowGauge, 0, len(rows))
	for _, r := range rows {
		g := QueueFlowGauge{Queue: r.Queue, MaxInFlight: r.MaxInFlight, MaxLeasesPerSecond: r.MaxLeasesPerSecond, LeasesGranted: r.LeasesGranted}
		if r.MaxLeasesPerSecond != nil {
			elapsed := max(0, now.Sub(r.TokensAt.Time).Seconds())
			g.Tokens = min(r.Burst, r.Tokens+*r.MaxLeasesPerSecond*elapsed)
		}
		out = append(out, g)
	}
	return out, nil
}

// Recheck intervals of a waiting lease poll on a limited queue: a rate
// limit is looked at again when its next token is due (at least
// minFlowRecheck apart), a max_in_flight every inFlightRecheck.
const (
	minFlowRecheck  = 20 * time.Millisecond
	inFlightRecheck = 250 * time.Millisecond
)

// flowRecheck is how soon a lease poll on queue that found nothing should
// look again because of the queue's flow limits, or 0 (no limits, or the
// settings could not be read: the poll keeps its usual interval). One
// primary-key read, once per waiting poll; the claim itself reads nothing
// more.
func (s *Store) flowRecheck(ctx context.Context, queue string) time.Duration {
	var rows []queueFlowRow
	if err := s.DB.WithContext(ctx).Where("queue = ?", queue).Limit(1).Find(&rows).Error; err != nil || len(rows) == 0 {
		return 0
	}
	r := rows[0]
	switch {
	case r.MaxLeasesPerSecond != nil:
		return max(minFlowRecheck, time.Duration(float64(time.Second) / *r.MaxLeasesPerSecond))
	case r.MaxInFlight != nil:
		return inFlightRecheck
	}
	return 0
}
