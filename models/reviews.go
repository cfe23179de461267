package models

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Reviews: reviewers score how clear each escalation package was.
//
// An item of the review queue is an escalation that a human decided: a
// session's escalation version (Escalation.AtVersion) followed by a human
// decision (completed, rejected, resumed, handed back, input requested).
// SyncReviewItems derives the items from the event log. The reviewer scores
// the package exactly as the agent got it, the state at the escalation
// version, on the five criteria of Rubric. A score is a review.scored event in
// the session, through Execute, and review_scores is its projection written
// in the same transaction. A share of the items (ReviewPolicy.DoubleShare) is
// scored by two reviewers, blind to each other, to measure their agreement.
//
//	decided escalation ──sync──▶ item (needed 1 or 2)
//	item ──claim (expires)──▶ held by a reviewer ──score──▶ scored
//	                              └─ release / expiry ─▶ back in the queue

// The rubric criteria, in the order the console asks them.
const (
	CriterionGoalClear          = "goal_clear"
	CriterionStateCurrent       = "state_current"
	CriterionEvidenceSufficient = "evidence_sufficient"
	CriterionRisksExplicit      = "risks_explicit"
	CriterionNextStepActionable = "next_step_actionable"
)

// The range of a rubric score.
const (
	MinScore = 1
	MaxScore = 5
)

// Defaults of ReviewPolicy.
const (
	DefaultReviewDoubleShare = 0.10
	DefaultReviewClaimTTL    = 30 * time.Minute
)

const (
	// reviewSyncOverlap is how far back of its watermark SyncReviewItems
	// reads again: a decision committed late (its created_at is taken before
	// the commit) is still found.
	reviewSyncOverlap = 5 * time.Minute
	reviewSyncBatch   = 500
	reviewSyncName    = "decisions"
)

// Criterion is one rubric criterion with the meaning of every score.
type Criterion struct {
	Key      string
	Title    string
	Question string
	// Levels[i] describes score i+1.
	Levels [5]string
}

// Rubric is the review rubric. Every score of every criterion is described,
// so that two reviewers mean the same thing by a 3.
var Rubric = []Criterion{
	{Key: CriterionGoalClear, Title: "Goal is clear", Question: "Could the human tell what the session was meant to achieve?", Levels: [5]string{
		"The goal is missing or cannot be understood.",
		"The goal is vague; the human had to guess what was wanted.",
		"The goal is understandable but leaves important details open.",
		"The goal is clear; minor details had to be looked up.",
		"The goal is unambiguous, including what done looks like.",
	}},
	{Key: CriterionStateCurrent, Title: "State is current", Question: "Did the package show the latest valid state, and only that?", Levels: [5]string{
		"The state shown is wrong or clearly outdated.",
		"Much of the state is stale or missing.",
		"The state is mostly current, with gaps the human had to fill.",
		"The state is current; small details are missing.",
		"The state is complete and exactly as of the escalation.",
	}},
	{Key: CriterionEvidenceSufficient, Title: "Evidence is sufficient", Question: "Were the claims that matter backed by checkable evidence?", Levels: [5]string{
		"No evidence backs the claims.",
		"Evidence is thin, or its sources cannot be checked.",
		"Some claims are backed; key ones lack a source.",
		"Most claims are backed by checkable sources.",
		"Every claim that matters is backed by a checkable source.",
	}},
	{Key: CriterionRisksExplicit, Title: "Risks are explicit", Question: "Were the open risks spelled out with their impact?", Levels: [5]string{
		"Risks exist but are not mentioned.",
		"Risks are hinted at but not spelled out.",
		"The main risk is named; others are missing.",
		"The risks are named; their impact is partly unclear.",
		"Every relevant risk is named with its impact.",
	}},
	{Key: CriterionNextStepActionable, Title: "Next step is actionable", Question: "Could the human act on the question and the recommended next step at once?", Levels: [5]string{
		"There is no recommended next step and no question.",
		"The next step is too vague to act on.",
		"The next step is clear but needs more information first.",
		"The next step can be acted on after minor checks.",
		"The question and the next step can be acted on at once.",
	}},
}

// CriterionKeys lists the rubric's criteria keys in order.
func CriterionKeys() []string {
	out := make([]string, len(Rubric))
	for i, c := range Rubric {
		out[i] = c.Key
	}
	return out
}

// DecisionEvents are the human decisions that end an escalation and make it
// due for review.
var DecisionEvents = []EventType{
	EventHumanCompleted, EventHumanRejected, EventHumanResumed, EventHumanHandedBack, EventHumanRequestedInput,
}

// ReviewPolicy configures the review queue. The zero value is the default.
type ReviewPolicy struct {
	// DoubleShare is the share of items scored by two reviewers, in [0, 1];
	// 0 means DefaultReviewDoubleShare and a negative value means none.
	DoubleShare float64
	// ClaimTTL is how long a claim for review lasts; 0 means
	// DefaultReviewClaimTTL.
	ClaimTTL time.Duration
}

// withDefaults fills in defaults. It must be idempotent (Needed applies it
// again to a policy that already went through it), so "none" stays negative
// rather than becoming 0, which would mean "the default share".
func (p ReviewPolicy) withDefaults() ReviewPolicy {
	switch {
	case p.DoubleShare == 0:
		p.DoubleShare = DefaultReviewDoubleShare
	case p.DoubleShare > 1:
		p.DoubleShare = 1
	}
	if p.ClaimTTL <= 0 {
		p.ClaimTTL = DefaultReviewClaimTTL
	}
	return p
}

