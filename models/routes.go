package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Step routes turn the return contract's next_step into the next delegation.
//
// A route maps a step name to the queue (with instructions, lease and
// attempts) that works it. When a worker's completed result names a
// next_step that has a route, SubmitResult chains a delegation.created
// command (actor RouterActor) onto the result with Command.Then, so the
// result, the delegation event and the delegation row commit in one
// transaction. The route is read in the same batch as the session and
// delegation locks, so routing costs no extra round trip.
//
// A session left open with a next_step that has no route is stalled: it
// waits on a step nobody will pick up. Stalled is not stored: it is the
// session's projected next_step (sessions.next_step) anti-joined with
// routes, so creating or deleting a route changes which sessions are stalled
// at once, without touching them. The partial index sessions_stalled_idx
// holds only open sessions with a next_step, which is what listing and
// counting stalled sessions read (migration 00012).
//
// Creating a route does not delegate sessions that stalled before it
// existed: routing happens when a result commits, never on a read.
//
// Route changes are configuration: each one is recorded in the admin audit
// log (AdminRoutePut, AdminRouteDelete) in the transaction that makes it.

// RouterActor is the actor of the delegations that routes create.
const RouterActor = "system:router"

// Route is where the next_step of a completed result is delegated.
type Route struct {
	Step         string  `gorm:"primaryKey" json:"step"`
	Queue        string  `json:"queue"`
	Instructions string  `json:"instructions"`
	LeaseSeconds int     `json:"lease_seconds"`
	MaxAttempts  int     `json:"max_attempts"`
	CreatedBy    string  `json:"created_by"`
	UpdatedBy    string  `json:"updated_by"`
	CreatedAt    UTCTime `json:"created_at"`
	UpdatedAt    UTCTime `json:"updated_at"`
}

// TableName pins the table name for GORM.
func (Route) TableName() string { return "routes" }

// RouteInput is the body of PUT /routes/{step}. Omitted bounds take the
// defaults of a delegation.
type RouteInput struct {
	Queue        string `json:"queue"`
	Instructions string `json:"instructions"`
	LeaseSeconds *int   `json:"lease_seconds"`
	MaxAttempts  *int   `json:"max_attempts"`
}

// Validate lists every problem with the route for step, with the rules of
// a delegation (the route becomes one).
func (in RouteInput) Validate(step string) error {
	v := &ValidationError{}
	validateDelegation(v, in.Queue, step, in.Instructions, in.MaxAttempts, in.LeaseSeconds)
	validateRouteStep(v, step)
	return v.Err()
}

// validateRouteStep adds what a route key needs beyond a delegation's step:
// results are matched on the exact step, so it may not carry spaces at its
// ends, which a URL would hide.
func validateRouteStep(v *ValidationError, step string) {
	if strings.TrimSpace(step) != "" && strings.TrimSpace(step) != step {
		v.Add("step", "must not start or end with spaces")
	}
}

// routeStep is the step a result's next_step routes by (delegations trim
// their step the same way).
func routeStep(nextStep string) string { return strings.TrimSpace(nextStep) }

// PutRoute creates or replaces the route of step and audits the change, in
// one transaction. An idempotency key replays the first answer.
func (s *Store) PutRoute(ctx context.Context, actor, idemKey, step string, in RouteInput) (Route, error) {
	if err := in.Validate(step); err != nil {
		return Route{}, err
	}
	fp, err := fingerprintFor(idemKey, "route.put", step, in)
	if err != nil {
		return Route{}, err
	}
	out, err := s.Idempotent(ctx, actor, idemKey, fp, func(tx *Tx) (Outcome, error) {
		prev, err := selectTx[Route](tx, `SELECT * FROM routes WHERE step = ?`+s.forUpdate(), step)
		if err != nil {
			return Outcome{}, fmt.Errorf("route %q: %w", step, err)
		}
		now := NewUTCTime(s.now())
		r := Route{
			Step: step, Queue: in.Queue, Instructions: in.Instructions,
			LeaseSeconds: intOr(in.LeaseSeconds, DefaultLeaseSeconds), MaxAttempts: intOr(in.MaxAttempts, DefaultMaxAttempts),
			CreatedBy: actor, UpdatedBy: actor, CreatedAt: now, UpdatedAt: now,
		}
		var before any
		if len(prev) == 1 {
			before = prev[0].auditView()
			r.CreatedBy, r.CreatedAt = prev[0].CreatedBy, prev[0].CreatedAt
		}
		tx.Later(failWith("route %q: save", step),
			`INSERT INTO routes (step, queue, instructions, lease_seconds, max_attempts, created_by, updated_by, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (step) DO UPDATE SET queue = excluded.queue, instructions = excluded.instructions,
				lease_seconds = excluded.lease_seconds, max_attempts = excluded.max_attempts,
				updated_by = excluded.updated_by, updated_at = excluded.updated_at`,
			r.Step, r.Queue, r.Instructions, r.LeaseSeconds, r.MaxAttempts, r.CreatedBy, r.UpdatedBy, r.CreatedAt, r.UpdatedAt)
		if err := s.adminLater(tx, actor, AdminRoutePut, "route", step, before, r.auditView()); err != nil {
			return Outcome{}, err
		}
		return routeOutcome(r)
	})
	if err != nil {
		return Route{}, err
	}
	var r Route
	if err := out.DecodeData(&r); err != nil {
		return Route{}, fmt.Errorf("route %q: %w", step, err)
	}
	return r, nil
}

