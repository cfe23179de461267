package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Fan-out: a parent session spawns child sessions, each a full session with
// its own id, and waits for them under a join contract.
//
//	open ──children.spawned──▶ waiting_children ──children.joined (met)──────────────▶ open
//	                                          └──children.joined (conflict, timeout,
//	                                                              unmet)─────────────▶ escalated
//
// The join is evaluated when a child reaches a terminal status (the
// post-commit hook of Execute calls onChildDone), when a waiting parent is
// resumed, and by the maintenance pass (timeouts, and a catch-up for a hook
// lost to a crash). Every evaluation runs under the parent's lock and only
// writes while the parent is still waiting, so a join is recorded once.

// Join policies.
const (
	JoinAll    = "all"
	JoinAny    = "any"
	JoinQuorum = "quorum"
)

// Join results (JoinPayload.Result).
const (
	JoinMet      = "met"
	JoinConflict = "conflict"
	JoinTimeout  = "timeout"
	JoinUnmet    = "unmet" // every child finished, and too few completed
)

// Bounds of a fan-out (README "JSON API").
const (
	MaxChildren               = 50
	DefaultJoinTimeoutSeconds = 600
	MaxJoinTimeoutSeconds     = 86400
	maxConflictKeys           = 50
	maxConflictKeyLen         = 200
)

// JoinActor is the actor of children.joined events.
const JoinActor = "system:join"

// JoinInput is the join contract of a fan-out.
type JoinInput struct {
	Policy         string `json:"policy"`
	Quorum         *int   `json:"quorum"`
	TimeoutSeconds *int   `json:"timeout_seconds"`
	// ConflictKeys are keys of the children's outputs that completed
	// children must agree on; a disagreement escalates the parent.
	ConflictKeys []string `json:"conflict_keys"`
}

// ChildInput is one child of a fan-out: its goal and the first step to
// delegate.
type ChildInput struct {
	Goal         string         `json:"goal"`
	Queue        string         `json:"queue"`
	Step         string         `json:"step"`
	Instructions string         `json:"instructions"`
	Facts        map[string]any `json:"facts"`
	MaxAttempts  *int           `json:"max_attempts"`
	LeaseSeconds *int           `json:"lease_seconds"`
	// PacketMaxBytes is the byte budget of the child's context packet.
	PacketMaxBytes *int `json:"packet_max_bytes"`
}

// SpawnInput is a controller's fan-out request.
type SpawnInput struct {
	ExpectedVersion *int64       `json:"expected_version"`
	Join            JoinInput    `json:"join"`
	Children        []ChildInput `json:"children"`
}