// Needed is how many reviewers score the item of an escalation: 2 for a
// DoubleShare of the items and 1 for the rest. It hashes the session id and
// the escalation version, so it is the same on every replica and every run,
// and reviewers cannot steer which items are double-scored.
func (p ReviewPolicy) Needed(sessionID string, atVersion int64) int {
	p = p.withDefaults()
	sum := sha256.Sum256([]byte(sessionID + "@" + strconv.FormatInt(atVersion, 10)))
	// The top 53 bits as a fraction in [0, 1).
	f := float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
	if f < p.DoubleShare {
		return 2
	}
	return 1
}

// CanReview reports whether u may claim and score escalation packages.
func (u User) CanReview() bool {
	return !u.Disabled && (u.Role == RoleReviewer || u.Role == RoleAdmin)
}

// ReviewItem is one decided escalation in the review queue.
type ReviewItem struct {
	SessionID       string `gorm:"primaryKey"`
	AtVersion       int64  `gorm:"primaryKey"`
	DecisionEventID string
	DecisionType    EventType
	DecidedBy       string
	Queue           string
	TicketRef       string
	EscalatedAt     UTCTime
	// ClaimedAt is the first human.claimed after the escalation (null when
	// the decision was taken without a claim).
	ClaimedAt NullTime
	DecidedAt UTCTime
	Needed    int
	Scored    int
	CreatedAt UTCTime
}

// TableName pins the table name for GORM.
func (ReviewItem) TableName() string { return "review_items" }

// Key is the item's id in URLs: session id and escalation version.
func (i ReviewItem) Key() ReviewKey { return ReviewKey{SessionID: i.SessionID, AtVersion: i.AtVersion} }

// ReviewKey names a review item.
type ReviewKey struct {
	SessionID string
	AtVersion int64
}

type reviewClaim struct {
	SessionID string
	AtVersion int64
	Reviewer  string
	ClaimedAt UTCTime
	ExpiresAt UTCTime
}

func (reviewClaim) TableName() string { return "review_claims" }

// ReviewScore is one reviewer's score of one item (the projection of a
// review.scored event).
type ReviewScore struct {
	EventID            string `gorm:"primaryKey"`
	SessionID          string
	AtVersion          int64
	Reviewer           string
	GoalClear          int
	StateCurrent       int
	EvidenceSufficient int
	RisksExplicit      int
	NextStepActionable int
	ScoredAt           UTCTime
}

// TableName pins the table name for GORM.
func (ReviewScore) TableName() string { return "review_scores" }

// Scores returns the score as a criterion → value map.
func (r ReviewScore) Scores() map[string]int {
	return map[string]int{
		CriterionGoalClear: r.GoalClear, CriterionStateCurrent: r.StateCurrent,
		CriterionEvidenceSufficient: r.EvidenceSufficient, CriterionRisksExplicit: r.RisksExplicit,
		CriterionNextStepActionable: r.NextStepActionable,
	}
}

func (r ReviewScore) values() [5]int {
	return [5]int{r.GoalClear, r.StateCurrent, r.EvidenceSufficient, r.RisksExplicit, r.NextStepActionable}
}

// ReviewTakenError refuses a claim or a score because the item is not
// available to this reviewer: fully scored, scored by them already, or held
// by other reviewers. It unwraps to a *ConflictError, so it answers 409.
type ReviewTakenError struct {
	Key    ReviewKey
	Reason string
}

func (e *ReviewTakenError) Error() string {
	return fmt.Sprintf("review of session %s at version %d: %s", e.Key.SessionID, e.Key.AtVersion, e.Reason)
}

// Unwrap makes the error a conflict for ErrorCode.
func (e *ReviewTakenError) Unwrap() error {
	return &ConflictError{SessionID: e.Key.SessionID, ExpectedVersion: e.Key.AtVersion, CurrentVersion: e.Key.AtVersion}
}

// ErrOwnDecision refuses a review by the human who decided the escalation:
// nobody grades their own package handling.
var ErrOwnDecision = fmt.Errorf("%w: you decided this escalation, so another reviewer must score it", ErrForbidden)

// Reasons of a ReviewTakenError.
const (
	ReviewFullyScored  = "it has all the scores it needs"
	ReviewAlreadyDone  = "you have already scored it"
	ReviewHeldByOthers = "another reviewer is scoring it"
)

