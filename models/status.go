package models

// Status is where a session stands in its state machine.
//
//	          delegation.created            delegation.leased
//	open ─────────────────────────▶ queued ───────────────────▶ running
//	 ▲  ▲                             ▲  ▲                        │
//	 │  │ input.provided              │  └── lease_expired ───────┤
//	 │  └──────── awaiting_input ◀────┼──── needs_input/bad_input ┤
//	 │                                └──── transient retry ──────┤
//	 │ result.completed (next step)                               │
//	 └────────────────────────────────────────────────────────────┤
//	                                                              ├─▶ completed / rejected
//	escalated ◀── permanent / escalated / retries exhausted ──────┘
//	 │  ▲
//	 ▼  │ human.released
//	human_active ──▶ completed | rejected | awaiting_input | queued (resume, hand back)
//
// Any non-terminal status may be paused (and resumed to where it was),
// escalated by a controller, or cancelled. completed, rejected and cancelled
// are terminal. The table in transitions is the single authority; this drawing
// only explains it.
type Status string

// The statuses of a session.
const (
	StatusOpen            Status = "open"
	StatusQueued          Status = "queued"
	StatusRunning         Status = "running"
	StatusAwaitingInput   Status = "awaiting_input"
	StatusPaused          Status = "paused"
	StatusEscalated       Status = "escalated"
	StatusHumanActive     Status = "human_active"
	StatusWaitingChildren Status = "waiting_children"
	StatusCompleted       Status = "completed"
	StatusRejected        Status = "rejected"
	StatusCancelled       Status = "cancelled"
)

// AllStatuses lists every status in display order.
var AllStatuses = []Status{
	StatusOpen, StatusQueued, StatusRunning, StatusAwaitingInput, StatusPaused,
	StatusEscalated, StatusHumanActive, StatusWaitingChildren,
	StatusCompleted, StatusRejected, StatusCancelled,
}

// Terminal reports whether no further work transition may leave s.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusRejected || s == StatusCancelled
}

// Valid reports whether s is one of the known statuses.
func (s Status) Valid() bool {
	for _, v := range AllStatuses {
		if v == s {
			return true
		}
	}
	return false
}

func statusSet(ss ...Status) map[Status]bool {
	m := make(map[Status]bool, len(ss))
	for _, s := range ss {
		m[s] = true
	}
	return m
}

// nonTerminal are the statuses from which pause, escalate and cancel are legal.
var nonTerminal = []Status{
	StatusOpen, StatusQueued, StatusRunning, StatusAwaitingInput, StatusPaused,
	StatusEscalated, StatusHumanActive, StatusWaitingChildren,
}

// transitions is the table of legal transitions: for each event type, the
// statuses it may be applied in. Where the target status depends on the
// payload, Apply computes it; the table only says what is allowed at all.
// A nil entry means "from any status, terminal included" (audit-only events).
var transitions = map[EventType]map[Status]bool{
	EventSessionCreated:    statusSet(), // only from the empty state; checked in Apply
	EventSessionPaused:     statusSet(StatusOpen, StatusQueued, StatusRunning, StatusAwaitingInput, StatusWaitingChildren),
	EventSessionResumed:    statusSet(StatusPaused),
	EventSessionEscalated:  statusSet(StatusOpen, StatusQueued, StatusRunning, StatusAwaitingInput, StatusPaused, StatusWaitingChildren),
	EventSessionCancelled:  statusSet(nonTerminal...),
	EventDelegationCreated: statusSet(StatusOpen, StatusAwaitingInput),
	EventDelegationLeased:  statusSet(StatusQueued),
	EventDelegationExpired: statusSet(StatusRunning),
	EventResultCompleted:   statusSet(StatusRunning),
	EventResultNeedsInput:  statusSet(StatusRunning),
	EventResultRejected:    statusSet(StatusRunning),
	EventResultEscalated:   statusSet(StatusRunning),
	EventResultFailed:      statusSet(StatusRunning),
	EventInputProvided:     statusSet(StatusAwaitingInput),
	EventHumanClaimed:      statusSet(StatusEscalated),
	EventHumanReleased:     statusSet(StatusHumanActive),
	// Notes are taken in every status, closed ones included: a note typed
	// while the session moved on must never be lost.
	EventHumanNoted:            nil,
	EventHumanRequestedInput:   statusSet(StatusHumanActive),
	EventHumanResumed:          statusSet(StatusHumanActive),
	EventHumanHandedBack:       statusSet(StatusHumanActive),
	EventHumanCompleted:        statusSet(StatusHumanActive),
	EventHumanRejected:         statusSet(StatusHumanActive),
	EventChildrenSpawned:       statusSet(StatusOpen),
	EventChildrenJoined:        statusSet(StatusWaitingChildren),
	EventReviewScored:          nil,
	EventEscalationSLABreached: statusSet(StatusEscalated, StatusHumanActive),
	EventRiskResolved:          statusSet(nonTerminal...),
}

// Allowed reports whether an event of type t may be applied to a session in
// status from. Unknown event types are never allowed.
func Allowed(from Status, t EventType) bool {
	set, ok := transitions[t]
	if !ok {
		return false
	}
	if set == nil {
		return true
	}
	return set[from]
}

// AllowedEvents lists the event types legal from status s, for tests and docs.
func AllowedEvents(s Status) []EventType {
	var out []EventType
	for _, t := range AllEventTypes {
		if Allowed(s, t) {
			out = append(out, t)
		}
	}
	return out
}
