package models

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Review statistics rollup.
//
// ReviewStatsFor used to read every score of its window (a 365-day window
// reads every score there is). The statistics only count items with all the
// scores they need, so an item enters the rollup in the transaction of the
// score that completes it (ScoreReview) and leaves it in the transaction
// that archives its session: the rollup always holds exactly the complete
// items, as the old query's "scored >= needed" did. Buckets are UTC days
// (weeks are made of days). A window reads the rollup rows of its whole days
// and, from review_scores, only the items that have a score in the two
// partial days at its ends.
//
// Three tables (migration 00030):
//
//   - review_score_days: per day of scored_at and queue, the number of
//     scores and the sum of each criterion (Overall, ByQueue, ByWeek).
//   - review_pair_days: the agreement of double-scored items, per (day of
//     the first score, day of the second) and criterion: how many pairs
//     scored (a, b), in columns p11 … p55. Cohen's kappa needs only that
//     contingency table; a row holds all of it, so that a year's window
//     reads rows by the day, not by the score pair.
//   - review_item_days: what each item adds to the clarity timing and to
//     the count of double-scored items, per (day1, day2, part, clarity).
//
// The item-level statistics depend on which of an item's scores fall in the
// window: both scores of a double item make a pair and a clarity point of
// ten values; one of them alone makes a clarity point of five. An item has
// at most two scores (Needed is 1 or 2 and reviewSlot refuses a score past
// it), so an item whose two scores fall on different days is stored three
// times: part "whole" keyed (day of first, day of second), part "first"
// (the first score alone) keyed (its day, day of the other) and part
// "second" keyed the same way. A window of whole days [L, H) counts "whole"
// when both days are inside, and a lone part when its own day is inside and
// the other day beyond the window, beyond the partial day at that end too:
// an item with a score in a partial end day is read from review_scores.

// Parts of review_item_days.
const (
	reviewPartWhole  = "whole"
	reviewPartFirst  = "first"
	reviewPartSecond = "second"
)

const reviewDay = 24 * time.Hour

// reviewDayOf is the UTC day t falls in.
func reviewDayOf(t time.Time) time.Time { return t.UTC().Truncate(reviewDay) }

type reviewScoreDay struct {
	Day    UTCTime
	Queue  string
	Scores int64
	Sums   [5]int64
}

type reviewPairDay struct {
	Day1, Day2 UTCTime
	Criterion  int
	A, B       int
	N          int64
}

// reviewPairCols are the count columns of review_pair_days: p<a><b> counts
// the pairs scored a by the first reviewer and b by the second.
var reviewPairCols = func() []string {
	var cols []string
	for a := MinScore; a <= MaxScore; a++ {
		for b := MinScore; b <= MaxScore; b++ {
			cols = append(cols, fmt.Sprintf("p%d%d", a, b))
		}
	}
	return cols
}()

var (
	reviewPairDaysInsert     = `INSERT INTO review_pair_days (day1, day2, criterion, ` + strings.Join(reviewPairCols, ", ") + `) VALUES `
	reviewPairDaysRow        = "(?, ?, ?" + strings.Repeat(", ?", len(reviewPairCols)) + ")"
	reviewPairDaysOnConflict = func() string {
		sets := make([]string, len(reviewPairCols))
		for i, c := range reviewPairCols {
			sets[i] = fmt.Sprintf("%s = review_pair_days.%s + excluded.%s", c, c, c)
		}
		return ` ON CONFLICT (day1, day2, criterion) DO UPDATE SET ` + strings.Join(sets, ", ")
	}()
	reviewPairDaysSQL = func() string {
		sums := make([]string, len(reviewPairCols))
		for i, c := range reviewPairCols {
			sums[i] = fmt.Sprintf("CAST(SUM(%s) AS bigint)", c)
		}
		return `SELECT criterion, ` + strings.Join(sums, ", ") + ` FROM review_pair_days
WHERE day1 >= ? AND day1 < ? AND day2 < ? GROUP BY criterion`
	}()
)

type reviewItemDay struct {
	Day1, Day2 UTCTime
	Part       string
	Clarity    int
	Items      int64
	Doubled    int64
	Claimed    int64
	SumUS      int64 // seconds from claim to decision, in microseconds
	SumX10     int64 // the item's mean score × 10 (an integer: 5 or 10 values)
	SumX10Sq   int64
	SumSecs2   float64
	SumX10Secs float64
}

