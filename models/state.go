package models

import "encoding/json"

// Resource is something a worker may use for the session (a database, an API).
type Resource struct {
	Name string `json:"name"`
	URI  string `json:"uri,omitempty"`
}

// Evidence backs a claim with where it came from.
type Evidence struct {
	Claim  string `json:"claim"`
	Source string `json:"source,omitempty"`
}

// Uncertainty is how sure a worker (or human) is of a result, 0 = certain.
type Uncertainty struct {
	Level float64 `json:"level"`
	Notes string  `json:"notes,omitempty"`
}

// StepRecord is one finished step, kept in the state so that the packet and the
// escalation package can say what was already done without the raw history.
type StepRecord struct {
	Step         string          `json:"step"`
	DelegationID string          `json:"delegation_id,omitempty"`
	Attempt      int             `json:"attempt,omitempty"`
	By           string          `json:"by"`
	ResultType   string          `json:"result_type"`
	Output       json.RawMessage `json:"output,omitempty"`
	// Evidence is the step's own evidence, so that the next worker's packet
	// carries it with the output (State.Evidence mixes every step's).
	Evidence  []Evidence `json:"evidence,omitempty"`
	NextStep  string     `json:"next_step,omitempty"`
	AtVersion int64      `json:"at_version"`
}

// ActiveDelegation is the delegation a session is waiting on, as the state sees
// it. The lease token and expiry are queue details and live only on the
// delegation row, so heartbeats do not grow the event log.
type ActiveDelegation struct {
	ID           string `json:"id"`
	Queue        string `json:"queue"`
	Step         string `json:"step"`
	Instructions string `json:"instructions,omitempty"`
	Attempt      int    `json:"attempt"`
	MaxAttempts  int    `json:"max_attempts"`
	LeaseSeconds int    `json:"lease_seconds"`
	Worker       string `json:"worker,omitempty"`
	// PacketMaxBytes is the byte budget of this delegation's context
	// packet; 0 means DefaultPacketMaxBytes.
	PacketMaxBytes int `json:"packet_max_bytes,omitempty"`
}

// Escalation is the package a human gets when a session escalates: everything
// needed to decide without reading the history.
type Escalation struct {
	Reason string `json:"reason"`
	// ReasonCode is why the session escalated, from a fixed list.
	ReasonCode      ReasonCode     `json:"reason_code"`
	Question        string         `json:"question"`
	Goal            string         `json:"goal"`
	ParentGoal      string         `json:"parent_goal,omitempty"`
	Facts           map[string]any `json:"facts,omitempty"`
	CompletedSteps  []string       `json:"completed_steps,omitempty"`
	Evidence        []Evidence     `json:"evidence,omitempty"`
	Risks           []string       `json:"risks,omitempty"`
	RecommendedNext string         `json:"recommended_next_step,omitempty"`
	Uncertainty     *Uncertainty   `json:"uncertainty,omitempty"`
	Step            string         `json:"step,omitempty"`
	DelegationID    string         `json:"delegation_id,omitempty"`
	By              string         `json:"by"`
	AtVersion       int64          `json:"at_version"`
	// Children are a parent's child sessions side by side, when the parent
	// escalated because its join conflicted, timed out or could not be met.
	Children []ChildOutcome `json:"children,omitempty"`
	// Attempts is the attempt the escalated delegation was on, of
	// MaxAttempts; Failures are its failed attempts (also listed, as text,
	// in Evidence); RecommendedAction is what the human should do first.
	Attempts          int              `json:"attempts,omitempty"`
	MaxAttempts       int              `json:"max_attempts,omitempty"`
	Failures          []AttemptFailure `json:"failures,omitempty"`
	RecommendedAction string           `json:"recommended_action,omitempty"`
}

// Note is a human's note on a session, optionally with evidence.
type Note struct {
	By        string    `json:"by"`
	Text      string    `json:"text"`
	Evidence  *Evidence `json:"evidence,omitempty"`
	AtVersion int64     `json:"at_version"`
	// SeenVersion is the version the author was looking at, when older
	// than AtVersion: notes are recorded whatever happened meanwhile.
	SeenVersion int64 `json:"seen_version,omitempty"`
}

// Join is how a parent waits for its children (the fan-out join contract).
type Join struct {
	Policy         string   `json:"policy"`
	Quorum         int      `json:"quorum,omitempty"`
	TimeoutSeconds int      `json:"timeout_seconds,omitempty"`
	Children       []string `json:"children"`
	// ConflictKeys are output keys on which completed children must agree.
	ConflictKeys []string `json:"conflict_keys,omitempty"`
	// DueAt is when the join times out (RFC 3339), fixed when the children
	// were spawned.
	DueAt string `json:"due_at,omitempty"`
	// Result is set when the join was recorded: met, conflict, timeout, unmet.
	Result string `json:"result,omitempty"`
}