// Validate lists every problem with the input.
func (in SpawnInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	if in.ExpectedVersion == nil {
		v.Add("expected_version", "is required")
	} else if *in.ExpectedVersion < 1 {
		v.Add("expected_version", "must be at least 1")
	}
	n := len(in.Children)
	j := in.Join
	switch j.Policy {
	case JoinAll, JoinAny, JoinQuorum:
	case "":
		v.Add("join.policy", "is required: all, any or quorum")
	default:
		v.Add("join.policy", "must be one of all, any, quorum")
	}
	switch {
	case j.Policy == JoinQuorum && j.Quorum == nil:
		v.Add("join.quorum", "is required for policy quorum")
	case j.Policy == JoinQuorum && n > 0 && (*j.Quorum < 1 || *j.Quorum > n):
		v.Add("join.quorum", "must be between 1 and %d (the number of children)", n)
	case j.Policy == JoinQuorum && *j.Quorum < 1:
		v.Add("join.quorum", "must be at least 1")
	case j.Policy != JoinQuorum && j.Quorum != nil:
		v.Add("join.quorum", "is only allowed with policy quorum")
	}
	if t := j.TimeoutSeconds; t != nil && (*t < 1 || *t > MaxJoinTimeoutSeconds) {
		v.Add("join.timeout_seconds", "must be between 1 and %d", MaxJoinTimeoutSeconds)
	}
	if len(j.ConflictKeys) > maxConflictKeys {
		v.Add("join.conflict_keys", "must have at most %d items", maxConflictKeys)
	}
	seen := map[string]bool{}
	for i, k := range j.ConflictKeys {
		field := fmt.Sprintf("join.conflict_keys[%d]", i)
		switch {
		case strings.TrimSpace(k) == "":
			v.Add(field, "must not be empty")
		case len(k) > maxConflictKeyLen:
			v.Add(field, "must be at most %d bytes", maxConflictKeyLen)
		case seen[k]:
			v.Add(field, "repeats %q", k)
		}
		seen[k] = true
	}
	switch {
	case n == 0:
		v.Add("children", "must have at least one child")
	case n > MaxChildren:
		v.Add("children", "must have at most %d children", MaxChildren)
	}
	for i, c := range in.Children {
		prefix := fmt.Sprintf("children[%d].", i)
		switch {
		case strings.TrimSpace(c.Goal) == "":
			v.Add(prefix+"goal", "is required")
		case utf8.RuneCountInString(c.Goal) > MaxGoalLen:
			v.Add(prefix+"goal", "must be at most %d characters", MaxGoalLen)
		}
		sub := &ValidationError{}
		validateDelegation(sub, c.Queue, c.Step, c.Instructions, c.MaxAttempts, c.LeaseSeconds)
		validateFacts(sub, "facts", c.Facts)
		validatePacketMaxBytes(sub, "packet_max_bytes", c.PacketMaxBytes)
		for _, f := range sub.Fields {
			v.Add(prefix+f.Field, "%s", f.Message)
		}
	}
	return v.Err()
}

// SpawnedChild is one child created by a fan-out.
type SpawnedChild struct {
	SessionID    string `json:"session_id"`
	DelegationID string `json:"delegation_id"`
}

// ChildrenSpawned is Outcome.Data of SpawnChildren.
type ChildrenSpawned struct {
	Children []SpawnedChild `json:"children"`
}

