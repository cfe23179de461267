package models

import (
	"context"
	"fmt"
	"sort"
)

// The session page's timeline is paged newest first with a keyset on seq
// (issue 16): a page is one index range read on events (session_id, seq) —
// or (session_id, type, seq) when filtered by type — so a session with
// 10,000 events opens as fast as one with five. What the page says about the
// session besides the timeline (who holds it since when, how it was closed,
// how the last escalation was answered, when each note was written) is read
// from the newest events plus a few single-row index seeks, never from the
// whole history.

// TimelinePageSize is how many events one page of the timeline shows.
const TimelinePageSize = 50

// TimelineQuery picks one page of a session's timeline.
type TimelineQuery struct {
	// Before is the seq the page starts below (exclusive); 0 is the newest
	// page.
	Before int64
	// Type narrows the page to one event type; "" is every type.
	Type EventType
	// Limit is the page size; 0 means TimelinePageSize.
	Limit int
}

// TimelinePage is one page of a session's events, newest first.
type TimelinePage struct {
	Events []Event
	// Older is the Before of the next, older page; 0 when this page reaches
	// the session's first (matching) event.
	Older int64
	// Before is the query's Before, for the "newest events" link.
	Before int64
}

// ReadTimelinePage reads one page of the session's events by seq, newest first.
// It reads Limit+1 rows to know whether an older page exists without
// counting.
func (s *Store) ReadTimelinePage(ctx context.Context, sessionID string, q TimelineQuery) (TimelinePage, error) {
	limit := q.Limit
	if limit <= 0 || limit > MaxTimelineEvents {
		limit = TimelinePageSize
	}
	db := s.DB.WithContext(ctx).Where("session_id = ?", sessionID)
	if q.Before > 0 {
		db = db.Where("seq < ?", q.Before)
	}
	if q.Type != "" {
		db = db.Where("type = ?", q.Type)
	}
	var evs []Event
	if err := db.Order("seq DESC").Limit(limit + 1).Find(&evs).Error; err != nil {
		return TimelinePage{}, fmt.Errorf("session %s: timeline page before %d: %w", sessionID, q.Before, err)
	}
	p := TimelinePage{Events: evs, Before: q.Before}
	if len(evs) > limit {
		p.Events = evs[:limit]
		p.Older = evs[limit-1].Seq
	}
	return p, nil
}

// latestOfType is the session's newest event of type t, if any: one seek on
// events (session_id, type, seq).
func (s *Store) latestOfType(ctx context.Context, sessionID string, t EventType) ([]Event, error) {
	var evs []Event
	err := s.DB.WithContext(ctx).Where("session_id = ? AND type = ?", sessionID, t).
		Order("seq DESC").Limit(1).Find(&evs).Error
	if err != nil {
		return nil, fmt.Errorf("session %s: latest %s: %w", sessionID, t, err)
	}
	return evs, nil
}

// firstAnswerAfter is the first decision event after version v (the answer
// to an escalation made at v). Seq is never below the version an event
// produces, so the read starts at seq v+1 on events (session_id, seq) and
// stops at the first decision.
func (s *Store) firstAnswerAfter(ctx context.Context, sessionID string, v int64) ([]Event, error) {
	types := make([]EventType, 0, len(decisionVerbs))
	for t := range decisionVerbs {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool { return types[i] < types[j] })
	var evs []Event
	err := s.DB.WithContext(ctx).Where("session_id = ? AND seq > ? AND version_after > ? AND type IN ?", sessionID, v, v, types).
		Order("seq").Limit(1).Find(&evs).Error
	if err != nil {
		return nil, fmt.Errorf("session %s: answer after v%d: %w", sessionID, v, err)
	}
	return evs, nil
}

// producerOf is the newest event below seq before that moved the version:
// the event that produced the current version when the newest page (which
// starts at before) holds only audit-only events. It reads back on events
// (session_id, seq) past audit-only events only, which are rare.
func (s *Store) producerOf(ctx context.Context, sessionID string, before int64) ([]Event, error) {
	var evs []Event
	err := s.DB.WithContext(ctx).Where("session_id = ? AND seq < ? AND version_before <> version_after", sessionID, before).
		Order("seq DESC").Limit(1).Find(&evs).Error
	if err != nil {
		return nil, fmt.Errorf("session %s: last version change before seq %d: %w", sessionID, before, err)
	}
	return evs, nil
}