// DeleteRoute removes the route of step and audits it, in one transaction,
// and returns the route it removed. Sessions that finish step afterwards
// stall until a route exists again. An idempotency key replays the first
// answer, so a repeated delete does not turn into a 404.
func (s *Store) DeleteRoute(ctx context.Context, actor, idemKey, step string) (Route, error) {
	fp, err := fingerprintFor(idemKey, "route.delete", step)
	if err != nil {
		return Route{}, err
	}
	out, err := s.Idempotent(ctx, actor, idemKey, fp, func(tx *Tx) (Outcome, error) {
		prev, err := selectTx[Route](tx, `DELETE FROM routes WHERE step = ? RETURNING *`, step)
		if err != nil {
			return Outcome{}, fmt.Errorf("route %q: delete: %w", step, err)
		}
		if len(prev) == 0 {
			return Outcome{}, &NotFoundError{Kind: "route", ID: step}
		}
		if err := s.adminLater(tx, actor, AdminRouteDelete, "route", step, prev[0].auditView(), nil); err != nil {
			return Outcome{}, err
		}
		return routeOutcome(prev[0])
	})
	if err != nil {
		return Route{}, err
	}
	var r Route
	if err := out.DecodeData(&r); err != nil {
		return Route{}, fmt.Errorf("route %q: %w", step, err)
	}
	return r, nil
}

// routeOutcome carries a route through Idempotent, which stores what a
// repeat answers.
func routeOutcome(r Route) (Outcome, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return Outcome{}, fmt.Errorf("route %q: %w", r.Step, err)
	}
	return Outcome{Data: b}, nil
}

// auditView is a route as the admin audit records it: what it routes to.
func (r Route) auditView() map[string]any {
	return map[string]any{"step": r.Step, "queue": r.Queue, "instructions": r.Instructions,
		"lease_seconds": r.LeaseSeconds, "max_attempts": r.MaxAttempts}
}

// GetRoute returns the route of step.
func (s *Store) GetRoute(ctx context.Context, step string) (Route, error) {
	var rows []Route
	if err := s.DB.WithContext(ctx).Where("step = ?", step).Limit(1).Find(&rows).Error; err != nil {
		return Route{}, fmt.Errorf("route %q: %w", step, err)
	}
	if len(rows) == 0 {
		return Route{}, &NotFoundError{Kind: "route", ID: step}
	}
	return rows[0], nil
}

// ListRoutes returns every route, by step. Routes are configuration, a
// handful per deployment, so the list is not paged.
func (s *Store) ListRoutes(ctx context.Context) ([]Route, error) {
	rows := []Route{}
	if err := s.DB.WithContext(ctx).Order("step").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	return rows, nil
}

// routeFollowUp is the command a completed result chains when its next_step
// has a route: the route's delegation, created by RouterActor.
func (s *Store) routeFollowUp(r Route) *Command {
	p := DelegationPayload{
		DelegationID: NewID("dlg"), Queue: r.Queue, Step: r.Step, Instructions: r.Instructions,
		MaxAttempts: r.MaxAttempts, LeaseSeconds: r.LeaseSeconds,
	}
	return &Command{Type: EventDelegationCreated, Actor: RouterActor, Payload: p, Effect: s.insertDelegation(p, time.Time{})}
}

// Stalled reports whether a session in st waits on a step that has no route
// (hasRoute says whether next_step has one): open, with a next_step. It is
// the rule stalledSQL states in SQL.
func Stalled(st Status, nextStep string, hasRoute bool) bool {
	return st == StatusOpen && nextStep != "" && !hasRoute
}