// SpawnChildren fans a parent session out into child sessions. In one
// transaction it records the parent's children.spawned event (the parent
// waits for its children under the join contract) and, for each child, its
// session.created (naming the parent and carrying the parent's goal) and
// its delegation.created with the queued delegation. Outcome.Data is a
// ChildrenSpawned.
func (s *Store) SpawnChildren(ctx context.Context, parentID, actor, idemKey string, in SpawnInput) (Outcome, error) {
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	// The fingerprint is the request, not the ids generated for it, so that
	// a repeat is recognised as the same request.
	fp, err := Fingerprint("children", parentID, in)
	if err != nil {
		return Outcome{}, err
	}
	ids := make([]string, len(in.Children))
	for i := range ids {
		ids[i] = NewID("ses")
	}
	timeout := intOr(in.Join.TimeoutSeconds, DefaultJoinTimeoutSeconds)
	join := Join{
		Policy: in.Join.Policy, Quorum: intOr(in.Join.Quorum, 0), TimeoutSeconds: timeout,
		Children: ids, ConflictKeys: in.Join.ConflictKeys,
	}
	var spawned []committed
	out, err := s.Execute(ctx, Command{
		SessionID: parentID, Type: EventChildrenSpawned, Actor: actor, ExpectedVersion: in.ExpectedVersion,
		IdempotencyKey: idemKey, Fingerprint: fp,
		Prepare: func(tx *Tx, cur State) (any, error) {
			j := join
			j.DueAt = formatScheduled(s.now().Add(time.Duration(timeout) * time.Second))
			return ChildrenPayload{Join: j}, nil
		},
		Effect: func(tx *Tx, parent State, ev Event) (any, error) {
			spawned = spawned[:0]
			observe := func(tx *Tx, next State, ev Event) (any, error) {
				spawned = append(spawned, committed{ev: ev, status: next.Status, queue: next.Queue})
				return nil, nil
			}
			res := ChildrenSpawned{Children: make([]SpawnedChild, 0, len(in.Children))}
			for i, c := range in.Children {
				created := SessionCreatedPayload{
					Goal: strings.TrimSpace(c.Goal), TicketRef: parent.TicketRef, ParentID: parent.SessionID,
					ParentGoal: parent.Goal, Priority: parent.Priority, Constraints: parent.Constraints,
					Resources: parent.Resources, Facts: c.Facts,
				}
				if _, _, err := s.ExecuteTx(tx, Command{
					SessionID: ids[i], Type: EventSessionCreated, Actor: actor, Payload: created, Effect: observe,
				}); err != nil {
					return nil, fmt.Errorf("child %d: %w", i, err)
				}
				p := DelegationPayload{
					DelegationID: NewID("dlg"), Queue: c.Queue, Step: strings.TrimSpace(c.Step), Instructions: c.Instructions,
					MaxAttempts:    intOr(c.MaxAttempts, DefaultMaxAttempts),
					LeaseSeconds:   intOr(c.LeaseSeconds, DefaultLeaseSeconds),
					PacketMaxBytes: intOr(c.PacketMaxBytes, 0),
				}
				insert := s.insertDelegation(p, time.Time{})
				if _, _, err := s.ExecuteTx(tx, Command{
					SessionID: ids[i], Type: EventDelegationCreated, Actor: actor, Payload: p,
					Effect: func(tx *Tx, next State, ev Event) (any, error) {
						observe(tx, next, ev)
						return insert(tx, next, ev)
					},
				}); err != nil {
					return nil, fmt.Errorf("child %d: %w", i, err)
				}
				res.Children = append(res.Children, SpawnedChild{SessionID: ids[i], DelegationID: p.DelegationID})
			}
			return res, nil
		},
	})
	if err != nil || out.Replayed {
		return out, err
	}
	if s.Observer != nil {
		for _, c := range spawned {
			s.Observer.Committed(c.ev, c.status, c.queue)
		}
	}
	woken := map[string]bool{}
	for _, c := range in.Children {
		if !woken[c.Queue] {
			woken[c.Queue] = true
			s.announce(c.Queue)
		}
	}
	return out, nil
}

// onChildDone is called after a child session reaches a terminal status, to
// evaluate its parent's join contract. It is not cut short when the caller
// goes away (the child's result is committed already). A failure is logged:
// the maintenance pass evaluates waiting parents again.
func (s *Store) onChildDone(ctx context.Context, parentID string) {
	if _, err := s.evaluateJoin(context.WithoutCancel(ctx), parentID); err != nil {
		s.Logger.Warn("join evaluation failed; the maintenance pass will retry", "parent", parentID, "err", err)
	}
}

// evaluateJoin records the parent's children.joined event if its join
// contract is decided (met, conflicting, unmet or timed out) and returns the
// result, or "" when the parent is not waiting or the join is not decided yet.
func (s *Store) evaluateJoin(ctx context.Context, parentID string) (string, error) {
	var (
		result string
		losers []string
		reason string
	)
	_, err := s.Execute(ctx, Command{
		SessionID: parentID, Type: EventChildrenJoined, Actor: JoinActor,
		Prepare: func(tx *Tx, cur State) (any, error) {
			result, losers, reason = "", nil, ""
			if cur.Status != StatusWaitingChildren || cur.Join == nil {
				return nil, errSkip
			}
			kids, err := loadChildren(tx, cur.Join.Children)
			if err != nil {
				return nil, err
			}
			p, ok := DecideJoin(*cur.Join, kids, s.now())
			if !ok {
				return nil, errSkip
			}
			result = p.Result
			losers, reason = joinLosers(*cur.Join, p)
			return p, nil
		},
		// The children an any or quorum join no longer needs are cancelled
		// with the join, so no worker keeps spending on them.
		Effect: func(tx *Tx, next State, ev Event) (any, error) {
			for _, id := range losers {
				_, _, err := s.ExecuteTx(tx, Command{
					SessionID: id, Type: EventSessionCancelled, Actor: JoinActor,
					Payload: ReasonPayload{Reason: reason},
					Effect:  s.cancelWithChildren(JoinActor),
				})
				if err != nil && ErrorCode(err) != EILLEGAL {
					return nil, fmt.Errorf("cancel losing child %s: %w", id, err)
				}
			}
			return nil, nil
		},
	})
	switch {
	case err == nil:
		return result, nil
	case errors.Is(err, errSkip), ErrorCode(err) == EILLEGAL, ErrorCode(err) == ENOTFOUND:
		return "", nil
	}
	return "", fmt.Errorf("join of %s: %w", parentID, err)
}