// reviewPoint is what one item adds to the item-level statistics, given
// the scores of it that a window holds (one or two, in scoring order).
type reviewPoint struct {
	doubled bool
	claimed bool
	clarity int   // the mean score rounded, as ClarityBucket.Score
	x10     int64 // the mean score × 10
	us      int64 // claim to decision
	pair    [5][2]int
}

func reviewPointOf(vals [][5]int, claimedAt NullTime, decidedAt UTCTime) reviewPoint {
	var p reviewPoint
	sum, n := 0, 0
	for _, v := range vals {
		for _, x := range v {
			sum += x
			n++
		}
	}
	if len(vals) >= 2 {
		p.doubled = true
		for c := range p.pair {
			p.pair[c] = [2]int{vals[0][c], vals[1][c]}
		}
	}
	// The same arithmetic as the statistics always used: the mean as a
	// float, rounded half away from zero.
	p.clarity = int(math.Round(float64(sum) / float64(n)))
	p.x10 = int64(sum) * 10 / int64(n)
	if claimedAt.Valid {
		p.claimed = true
		p.us = decidedAt.Sub(claimedAt.Time.Time).Microseconds()
	}
	return p
}

func (p reviewPoint) itemDay(day1, day2 time.Time, part string, sign int64) reviewItemDay {
	r := reviewItemDay{Day1: NewUTCTime(day1), Day2: NewUTCTime(day2), Part: part, Items: sign}
	if p.doubled {
		r.Doubled = sign
	}
	if p.claimed {
		secs := float64(p.us) / 1e6
		f := float64(sign)
		r.Clarity = p.clarity
		r.Claimed, r.SumUS = sign, sign*p.us
		r.SumX10, r.SumX10Sq = sign*p.x10, sign*p.x10*p.x10
		r.SumSecs2, r.SumX10Secs = f*secs*secs, f*float64(p.x10)*secs
	}
	return r
}

// reviewRollupRows are the rollup rows one complete item adds (sign 1) or
// takes away (sign -1). scores are all the item's scores.
func reviewRollupRows(queue string, claimedAt NullTime, decidedAt UTCTime, scores []ReviewScore, sign int64) ([]reviewScoreDay, []reviewPairDay, []reviewItemDay) {
	scores = append([]ReviewScore(nil), scores...)
	sort.Slice(scores, func(i, j int) bool {
		if !scores[i].ScoredAt.Equal(scores[j].ScoredAt.Time) {
			return scores[i].ScoredAt.Before(scores[j].ScoredAt.Time)
		}
		return scores[i].EventID < scores[j].EventID
	})
	var days []reviewScoreDay
	for _, sc := range scores {
		d := NewUTCTime(reviewDayOf(sc.ScoredAt.Time))
		v := sc.values()
		if n := len(days); n > 0 && days[n-1].Day.Equal(d.Time) {
			days[n-1].Scores += sign
			for c := range v {
				days[n-1].Sums[c] += sign * int64(v[c])
			}
			continue
		}
		row := reviewScoreDay{Day: d, Queue: queue, Scores: sign}
		for c := range v {
			row.Sums[c] = sign * int64(v[c])
		}
		days = append(days, row)
	}
	if len(scores) == 0 {
		return nil, nil, nil
	}
	vals := make([][5]int, len(scores))
	for i, sc := range scores {
		vals[i] = sc.values()
	}
	first := reviewDayOf(scores[0].ScoredAt.Time)
	last := reviewDayOf(scores[len(scores)-1].ScoredAt.Time)
	whole := reviewPointOf(vals, claimedAt, decidedAt)
	items := []reviewItemDay{whole.itemDay(first, last, reviewPartWhole, sign)}
	var pairs []reviewPairDay
	if whole.doubled {
		for c, ab := range whole.pair {
			pairs = append(pairs, reviewPairDay{Day1: NewUTCTime(first), Day2: NewUTCTime(reviewDayOf(scores[1].ScoredAt.Time)),
				Criterion: c, A: ab[0], B: ab[1], N: sign})
		}
	}
	if len(scores) == 2 && !first.Equal(last) {
		items = append(items,
			reviewPointOf(vals[:1], claimedAt, decidedAt).itemDay(first, last, reviewPartFirst, sign),
			reviewPointOf(vals[1:], claimedAt, decidedAt).itemDay(last, first, reviewPartSecond, sign))
	}
	return days, pairs, items
}

