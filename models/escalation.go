package models

import (
	"fmt"
	"strings"
)

// ReasonCode says why a session escalated, from a fixed list, so that the
// inbox can filter and the metrics can count escalations by cause. Apply
// derives it from the event type and payload, never from a stored field, so
// events written before codes existed replay to the same code.
type ReasonCode string

// The escalation reason codes. Their spelling is part of the API, the
// projection column sessions.reason_code and the metrics; do not rename them.
const (
	// ReasonWorker: a worker returned result_type escalated.
	ReasonWorker ReasonCode = "worker"
	// ReasonPermanentFailure: a worker reported a permanent failure.
	ReasonPermanentFailure ReasonCode = "permanent_failure"
	// ReasonRetriesExhausted: a transient failure on the last attempt.
	ReasonRetriesExhausted ReasonCode = "retries_exhausted"
	// ReasonLeasesExhausted: the lease expired on the last attempt.
	ReasonLeasesExhausted ReasonCode = "leases_exhausted"
	// ReasonController: a controller (or an admin token) escalated.
	ReasonController ReasonCode = "controller"
	// ReasonJoinConflict: the children's results disagree.
	ReasonJoinConflict ReasonCode = "join_conflict"
	// ReasonJoinTimeout: the children did not finish in time, or the join
	// can no longer be met.
	ReasonJoinTimeout ReasonCode = "join_timeout"
)

// AllReasonCodes lists every reason code in display order.
var AllReasonCodes = []ReasonCode{
	ReasonWorker, ReasonPermanentFailure, ReasonRetriesExhausted, ReasonLeasesExhausted,
	ReasonController, ReasonJoinConflict, ReasonJoinTimeout,
}

// Valid reports whether c is one of the reason codes.
func (c ReasonCode) Valid() bool {
	for _, v := range AllReasonCodes {
		if v == c {
			return true
		}
	}
	return false
}