// joinLosers lists the children a met any or quorum join leaves unfinished,
// and the reason they are cancelled with: which children met the join.
func joinLosers(j Join, p JoinPayload) ([]string, string) {
	if p.Result != JoinMet || j.Policy == JoinAll {
		return nil, ""
	}
	var winners, losers []string
	for _, c := range p.Children {
		switch {
		case c.Status == StatusCompleted:
			winners = append(winners, c.SessionID)
		case !c.Status.Terminal():
			losers = append(losers, c.SessionID)
		}
	}
	policy := j.Policy
	if j.Policy == JoinQuorum {
		policy = fmt.Sprintf("quorum %d", j.Quorum)
	}
	return losers, fmt.Sprintf("join met by %s (policy %s)", strings.Join(winners, ", "), policy)
}

// childRow is the part of a child's session row a join decision reads.
type childRow struct {
	ID    string
	State string
}

// loadChildren reads the children's states in the join's order.
func loadChildren(tx *Tx, ids []string) ([]State, error) {
	rows, err := selectTx[childRow](tx, `SELECT session_id AS id, state FROM session_states WHERE session_id IN ?`, ids)
	if err != nil {
		return nil, fmt.Errorf("load children: %w", err)
	}
	byID := make(map[string]Session, len(rows))
	for _, r := range rows {
		byID[r.ID] = Session{ID: r.ID, State: r.State}
	}
	out := make([]State, len(ids))
	for i, id := range ids {
		r, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("child session %s is missing", id)
		}
		st, err := r.Decode()
		if err != nil {
			return nil, err
		}
		out[i] = st
	}
	return out, nil
}

// childOutcome is a child's outcome as a join records it: its status, the
// output of its last completed step and its evidence.
func childOutcome(st State) ChildOutcome {
	c := ChildOutcome{SessionID: st.SessionID, Status: st.Status, Evidence: st.Evidence, Goal: st.Goal, Outcome: st.Outcome}
	if n := len(st.CompletedSteps); n > 0 {
		c.Output = st.CompletedSteps[n-1].Output
	}
	return c
}

// DecideJoin applies a join contract to the children's states at now. It
// returns the children.joined payload and true when the join is decided:
//
//   - all: once every child finished: met when all completed; a conflict
//     when completed and rejected children are mixed; unmet otherwise.
//   - any: met when a child completed; unmet when all finished without one.
//   - quorum: met when Quorum children completed; unmet when all finished
//     with fewer.
//
// Completed children whose outputs disagree on a conflict key turn "met"
// into a conflict. An undecided join past its due time times out.
func DecideJoin(j Join, kids []State, now time.Time) (JoinPayload, bool) {
	p := JoinPayload{Children: make([]ChildOutcome, len(kids))}
	var completed, rejected, cancelled, pending int
	for i, k := range kids {
		p.Children[i] = childOutcome(k)
		switch k.Status {
		case StatusCompleted:
			completed++
		case StatusRejected:
			rejected++
		case StatusCancelled:
			cancelled++
		default:
			pending++
		}
	}
	n := len(kids)
	tally := fmt.Sprintf("%d of %d children completed, %d rejected, %d cancelled, %d unfinished (policy %s",
		completed, n, rejected, cancelled, pending, j.Policy)
	if j.Policy == JoinQuorum {
		tally += fmt.Sprintf(", quorum %d", j.Quorum)
	}
	tally += ")"
	decide := func(result, reason string) (JoinPayload, bool) {
		p.Result, p.Reason = result, reason
		return p, true
	}
	metOrConflict := func() (JoinPayload, bool) {
		if reason := keyConflict(j.ConflictKeys, kids); reason != "" {
			return decide(JoinConflict, reason+"; "+tally)
		}
		return decide(JoinMet, tally)
	}
	need := n
	switch j.Policy {
	case JoinAny:
		need = 1
	case JoinQuorum:
		need = j.Quorum
	}
	switch {
	case j.Policy == JoinAll && pending == 0 && completed == n:
		return metOrConflict()
	case j.Policy == JoinAll && pending == 0 && completed > 0 && rejected > 0:
		return decide(JoinConflict, "completed and rejected children disagree; "+tally)
	case j.Policy != JoinAll && completed >= need:
		return metOrConflict()
	case pending == 0:
		return decide(JoinUnmet, tally)
	}
	if j.DueAt != "" {
		if due, err := parseTime(j.DueAt); err == nil && !now.Before(due) {
			return decide(JoinTimeout, fmt.Sprintf("not decided by %s; %s", j.DueAt, tally))
		}
	}
	return JoinPayload{}, false
}

