package models

import "strings"

// What the session page says about questions and decisions. The rules live
// here, next to the state, so that the page only renders them: which
// question is open now, who closed a session and how, and how a past
// escalation was answered.

// OpenEscalation is the escalation waiting for a human now: the state keeps
// its last escalation package after a human answers it (requests input,
// completes, rejects), so the package is open only while the session is
// escalated or claimed.
func (st State) OpenEscalation() *Escalation {
	if inHumanHands(st.Status) {
		return st.Escalation
	}
	return nil
}

// InputQuestions are the questions a session waiting in awaiting_input asks;
// none in any other status.
func (st State) InputQuestions() []string {
	if st.Status != StatusAwaitingInput {
		return nil
	}
	return st.OpenQuestions
}

// Decision is one human or system decision read from the event log: who
// did what, with which text (resolution, reason, question, note), when.
type Decision struct {
	Type    EventType
	Actor   string
	Verb    string // "completed", "rejected", "requested input", …
	Text    string
	At      UTCTime
	Version int64
}

// decisionVerbs are the events that close a session or answer an
// escalation, with how the page says them.
var decisionVerbs = map[EventType]string{
	EventHumanCompleted:      "completed",
	EventHumanRejected:       "rejected",
	EventHumanRequestedInput: "requested input",
	EventHumanResumed:        "resumed automation",
	EventHumanHandedBack:     "handed back",
	EventSessionCancelled:    "cancelled",
	EventResultCompleted:     "completed",
	EventResultRejected:      "rejected",
}

func decisionOf(e Event) Decision {
	d := Decision{Type: e.Type, Actor: e.Actor, Verb: decisionVerbs[e.Type], At: e.CreatedAt, Version: e.VersionAfter}
	switch e.Type {
	case EventSessionCancelled:
		var p ReasonPayload
		if decodeJSON([]byte(e.Payload), &p) == nil {
			d.Text = p.Reason
		}
	case EventResultCompleted, EventResultRejected:
		// A worker's result: its evidence and output are on the page.
	case EventHumanResumed, EventHumanHandedBack:
		var p HumanDelegationPayload
		if decodeJSON([]byte(e.Payload), &p) == nil {
			d.Text = strings.TrimSpace(p.Step + " on " + p.Queue)
			if p.Note != "" {
				d.Text += ": " + p.Note
			}
		}
	default:
		var p HumanPayload
		if decodeJSON([]byte(e.Payload), &p) == nil {
			d.Text = firstNonEmpty(p.Resolution, p.Reason, p.Question)
		}
	}
	return d
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// Closing is the decision that closed a terminal session (the last event
// that can end one), or false when the session is not closed or the event is
// beyond the timeline the page read.
func (d SessionDetail) Closing() (Decision, bool) {
	if !d.State.Status.Terminal() {
		return Decision{}, false
	}
	for i := len(d.Events) - 1; i >= 0; i-- {
		e := d.Events[i]
		if _, ok := decisionVerbs[e.Type]; ok && e.Type != EventHumanRequestedInput &&
			e.Type != EventHumanResumed && e.Type != EventHumanHandedBack {
			return decisionOf(e), true
		}
	}
	return Decision{}, false
}

// PastEscalation is an escalation that is no longer open, with the
// decision that answered it (none when the session was closed some other
// way the timeline does not show).
type PastEscalation struct {
	Escalation
	Answer *Decision
}

// EscalationHistory is the session's last escalation once it has been
// answered (the session left human hands), or nil while it is open or when
// there was none.
func (d SessionDetail) EscalationHistory() *PastEscalation {
	e := d.State.Escalation
	if e == nil || d.State.OpenEscalation() != nil {
		return nil
	}
	past := &PastEscalation{Escalation: *e}
	for _, ev := range d.Events {
		if ev.VersionAfter <= e.AtVersion {
			continue
		}
		if _, ok := decisionVerbs[ev.Type]; ok {
			a := decisionOf(ev)
			past.Answer = &a
			break
		}
	}
	return past
}
