package views

import (
	"strconv"
	"strings"
	"time"

	"github.com/taskpilots/handoff/models"
)

// statusSentence renders models.SessionDetail.ExplainStatus as one sentence
// for the session page. It only words what the models decided.
func (d SessionPageData) statusSentence() string {
	x := d.ExplainStatus()
	since := ""
	if !x.Since.IsZero() {
		since = " since " + clock(d.Now, x.Since.Time)
	}
	by := ""
	if x.Actor != "" {
		by = " by " + nameOf(d.Names, x.Actor)
	}
	withReason := func(s string) string {
		if x.Reason != "" {
			return s + ": " + x.Reason
		}
		return s
	}
	switch x.Kind {
	case "stalled":
		return "Stalled: no route for " + x.Step + "; no worker will pick it up" + since + "."
	case string(models.StatusOpen):
		if x.Step != "" {
			return "Open: waiting for step " + x.Step + " to be delegated" + since + "."
		}
		return "Open: waiting for the controller to delegate a step" + since + "."
	case string(models.StatusQueued):
		return "Waiting for a worker on queue " + x.Queue + " (step " + x.Step + ")" + since + "."
	case string(models.StatusRunning):
		w := "A worker"
		if x.Worker != "" {
			w = "Worker " + x.Worker
		}
		return w + " is working on step " + x.Step + " on queue " + x.Queue + since + "."
	case string(models.StatusPaused):
		s := "Paused" + by
		if x.Until != "" {
			if t, err := time.Parse(time.RFC3339, x.Until); err == nil {
				s += " until " + clock(d.Now, t)
			}
		} else {
			s += since + ", until someone resumes it"
		}
		return withReason(s) + "."
	case string(models.StatusAwaitingInput):
		return withReason("Waiting for an answer"+since) + "."
	case string(models.StatusEscalated):
		return withReason("Waiting for a human"+since) + "."
	case string(models.StatusHumanActive):
		return "In human hands: " + nameOf(d.Names, d.State.Assignee) + " holds it" + since + "."
	case string(models.StatusWaitingChildren):
		return "Waiting for its " + strconv.Itoa(x.Children) + " child sessions to finish" + since + "."
	case string(models.StatusCompleted), string(models.StatusRejected), string(models.StatusCancelled):
		label := StatusLabel(x.Status)
		at := ""
		if !x.Since.IsZero() {
			at = " at " + clock(d.Now, x.Since.Time)
		}
		return withReason(strings.ToUpper(label[:1])+label[1:]+by+at) + "."
	}
	return ""
}

// clock is a time of day in UTC, with the date when it is not today.
func clock(now, t time.Time) string {
	t, now = t.UTC(), now.UTC()
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04 UTC")
	}
	return t.Format("2 Jan 15:04 UTC")
}
