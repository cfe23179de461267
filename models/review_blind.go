package models

import (
	"context"
	"encoding/json"
	"fmt"
)

// Blind double review: a share of the review items is scored by two
// reviewers who must not see each other's scores, or their agreement
// (Cohen's kappa, Pearson) measures nothing. A score is a review.scored
// event in the session, and events are read in many places (the session
// timeline, the events API, the feed, webhook deliveries), so the rule of
// who may read a score's contents is decided here, once, and every read
// path redacts through RedactReviews.

// ReviewReader is who reads review events: the actor of a user or an API
// token ("" for a webhook receiver, which has no identity here), and whether
// it is an admin.
type ReviewReader struct {
	Actor string
	Admin bool
}

// ReaderOfUser is the ReviewReader of a console user.
func ReaderOfUser(u User) ReviewReader {
	return ReviewReader{Actor: u.Actor(), Admin: u.Role == RoleAdmin && !u.Disabled}
}

// ReaderOfToken is the ReviewReader of an API token.
func ReaderOfToken(t APIToken) ReviewReader {
	return ReviewReader{Actor: t.Actor(), Admin: t.Role == RoleAdmin}
}

// MayReadReview is the rule: may r read the scores and comment that
// scoredBy gave item? While a double-review item still waits for a score,
// its scores are blind to everyone but admins and the reviewer who wrote
// them, until the reader has submitted a score of the same item. Blind to
// every other reader, not only to a reviewer holding a claim: any reviewer
// may claim the item later, and a claim lasts minutes, so a look before
// claiming would break the blindness just the same (agents, tokens and
// webhook receivers are readers a reviewer could look over). A single-review
// item, or one with all its scores, has nothing left to be blind to.
func MayReadReview(r ReviewReader, scoredBy string, item ReviewItem, readerScored bool) bool {
	switch {
	case r.Admin, r.Actor != "" && r.Actor == scoredBy, readerScored:
		return true
	case item.Needed < 2, item.Scored >= item.Needed:
		return true
	}
	return false
}

// RedactedReviewPayload replaces a review.scored payload the reader may not
// read: who scored which escalation stays (the review queue shows as much),
// the scores and the comment do not.
type RedactedReviewPayload struct {
	Reviewer  string `json:"reviewer"`
	AtVersion int64  `json:"at_version"`
	Redacted  bool   `json:"redacted"`
}

// RedactReviews returns evs with the payload of every review.scored event r
// may not read (MayReadReview) replaced by a RedactedReviewPayload. The
// slice is copied when anything is redacted; evs is not changed. A redacted
// event's hash no longer matches its payload: the payload says redacted.
func (s *Store) RedactReviews(ctx context.Context, r ReviewReader, evs []Event) ([]Event, error) {
	if r.Admin {
		return evs, nil
	}
	type ref struct {
		i int
		p ReviewPayload
	}
	var refs []ref
	sessions := map[string]bool{}
	for i, e := range evs {
		if e.Type != EventReviewScored {
			continue
		}
		var p ReviewPayload
		if err := decodeJSON([]byte(e.Payload), &p); err != nil {
			// A payload that does not decode (a tampered row; verify
			// reports it) cannot be told apart from a score: redact it.
			p = ReviewPayload{Reviewer: e.Actor}
		} else if p.Reviewer == r.Actor && r.Actor != "" {
			continue
		}
		refs = append(refs, ref{i, p})
		sessions[e.SessionID] = true
	}
	if len(refs) == 0 {
		return evs, nil
	}
	ids := make([]string, 0, len(sessions))
	for id := range sessions {
		ids = append(ids, id)
	}
	db := s.DB.WithContext(ctx)
	var items []ReviewItem
	if err := db.Where("session_id IN ?", ids).Find(&items).Error; err != nil {
		return nil, fmt.Errorf("review blindness: items: %w", err)
	}
	byKey := make(map[ReviewKey]ReviewItem, len(items))
	for _, it := range items {
		byKey[it.Key()] = it
	}
	mine := map[ReviewKey]bool{}
	if r.Actor != "" {
		var scored []ReviewScore
		if err := db.Select("session_id", "at_version").Where("session_id IN ? AND reviewer = ?", ids, r.Actor).Find(&scored).Error; err != nil {
			return nil, fmt.Errorf("review blindness: own scores: %w", err)
		}
		for _, sc := range scored {
			mine[ReviewKey{SessionID: sc.SessionID, AtVersion: sc.AtVersion}] = true
		}
	}
	out := evs
	for _, x := range refs {
		e := evs[x.i]
		k := ReviewKey{SessionID: e.SessionID, AtVersion: x.p.AtVersion}
		item, ok := byKey[k]
		if !ok {
			// No item: the score was not part of a double review.
			item = ReviewItem{Needed: 1}
		}
		if MayReadReview(r, e.Actor, item, mine[k]) && x.p.Scores != nil {
			continue
		}
		body, err := Canonical(RedactedReviewPayload{Reviewer: x.p.Reviewer, AtVersion: x.p.AtVersion, Redacted: true})
		if err != nil {
			return nil, err
		}
		if &out[0] == &evs[0] {
			out = append([]Event(nil), evs...)
		}
		out[x.i].Payload = string(body)
	}
	return out, nil
}

// redactFeed redacts the review scores of a feed page in place.
func (s *Store) redactFeed(ctx context.Context, r ReviewReader, fevs []FeedEvent) error {
	var evs []Event
	var at []int
	for i, f := range fevs {
		if f.Type == EventReviewScored {
			evs = append(evs, Event{ID: f.EventID, SessionID: f.SessionID, Type: f.Type, Actor: f.Actor, Payload: string(f.Payload)})
			at = append(at, i)
		}
	}
	if len(evs) == 0 {
		return nil
	}
	red, err := s.RedactReviews(ctx, r, evs)
	if err != nil {
		return fmt.Errorf("feed: %w", err)
	}
	for j, i := range at {
		fevs[i].Payload = json.RawMessage(red[j].Payload)
	}
	return nil
}
