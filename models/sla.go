package models

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"
)

// Escalation SLAs. Every escalation is due a fixed time after it began
// (the session's escalated_at, which claims, releases and notes do not
// restart), the time depending on the session's priority. The clock runs
// while the session is in human hands (escalated or human_active). Because
// the due time is derived from escalated_at and the policy, it needs no
// stored timer; changing the policy moves the due times of open escalations.
//
// A breach is recorded by the maintenance pass as exactly one
// escalation.sla_breached event per escalation, whatever the number of
// server processes.

// SLAPolicy is the time allowed to resolve an escalation, per priority
// (1 = most urgent).
type SLAPolicy map[int]time.Duration

// DefaultSLAPolicy is the SLA used when Store.SLA is nil.
func DefaultSLAPolicy() SLAPolicy {
	return SLAPolicy{1: 15 * time.Minute, 2: time.Hour, 3: 4 * time.Hour, 4: 24 * time.Hour, 5: 72 * time.Hour}
}

// NearBreachFraction is the share of the SLA after which an escalation is
// near breach.
const NearBreachFraction = 0.8

// SLAActor is the actor of escalation.sla_breached events.
const SLAActor = "system:sla"

// For is the SLA of priority p: the policy's entry, else the default
// policy's, else the default priority's.
func (p SLAPolicy) For(priority int) time.Duration {
	if d, ok := p[priority]; ok && d > 0 {
		return d
	}
	def := DefaultSLAPolicy()
	if d, ok := def[priority]; ok {
		return d
	}
	if d, ok := p[DefaultPriority]; ok && d > 0 {
		return d
	}
	return def[DefaultPriority]
}

func (s *Store) slaPolicy() SLAPolicy {
	if s.SLA != nil {
		return s.SLA
	}
	return DefaultSLAPolicy()
}

// SLAState is where an escalation stands against its SLA.
type SLAState string

// The SLA states.
const (
	SLAOK         SLAState = "ok"
	SLANearBreach SLAState = "near_breach" // at least NearBreachFraction of the SLA elapsed
	SLABreached   SLAState = "breached"
)

// SLAClock is an escalation's SLA at one instant.
type SLAClock struct {
	EscalatedAt time.Time     `json:"escalated_at"`
	DueAt       time.Time     `json:"due_at"`
	Budget      time.Duration `json:"budget_ns"`
	State       SLAState      `json:"sla_state"`
}

// Clock computes the SLA of an escalation of the given priority that began
// at escalatedAt, as seen at now.
func (p SLAPolicy) Clock(priority int, escalatedAt, now time.Time) SLAClock {
	budget := p.For(priority)
	c := SLAClock{EscalatedAt: escalatedAt, DueAt: escalatedAt.Add(budget), Budget: budget, State: SLAOK}
	elapsed := now.Sub(escalatedAt)
	switch {
	case !now.Before(c.DueAt):
		c.State = SLABreached
	case float64(elapsed) >= NearBreachFraction*float64(budget):
		c.State = SLANearBreach
	}
	return c
}

// SLAClock is the SLA of an escalation of the given priority that began at
// escalatedAt, under the store's policy and clock (for the inbox rows).
func (s *Store) SLAClock(priority int, escalatedAt time.Time) SLAClock {
	return s.slaPolicy().Clock(priority, escalatedAt, s.now())
}

// slaBucket selects the sessions in human hands that share one SLA.
type slaBucket struct {
	where  string
	args   []any
	budget time.Duration
}

// slaBuckets splits the sessions in human hands by SLA: one bucket per
// priority the policy or the API knows, and one for any other priority.
// Each bucket's query is a plain comparison on escalated_at that the inbox
// indexes serve, on both dialects.
func (s *Store) slaBuckets() []slaBucket {
	p := s.slaPolicy()
	prios := map[int]bool{1: true, 2: true, 3: true, 4: true, 5: true}
	for k := range p {
		prios[k] = true
	}
	var known []int
	for k := range prios {
		known = append(known, k)
	}
	sort.Ints(known)
	out := make([]slaBucket, 0, len(known)+1)
	for _, k := range known {
		out = append(out, slaBucket{where: "priority = ?", args: []any{k}, budget: p.For(k)})
	}
	out = append(out, slaBucket{where: "priority NOT IN ?", args: []any{known}, budget: p.For(DefaultPriority)})
	return out
}