// stalledSQL selects the stalled sessions; sessions_stalled_idx and
// sessions_waiting_step_updated_idx serve it. The route check is a NOT IN
// over the (small, primary-keyed, never null) routes table, which PostgreSQL
// runs as a hashed filter: as a NOT EXISTS anti-join, the planner estimated
// that almost no session survives it (few distinct next_step values, all of
// them "matched") and sorted every stalled session rather than read a page
// of them in order.
const stalledSQL = `sessions.status = 'open' AND sessions.next_step <> ''
	AND sessions.next_step NOT IN (SELECT routes.step FROM routes)`

// StalledScope narrows a query on sessions to the stalled ones, for any
// listing of sessions (q.Scopes(models.StalledScope)); sessions_stalled_idx
// serves it.
func StalledScope(q *gorm.DB) *gorm.DB { return q.Where(stalledSQL) }

// StalledStep returns the step a session is stalled on, or "" when it is
// not stalled. It reads the route only for an open session with a next_step.
func (s *Store) StalledStep(ctx context.Context, row Session) (string, error) {
	if row.Status != StatusOpen || row.NextStep == "" {
		return "", nil
	}
	var n int64
	if err := s.DB.WithContext(ctx).Model(&Route{}).Where("step = ?", row.NextStep).Count(&n).Error; err != nil {
		return "", fmt.Errorf("session %s: route of %q: %w", row.ID, row.NextStep, err)
	}
	if Stalled(row.Status, row.NextStep, n > 0) {
		return row.NextStep, nil
	}
	return "", nil
}

// StalledGroup counts stalled sessions waiting on one step, by the queue
// they were last delegated to.
type StalledGroup struct {
	Step  string `json:"step"`
	Queue string `json:"queue"`
	N     int64  `json:"sessions"`
}

// StalledStats is how many sessions are stalled now (not windowed), and on
// which steps.
type StalledStats struct {
	Sessions int64            `json:"sessions"`
	ByStep   map[string]int64 `json:"by_step"`
}

// StalledGroups counts stalled sessions by step and last queue, in one
// query over sessions_stalled_idx.
func (s *Store) StalledGroups(ctx context.Context) ([]StalledGroup, error) {
	var rows []StalledGroup
	err := s.DB.WithContext(ctx).Raw(`SELECT next_step AS step, queue, count(*) AS n FROM sessions WHERE ` + stalledSQL +
		` GROUP BY next_step, queue ORDER BY next_step, queue`).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("count stalled sessions: %w", err)
	}
	return rows, nil
}

// StalledStats counts stalled sessions, in total and by step.
func (s *Store) StalledStats(ctx context.Context) (StalledStats, error) {
	groups, err := s.StalledGroups(ctx)
	if err != nil {
		return StalledStats{}, err
	}
	st := StalledStats{ByStep: map[string]int64{}}
	for _, g := range groups {
		st.Sessions += g.N
		st.ByStep[g.Step] += g.N
	}
	return st, nil
}

// QueueGauge is where one queue stands now, for the Prometheus gauges.
type QueueGauge struct {
	Queue string
	// Ready counts delegations claimable now; OldestReady is the
	// available_at of the one waiting longest (zero when none).
	Ready       int64
	OldestReady time.Time
	// InFlight counts leased delegations.
	InFlight int64
	// Stalled counts stalled sessions whose last delegation was on this
	// queue (the queue whose worker named the unrouted next_step): a
	// stalled session has no queue of its own, and step names come from
	// workers, too many to be a label.
	Stalled int64
}

// QueueGauges reads every queue's gauges in one statement: three grouped
// reads over partial indexes (delegations_claim_idx, delegations_leased_queue_idx,
// sessions_stalled_idx), none of which grows with finished work.
func (s *Store) QueueGauges(ctx context.Context) ([]QueueGauge, error) {
	var rows []struct {
		Queue  string
		Kind   string
		N      int64
		Oldest NullTime
	}
	now := NewUTCTime(s.now())
	err := s.DB.WithContext(ctx).Raw(`SELECT queue, 'ready' AS kind, count(*) AS n, min(available_at) AS oldest
	FROM delegations WHERE status = 'queued' AND available_at <= ? GROUP BY queue
UNION ALL
SELECT queue, 'leased', count(*), NULL FROM delegations WHERE status = 'leased' GROUP BY queue
UNION ALL
SELECT queue, 'stalled', count(*), NULL FROM sessions WHERE `+stalledSQL+` GROUP BY queue`, now).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("queue gauges: %w", err)
	}
	at := map[string]int{}
	var out []QueueGauge
	for _, r := range rows {
		i, ok := at[r.Queue]
		if !ok {
			i = len(out)
			at[r.Queue] = i
			out = append(out, QueueGauge{Queue: r.Queue})
		}
		g := &out[i]
		switch r.Kind {
		case "ready":
			g.Ready = r.N
			if r.Oldest.Valid {
				g.OldestReady = r.Oldest.Time.Time
			}
		case "leased":
			g.InFlight = r.N
		case "stalled":
			g.Stalled = r.N
		}
	}
	return out, nil
}