// SyncReviewItems adds the decided escalations that are not in the review
// queue yet. It reads the decision events from a watermark, minus an overlap
// that covers transactions which committed late, so that each call costs
// what is new, not the whole history; adding an item twice is a no-op. It
// returns the number of items added.
func (s *Store) SyncReviewItems(ctx context.Context, p ReviewPolicy) (int, error) {
	p = p.withDefaults()
	db := s.DB.WithContext(ctx)
	var marks []struct{ Watermark UTCTime }
	if err := db.Raw(`SELECT watermark FROM review_sync WHERE name = ?`, reviewSyncName).Scan(&marks).Error; err != nil {
		return 0, fmt.Errorf("review sync: read watermark: %w", err)
	}
	from := UTCTime{}
	if len(marks) > 0 {
		from = NewUTCTime(marks[0].Watermark.Add(-reviewSyncOverlap))
	}
	added := 0
	var (
		afterAt UTCTime
		afterID string
		last    UTCTime
	)
	for {
		q := db.Table("events").Select("id, session_id, seq, type, actor, version_before, version_after, created_at").
			Where("type IN ?", DecisionEvents)
		if afterID == "" {
			q = q.Where("created_at >= ?", from)
		} else {
			q = q.Where("(created_at, id) > ("+s.timeParam()+", ?)", afterAt, afterID)
		}
		var evs []Event
		if err := q.Order("created_at, id").Limit(reviewSyncBatch).Find(&evs).Error; err != nil {
			return added, fmt.Errorf("review sync: read decisions: %w", err)
		}
		if len(evs) == 0 {
			break
		}
		ids := make([]string, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
		}
		var known []string
		if err := db.Table("review_items").Where("decision_event_id IN ?", ids).Pluck("decision_event_id", &known).Error; err != nil {
			return added, fmt.Errorf("review sync: known decisions: %w", err)
		}
		seen := make(map[string]bool, len(known))
		for _, id := range known {
			seen[id] = true
		}
		for _, e := range evs {
			if seen[e.ID] {
				continue
			}
			ok, err := s.addReviewItem(ctx, e, p)
			if err != nil {
				return added, err
			}
			if ok {
				added++
			}
		}
		tail := evs[len(evs)-1]
		afterAt, afterID, last = tail.CreatedAt, tail.ID, tail.CreatedAt
		if len(evs) < reviewSyncBatch {
			break
		}
	}
	if !last.IsZero() {
		// The watermark only moves forward, whoever else is syncing.
		err := db.Exec(`INSERT INTO review_sync (name, watermark) VALUES (?, ?)
ON CONFLICT (name) DO UPDATE SET watermark = CASE WHEN excluded.watermark > review_sync.watermark THEN excluded.watermark ELSE review_sync.watermark END`,
			reviewSyncName, last).Error
		if err != nil {
			return added, fmt.Errorf("review sync: write watermark: %w", err)
		}
	}
	return added, nil
}

// queueReviewItem queues, in the decision's transaction, the review item of
// decision ev on cur, the state just before it (row its projection row):
// the package at the escalation's version, escalated when the session
// entered human hands, claimed at the first claim after the escalation. An
// item that exists already (the sync of an older binary) is kept.
func (s *Store) queueReviewItem(tx *Tx, row Session, cur State, ev Event) {
	at := cur.Escalation.AtVersion
	escalatedAt := row.EscalatedAt.Time
	if !row.EscalatedAt.Valid {
		escalatedAt = ev.CreatedAt
	}
	tx.Later(failWith("session %s: queue review item", ev.SessionID),
		`INSERT INTO review_items (session_id, at_version, decision_event_id, decision_type, decided_by, queue, ticket_ref,
	escalated_at, claimed_at, decided_at, needed, scored, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?,
	(SELECT min(created_at) FROM events WHERE session_id = ? AND type = ? AND version_after > ?),
	?, ?, 0, ?)
ON CONFLICT DO NOTHING`,
		ev.SessionID, at, ev.ID, ev.Type, ev.Actor, cur.Queue, cur.TicketRef, escalatedAt,
		ev.SessionID, EventHumanClaimed, at,
		ev.CreatedAt, s.Reviews.withDefaults().Needed(ev.SessionID, at), NewUTCTime(s.now()))
}