// noteEvents are the session's newest n note events: the state keeps the
// last notes, and the page shows when each was written.
func (s *Store) noteEvents(ctx context.Context, sessionID string, n int) ([]Event, error) {
	var evs []Event
	err := s.DB.WithContext(ctx).Where("session_id = ? AND type = ?", sessionID, EventHumanNoted).
		Order("seq DESC").Limit(n).Find(&evs).Error
	if err != nil {
		return nil, fmt.Errorf("session %s: notes: %w", sessionID, err)
	}
	return evs, nil
}

// contextEvents fills d.Events with what the page's sentences need besides
// the newest events (recent, newest first): the last claim while the
// session is held, the event that produced the current version, the answer
// to the last escalation and the events of the notes the state keeps. Each
// is read only when recent does not already hold it.
func (s *Store) contextEvents(ctx context.Context, d *SessionDetail, recent []Event) error {
	bySeq := make(map[int64]Event, len(recent)+8)
	for _, e := range recent {
		bySeq[e.Seq] = e
	}
	// oldest is the first seq recent holds: everything from it on is there.
	oldest := int64(1)
	if len(recent) > 0 {
		oldest = recent[len(recent)-1].Seq
	}
	complete := len(recent) == 0 || oldest == 1
	add := func(evs []Event, err error) error {
		for _, e := range evs {
			bySeq[e.Seq] = e
		}
		return err
	}
	st := d.State
	if !complete {
		if st.Status == StatusHumanActive && !holds(recent, EventHumanClaimed) {
			if err := add(s.latestOfType(ctx, d.Row.ID, EventHumanClaimed)); err != nil {
				return err
			}
		}
		// Every event that produced a version above from is in recent.
		from := recent[len(recent)-1].VersionBefore
		if st.Version > 1 && from >= st.Version {
			if err := add(s.producerOf(ctx, d.Row.ID, oldest)); err != nil {
				return err
			}
		}
		if e := st.Escalation; e != nil && st.OpenEscalation() == nil && e.AtVersion < from {
			if err := add(s.firstAnswerAfter(ctx, d.Row.ID, e.AtVersion)); err != nil {
				return err
			}
		}
		if len(st.Notes) > 0 && st.Notes[0].AtVersion <= from {
			if err := add(s.noteEvents(ctx, d.Row.ID, len(st.Notes))); err != nil {
				return err
			}
		}
	}
	d.Events = make([]Event, 0, len(bySeq))
	for _, e := range bySeq {
		d.Events = append(d.Events, e)
	}
	sort.Slice(d.Events, func(i, j int) bool { return d.Events[i].Seq < d.Events[j].Seq })
	return nil
}

func holds(evs []Event, t EventType) bool {
	for _, e := range evs {
		if e.Type == t {
			return true
		}
	}
	return false
}

// SessionChanges is what moved a session on since a version, for the
// session page's change notice.
type SessionChanges struct {
	// Version is the session's version now.
	Version int64
	// Events are the newest events that moved the version past the one
	// asked about, newest first, at most maxChangeEvents.
	Events []Event
	// More is set when more events than those moved it.
	More bool
}

const (
	maxChangeEvents = 3
	// changeWindow is how many of the newest events the notice reads to
	// find the ones that moved the version (audit-only events, such as
	// SLA markers and review scores, are skipped).
	changeWindow = 20
)

// ChangesSince says what happened to the session after version v: nothing
// (Version <= v) with one primary-key read, else also the newest events
// that moved the version, from one backward range read of the newest
// events on events (session_id, seq); seq is never below the version an
// event produces.
func (s *Store) ChangesSince(ctx context.Context, sessionID string, v int64) (SessionChanges, error) {
	row, err := s.GetSession(ctx, sessionID)
	if err != nil {
		return SessionChanges{}, err
	}
	c := SessionChanges{Version: row.StateVersion}
	if row.StateVersion <= v {
		return c, nil
	}
	var evs []Event
	err = s.DB.WithContext(ctx).Where("session_id = ? AND seq > ?", sessionID, v).
		Order("seq DESC").Limit(changeWindow).Find(&evs).Error
	if err != nil {
		return SessionChanges{}, fmt.Errorf("session %s: changes since v%d: %w", sessionID, v, err)
	}
	for _, e := range evs {
		if e.VersionAfter <= v || e.VersionBefore == e.VersionAfter {
			continue
		}
		if len(c.Events) == maxChangeEvents {
			c.More = true
			break
		}
		c.Events = append(c.Events, e)
	}
	if n := len(c.Events); n > 0 && c.Events[n-1].VersionBefore > v {
		// Versions between v and the oldest event read moved too.
		c.More = true
	}
	return c, nil
}
