package client

import (
	"encoding/json"
	"time"
)

// The session statuses of the API.
const (
	StatusOpen            = "open"
	StatusQueued          = "queued"
	StatusRunning         = "running"
	StatusAwaitingInput   = "awaiting_input"
	StatusPaused          = "paused"
	StatusEscalated       = "escalated"
	StatusHumanActive     = "human_active"
	StatusWaitingChildren = "waiting_children"
	StatusCompleted       = "completed"
	StatusRejected        = "rejected"
	StatusCancelled       = "cancelled"
)

// The result types of the return contract.
const (
	ResultCompleted  = "completed"
	ResultNeedsInput = "needs_input"
	ResultRejected   = "rejected"
	ResultEscalated  = "escalated"
	ResultFailed     = "failed"
)

// The failure classes of a failed result.
const (
	FailureTransient = "transient"
	FailureBadInput  = "bad_input"
	FailurePermanent = "permanent"
)

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

// Uncertainty is how sure a worker is of a result; 0 is certain.
type Uncertainty struct {
	Level float64 `json:"level"`
	Notes string  `json:"notes,omitempty"`
}

// Failure is the failure part of a failed result.
type Failure struct {
	Class   string `json:"class"`
	Message string `json:"message,omitempty"`
}

// CreateSessionInput starts a session (POST /api/v1/sessions). Goal is required.
type CreateSessionInput struct {
	Goal         string         `json:"goal"`
	TicketRef    string         `json:"ticket_ref,omitempty"`
	Constraints  []string       `json:"constraints,omitempty"`
	Resources    []Resource     `json:"resources,omitempty"`
	DoneCriteria []string       `json:"done_criteria,omitempty"`
	Facts        map[string]any `json:"facts,omitempty"`
	// Priority runs from 1 (most urgent) to 5; 0 leaves the server's default.
	Priority int `json:"priority,omitempty"`
}

// Outcome is the answer to a state-changing command: where the session
// stands after it.
type Outcome struct {
	SessionID    string `json:"session_id"`
	Status       string `json:"status"`
	StateVersion int64  `json:"state_version"`
}

// Session is a session with its latest valid state (GET /api/v1/sessions/{id}).
type Session struct {
	SessionID    string          `json:"session_id"`
	ParentID     *string         `json:"parent_id"`
	TicketRef    string          `json:"ticket_ref"`
	Goal         string          `json:"goal"`
	Status       string          `json:"status"`
	StateVersion int64           `json:"state_version"`
	CurrentStep  string          `json:"current_step"`
	State        json.RawMessage `json:"state"`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
}

// Event is one immutable record of a session's event log.
type Event struct {
	Seq           int64  `json:"seq"`
	Type          string `json:"type"`
	Actor         string `json:"actor"`
	VersionBefore int64  `json:"version_before"`
	VersionAfter  int64  `json:"version_after"`
	// Payload is the event's payload as JSON; see DecodePayload.
	Payload        json.RawMessage `json:"payload"`
	IdempotencyKey *string         `json:"idempotency_key"`
	Hash           string          `json:"hash"`
	PrevHash       string          `json:"prev_hash"`
	CreatedAt      time.Time       `json:"created_at"`
}

// DecodePayload decodes the event's payload into v. It accepts the payload
// both as a JSON object and as a string holding JSON.
func (e Event) DecodePayload(v any) error {
	b := e.Payload
	var s string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		b = []byte(s)
	}
	return json.Unmarshal(b, v)
}

// EventsPage is one page of a session's events.
type EventsPage struct {
	Events       []Event `json:"events"`
	NextAfterSeq int64   `json:"next_after_seq"`
}

// PacketStep summarises a finished step in a context packet.
type PacketStep struct {
	Step       string `json:"step"`
	ResultType string `json:"result_type"`
	NextStep   string `json:"next_step,omitempty"`
}

// Packet is the minimal context a worker gets, built from the latest valid
// state. PrefixHash covers the stable fields (goal, constraints, resources,
// done criteria), so a cached prompt prefix may be reused while it matches.
type Packet struct {
	SessionID      string         `json:"session_id"`
	BasedOnVersion int64          `json:"based_on_version"`
	Goal           string         `json:"goal"`
	Constraints    []string       `json:"constraints"`
	Resources      []Resource     `json:"resources"`
	DoneCriteria   []string       `json:"done_criteria"`
	ConfirmedFacts map[string]any `json:"confirmed_facts"`
	OpenQuestions  []string       `json:"open_questions"`
	CompletedSteps []PacketStep   `json:"completed_steps"`
	Risks          []string       `json:"risks"`
	Step           string         `json:"step"`
	Instructions   string         `json:"instructions"`
	PrefixHash     string         `json:"prefix_hash"`
	// Packet v2 (see packet.go).
	RunReason       RunReason        `json:"run_reason"`
	Notes           []PacketNote     `json:"notes"`
	PreviousOutputs []PreviousOutput `json:"previous_outputs"`
	Budget          PacketBudget     `json:"budget"`
}