// inHumanHandsSQL selects the sessions whose escalation clock runs.
const inHumanHandsSQL = `status IN ('escalated', 'human_active') AND escalated_at IS NOT NULL`

// slaPendingSQL selects the escalations in human hands whose breach is not
// recorded yet: sla_breached_for holds the escalated_at of the escalation
// whose breach was recorded, so a new escalation of the same session is
// pending again. It is, word for word, the predicate of the partial index
// sessions_sla_pending_idx (migration 00016), which keeps the maintenance
// pass from revisiting escalations already judged.
const slaPendingSQL = `status IN ('escalated', 'human_active') AND escalated_at IS NOT NULL AND sla_breached_for IS DISTINCT FROM escalated_at`

// EscalationDue is a session in human hands with its SLA.
type EscalationDue struct {
	SessionID    string `json:"session_id"`
	TicketRef    string `json:"ticket_ref"`
	Goal         string `json:"goal"`
	Status       Status `json:"status"`
	Priority     int    `json:"priority"`
	Queue        string `json:"queue"`
	Assignee     string `json:"assignee"`
	StateVersion int64  `json:"state_version"`
	SLAClock
	// BreachRecorded says the escalation.sla_breached event was written.
	BreachRecorded bool `json:"breach_recorded"`
}

type dueRow struct {
	ID           string
	TicketRef    string
	Goal         string
	Status       Status
	Priority     int
	Queue        string
	Assignee     string
	StateVersion int64
	EscalatedAt  UTCTime
}

// DefaultEscalationsDueLimit and MaxEscalationsDueLimit bound EscalationsDue.
const (
	DefaultEscalationsDueLimit = 50
	MaxEscalationsDueLimit     = 500
)