type sqlStmt struct {
	sql  string
	args []any
}

const (
	reviewScoreDaysUpsert = `INSERT INTO review_score_days (day, queue, scores, goal_clear, state_current, evidence_sufficient, risks_explicit, next_step_actionable)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (day, queue) DO UPDATE SET scores = review_score_days.scores + excluded.scores,
	goal_clear = review_score_days.goal_clear + excluded.goal_clear,
	state_current = review_score_days.state_current + excluded.state_current,
	evidence_sufficient = review_score_days.evidence_sufficient + excluded.evidence_sufficient,
	risks_explicit = review_score_days.risks_explicit + excluded.risks_explicit,
	next_step_actionable = review_score_days.next_step_actionable + excluded.next_step_actionable`
	reviewItemDaysUpsert = `INSERT INTO review_item_days (day1, day2, part, clarity, items, doubled, claimed, sum_us, sum_x10, sum_x10sq, sum_secs2, sum_x10secs)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (day1, day2, part, clarity) DO UPDATE SET items = review_item_days.items + excluded.items,
	doubled = review_item_days.doubled + excluded.doubled, claimed = review_item_days.claimed + excluded.claimed,
	sum_us = review_item_days.sum_us + excluded.sum_us, sum_x10 = review_item_days.sum_x10 + excluded.sum_x10,
	sum_x10sq = review_item_days.sum_x10sq + excluded.sum_x10sq, sum_secs2 = review_item_days.sum_secs2 + excluded.sum_secs2,
	sum_x10secs = review_item_days.sum_x10secs + excluded.sum_x10secs`
)

// reviewRollupStmts are the upserts that add (sign 1) or take away (sign
// -1) one complete item. Rows are written in key order, table by table, so
// that two transactions completing items of the same days lock the shared
// rows in the same order and cannot deadlock.
func reviewRollupStmts(queue string, claimedAt NullTime, decidedAt UTCTime, scores []ReviewScore, sign int64) []sqlStmt {
	days, pairs, items := reviewRollupRows(queue, claimedAt, decidedAt, scores, sign)
	var out []sqlStmt
	for _, d := range days {
		out = append(out, sqlStmt{reviewScoreDaysUpsert, []any{d.Day, d.Queue, d.Scores, d.Sums[0], d.Sums[1], d.Sums[2], d.Sums[3], d.Sums[4]}})
	}
	if len(pairs) > 0 {
		// One statement for the five criteria: their keys differ.
		q := reviewPairDaysInsert
		var args []any
		for i, p := range pairs {
			if i > 0 {
				q += ", "
			}
			q += reviewPairDaysRow
			args = append(args, p.Day1, p.Day2, p.Criterion)
			cell := (p.A-MinScore)*(MaxScore-MinScore+1) + (p.B - MinScore)
			for j := range reviewPairCols {
				if j == cell {
					args = append(args, p.N)
				} else {
					args = append(args, 0)
				}
			}
		}
		q += reviewPairDaysOnConflict
		out = append(out, sqlStmt{q, args})
	}
	sort.Slice(items, func(i, j int) bool {
		if !items[i].Day1.Equal(items[j].Day1.Time) {
			return items[i].Day1.Before(items[j].Day1.Time)
		}
		if !items[i].Day2.Equal(items[j].Day2.Time) {
			return items[i].Day2.Before(items[j].Day2.Time)
		}
		return items[i].Part < items[j].Part
	})
	for _, r := range items {
		out = append(out, sqlStmt{reviewItemDaysUpsert, []any{r.Day1, r.Day2, r.Part, r.Clarity, r.Items, r.Doubled, r.Claimed,
			r.SumUS, r.SumX10, r.SumX10Sq, r.SumSecs2, r.SumX10Secs}})
	}
	return out
}

// reviewStatsAcc accumulates the statistics from rollup rows and from the
// items read raw at a window's ends.
type reviewStatsAcc struct {
	overall  meansAcc
	queues   map[string]*meansAcc
	weeks    map[time.Time]*meansAcc
	pairs    [5][MaxScore][MaxScore]int64
	doubled  int64
	buckets  [MaxScore + 1][2]int64 // per clarity score: items, microseconds
	claimed  int64
	sx, sxx  int64 // over the mean score × 10
	sus      int64 // over the microseconds
	syy, sxy float64
}

