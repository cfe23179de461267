package views

import (
	"context"
	"time"

	"github.com/taskpilots/handoff/models"
)

// newestFirst returns xs reversed, without changing xs.
func newestFirst[T any](xs []T) []T {
	out := make([]T, len(xs))
	for i, x := range xs {
		out[len(xs)-1-i] = x
	}
	return out
}

// eventTime is when the event that produced version v was written, or zero
// when the page does not hold it (models.SessionDetail.Events holds the
// events of the notes the state keeps).
func (d SessionPageData) eventTime(v int64) time.Time {
	for _, e := range d.Events {
		if e.VersionAfter == v && e.VersionBefore != v {
			return e.CreatedAt.Time
		}
	}
	return time.Time{}
}

// canResolveRisks asks the models rule whether the user looking may mark
// risks resolved, so the buttons never disagree with the command.
func (d SessionPageData) canResolveRisks(ctx context.Context) bool {
	u := Page(ctx).User
	return u != nil && models.CanResolveRisks(d.State, *u)
}

// decisionActions are the takeover actions other than a note, which is
// offered in every status and so says nothing about what is left to decide.
func decisionActions(as []models.TakeoverAction) []models.TakeoverAction {
	var out []models.TakeoverAction
	for _, a := range as {
		if a != models.ActNote {
			out = append(out, a)
		}
	}
	return out
}

// reasonCounts are the window's escalations per reason code, for the chosen
// queue or the whole system.
func (d MetricsDashData) reasonCounts() map[models.ReasonCode]int64 {
	if d.Queue != "" {
		return d.Total.Queues[d.Queue].EscalationClarity.EscalationsByReason
	}
	return d.Total.Overall.EscalationClarity.EscalationsByReason
}

// colonIf is ":" when s is not empty, to join a label and its text.
func colonIf(s string) string {
	if s == "" {
		return ""
	}
	return ":"
}

// claimHint says that a decision on an unclaimed escalation claims it too.
func claimHint(d SessionPageData) string {
	if d.State.Status == models.StatusEscalated {
		return "; you claim the session with it"
	}
	return ""
}