func reasonList() string {
	names := make([]string, len(AllReasonCodes))
	for i, c := range AllReasonCodes {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}

// Label is the code for people.
func (c ReasonCode) Label() string {
	switch c {
	case ReasonWorker:
		return "Worker escalated"
	case ReasonPermanentFailure:
		return "Permanent failure"
	case ReasonRetriesExhausted:
		return "Retries exhausted"
	case ReasonLeasesExhausted:
		return "Leases exhausted"
	case ReasonController:
		return "Controller escalated"
	case ReasonJoinConflict:
		return "Join conflict"
	case ReasonJoinTimeout:
		return "Join timed out"
	}
	return string(c)
}

// escalationCode is the reason code of an escalating event: its type, and
// for a failed result its failure class, for a join its result. Apply and
// the metrics both ask it, so that they never disagree.
func escalationCode(t EventType, failureClass, joinResult string) ReasonCode {
	switch t {
	case EventResultEscalated:
		return ReasonWorker
	case EventResultFailed:
		if failureClass == FailureTransient {
			return ReasonRetriesExhausted
		}
		return ReasonPermanentFailure
	case EventDelegationExpired:
		return ReasonLeasesExhausted
	case EventChildrenJoined:
		if joinResult == "conflict" {
			return ReasonJoinConflict
		}
		return ReasonJoinTimeout
	}
	return ReasonController
}

// AttemptFailure is one failed attempt of a delegation (a failed result or
// an expired lease), kept in the state so that an escalation package can show
// what went wrong on each attempt without reading the history.
type AttemptFailure struct {
	DelegationID string `json:"delegation_id"`
	Step         string `json:"step,omitempty"`
	Attempt      int    `json:"attempt"`
	// Class is the failure class of a failed result, or "lease_expired".
	Class     string `json:"class"`
	Message   string `json:"message,omitempty"`
	Worker    string `json:"worker,omitempty"`
	AtVersion int64  `json:"at_version"`
}

// FailureLeaseExpired is the class recorded for an attempt whose lease ran out.
const FailureLeaseExpired = "lease_expired"

// maxKeptFailures bounds State.Failures; it is at least MaxMaxAttempts'
// share that a package needs (the last attempts of one delegation).
const maxKeptFailures = 10

// ResolvedRisk is an open risk that a human or a worker marked resolved.
type ResolvedRisk struct {
	Risk      string `json:"risk"`
	By        string `json:"by"`
	Note      string `json:"note,omitempty"`
	AtVersion int64  `json:"at_version"`
}

// maxKeptResolvedRisks bounds State.ResolvedRisks.
const maxKeptResolvedRisks = 20

// RiskResolvedPayload marks open risks resolved.
type RiskResolvedPayload struct {
	User  string   `json:"user"`
	Risks []string `json:"risks"`
	Note  string   `json:"note,omitempty"`
}

// resolveRisks removes the named risks from the open risks and records them
// as resolved. A name that is not open is ignored here: the write path
// refuses it before the event is written, and replay must never fail on it.
func resolveRisks(n *State, names []string, by, note string, at int64) {
	if len(names) == 0 {
		return
	}
	drop, done := make(map[string]bool, len(names)), map[string]bool{}
	for _, r := range names {
		drop[r] = true
	}
	kept := make([]string, 0, len(n.Risks))
	for _, r := range n.Risks {
		if !drop[r] {
			kept = append(kept, r)
			continue
		}
		if !done[r] {
			done[r] = true
			n.ResolvedRisks = append(n.ResolvedRisks, ResolvedRisk{Risk: r, By: by, Note: note, AtVersion: at})
		}
	}
	n.Risks = kept
	n.ResolvedRisks = keepLast(n.ResolvedRisks, maxKeptResolvedRisks)
}

// openRiskErrors adds to v every name in names that is not an open risk of st.
func openRiskErrors(v *ValidationError, field string, names []string, st State) {
	for i, r := range names {
		open := false
		for _, x := range st.Risks {
			if x == r {
				open = true
				break
			}
		}
		if !open {
			v.Add(fmt.Sprintf("%s[%d]", field, i), "is not an open risk of session %s", st.SessionID)
		}
	}
}

// escalation is what caused an escalation, as Apply sees it.
type escalation struct {
	code     ReasonCode
	reason   string
	question string // the worker's or controller's own question, if any
	next     string
	u        *Uncertainty
	// detail names what failed, for the generated question (a failure
	// message, the join's reason).
	detail string
	// children is a join's children (done/total in the question).
	children []ChildOutcome
}

// packageText returns the question for the human (the asker's own question
// when there is one, else one that names the decision to take) and the
// recommended action, for an escalation of the session n as it is now.
func packageText(n *State, c escalation, d *ActiveDelegation) (question, action string) {
	step := n.CurrentStep
	queue := n.Queue
	attempts, maxAttempts := 0, 0
	if d != nil {
		step, queue, attempts, maxAttempts = d.Step, d.Queue, d.Attempt, d.MaxAttempts
	}
	question = strings.TrimSpace(c.question)
	switch c.code {
	case ReasonWorker:
		if question == "" {
			question = fmt.Sprintf("The worker on step %q escalated and proposes %q next. Approve that step, choose another, or finish the session by hand?", step, c.next)
		}
		action = "Answer the worker's question, then hand the step back or resume automation with the answer as facts; complete or reject by hand if no worker can finish it."
	case ReasonPermanentFailure:
		if question == "" {
			question = fmt.Sprintf("Step %q failed permanently: %s. Correct the cause and resume automation, or finish or reject the session by hand?", step, orNone(c.detail))
		}
		action = "A permanent failure will not pass on a retry: correct the facts or instructions it names and resume automation, or reject the session if the request cannot be met."
	case ReasonRetriesExhausted:
		if question == "" {
			question = fmt.Sprintf("Step %q failed on all %d attempts (last: %s). Retry it, send it to another queue, or finish the session by hand?", step, attempts, orNone(c.detail))
		}
		action = fmt.Sprintf("Check the dependency named in the failures below; once it is healthy, hand the step back to %s for a fresh set of %d attempts.", orNone(queue), maxAttempts)
	case ReasonLeasesExhausted:
		if question == "" {
			question = fmt.Sprintf("The worker on step %q stopped responding on all %d attempts. Retry it, reassign it to another queue, or finish the session by hand?", step, attempts)
		}
		action = fmt.Sprintf("Check that the workers of queue %s are running and heartbeating; hand the step back when they are, or to another queue if they are not.", orNone(queue))
	case ReasonController:
		if question == "" {
			question = fmt.Sprintf("A controller escalated this session (%s). Resume automation, ask the requester for input, or finish the session by hand?", orNone(c.reason))
		}
		action = "Read the controller's reason, then decide: resume automation with corrected facts, request input, or complete or reject by hand."
	case ReasonJoinConflict:
		if question == "" {
			question = fmt.Sprintf("The child sessions disagree (%s). Which child's result stands?", orNone(c.detail))
		}
		action = "Compare the children's results side by side; complete with the result that stands and say why, or resume automation with the chosen result as a fact."
	case ReasonJoinTimeout:
		if question == "" {
			done := 0
			for _, ch := range c.children {
				if ch.Status.Terminal() {
					done++
				}
			}
			question = fmt.Sprintf("Only %d of %d child sessions finished before the join gave up (%s). Finish with the results at hand, or resume automation to try again?", done, len(c.children), orNone(c.detail))
		}
		action = "See which children are still open or failed; complete with the results at hand, or resume automation once the missing work is done."
	default:
		if question == "" {
			question = "How should this session continue?"
		}
	}
	return question, action
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "no detail given"
	}
	return s
}

// failureEvidence turns a delegation's failed attempts into evidence for the
// escalation package.
func failureEvidence(fs []AttemptFailure) []Evidence {
	out := make([]Evidence, 0, len(fs))
	for _, f := range fs {
		claim := fmt.Sprintf("Attempt %d of step %q failed (%s)", f.Attempt, f.Step, f.Class)
		if f.Message != "" {
			claim += ": " + f.Message
		}
		src := "delegation " + f.DelegationID
		if f.Worker != "" {
			src += ", " + f.Worker
		}
		out = append(out, Evidence{Claim: claim, Source: src})
	}
	return out
}

// failuresOf returns the recorded failures of one delegation, oldest first.
func failuresOf(fs []AttemptFailure, delegationID string) []AttemptFailure {
	if delegationID == "" {
		return nil
	}
	var out []AttemptFailure
	for _, f := range fs {
		if f.DelegationID == delegationID {
			out = append(out, f)
		}
	}
	return out
}