func newReviewStatsAcc() *reviewStatsAcc {
	return &reviewStatsAcc{queues: map[string]*meansAcc{}, weeks: map[time.Time]*meansAcc{}}
}

func (a *reviewStatsAcc) addScores(day time.Time, queue string, n int64, sums [5]int64) {
	if n == 0 {
		return
	}
	a.overall.addN(n, sums)
	qa := a.queues[queue]
	if qa == nil {
		qa = &meansAcc{}
		a.queues[queue] = qa
	}
	qa.addN(n, sums)
	w := WeekStart(day)
	wa := a.weeks[w]
	if wa == nil {
		wa = &meansAcc{}
		a.weeks[w] = wa
	}
	wa.addN(n, sums)
}

func (a *reviewStatsAcc) addItemDay(r reviewItemDay) {
	a.doubled += r.Doubled
	if r.Claimed == 0 {
		return
	}
	if r.Clarity >= MinScore && r.Clarity <= MaxScore {
		a.buckets[r.Clarity][0] += r.Claimed
		a.buckets[r.Clarity][1] += r.SumUS
	}
	a.claimed += r.Claimed
	a.sx += r.SumX10
	a.sxx += r.SumX10Sq
	a.sus += r.SumUS
	a.syy += r.SumSecs2
	a.sxy += r.SumX10Secs
}

func (a *reviewStatsAcc) addPoint(p reviewPoint) {
	if p.doubled {
		for c, ab := range p.pair {
			a.pairs[c][ab[0]-MinScore][ab[1]-MinScore]++
		}
	}
	a.addItemDay(p.itemDay(time.Time{}, time.Time{}, reviewPartWhole, 1))
}

func (a *reviewStatsAcc) stats(from, to time.Time) ReviewStats {
	st := ReviewStats{From: from, To: to, Overall: a.overall.means()}
	for q, m := range a.queues {
		if m.n != 0 {
			st.ByQueue = append(st.ByQueue, QueueMeans{Queue: q, CriteriaMeans: m.means()})
		}
	}
	sort.Slice(st.ByQueue, func(i, j int) bool { return st.ByQueue[i].Queue < st.ByQueue[j].Queue })
	for w, m := range a.weeks {
		if m.n != 0 {
			st.ByWeek = append(st.ByWeek, WeekMeans{Week: w, CriteriaMeans: m.means()})
		}
	}
	sort.Slice(st.ByWeek, func(i, j int) bool { return st.ByWeek[i].Week.Before(st.ByWeek[j].Week) })

	st.Agreement.Items = int(a.doubled)
	var all [MaxScore][MaxScore]int64
	for c := range a.pairs {
		st.Agreement.Criteria = append(st.Agreement.Criteria, agreementOfTable(a.pairs[c]))
		for i := range all {
			for j := range all[i] {
				all[i][j] += a.pairs[c][i][j]
			}
		}
	}
	st.Agreement.Overall = agreementOfTable(all)

	st.Clarity.Items = int(a.claimed)
	for score := MinScore; score <= MaxScore; score++ {
		b := ClarityBucket{Score: score}
		if bk := a.buckets[score]; bk[0] > 0 {
			b.Items = int(bk[0])
			m := float64(bk[1]) / 1e6 / float64(bk[0])
			b.MeanSeconds = &m
		}
		st.Clarity.Buckets = append(st.Clarity.Buckets, b)
	}
	if r, ok := pearsonOfSums(a.claimed, a.sx, a.sxx, float64(a.sus)/1e6, a.syy, a.sxy); ok {
		st.Clarity.Pearson = &r
	}
	return st
}

// agreementOfTable is agreementOf over a contingency table of score pairs.
func agreementOfTable(t [MaxScore][MaxScore]int64) AgreementStat {
	var n, same int64
	var rows, cols [MaxScore]int64
	for i := range t {
		for j, c := range t[i] {
			n += c
			rows[i] += c
			cols[j] += c
			if i == j {
				same += c
			}
		}
	}
	a := AgreementStat{Pairs: int(n)}
	if n == 0 {
		return a
	}
	nf := float64(n)
	pct := float64(same) / nf
	a.Percent = &pct
	pe := 0.0
	for i := range rows {
		pe += (float64(rows[i]) / nf) * (float64(cols[i]) / nf)
	}
	if pe < 1 {
		k := (pct - pe) / (1 - pe)
		a.Kappa = &k
	}
	return a
}

