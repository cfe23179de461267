package models

// StatusExplanation says why a session is where it is, for the session
// page: what it waits for, on whom, since when. The page renders it as a
// sentence ("waiting for a worker on queue refunds since 10:02", "paused by
// Alex until 14:00: waiting for the warehouse", "stalled: no route for
// notify-customer"); what a user may do about it is the takeover policy's.
type StatusExplanation struct {
	Status Status
	// Kind refines Status: "stalled" for an open session whose next step
	// has no route, else the status itself.
	Kind string
	// Since is when the session entered this situation: the event that
	// produced the current state version (zero when unknown).
	Since UTCTime
	// Actor is who put it there (paused, cancelled, escalated, decided),
	// when one did.
	Actor  string
	Queue  string
	Step   string
	Worker string
	// Until is a snoozed pause's wake-up time (RFC 3339).
	Until string
	// Reason is the text that goes with it: the pause or cancel reason, the
	// question asked, the escalation reason, the outcome.
	Reason string
	// Children counts a parent's children while it waits for them.
	Children int
}

// ExplainStatus explains d's current status from its state and timeline.
func (d SessionDetail) ExplainStatus() StatusExplanation {
	st := d.State
	x := StatusExplanation{Status: st.Status, Kind: string(st.Status), Queue: st.Queue, Step: st.CurrentStep}
	// The event that produced the current version is when the situation
	// began: audit-only events (notes, SLA markers) do not change it.
	var last *Event
	for i := len(d.Events) - 1; i >= 0; i-- {
		if d.Events[i].VersionAfter == st.Version && d.Events[i].VersionBefore != st.Version {
			last = &d.Events[i]
			break
		}
	}
	if last != nil {
		x.Since, x.Actor = last.CreatedAt, last.Actor
	}
	switch st.Status {
	case StatusOpen:
		if d.StalledOn != "" {
			x.Kind, x.Step = "stalled", d.StalledOn
		} else if st.NextStep != "" {
			x.Step = st.NextStep
		}
	case StatusQueued, StatusRunning:
		if dl := st.Delegation; dl != nil {
			x.Queue, x.Step, x.Worker = dl.Queue, dl.Step, dl.Worker
		}
	case StatusPaused:
		x.Until = st.PausedUntil
		if last != nil && last.Type == EventSessionPaused {
			var p PausePayload
			if decodeJSON([]byte(last.Payload), &p) == nil {
				x.Reason = p.Reason
			}
		}
	case StatusAwaitingInput:
		if len(st.OpenQuestions) > 0 {
			x.Reason = st.OpenQuestions[len(st.OpenQuestions)-1]
		}
	case StatusEscalated, StatusHumanActive:
		if e := st.Escalation; e != nil {
			x.Reason = e.Reason
		}
	case StatusWaitingChildren:
		x.Children = len(d.Children)
	case StatusCompleted, StatusRejected, StatusCancelled:
		if last != nil {
			x.Reason = decisionOf(*last).Text
		}
		if x.Reason == "" {
			x.Reason = st.Outcome
		}
	}
	return x
}
