package models

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Scheduling: a delegation may be queued for later (DelegateInput's
// available_at or delay_seconds; the claim only takes delegations whose
// available_at has come), and a session may be snoozed, that is paused until
// a time (TransitionInput.Until), after which the maintenance pass resumes it
// with one session.resumed event, whatever the number of server processes.

// MaxScheduleAhead bounds how far ahead work may be scheduled or snoozed.
const MaxScheduleAhead = 30 * 24 * time.Hour

// SchedulerActor is the actor of the events the scheduler writes.
const SchedulerActor = "system:scheduler"

// parseTime reads an RFC 3339 time.
func parseTime(s string) (time.Time, error) {
	return time.Parse(time.RFC3339Nano, s)
}

// stateTime turns a time kept in the state (RFC 3339) into a column value;
// an empty or unreadable time is NULL.
func stateTime(s string) NullTime {
	if s == "" {
		return NullTime{}
	}
	t, err := parseTime(s)
	if err != nil {
		return NullTime{}
	}
	return SomeTime(t)
}

// formatScheduled is the state's and payloads' form of a scheduled time, ""
// for none.
func formatScheduled(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return NewUTCTime(t).String()
}

// validateSchedule checks the shape of a delegation's schedule; how far ahead
// it lies is checked against the clock by scheduledAt.
func validateSchedule(v *ValidationError, availableAt string, delaySeconds *int) {
	if availableAt != "" {
		if _, err := parseTime(availableAt); err != nil {
			v.Add("available_at", "must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
		}
		if delaySeconds != nil {
			v.Add("delay_seconds", "must not be given together with available_at")
		}
	}
	if delaySeconds != nil && (*delaySeconds < 0 || *delaySeconds > int(MaxScheduleAhead/time.Second)) {
		v.Add("delay_seconds", "must be between 0 and %d", int(MaxScheduleAhead/time.Second))
	}
}

// scheduledAt is when a delegation becomes claimable: the zero time for
// "now" (no schedule, or a time already past), otherwise a future time no
// further than MaxScheduleAhead.
func (s *Store) scheduledAt(availableAt string, delaySeconds *int) (time.Time, error) {
	now := s.now()
	var at time.Time
	switch {
	case availableAt != "":
		t, err := parseTime(availableAt)
		if err != nil {
			return time.Time{}, &ValidationError{Fields: []FieldError{{Field: "available_at", Message: "must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z"}}}
		}
		if t.Sub(now) > MaxScheduleAhead {
			return time.Time{}, &ValidationError{Fields: []FieldError{{Field: "available_at", Message: fmt.Sprintf("must be at most %s ahead", MaxScheduleAhead)}}}
		}
		at = NewUTCTime(t).Time
	case delaySeconds != nil:
		at = now.Add(time.Duration(*delaySeconds) * time.Second)
	}
	if !at.After(now) {
		return time.Time{}, nil
	}
	return at, nil
}

// snoozeUntil checks TransitionInput.Until against the transition and the
// clock and returns it in the state's form ("" for a plain pause).
func (s *Store) snoozeUntil(t EventType, in TransitionInput) (string, error) {
	if in.Until == "" {
		return "", nil
	}
	bad := func(msg string) error {
		return &ValidationError{Fields: []FieldError{{Field: "until", Message: msg}}}
	}
	if t != EventSessionPaused {
		return "", bad("is only allowed when pausing")
	}
	until, err := parseTime(in.Until)
	if err != nil {
		return "", bad("must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
	}
	now := s.now()
	if !until.After(now) {
		return "", bad("must be in the future")
	}
	if until.Sub(now) > MaxScheduleAhead {
		return "", bad(fmt.Sprintf("must be at most %s ahead", MaxScheduleAhead))
	}
	return formatScheduled(until), nil
}

// ResumeSnoozed resumes the snoozed sessions whose time has come, at most
// limit of them, and returns how many it resumed. Several processes may run
// it at once: each resume re-checks the session under its lock, so a snooze
// ends with exactly one session.resumed event.
func (s *Store) ResumeSnoozed(ctx context.Context, limit int) (int, error) {
	n, _, err := s.resumeSnoozed(ctx, limit)
	return n, err
}

// resumeSnoozed is ResumeSnoozed that also returns how many due snoozes it
// found.
func (s *Store) resumeSnoozed(ctx context.Context, limit int) (int, int, error) {
	if limit <= 0 {
		limit = 100
	}
	var due []string
	err := s.DB.WithContext(ctx).Model(&Session{}).
		Where("status = ? AND resume_at <= ?", StatusPaused, NewUTCTime(s.now())).
		Order("resume_at").Limit(limit).Pluck("id", &due).Error
	if err != nil {
		return 0, 0, fmt.Errorf("find snoozed sessions: %w", err)
	}
	n := 0
	for _, id := range due {
		out, err := s.Execute(ctx, Command{
			SessionID: id, Type: EventSessionResumed, Actor: SchedulerActor,
			Prepare: func(tx *Tx, cur State) (any, error) {
				if cur.Status != StatusPaused || cur.PausedUntil == "" {
					return nil, errSkip
				}
				until, err := parseTime(cur.PausedUntil)
				if err != nil || until.After(s.now()) {
					return nil, errSkip
				}
				return ReasonPayload{Reason: "snoozed until " + cur.PausedUntil}, nil
			},
			Effect: s.releaseHeldDelegation,
		})
		switch {
		case err == nil:
			n++
			if out.Status == StatusWaitingChildren {
				s.onChildDone(ctx, id)
			}
		case errors.Is(err, errSkip), ErrorCode(err) == EILLEGAL:
			// Another process resumed it, or it was resumed, cancelled or
			// snoozed again meanwhile.
		default:
			return n, len(due), fmt.Errorf("resume snoozed session %s: %w", id, err)
		}
	}
	return n, len(due), nil
}