// pearsonOfSums is Pearson from the sums of x, x², y, y² and xy of n
// points. x is exact (integers), so "no variation in x" is exact; y's
// variation is taken as none when it is at the level of rounding.
func pearsonOfSums(n, sx, sxx int64, sy, syy, sxy float64) (float64, bool) {
	if n < 2 {
		return 0, false
	}
	nf := float64(n)
	dx := n*sxx - sx*sx
	dy := nf*syy - sy*sy
	if dx == 0 || dy <= roundingVariation*nf*syy {
		return 0, false
	}
	r := (nf*sxy - float64(sx)*sy) / math.Sqrt(float64(dx)*dy)
	return math.Max(-1, math.Min(1, r)), true
}

const (
	reviewScoreDaysSQL = `SELECT day, queue, CAST(SUM(scores) AS bigint), CAST(SUM(goal_clear) AS bigint), CAST(SUM(state_current) AS bigint),
	CAST(SUM(evidence_sufficient) AS bigint), CAST(SUM(risks_explicit) AS bigint), CAST(SUM(next_step_actionable) AS bigint)
FROM review_score_days WHERE day >= ? AND day < ? GROUP BY day, queue`
	// One range of day1 for the three parts: "second" rows are keyed by
	// their own day too (see reviewRollupRows).
	reviewItemDaysSQL = `SELECT clarity, CAST(SUM(doubled) AS bigint), CAST(SUM(claimed) AS bigint), CAST(SUM(sum_us) AS bigint),
	CAST(SUM(sum_x10) AS bigint), CAST(SUM(sum_x10sq) AS bigint), SUM(sum_secs2), SUM(sum_x10secs)
FROM review_item_days
WHERE day1 >= ? AND day1 < ? AND (
	(part = 'whole' AND day2 < ?) OR (part = 'first' AND day2 >= ?) OR (part = 'second' AND day2 < ?))
GROUP BY clarity`
	// The complete items with a score in the given ranges, with all their
	// scores, item by item in scoring order.
	reviewEdgeItemsSQL = `SELECT r.event_id, r.session_id, r.at_version, r.reviewer,
	r.goal_clear, r.state_current, r.evidence_sufficient, r.risks_explicit, r.next_step_actionable, r.scored_at,
	i.queue, i.claimed_at, i.decided_at
FROM review_scores r JOIN review_items i ON i.session_id = r.session_id AND i.at_version = r.at_version
WHERE i.scored >= i.needed AND (r.session_id, r.at_version) IN (
	SELECT e.session_id, e.at_version FROM review_scores e
	WHERE (e.scored_at >= ? AND e.scored_at < ?) OR (e.scored_at >= ? AND e.scored_at < ?))
ORDER BY r.session_id, r.at_version, r.scored_at, r.event_id`
)