// TransitionInput is a controller's pause, resume, escalate or cancel.
// ExpectedVersion must be the session's current state version.
type TransitionInput struct {
	ExpectedVersion int64  `json:"expected_version"`
	Reason          string `json:"reason,omitempty"`
	// Question is the question for the human (escalate only).
	Question string `json:"question,omitempty"`
	// Until snoozes a pause (pause only): the session resumes by itself at
	// this time, RFC 3339 and in the future. See Snooze.
	Until string `json:"until,omitempty"`
}

// DelegateInput queues a step of a session. Zero MaxAttempts and
// LeaseSeconds leave the server's defaults (3 and 30).
type DelegateInput struct {
	Queue           string         `json:"queue"`
	Step            string         `json:"step"`
	Instructions    string         `json:"instructions,omitempty"`
	ExpectedVersion int64          `json:"expected_version"`
	MaxAttempts     int            `json:"max_attempts,omitempty"`
	LeaseSeconds    int            `json:"lease_seconds,omitempty"`
	Facts           map[string]any `json:"facts,omitempty"`
	// PacketMaxBytes is the context packet's byte budget (4096–1048576;
	// zero leaves the server's 32768).
	PacketMaxBytes int `json:"packet_max_bytes,omitempty"`
	// AvailableAt (RFC 3339) or DelaySeconds schedule the delegation: no
	// worker can lease it before then. At most one may be given.
	AvailableAt  string `json:"available_at,omitempty"`
	DelaySeconds int    `json:"delay_seconds,omitempty"`
}

// Delegation is the answer to Delegate.
type Delegation struct {
	DelegationID string `json:"delegation_id"`
	SessionID    string `json:"session_id"`
	StateVersion int64  `json:"state_version"`
	Status       string `json:"status"`
}

// LeaseInput asks a queue for work. WaitSeconds (0–30) is how long the
// server may hold the request open waiting for work.
type LeaseInput struct {
	Worker      string `json:"worker"`
	WaitSeconds int    `json:"wait_seconds"`
}

// Lease is a worker's time-bounded claim on a delegation, with its context
// packet. The LeaseToken fences the worker: heartbeats and the result must
// carry it.
type Lease struct {
	// Queue is the queue the lease came from (filled in by Client.Lease when
	// the server does not say it).
	Queue          string    `json:"queue,omitempty"`
	DelegationID   string    `json:"delegation_id"`
	SessionID      string    `json:"session_id"`
	Step           string    `json:"step"`
	Attempt        int       `json:"attempt"`
	LeaseToken     string    `json:"lease_token"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	Packet         Packet    `json:"packet"`
	// Traceparent and Tracestate are the W3C trace context of the request
	// that created the delegation ("" when it had none). Continue the trace
	// with WithTraceparent(ctx, l.Traceparent, l.Tracestate) (Worker does it
	// for its handler, heartbeats and result).
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// ResultInput is the return contract. Worker.Run fills in LeaseToken,
// SessionID and Step from the lease when they are empty.
//
// completed needs at least one Evidence item; needs_input and escalated need
// NextStep or Question; failed needs Failure.
type ResultInput struct {
	LeaseToken  string       `json:"lease_token"`
	SessionID   string       `json:"session_id"`
	Step        string       `json:"step"`
	ResultType  string       `json:"result_type"`
	Output      any          `json:"output,omitempty"`
	Evidence    []Evidence   `json:"evidence,omitempty"`
	Uncertainty *Uncertainty `json:"uncertainty,omitempty"`
	NextStep    string       `json:"next_step,omitempty"`
	Question    string       `json:"question,omitempty"`
	Risks       []string     `json:"risks,omitempty"`
	Failure     *Failure     `json:"failure,omitempty"`
	Usage       *Usage       `json:"usage,omitempty"`
	// ResolvedRisks names open risks of the session (exact text) that this
	// result resolves; a name that is not open is a 422.
	ResolvedRisks []string `json:"resolved_risks,omitempty"`
}

// ChildInput is one child session of a fan-out.
type ChildInput struct {
	Goal         string `json:"goal"`
	Queue        string `json:"queue"`
	Step         string `json:"step"`
	Instructions string `json:"instructions,omitempty"`
	// PacketMaxBytes is the child's packet budget (zero: the server's).
	PacketMaxBytes int `json:"packet_max_bytes,omitempty"`
}

// JoinInput is how a parent waits for its children: policy all, any or
// quorum.
type JoinInput struct {
	Policy         string `json:"policy"`
	Quorum         int    `json:"quorum,omitempty"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty"`
}

// SpawnChildrenInput fans a session out into child sessions.
type SpawnChildrenInput struct {
	ExpectedVersion int64        `json:"expected_version"`
	Join            JoinInput    `json:"join"`
	Children        []ChildInput `json:"children"`
}

// ChildRef names a child session and the delegation queued for it.
type ChildRef struct {
	SessionID    string `json:"session_id"`
	DelegationID string `json:"delegation_id,omitempty"`
}

// Children is the answer to SpawnChildren: the children and where the
// parent stands.
type Children struct {
	Children     []ChildRef `json:"children"`
	SessionID    string     `json:"session_id"`
	Status       string     `json:"status"`
	StateVersion int64      `json:"state_version"`
}