// keyConflict says how completed children's outputs disagree on the keys,
// or "" when they agree. A child whose output lacks a key does not take part
// in that key's comparison.
func keyConflict(keys []string, kids []State) string {
	for _, key := range keys {
		values := map[string][]string{}
		var order []string
		for _, k := range kids {
			if k.Status != StatusCompleted {
				continue
			}
			out := childOutcome(k).Output
			if len(out) == 0 {
				continue
			}
			var obj map[string]json.RawMessage
			if decodeJSON(out, &obj) != nil {
				continue
			}
			raw, ok := obj[key]
			if !ok {
				continue
			}
			b, err := Canonical(raw)
			if err != nil {
				continue
			}
			v := string(b)
			if _, seen := values[v]; !seen {
				order = append(order, v)
			}
			values[v] = append(values[v], k.SessionID)
		}
		if len(values) > 1 {
			parts := make([]string, 0, len(order))
			for _, v := range order {
				parts = append(parts, fmt.Sprintf("%s says %s", strings.Join(values[v], ", "), v))
			}
			return fmt.Sprintf("children disagree on %q: %s", key, strings.Join(parts, "; "))
		}
	}
	return ""
}

// MaintainJoins records the joins the maintenance pass finds due: parents
// whose join timed out, and parents whose current children have all
// finished (a catch-up for a child-done hook lost between commit and
// evaluation, over every waiting parent). It returns how many joins it
// recorded.
func (s *Store) MaintainJoins(ctx context.Context, limit int) (int, error) {
	n, _, err := s.joinTimeouts(ctx, limit)
	if err != nil {
		return n, err
	}
	s.maint.mu.Lock()
	s.maint.childDone = time.Time{}
	s.maint.mu.Unlock()
	m, _, err := s.joinCatchUp(ctx, limit)
	return n + m, err
}

// joinTimeouts records the joins whose timeout has come, through
// sessions_join_due_at_idx, and returns how many it recorded and found.
func (s *Store) joinTimeouts(ctx context.Context, limit int) (int, int, error) {
	if limit <= 0 {
		limit = 100
	}
	var timedOut []string
	err := s.DB.WithContext(ctx).Model(&Session{}).
		Where("join_due_at <= ? AND status = ?", NewUTCTime(s.now()), StatusWaitingChildren).
		Order("join_due_at").Limit(limit).Pluck("id", &timedOut).Error
	if err != nil {
		return 0, 0, fmt.Errorf("find timed out joins: %w", err)
	}
	n, err := s.evaluateJoins(ctx, timedOut)
	return n, len(timedOut), err
}

// catchUpLookback widens the join catch-up's window of child writes: a
// transaction stamps updated_at before it commits, so a child written
// slightly before the newest one seen may commit after it.
const catchUpLookback = time.Minute