// ReviewStatsFor computes the statistics of the scores given in the period.
// Only items with all the scores they need count: a double review's first
// score stays out until the second is in, or the statistics every reviewer
// sees would tell a lone score the blind rule hides (MayReadReview).
// It reads the rollup for the window's whole UTC days and review_scores only
// for the items with a score in the partial days at its ends, so its cost
// grows with the window's days and the scores of two days at most, not with
// all the scores in it. Its reads share one snapshot.
func (s *Store) ReviewStatsFor(ctx context.Context, o ReviewStatsOpts) (ReviewStats, error) {
	if !o.To.After(o.From) {
		return ReviewStats{}, &ValidationError{Fields: []FieldError{{Field: "window", Message: "must end after it starts"}}}
	}
	var opts *sql.TxOptions
	if s.Dialect == Postgres {
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	var st ReviewStats
	err := s.DB.WithContext(ctx).Transaction(func(db *gorm.DB) error {
		var err error
		st, err = s.reviewStats(db, NewUTCTime(o.From), NewUTCTime(o.To))
		return err
	}, opts)
	if err != nil {
		return ReviewStats{}, fmt.Errorf("%w", err)
	}
	return st, nil
}

// reviewStats computes ReviewStatsFor's statistics in db's snapshot.
func (s *Store) reviewStats(db *gorm.DB, from, to UTCTime) (ReviewStats, error) {
	acc := newReviewStatsAcc()
	// The whole days [lo, hi). A partial day at an end counts as whole when
	// the window holds all its scores: a window that ends now has no
	// scores after its end, so the day it ends in is read from the rollup.
	lo := reviewDayOf(from.Time)
	if lo.Before(from.Time) {
		some, err := reviewScoresIn(db, lo, from.Time)
		if err != nil {
			return ReviewStats{}, err
		}
		if some {
			lo = lo.Add(reviewDay)
		}
	}
	hi := reviewDayOf(to.Time)
	if hi.Before(to.Time) {
		some, err := reviewScoresIn(db, to.Time, hi.Add(reviewDay))
		if err != nil {
			return ReviewStats{}, err
		}
		if !some {
			hi = hi.Add(reviewDay)
		}
	}
	// Raw ranges: the items with a score there are read from review_scores,
	// and so are the window's scores in [from, lo) and [hi, to).
	var raw [2][2]time.Time // empty ranges by default
	if lo.Before(hi) {
		loOut, hiOut := lo, hi
		if lo.After(from.Time) {
			loOut = lo.Add(-reviewDay)
			raw[0] = [2]time.Time{loOut, lo}
		}
		if to.After(hi) {
			hiOut = hi.Add(reviewDay)
			raw[1] = [2]time.Time{hi, hiOut}
		}
		if err := readReviewRollup(db, acc, NewUTCTime(lo), NewUTCTime(hi), NewUTCTime(loOut), NewUTCTime(hiOut)); err != nil {
			return ReviewStats{}, err
		}
	} else {
		// No whole day: everything from review_scores.
		raw[0] = [2]time.Time{from.Time, to.Time}
		lo, hi = to.Time, to.Time
	}
	if !raw[0][0].Before(raw[0][1]) && !raw[1][0].Before(raw[1][1]) {
		// Whole days only (the usual window, which ends now): no score
		// to read. The statement would find nothing, yet at a million
		// events PostgreSQL planned it afresh on every view, 1.0 ms
		// (its time ranges as parameters keep a generic plan dearer).
		return acc.stats(from.Time, to.Time), nil
	}
	rows, err := db.Raw(reviewEdgeItemsSQL, NewUTCTime(raw[0][0]), NewUTCTime(raw[0][1]), NewUTCTime(raw[1][0]), NewUTCTime(raw[1][1])).Rows()
	if err != nil {
		return ReviewStats{}, fmt.Errorf("edge items: %w", err)
	}
	defer rows.Close()
	var item []scoreRow
	flush := func() {
		var vals [][5]int
		for _, r := range item {
			if r.ScoredAt.Before(from.Time) || !r.ScoredAt.Before(to.Time) {
				continue
			}
			vals = append(vals, r.values())
			// Scores in whole days are in the rollup already.
			if r.ScoredAt.Before(lo) || !r.ScoredAt.Before(hi) {
				var sums [5]int64
				for c, v := range r.values() {
					sums[c] = int64(v)
				}
				acc.addScores(r.ScoredAt.Time, r.Queue, 1, sums)
			}
		}
		if len(vals) > 0 {
			acc.addPoint(reviewPointOf(vals, item[0].ClaimedAt, item[0].DecidedAt))
		}
		item = item[:0]
	}
	for rows.Next() {
		var r scoreRow
		if err := rows.Scan(&r.EventID, &r.SessionID, &r.AtVersion, &r.Reviewer,
			&r.GoalClear, &r.StateCurrent, &r.EvidenceSufficient, &r.RisksExplicit, &r.NextStepActionable, &r.ScoredAt,
			&r.Queue, &r.ClaimedAt, &r.DecidedAt); err != nil {
			return ReviewStats{}, fmt.Errorf("edge items: scan: %w", err)
		}
		if len(item) > 0 && (item[0].SessionID != r.SessionID || item[0].AtVersion != r.AtVersion) {
			flush()
		}
		item = append(item, r)
	}
	if err := rows.Err(); err != nil {
		return ReviewStats{}, fmt.Errorf("edge items: %w", err)
	}
	flush()
	return acc.stats(from.Time, to.Time), nil
}

const reviewScoresInSQL = `SELECT count(*) FROM (SELECT 1 FROM review_scores WHERE scored_at >= ? AND scored_at < ? LIMIT 1) x`

// reviewScoresIn reports whether any score was given in [a, b).
func reviewScoresIn(db *gorm.DB, a, b time.Time) (bool, error) {
	var n int64
	if err := db.Raw(reviewScoresInSQL, NewUTCTime(a), NewUTCTime(b)).Scan(&n).Error; err != nil {
		return false, fmt.Errorf("scores in [%s, %s): %w", NewUTCTime(a), NewUTCTime(b), err)
	}
	return n > 0, nil
}

// readReviewRollup adds the rollup of the whole days [L, H). loOut and
// hiOut are the first day before and after the window that no partial end
// day covers: a lone part counts when its other score is beyond them.
func readReviewRollup(db *gorm.DB, acc *reviewStatsAcc, L, H, loOut, hiOut UTCTime) error {
	rows, err := db.Raw(reviewScoreDaysSQL, L, H).Rows()
	if err != nil {
		return fmt.Errorf("score days: %w", err)
	}
	for rows.Next() {
		var d reviewScoreDay
		if err := rows.Scan(&d.Day, &d.Queue, &d.Scores, &d.Sums[0], &d.Sums[1], &d.Sums[2], &d.Sums[3], &d.Sums[4]); err != nil {
			rows.Close()
			return fmt.Errorf("score days: scan: %w", err)
		}
		acc.addScores(d.Day.Time, d.Queue, d.Scores, d.Sums)
	}
	if err := closeRows(rows); err != nil {
		return fmt.Errorf("score days: %w", err)
	}

	rows, err = db.Raw(reviewPairDaysSQL, L, H, H).Rows()
	if err != nil {
		return fmt.Errorf("pair days: %w", err)
	}
	for rows.Next() {
		var c int
		var t [MaxScore - MinScore + 1][MaxScore - MinScore + 1]int64
		dest := []any{&c}
		for a := range t {
			for b := range t[a] {
				dest = append(dest, &t[a][b])
			}
		}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return fmt.Errorf("pair days: scan: %w", err)
		}
		if c >= 0 && c < len(acc.pairs) {
			for a := range t {
				for b := range t[a] {
					acc.pairs[c][a][b] += t[a][b]
				}
			}
		}
	}
	if err := closeRows(rows); err != nil {
		return fmt.Errorf("pair days: %w", err)
	}

	rows, err = db.Raw(reviewItemDaysSQL, L, H, H, hiOut, loOut).Rows()
	if err != nil {
		return fmt.Errorf("item days: %w", err)
	}
	for rows.Next() {
		var r reviewItemDay
		if err := rows.Scan(&r.Clarity, &r.Doubled, &r.Claimed, &r.SumUS, &r.SumX10, &r.SumX10Sq, &r.SumSecs2, &r.SumX10Secs); err != nil {
			rows.Close()
			return fmt.Errorf("item days: scan: %w", err)
		}
		acc.addItemDay(r)
	}
	if err := closeRows(rows); err != nil {
		return fmt.Errorf("item days: %w", err)
	}
	return nil
}