// State is a session's latest valid state. It is produced only by Apply, stored
// as canonical JSON on the session row, and rebuilt exactly by replay.
type State struct {
	SessionID      string         `json:"session_id"`
	ParentID       string         `json:"parent_id,omitempty"`
	TicketRef      string         `json:"ticket_ref,omitempty"`
	Goal           string         `json:"goal"`
	Priority       int            `json:"priority"`
	Status         Status         `json:"status"`
	Version        int64          `json:"version"`
	Constraints    []string       `json:"constraints,omitempty"`
	Resources      []Resource     `json:"resources,omitempty"`
	DoneCriteria   []string       `json:"done_criteria,omitempty"`
	Facts          map[string]any `json:"facts,omitempty"`
	OpenQuestions  []string       `json:"open_questions,omitempty"`
	CompletedSteps []StepRecord   `json:"completed_steps,omitempty"`
	Evidence       []Evidence     `json:"evidence,omitempty"`
	Risks          []string       `json:"risks,omitempty"`
	CurrentStep    string         `json:"current_step,omitempty"`
	// Queue is the queue the session was last delegated to; it stays set
	// after the delegation ends so escalations can be filtered by queue.
	Queue       string            `json:"queue,omitempty"`
	NextStep    string            `json:"next_step,omitempty"`
	Uncertainty *Uncertainty      `json:"uncertainty,omitempty"`
	Delegation  *ActiveDelegation `json:"delegation,omitempty"`
	Escalation  *Escalation       `json:"escalation,omitempty"`
	Assignee    string            `json:"assignee,omitempty"`
	PausedFrom  Status            `json:"paused_from,omitempty"`
	Notes       []Note            `json:"notes,omitempty"`
	Join        *Join             `json:"join,omitempty"`
	Outcome     string            `json:"outcome,omitempty"`
	Reviews     int               `json:"reviews,omitempty"`
	// PausedUntil is when a snoozed session resumes by itself (RFC 3339).
	PausedUntil string `json:"paused_until,omitempty"`
	// Context packet v2 (see packet.go). RunReason says why the next worker
	// runs; FactVersions the state version that last set each fact, so that
	// "the newest facts" is well defined; Joined the children's results of
	// the last join, for the parent's next packet.
	RunReason    *RunReason       `json:"run_reason,omitempty"`
	FactVersions map[string]int64 `json:"fact_versions,omitempty"`
	Joined       *JoinedChildren  `json:"joined,omitempty"`
	// Failures are the last failed attempts (failed results, expired
	// leases) of the session's delegations, newest last, for escalation
	// packages and retries.
	Failures []AttemptFailure `json:"failures,omitempty"`
	// ResolvedRisks are risks that left Risks because a human or a worker
	// resolved them, newest last.
	ResolvedRisks []ResolvedRisk `json:"resolved_risks,omitempty"`
}

// Run reason kinds (RunReason.Kind).
const (
	RunFirst        = "first_run"
	RunRetry        = "retry"
	RunLeaseExpired = "lease_expired"
	RunAfterInput   = "after_input"
	RunAfterHuman   = "after_human"
	RunAfterJoin    = "after_join"
)

// RunReason is why the session's next (or current) worker runs: set by Apply
// from the event that caused the run, so it replays like everything else.
// Detail is the last failure's message, the input answer, the human's
// decision and note, or the join's result; Question is the question an
// input answered and By who answered or decided.
type RunReason struct {
	Kind      string `json:"kind"`
	Detail    string `json:"detail,omitempty"`
	Attempt   int    `json:"attempt"`
	Question  string `json:"question,omitempty"`
	By        string `json:"by,omitempty"`
	AtVersion int64  `json:"at_version,omitempty"`
}

// JoinedChildren is the outcome of a parent's last join: each child's
// status, output and evidence.
type JoinedChildren struct {
	Result    string         `json:"result"`
	Policy    string         `json:"policy,omitempty"`
	AtVersion int64          `json:"at_version"`
	Children  []ChildOutcome `json:"children"`
}

// clone returns a copy of s that Apply may change without touching s: every
// slice, map and pointer Apply writes through is copied. Values inside them
// (facts, outputs, evidence) are never mutated in place, only replaced, so
// they may be shared. TestApplyIsPure guards this.
func (s State) clone() State {
	c := s
	c.Constraints = cloneSlice(s.Constraints)
	c.Resources = cloneSlice(s.Resources)
	c.DoneCriteria = cloneSlice(s.DoneCriteria)
	c.OpenQuestions = cloneSlice(s.OpenQuestions)
	c.CompletedSteps = cloneSlice(s.CompletedSteps)
	c.Evidence = cloneSlice(s.Evidence)
	c.Risks = cloneSlice(s.Risks)
	c.Notes = cloneSlice(s.Notes)
	c.Failures = cloneSlice(s.Failures)
	c.ResolvedRisks = cloneSlice(s.ResolvedRisks)
	if s.Facts != nil {
		c.Facts = make(map[string]any, len(s.Facts))
		for k, v := range s.Facts {
			c.Facts[k] = v
		}
	}
	if s.FactVersions != nil {
		c.FactVersions = make(map[string]int64, len(s.FactVersions))
		for k, v := range s.FactVersions {
			c.FactVersions[k] = v
		}
	}
	if s.RunReason != nil {
		r := *s.RunReason
		c.RunReason = &r
	}
	if s.Uncertainty != nil {
		u := *s.Uncertainty
		c.Uncertainty = &u
	}
	if s.Delegation != nil {
		d := *s.Delegation
		c.Delegation = &d
	}
	if s.Escalation != nil {
		e := *s.Escalation
		c.Escalation = &e
	}
	if s.Join != nil {
		j := *s.Join
		j.Children = cloneSlice(s.Join.Children)
		c.Join = &j
	}
	return c
}

func cloneSlice[T any](xs []T) []T {
	if xs == nil {
		return nil
	}
	return append(make([]T, 0, len(xs)), xs...)
}