// Limits of DrainRoute.
const (
	DefaultDrainLimit = 100
	MaxDrainLimit     = 500
)

// DrainInput is the body of POST /routes/{step}/drain.
type DrainInput struct {
	// Limit is the most sessions to delegate (default DefaultDrainLimit).
	Limit *int `json:"limit"`
}

// Validate lists every problem with the input.
func (in DrainInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	if in.Limit != nil && (*in.Limit < 1 || *in.Limit > MaxDrainLimit) {
		v.Add("limit", "must be between 1 and %d", MaxDrainLimit)
	}
	return v.Err()
}

// DrainResult is what DrainRoute did.
type DrainResult struct {
	Step string `json:"step"`
	// Delegated are the sessions delegated to the route's queue.
	Delegated []DrainedSession `json:"delegated"`
	// More is true when more sessions wait on the step than limit allowed.
	More bool `json:"more"`
}

// DrainedSession is one session DrainRoute delegated.
type DrainedSession struct {
	SessionID    string `json:"session_id"`
	DelegationID string `json:"delegation_id"`
	StateVersion int64  `json:"state_version"`
}

// DrainRoute delegates, by the route of step, up to limit sessions that are
// open and wait on step: sessions that stalled before the route existed, or
// that an answer or a resume left open. Routing never happens on its own
// for them (only a completed result routes); this is the explicit action.
//
// Each session is its own command under its own lock, by actor, oldest
// first: a session that moved on since it was found (delegated, cancelled)
// is left alone. With an idempotency key a repeat answers the first result.
func (s *Store) DrainRoute(ctx context.Context, actor, idemKey, step string, in DrainInput) (DrainResult, error) {
	if err := in.Validate(); err != nil {
		return DrainResult{}, err
	}
	limit := intOr(in.Limit, DefaultDrainLimit)
	fp, err := fingerprintFor(idemKey, "route.drain", step, limit)
	if err != nil {
		return DrainResult{}, err
	}
	if idemKey != "" {
		prev, found, err := lookupIdempotency(s.DB.WithContext(ctx), actor, idemKey, fp)
		if err != nil {
			return DrainResult{}, err
		}
		if found {
			noteReplay(ctx)
			var r DrainResult
			return r, prev.DecodeData(&r)
		}
	}
	r, err := s.GetRoute(ctx, step)
	if err != nil {
		return DrainResult{}, err
	}
	var ids []string
	if err := s.DB.WithContext(ctx).Model(&Session{}).
		Where("sessions.status = 'open' AND sessions.next_step <> '' AND sessions.next_step = ?", step).
		Order("updated_at, id").Limit(limit+1).Pluck("id", &ids).Error; err != nil {
		return DrainResult{}, fmt.Errorf("drain route %q: %w", step, err)
	}
	res := DrainResult{Step: step, Delegated: []DrainedSession{}, More: len(ids) > limit}
	ids = ids[:min(len(ids), limit)]
	for _, id := range ids {
		follow := s.routeFollowUp(r)
		follow.SessionID, follow.Actor = id, actor
		follow.Prepare = func(tx *Tx, cur State) (any, error) {
			if cur.Status != StatusOpen || cur.NextStep != step {
				return nil, errSkip
			}
			return nil, nil
		}
		out, err := s.Execute(ctx, *follow)
		switch {
		case errors.Is(err, errSkip):
			continue
		case err != nil:
			return res, fmt.Errorf("drain route %q: session %s: %w", step, id, err)
		}
		var d DelegationCreated
		if err := out.DecodeData(&d); err != nil {
			return res, fmt.Errorf("drain route %q: session %s: %w", step, id, err)
		}
		res.Delegated = append(res.Delegated, DrainedSession{SessionID: id, DelegationID: d.DelegationID, StateVersion: out.StateVersion})
	}
	if idemKey == "" {
		return res, nil
	}
	// Record the answer under the key; a concurrent drain with the same key
	// that recorded first wins, and its answer is returned.
	b, err := json.Marshal(res)
	if err != nil {
		return res, err
	}
	out, err := s.Idempotent(ctx, actor, idemKey, fp, func(*Tx) (Outcome, error) { return Outcome{Data: b}, nil })
	if err != nil {
		return res, err
	}
	var first DrainResult
	if err := out.DecodeData(&first); err != nil {
		return res, err
	}
	return first, nil
}