type sqlRows interface {
	Err() error
	Close() error
}

func closeRows(r sqlRows) error {
	if err := r.Err(); err != nil {
		r.Close()
		return err
	}
	return r.Close()
}

// unrollReviewScores takes the complete review items of a session out of the
// statistics rollup, in the transaction that deletes its scores (archiving).
func unrollReviewScores(tx *gorm.DB, sessionID string) error {
	var items []ReviewItem
	if err := tx.Where("session_id = ? AND scored >= needed", sessionID).Find(&items).Error; err != nil {
		return fmt.Errorf("review rollup: items of %s: %w", sessionID, err)
	}
	if len(items) == 0 {
		return nil
	}
	var scores []ReviewScore
	if err := tx.Where("session_id = ?", sessionID).Find(&scores).Error; err != nil {
		return fmt.Errorf("review rollup: scores of %s: %w", sessionID, err)
	}
	byVersion := map[int64][]ReviewScore{}
	for _, sc := range scores {
		byVersion[sc.AtVersion] = append(byVersion[sc.AtVersion], sc)
	}
	for _, it := range items {
		for _, st := range reviewRollupStmts(it.Queue, it.ClaimedAt, it.DecidedAt, byVersion[it.AtVersion], -1) {
			if err := tx.Exec(st.sql, st.args...).Error; err != nil {
				return fmt.Errorf("review rollup: take out %s@%d: %w", sessionID, it.AtVersion, err)
			}
		}
	}
	return nil
}