// addReviewItem adds the item of one decision event: the escalation it ended
// is read from the state just before the decision.
func (s *Store) addReviewItem(ctx context.Context, d Event, p ReviewPolicy) (bool, error) {
	var evs []Event
	if err := s.DB.WithContext(ctx).Where("session_id = ? AND seq < ?", d.SessionID, d.Seq).
		Order("seq").Find(&evs).Error; err != nil {
		return false, fmt.Errorf("review sync: session %s: %w", d.SessionID, err)
	}
	st, err := Replay(evs)
	if err != nil {
		return false, fmt.Errorf("review sync: session %s: %w", d.SessionID, err)
	}
	// The escalation is the work event that moved the version to the
	// package's version (audit-only events may share that version, never
	// move to it).
	esc := -1
	if st.Escalation != nil {
		for i, e := range evs {
			if e.VersionAfter == st.Escalation.AtVersion && e.VersionBefore < e.VersionAfter {
				esc = i
				break
			}
		}
	}
	if esc < 0 {
		// A decision without an escalation package cannot be reviewed.
		return false, nil
	}
	at := st.Escalation.AtVersion
	item := ReviewItem{
		SessionID: d.SessionID, AtVersion: at, DecisionEventID: d.ID, DecisionType: d.Type, DecidedBy: d.Actor,
		Queue: st.Queue, TicketRef: st.TicketRef, EscalatedAt: evs[esc].CreatedAt, DecidedAt: d.CreatedAt,
		Needed: p.Needed(d.SessionID, at), CreatedAt: NewUTCTime(s.now()),
	}
	for _, e := range evs[esc+1:] {
		if e.Type == EventHumanClaimed {
			item.ClaimedAt = NullTime{Time: e.CreatedAt, Valid: true}
			break
		}
	}
	res := s.DB.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&item)
	if res.Error != nil {
		return false, fmt.Errorf("review sync: add item %s@%d: %w", d.SessionID, at, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// ReviewQueueOpts selects a page of a reviewer's queue.
type ReviewQueueOpts struct {
	Reviewer User
	// Mine limits the page to the items the reviewer holds a claim on.
	Mine  bool
	After string
	Limit int
	// Policy gives the claim length (for display only).
	Policy ReviewPolicy
}

// ReviewQueueRow is one item as a reviewer's queue shows it.
type ReviewQueueRow struct {
	ReviewItem
	// MyClaimExpires is when the reviewer's claim lapses (null: not held).
	MyClaimExpires NullTime
}

// ReviewCounts are the numbers beside the queue's filters. They are exact
// (maintained by migration 00031's triggers and derived from them, see
// reviewCountsOf) but capped at CountCap+1 like the console's bounded counts
// beside them: a value above CountCap means "more than CountCap".
type ReviewCounts struct {
	// Open items still need a score from someone.
	Open int64
	// Available items this reviewer may claim or already holds.
	Available int64
	// Mine are the items this reviewer holds.
	Mine int64
}

// ReviewQueuePage is one page of the queue.
type ReviewQueuePage struct {
	Rows   []ReviewQueueRow
	Next   string
	Counts ReviewCounts
}

type reviewCursor struct {
	DecidedAt UTCTime `json:"d"`
	SessionID string  `json:"s"`
	AtVersion int64   `json:"v"`
}

func encodeReviewCursor(i ReviewItem) string {
	return encodeCursor(reviewCursor{DecidedAt: i.DecidedAt, SessionID: i.SessionID, AtVersion: i.AtVersion})
}

func decodeReviewCursor(s string) (reviewCursor, error) {
	var c reviewCursor
	if err := decodeCursor(s, &c); err != nil || c.SessionID == "" || c.DecidedAt.IsZero() {
		return c, &ValidationError{Fields: []FieldError{{Field: "after", Message: "is not a cursor of this queue"}}}
	}
	return c, nil
}

// availableTo narrows a query over review_items i (left-joined with the
// reviewer's live claim as c) to the items the reviewer may score: still
// short of scores, not decided by them, not scored by them, and either held
// by them or with a free slot once the other live claims are counted.
func availableTo(q *gorm.DB, actor string, now UTCTime) *gorm.DB {
	return q.Where("i.scored < i.needed AND i.decided_by <> ?", actor).
		// OFFSET 0 keeps "not scored by me" a probe of
		// review_scores_reviewer_idx per open item (PostgreSQL does not turn
		// a subquery with an OFFSET into a join): as an anti-join the planner
		// hashed every score the reviewer ever gave, a cost that grows with
		// their history. SQLite wants a LIMIT before an OFFSET.
		Where(notScoredBy, actor).
		Where(`(c.reviewer IS NOT NULL OR i.scored + (SELECT count(*) FROM review_claims o
	WHERE o.session_id = i.session_id AND o.at_version = i.at_version AND o.reviewer <> ? AND o.expires_at > ?) < i.needed)`, actor, now)
}

// notScoredBy is availableTo's "not scored by ?" over review_items i.
const notScoredBy = "NOT EXISTS (SELECT 1 FROM review_scores r WHERE r.session_id = i.session_id AND r.at_version = i.at_version AND r.reviewer = ? LIMIT 1 OFFSET 0)"

func (s *Store) reviewQueueBase(ctx context.Context, actor string, now UTCTime) *gorm.DB {
	q := s.read(ctx).Table("review_items i").
		Joins("LEFT JOIN review_claims c ON c.session_id = i.session_id AND c.at_version = i.at_version AND c.reviewer = ? AND c.expires_at > ?", actor, now)
	return availableTo(q, actor, now)
}

// reviewOrder is the queue's order, that of review_items_open_idx.
const reviewOrder = "i.decided_at, i.session_id, i.at_version"

// ReviewQueue returns a page of the items a reviewer may score, oldest
// decision first, with the queue's counts.
func (s *Store) ReviewQueue(ctx context.Context, o ReviewQueueOpts) (ReviewQueuePage, error) {
	if o.Limit <= 0 || o.Limit > 200 {
		o.Limit = 50
	}
	actor := o.Reviewer.Actor()
	now := NewUTCTime(s.now())
	q := s.reviewQueueBase(ctx, actor, now)
	if o.Mine {
		// The reviewer's live claims, a handful, drive the page: walking the
		// open items in order for the few held read the whole backlog.
		q = availableTo(s.read(ctx).Table("review_claims c").
			Joins("JOIN review_items i ON i.session_id = c.session_id AND i.at_version = c.at_version").
			Where("c.reviewer = ? AND c.expires_at > ?", actor, now), actor, now)
	}
	q = q.Select("i.*, c.expires_at AS my_claim_expires")
	if o.After != "" {
		cur, err := decodeReviewCursor(o.After)
		if err != nil {
			return ReviewQueuePage{}, err
		}
		q = q.Where("(i.decided_at, i.session_id, i.at_version) > ("+s.timeParam()+", ?, ?)", cur.DecidedAt, cur.SessionID, cur.AtVersion)
	}
	var rows []ReviewQueueRow
	if err := q.Order(reviewOrder).Limit(o.Limit + 1).Scan(&rows).Error; err != nil {
		return ReviewQueuePage{}, fmt.Errorf("review queue: %w", err)
	}
	page := ReviewQueuePage{Rows: rows}
	if len(rows) > o.Limit {
		page.Rows = rows[:o.Limit]
		page.Next = encodeReviewCursor(page.Rows[o.Limit-1].ReviewItem)
	}
	// Maintained and derived counts (review_counts.go): they read a few
	// counter rows and the items in progress, not the backlog.
	counts, err := s.reviewCountsOf(ctx, actor, now)
	if err != nil {
		return page, fmt.Errorf("review queue: counts: %w", err)
	}
	page.Counts = counts
	return page, nil
}

// GetReviewItem returns one item.
func (s *Store) GetReviewItem(ctx context.Context, k ReviewKey) (ReviewItem, error) {
	var items []ReviewItem
	if err := s.DB.WithContext(ctx).Where("session_id = ? AND at_version = ?", k.SessionID, k.AtVersion).
		Limit(1).Find(&items).Error; err != nil {
		return ReviewItem{}, fmt.Errorf("review item %s@%d: %w", k.SessionID, k.AtVersion, err)
	}
	if len(items) == 0 {
		return ReviewItem{}, &NotFoundError{Kind: "review item", ID: fmt.Sprintf("%s@%d", k.SessionID, k.AtVersion)}
	}
	return items[0], nil
}

// ReviewView is what a reviewer sees of one item: the item, the package as
// the agent got it, and their own claim and score.
type ReviewView struct {
	Item ReviewItem
	// Package is the session's state at the escalation version; its
	// Escalation is the package the agent saw.
	Package State
	// MyClaimExpires is when the reviewer's live claim lapses (null: none).
	MyClaimExpires NullTime
	// Mine is the reviewer's own score, if they scored the item. Other
	// reviewers' scores are never shown: double scoring is blind.
	Mine *ReviewScore
	// Claimable says whether a claim by the reviewer would be accepted now.
	Claimable bool
}

// GetReviewView reads what the review page needs for reviewer u.
func (s *Store) GetReviewView(ctx context.Context, k ReviewKey, u User) (ReviewView, error) {
	item, err := s.GetReviewItem(ctx, k)
	if err != nil {
		return ReviewView{}, err
	}
	st, err := s.StateAt(ctx, k.SessionID, k.AtVersion)
	if err != nil {
		return ReviewView{}, err
	}
	v := ReviewView{Item: item, Package: st}
	actor := u.Actor()
	db := s.DB.WithContext(ctx)
	var mine []ReviewScore
	if err := db.Where("session_id = ? AND at_version = ? AND reviewer = ?", k.SessionID, k.AtVersion, actor).Limit(1).Find(&mine).Error; err != nil {
		return v, fmt.Errorf("review item %s@%d: my score: %w", k.SessionID, k.AtVersion, err)
	}
	if len(mine) > 0 {
		v.Mine = &mine[0]
	}
	now := NewUTCTime(s.now())
	var claims []reviewClaim
	if err := db.Where("session_id = ? AND at_version = ? AND reviewer = ? AND expires_at > ?", k.SessionID, k.AtVersion, actor, now).
		Limit(1).Find(&claims).Error; err != nil {
		return v, fmt.Errorf("review item %s@%d: my claim: %w", k.SessionID, k.AtVersion, err)
	}
	if len(claims) > 0 {
		v.MyClaimExpires = NullTime{Time: claims[0].ExpiresAt, Valid: true}
	}
	if u.CanReview() && v.Mine == nil {
		var n int64
		if err := s.reviewQueueBase(ctx, actor, now).Where("i.session_id = ? AND i.at_version = ?", k.SessionID, k.AtVersion).
			Count(&n).Error; err != nil {
			return v, fmt.Errorf("review item %s@%d: available: %w", k.SessionID, k.AtVersion, err)
		}
		v.Claimable = n > 0
	}
	return v, nil
}

// lockReviewItem reads an item in tx, locking it on PostgreSQL, so that
// claims and scores of one item are decided one at a time.
func (s *Store) lockReviewItem(tx *Tx, k ReviewKey) (ReviewItem, error) {
	items, err := selectTx[ReviewItem](tx, `SELECT * FROM review_items WHERE session_id = ? AND at_version = ?`+s.forUpdate(),
		k.SessionID, k.AtVersion)
	if err != nil {
		return ReviewItem{}, fmt.Errorf("review item %s@%d: %w", k.SessionID, k.AtVersion, err)
	}
	if len(items) == 0 {
		return ReviewItem{}, &NotFoundError{Kind: "review item", ID: fmt.Sprintf("%s@%d", k.SessionID, k.AtVersion)}
	}
	return items[0], nil
}

// reviewSlot checks, with the item locked, that u may score it now: not
// decided by u, not scored by u, short of scores, and held by u or with a
// free slot. It reports whether u holds a live claim.
func (s *Store) reviewSlot(tx *Tx, item ReviewItem, u User, now UTCTime) (bool, []ReviewScore, error) {
	actor := u.Actor()
	k := item.Key()
	if item.DecidedBy == actor {
		return false, nil, fmt.Errorf("review of %s@%d: %w", k.SessionID, k.AtVersion, ErrOwnDecision)
	}
	// All the item's scores (at most Needed, so one or two), not a count of
	// u's: the score that completes the item adds them to the statistics
	// rollup in the same round trip's worth of work.
	scores, err := selectTx[ReviewScore](tx, `SELECT * FROM review_scores WHERE session_id = ? AND at_version = ?`,
		k.SessionID, k.AtVersion)
	if err != nil {
		return false, nil, fmt.Errorf("review item %s@%d: %w", k.SessionID, k.AtVersion, err)
	}
	for _, sc := range scores {
		if sc.Reviewer == actor {
			return false, nil, &ReviewTakenError{Key: k, Reason: ReviewAlreadyDone}
		}
	}
	if item.Scored >= item.Needed {
		return false, nil, &ReviewTakenError{Key: k, Reason: ReviewFullyScored}
	}
	claims, err := selectTx[reviewClaim](tx, `SELECT * FROM review_claims WHERE session_id = ? AND at_version = ? AND expires_at > ?`,
		k.SessionID, k.AtVersion, now)
	if err != nil {
		return false, nil, fmt.Errorf("review item %s@%d: claims: %w", k.SessionID, k.AtVersion, err)
	}
	mine, others := false, 0
	for _, c := range claims {
		if c.Reviewer == actor {
			mine = true
		} else {
			others++
		}
	}
	if !mine && item.Scored+others >= item.Needed {
		return false, nil, &ReviewTakenError{Key: k, Reason: ReviewHeldByOthers}
	}
	return mine, scores, nil
}

// ClaimReview gives u the item for ClaimTTL, so that nobody else scores it by
// accident; a claim u already holds is extended. It returns when the claim
// expires.
func (s *Store) ClaimReview(ctx context.Context, k ReviewKey, u User, p ReviewPolicy) (time.Time, error) {
	p = p.withDefaults()
	if !u.CanReview() {
		return time.Time{}, fmt.Errorf("claim review of %s@%d by %s (%s): %w", k.SessionID, k.AtVersion, u.Email, u.Role, ErrForbidden)
	}
	now := NewUTCTime(s.now())
	expires := NewUTCTime(now.Add(p.ClaimTTL))
	err := s.Write(ctx, func(tx *Tx) error {
		item, err := s.lockReviewItem(tx, k)
		if err != nil {
			return err
		}
		if _, _, err := s.reviewSlot(tx, item, u, now); err != nil {
			return err
		}
		tx.Later(failWith("claim review: drop lapsed claims"),
			`DELETE FROM review_claims WHERE session_id = ? AND at_version = ? AND expires_at <= ?`, k.SessionID, k.AtVersion, now)
		tx.Later(failWith("claim review"),
			`INSERT INTO review_claims (session_id, at_version, reviewer, claimed_at, expires_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (session_id, at_version, reviewer) DO UPDATE SET claimed_at = excluded.claimed_at, expires_at = excluded.expires_at`,
			k.SessionID, k.AtVersion, u.Actor(), now, expires)
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return expires.Time, nil
}

// ReleaseReview gives up u's claim on the item (a no-op without one).
func (s *Store) ReleaseReview(ctx context.Context, k ReviewKey, u User) error {
	err := s.DB.WithContext(ctx).Where("session_id = ? AND at_version = ? AND reviewer = ?", k.SessionID, k.AtVersion, u.Actor()).
		Delete(&reviewClaim{}).Error
	if err != nil {
		return fmt.Errorf("release review of %s@%d: %w", k.SessionID, k.AtVersion, err)
	}
	return nil
}

// ClaimNextReview claims the oldest item u may score (one u holds already
// counts) and returns its key; ok is false when the queue is empty for u.
func (s *Store) ClaimNextReview(ctx context.Context, u User, p ReviewPolicy) (ReviewKey, bool, error) {
	if !u.CanReview() {
		return ReviewKey{}, false, fmt.Errorf("claim next review by %s (%s): %w", u.Email, u.Role, ErrForbidden)
	}
	// Another reviewer may take the item between the read and the claim;
	// then the next one is tried.
	for attempt := 0; attempt < 5; attempt++ {
		var items []ReviewItem
		now := NewUTCTime(s.now())
		err := s.reviewQueueBase(ctx, u.Actor(), now).Select("i.*").
			Order("i.decided_at, i.session_id, i.at_version").Limit(1).Scan(&items).Error
		if err != nil {
			return ReviewKey{}, false, fmt.Errorf("claim next review: %w", err)
		}
		if len(items) == 0 {
			return ReviewKey{}, false, nil
		}
		k := items[0].Key()
		_, err = s.ClaimReview(ctx, k, u, p)
		var taken *ReviewTakenError
		if errors.As(err, &taken) {
			continue
		}
		if err != nil {
			return ReviewKey{}, false, err
		}
		return k, true, nil
	}
	return ReviewKey{}, false, nil
}

// ScoreInput is a reviewer's score of one item.
type ScoreInput struct {
	Key     ReviewKey
	Scores  map[string]int
	Comment string
}

// Validate lists every problem with the input, one entry per criterion.
func (in ScoreInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	if in.Key.SessionID == "" {
		v.Add("session_id", "is required")
	}
	if in.Key.AtVersion < 1 {
		v.Add("at_version", "must be at least 1")
	}
	for _, c := range Rubric {
		n, ok := in.Scores[c.Key]
		switch {
		case !ok || n == 0:
			v.Add(c.Key, "needs a score from %d to %d", MinScore, MaxScore)
		case n < MinScore || n > MaxScore:
			v.Add(c.Key, "must be between %d and %d", MinScore, MaxScore)
		}
	}
	for k := range in.Scores {
		if !isCriterion(k) {
			v.Add(k, "is not a criterion of the rubric")
		}
	}
	validateText(v, "comment", in.Comment, false)
	return v.Err()
}

func isCriterion(k string) bool {
	for _, c := range Rubric {
		if c.Key == k {
			return true
		}
	}
	return false
}

// ScoreReview records u's score of an item as a review.scored event in the
// session, with its projection row, the item's score count and the end of
// u's claim, all in the transaction of the event. A reviewer without a claim
// may score when a slot is free.
func (s *Store) ScoreReview(ctx context.Context, u User, idemKey string, in ScoreInput) (Outcome, error) {
	if !u.CanReview() {
		return Outcome{}, fmt.Errorf("score review of %s@%d by %s (%s): %w", in.Key.SessionID, in.Key.AtVersion, u.Email, u.Role, ErrForbidden)
	}
	in.Comment = strings.TrimSpace(in.Comment)
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	actor := u.Actor()
	scores := make(map[string]int, len(Rubric))
	for _, c := range Rubric {
		scores[c.Key] = in.Scores[c.Key]
	}
	payload := ReviewPayload{Reviewer: actor, AtVersion: in.Key.AtVersion, Scores: scores, Comment: in.Comment}
	fp, err := Fingerprint("review", in.Key, payload)
	if err != nil {
		return Outcome{}, err
	}
	k := in.Key
	var (
		item   ReviewItem    // locked by Prepare
		before []ReviewScore // the item's scores before this one
	)
	return s.Execute(ctx, Command{
		SessionID: k.SessionID, Type: EventReviewScored, Actor: actor, Payload: payload,
		IdempotencyKey: idemKey, Fingerprint: fp,
		Prepare: func(tx *Tx, cur State) (any, error) {
			var err error
			item, err = s.lockReviewItem(tx, k)
			if err != nil {
				return nil, err
			}
			_, before, err = s.reviewSlot(tx, item, u, NewUTCTime(s.now()))
			return nil, err
		},
		Effect: func(tx *Tx, next State, ev Event) (any, error) {
			row := ReviewScore{
				EventID: ev.ID, SessionID: k.SessionID, AtVersion: k.AtVersion, Reviewer: actor,
				GoalClear: scores[CriterionGoalClear], StateCurrent: scores[CriterionStateCurrent],
				EvidenceSufficient: scores[CriterionEvidenceSufficient], RisksExplicit: scores[CriterionRisksExplicit],
				NextStepActionable: scores[CriterionNextStepActionable], ScoredAt: ev.CreatedAt,
			}
			// The count first: the score that completes the item then moves
			// only the other scorers' counter rows (migration 00031), taken
			// in the trigger's lock order, not its own row before theirs.
			tx.Later(failWith("score review: count"),
				`UPDATE review_items SET scored = scored + 1 WHERE session_id = ? AND at_version = ?`, k.SessionID, k.AtVersion)
			tx.Later(func(err error) error {
				if isUniqueViolation(err) {
					return &ReviewTakenError{Key: k, Reason: ReviewAlreadyDone}
				}
				return failWith("score review")(err)
			}, `INSERT INTO review_scores (event_id, session_id, at_version, reviewer, goal_clear, state_current,
				evidence_sufficient, risks_explicit, next_step_actionable, scored_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				row.EventID, row.SessionID, row.AtVersion, row.Reviewer, row.GoalClear, row.StateCurrent,
				row.EvidenceSufficient, row.RisksExplicit, row.NextStepActionable, row.ScoredAt)
			tx.Later(failWith("score review: end claim"),
				`DELETE FROM review_claims WHERE session_id = ? AND at_version = ? AND reviewer = ?`, k.SessionID, k.AtVersion, actor)
			if len(before)+1 == item.Needed {
				// This score completes the item: it enters the statistics
				// with all its scores (see review_rollup.go).
				for _, st := range reviewRollupStmts(item.Queue, item.ClaimedAt, item.DecidedAt, append(before, row), 1) {
					tx.Later(failWith("score review: statistics rollup"), st.sql, st.args...)
				}
			}
			return nil, nil
		},
	})
}

// Review statistics.

// ReviewStatsOpts selects the scores counted: those given in [From, To).
type ReviewStatsOpts struct {
	From, To time.Time
}

// CriteriaMeans are the mean score of each criterion over a set of scores.
type CriteriaMeans struct {
	// Scores is the number of reviewer scores counted.
	Scores int64
	// Means are in Rubric order; nil without scores.
	Means []float64
}

// Mean is the mean over all criteria.
func (c CriteriaMeans) Mean() float64 {
	if len(c.Means) == 0 {
		return 0
	}
	sum := 0.0
	for _, m := range c.Means {
		sum += m
	}
	return sum / float64(len(c.Means))
}

type meansAcc struct {
	n    int64
	sums [5]int64
}

func (a *meansAcc) add(v [5]int) {
	a.n++
	for i, x := range v {
		a.sums[i] += int64(x)
	}
}

func (a *meansAcc) addN(n int64, sums [5]int64) {
	a.n += n
	for i, x := range sums {
		a.sums[i] += x
	}
}

func (a *meansAcc) means() CriteriaMeans {
	c := CriteriaMeans{Scores: a.n}
	if a.n == 0 {
		return c
	}
	c.Means = make([]float64, len(a.sums))
	for i, s := range a.sums {
		c.Means[i] = float64(s) / float64(a.n)
	}
	return c
}

// QueueMeans are the criteria means of one queue's items.
type QueueMeans struct {
	Queue string
	CriteriaMeans
}

// WeekMeans are the criteria means of the scores given in one week
// (starting Monday 00:00 UTC).
type WeekMeans struct {
	Week time.Time
	CriteriaMeans
}

// AgreementStat is how two reviewers agreed on double-scored items.
type AgreementStat struct {
	// Pairs is the number of (item, criterion) score pairs compared.
	Pairs int
	// Percent is the share of pairs with the same score, in [0, 1].
	Percent *float64
	// Kappa is Cohen's kappa; nil when undefined (no pairs, or both
	// reviewers used one and the same score throughout).
	Kappa *float64
}

// Agreement covers the items scored by two reviewers.
type Agreement struct {
	Items int
	// Criteria are in Rubric order.
	Criteria []AgreementStat
	// Overall pools the pairs of every criterion.
	Overall AgreementStat
}

// ClarityBucket is the mean time from claim to decision of the items whose
// mean rubric score rounds to Score.
type ClarityBucket struct {
	Score       int
	Items       int
	MeanSeconds *float64
}

// ClarityTiming relates clarity scores to how long humans took.
type ClarityTiming struct {
	// Items counts the scored items that were claimed before the decision.
	Items   int
	Buckets []ClarityBucket
	// Pearson is the correlation between an item's mean score and its
	// seconds from claim to decision (negative: clearer is faster); nil
	// with fewer than two items or no variation.
	Pearson *float64
}

// ReviewStats are the reviewer statistics of a period.
type ReviewStats struct {
	From, To  time.Time
	Overall   CriteriaMeans
	ByQueue   []QueueMeans
	ByWeek    []WeekMeans
	Agreement Agreement
	Clarity   ClarityTiming
}

type scoreRow struct {
	ReviewScore
	Queue     string
	ClaimedAt NullTime
	DecidedAt UTCTime
}

func agreementOf(pairs [][2]int) AgreementStat {
	a := AgreementStat{Pairs: len(pairs)}
	if len(pairs) == 0 {
		return a
	}
	same := 0
	for _, p := range pairs {
		if p[0] == p[1] {
			same++
		}
	}
	pct := float64(same) / float64(len(pairs))
	a.Percent = &pct
	if k, ok := CohenKappa(pairs); ok {
		a.Kappa = &k
	}
	return a
}

// WeekStart is the Monday 00:00 UTC that starts t's week.
func WeekStart(t time.Time) time.Time {
	t = t.UTC()
	d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	offset := (int(d.Weekday()) - int(time.Monday) + 7) % 7
	return d.AddDate(0, 0, -offset)
}

// CohenKappa is Cohen's kappa of two raters who labelled the same items:
// pairs[i] holds rater A's and rater B's label of item i. It is
// (po − pe) / (1 − pe), with po the observed share of agreement and pe the
// agreement expected by chance from each rater's label frequencies. ok is
// false when it is undefined: no pairs, or pe = 1 (both raters gave one and
// the same label to every item).
func CohenKappa(pairs [][2]int) (kappa float64, ok bool) {
	n := float64(len(pairs))
	if n == 0 {
		return 0, false
	}
	a, b := map[int]float64{}, map[int]float64{}
	agree := 0.0
	for _, p := range pairs {
		a[p[0]]++
		b[p[1]]++
		if p[0] == p[1] {
			agree++
		}
	}
	po := agree / n
	pe := 0.0
	for label, na := range a {
		pe += (na / n) * (b[label] / n)
	}
	if pe >= 1 {
		return 0, false
	}
	return (po - pe) / (1 - pe), true
}

// Pearson is the Pearson correlation coefficient of xs and ys; ok is false
// when it is undefined (fewer than two points, different lengths, or no
// variation in either).
//
// Variation at the level of rounding counts as none: three equal values
// such as 0.1 have a float mean that differs from each by an ulp, and
// the "correlation" of those ulps is noise, not a figure (the rollup's
// pearsonOfSums draws the same line).
func Pearson(xs, ys []float64) (r float64, ok bool) {
	n := len(xs)
	if n < 2 || n != len(ys) {
		return 0, false
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(n)
	my /= float64(n)
	var sxy, sxx, syy, rawXX, rawYY float64
	for i := range xs {
		dx, dy := xs[i]-mx, ys[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
		rawXX += xs[i] * xs[i]
		rawYY += ys[i] * ys[i]
	}
	if sxx <= roundingVariation*rawXX || syy <= roundingVariation*rawYY {
		return 0, false
	}
	return sxy / math.Sqrt(sxx*syy), true
}

// roundingVariation is the share of a sum of squares below which the
// squared deviations from the mean are taken as rounding, not variation.
const roundingVariation = 1e-12