// joinCatchUp evaluates the joins of the waiting parents whose children
// were written since the last catch-up (all waiting parents the first time
// in this process), which covers a child-done hook lost in a crash.
func (s *Store) joinCatchUp(ctx context.Context, limit int) (int, int, error) {
	if limit <= 0 {
		limit = 100
	}
	s.maint.mu.Lock()
	since, seen := s.maint.childDone, s.maint.childSeen
	s.maint.mu.Unlock()
	// The current children are those created by the parent's latest
	// fan-out; older children (left running by an any or quorum join) do
	// not hold the catch-up back.
	q := `SELECT p.id FROM sessions p
WHERE p.status = 'waiting_children' AND NOT EXISTS (
	SELECT 1 FROM sessions c
	WHERE c.parent_id = p.id AND c.status NOT IN ('completed', 'rejected', 'cancelled')
	  AND c.created_at >= (SELECT max(e.created_at) FROM events e WHERE e.session_id = p.id AND e.type = 'children.spawned'))`
	args := []any{}
	if !since.IsZero() {
		q += ` AND p.id IN (SELECT c.parent_id FROM sessions c WHERE c.parent_id IS NOT NULL AND c.updated_at >= ?)`
		args = append(args, NewUTCTime(since.Add(-catchUpLookback)))
	}
	var ready []string
	if err := s.DB.WithContext(ctx).Raw(q+` ORDER BY p.id LIMIT ?`, append(args, limit)...).Scan(&ready).Error; err != nil {
		return 0, 0, fmt.Errorf("find finished joins: %w", err)
	}
	n, err := s.evaluateJoins(ctx, ready)
	if err == nil && len(ready) < limit && !seen.IsZero() {
		s.maint.mu.Lock()
		if seen.After(s.maint.childDone) {
			s.maint.childDone = seen
		}
		s.maint.mu.Unlock()
	}
	return n, len(ready), err
}

// evaluateJoins evaluates the joins of ids and returns how many it recorded.
func (s *Store) evaluateJoins(ctx context.Context, ids []string) (int, error) {
	ids = append([]string(nil), ids...)
	sort.Strings(ids)
	n := 0
	for i, id := range ids {
		if i > 0 && ids[i-1] == id {
			continue
		}
		r, err := s.evaluateJoin(ctx, id)
		if err != nil {
			return n, err
		}
		if r != "" {
			n++
		}
	}
	return n, nil
}

// cancelWithChildren is the effect of cancelling a session: its open
// delegation ends (a held lease is fenced off) and its open children, and
// theirs, are cancelled in the same transaction.
func (s *Store) cancelWithChildren(actor string) func(tx *Tx, next State, ev Event) (any, error) {
	end := s.endDelegation(DelegationCancelled)
	return func(tx *Tx, next State, ev Event) (any, error) {
		if _, err := end(tx, next, ev); err != nil {
			return nil, err
		}
		return nil, s.cancelChildren(tx, next.SessionID, actor)
	}
}

// cancelChildren cancels every unfinished child of parentID, within tx. A
// child's delegation is cancelled with it, so a worker holding its lease
// gets a conflict for any later heartbeat or result.
func (s *Store) cancelChildren(tx *Tx, parentID, actor string) error {
	ids, err := selectTx[string](tx, `SELECT id FROM sessions WHERE parent_id = ? AND status NOT IN ? ORDER BY id`,
		parentID, []Status{StatusCompleted, StatusRejected, StatusCancelled})
	if err != nil {
		return fmt.Errorf("session %s: children: %w", parentID, err)
	}
	for _, id := range ids {
		_, _, err := s.ExecuteTx(tx, Command{
			SessionID: id, Type: EventSessionCancelled, Actor: actor,
			Payload: ReasonPayload{Reason: "parent session " + parentID + " was cancelled"},
			Effect:  s.cancelWithChildren(actor),
		})
		if err != nil && ErrorCode(err) != EILLEGAL {
			return fmt.Errorf("cancel child %s: %w", id, err)
		}
	}
	return nil
}