// EscalationsDue lists the escalated and human_active sessions with their
// due times, the soonest due (most overdue) first, at most limit of them.
func (s *Store) EscalationsDue(ctx context.Context, limit int) ([]EscalationDue, error) {
	if limit <= 0 {
		limit = DefaultEscalationsDueLimit
	}
	limit = min(limit, MaxEscalationsDueLimit)
	now := s.now()
	policy := s.slaPolicy()
	var out []EscalationDue
	// Within one SLA bucket, due order is escalated_at order: take the
	// first limit of each bucket and merge.
	for _, b := range s.slaBuckets() {
		var rows []dueRow
		err := s.DB.WithContext(ctx).Table("sessions").
			Select("id, ticket_ref, goal, status, priority, queue, assignee, state_version, escalated_at").
			Where(inHumanHandsSQL).Where(b.where, b.args...).
			Order("escalated_at, id").Limit(limit).Find(&rows).Error
		if err != nil {
			return nil, fmt.Errorf("escalations due: %w", err)
		}
		for _, r := range rows {
			out = append(out, EscalationDue{
				SessionID: r.ID, TicketRef: r.TicketRef, Goal: r.Goal, Status: r.Status, Priority: r.Priority,
				Queue: r.Queue, Assignee: r.Assignee, StateVersion: r.StateVersion,
				SLAClock: policy.Clock(r.Priority, r.EscalatedAt.Time, now),
			})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].DueAt.Equal(out[j].DueAt) {
			return out[i].DueAt.Before(out[j].DueAt)
		}
		return out[i].SessionID < out[j].SessionID
	})
	if len(out) > limit {
		out = out[:limit]
	}
	if err := s.markRecordedBreaches(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// markRecordedBreaches sets BreachRecorded on the rows whose current
// escalation has its breach event, in one query.
func (s *Store) markRecordedBreaches(ctx context.Context, rows []EscalationDue) error {
	var ids []string
	for _, r := range rows {
		if r.State == SLABreached {
			ids = append(ids, r.SessionID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var last []struct {
		SessionID string
		At        UTCTime
	}
	err := s.DB.WithContext(ctx).Model(&Event{}).Select("session_id, max(created_at) AS at").
		Where("type = ? AND session_id IN ?", EventEscalationSLABreached, ids).Group("session_id").Scan(&last).Error
	if err != nil {
		return fmt.Errorf("escalations due: breaches: %w", err)
	}
	at := make(map[string]time.Time, len(last))
	for _, l := range last {
		at[l.SessionID] = l.At.Time
	}
	for i := range rows {
		if t, ok := at[rows[i].SessionID]; ok && !t.Before(rows[i].EscalatedAt) {
			rows[i].BreachRecorded = true
		}
	}
	return nil
}

// SLAStats counts the sessions in human hands by SLA state, and every
// breach ever recorded, for the metrics.
type SLAStats struct {
	Open       int64 `json:"open"`
	OK         int64 `json:"ok"`
	NearBreach int64 `json:"near_breach"`
	Breached   int64 `json:"breached"`
	// BreachEvents counts escalation.sla_breached events (all time).
	BreachEvents int64 `json:"breach_events"`
}

// SLAStats counts escalations by SLA state in one statement whatever the
// number of sessions (countNow).
func (s *Store) SLAStats(ctx context.Context) (SLAStats, error) {
	st, _, err := s.countNow(ctx, false)
	if err != nil {
		return SLAStats{}, fmt.Errorf("sla stats: %w", err)
	}
	return st, nil
}

// SLABreachPayload records that an escalation outlived its SLA.
type SLABreachPayload struct {
	Priority   int   `json:"priority"`
	SLASeconds int64 `json:"sla_seconds"`
	// EscalatedAt and EscalationVersion identify the escalation.
	EscalatedAt       string `json:"escalated_at"`
	EscalationVersion int64  `json:"escalation_version"`
	DueAt             string `json:"due_at"`
	Status            Status `json:"status"`
	Assignee          string `json:"assignee,omitempty"`
}

type breachCandidate struct {
	ID          string
	EscalatedAt UTCTime
}

// RecordSLABreaches writes one escalation.sla_breached event for each
// escalation past its due time that has none yet, at most limit per SLA
// bucket, and returns how many it wrote. Several processes may run it at
// once: each breach is re-checked under the session lock, against the
// session's events, so an escalation is recorded as breached exactly once.
func (s *Store) RecordSLABreaches(ctx context.Context, limit int) (int, error) {
	n, _, err := s.recordSLABreaches(ctx, limit)
	return n, err
}

// recordSLABreaches is RecordSLABreaches that also returns how many
// candidates it found.
func (s *Store) recordSLABreaches(ctx context.Context, limit int) (int, int, error) {
	if limit <= 0 {
		limit = 100
	}
	now := s.now()
	var due []breachCandidate
	for _, b := range s.slaBuckets() {
		var rows []breachCandidate
		err := s.DB.WithContext(ctx).Table(s.slaPendingFrom()).Select("id, escalated_at").
			Where(slaPendingSQL).Where(b.where, b.args...).
			Where("escalated_at <= ?", NewUTCTime(now.Add(-b.budget))).
			Order("escalated_at, id").Limit(limit).Find(&rows).Error
		if err != nil {
			return 0, 0, fmt.Errorf("find sla breaches: %w", err)
		}
		due = append(due, rows...)
	}
	n := 0
	for _, c := range due {
		_, err := s.Execute(ctx, Command{
			SessionID: c.ID, Type: EventEscalationSLABreached, Actor: SLAActor,
			Prepare: func(tx *Tx, cur State) (any, error) {
				return s.prepareBreach(tx, cur, c)
			},
			Effect: markBreached(c.ID),
		})
		switch {
		case err == nil:
			n++
		case errors.Is(err, errAlreadyBreached):
			// Recorded before the index column was kept: mark it, so that
			// it is not found again.
			if err := s.DB.WithContext(ctx).Exec(`UPDATE sessions SET sla_breached_for = escalated_at WHERE id = ? AND escalated_at = ?`,
				c.ID, c.EscalatedAt).Error; err != nil {
				return n, len(due), fmt.Errorf("mark sla breach of %s: %w", c.ID, err)
			}
		case errors.Is(err, errSkip), ErrorCode(err) == EILLEGAL:
			// Recorded by another process, or the escalation ended meanwhile.
		default:
			return n, len(due), fmt.Errorf("record sla breach of %s: %w", c.ID, err)
		}
	}
	return n, len(due), nil
}

// errAlreadyBreached aborts a breach whose event is already written.
var errAlreadyBreached = fmt.Errorf("breach already recorded: %w", errSkip)

// slaPendingFrom names the sessions table for queries over slaPendingSQL.
// SQLite, without statistics, would rather walk an inbox index and skip the
// breached escalations one by one, so it is told which index to use.
func (s *Store) slaPendingFrom() string {
	if s.Dialect == SQLite {
		return "sessions INDEXED BY sessions_sla_pending_idx"
	}
	return "sessions"
}

// markBreached is the effect of a breach event: the escalation leaves
// sessions_sla_pending_idx, so no later pass looks at it again.
func markBreached(id string) func(tx *Tx, next State, ev Event) (any, error) {
	return func(tx *Tx, next State, ev Event) (any, error) {
		tx.Later(failWith("session %s: mark sla breached", id),
			`UPDATE sessions SET sla_breached_for = escalated_at WHERE id = ?`, id)
		return nil, nil
	}
}

// prepareBreach decides, under the session lock, whether the escalation seen
// as breached still is and has no breach event yet.
func (s *Store) prepareBreach(tx *Tx, cur State, seen breachCandidate) (any, error) {
	if !inHumanHands(cur.Status) || cur.Escalation == nil {
		return nil, errSkip
	}
	rows, err := selectTx[NullTime](tx, `SELECT escalated_at FROM sessions WHERE id = ?`, cur.SessionID)
	if err == nil && len(rows) != 1 {
		err = &NotFoundError{Kind: "session", ID: cur.SessionID}
	}
	if err != nil {
		return nil, fmt.Errorf("session %s: escalated_at: %w", cur.SessionID, err)
	}
	row := struct{ EscalatedAt NullTime }{rows[0]}
	if !row.EscalatedAt.Valid || !row.EscalatedAt.Time.Equal(seen.EscalatedAt.Time) {
		return nil, errSkip // a newer escalation; a later pass judges it
	}
	budget := s.slaPolicy().For(cur.Priority)
	due := row.EscalatedAt.Time.Add(budget)
	if due.After(s.now()) {
		return nil, errSkip
	}
	// A breach of this escalation is at its version or later (a breach is
	// audit-only, so it may share the escalation's version); one of an
	// earlier escalation is below it.
	recorded, err := selectTx[int64](tx, `SELECT count(*) FROM events WHERE session_id = ? AND type = ? AND version_after >= ?`,
		cur.SessionID, EventEscalationSLABreached, cur.Escalation.AtVersion)
	if err != nil {
		return nil, fmt.Errorf("session %s: breaches: %w", cur.SessionID, err)
	}
	if recorded[0] > 0 {
		return nil, errAlreadyBreached
	}
	return SLABreachPayload{
		Priority: cur.Priority, SLASeconds: int64(budget / time.Second),
		EscalatedAt: row.EscalatedAt.Time.String(), EscalationVersion: cur.Escalation.AtVersion,
		DueAt: NewUTCTime(due).String(), Status: cur.Status, Assignee: cur.Assignee,
	}, nil
}
