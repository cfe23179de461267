package models

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"
)

// ReviewStatsFromScores is ReviewStatsFor as it was before the rollup: it
// reads every score of the period (the reference the rollup must match).
//
// It computes the statistics of the scores given in the period.
// Only items with all the scores they need count: a double review's first
// score stays out until the second is in, or the statistics every reviewer
// sees would tell a lone score the blind rule hides (MayReadReview).
// Scores are streamed item by item, so memory grows with the number of
// queues and weeks, not with the number of scores.
func (s *Store) ReviewStatsFromScores(ctx context.Context, o ReviewStatsOpts) (ReviewStats, error) {
	if !o.To.After(o.From) {
		return ReviewStats{}, &ValidationError{Fields: []FieldError{{Field: "window", Message: "must end after it starts"}}}
	}
	from, to := NewUTCTime(o.From), NewUTCTime(o.To)
	rows, err := s.DB.WithContext(ctx).Raw(`SELECT r.event_id, r.session_id, r.at_version, r.reviewer,
	r.goal_clear, r.state_current, r.evidence_sufficient, r.risks_explicit, r.next_step_actionable, r.scored_at,
	i.queue, i.claimed_at, i.decided_at
FROM review_scores r JOIN review_items i ON i.session_id = r.session_id AND i.at_version = r.at_version
WHERE r.scored_at >= ? AND r.scored_at < ? AND i.scored >= i.needed
ORDER BY r.session_id, r.at_version, r.scored_at, r.event_id`, from, to).Rows()
	if err != nil {
		return ReviewStats{}, fmt.Errorf("review stats: %w", err)
	}
	defer rows.Close()
	var (
		overall   meansAcc
		queues    = map[string]*meansAcc{}
		weeks     = map[time.Time]*meansAcc{}
		pairs     = make([][][2]int, len(Rubric))
		doubled   int
		buckets   = map[int]*[2]float64{} // items, seconds sum
		xs, ys    []float64
		item      []scoreRow
		flushItem = func() {
			if len(item) == 0 {
				return
			}
			if len(item) >= 2 {
				doubled++
				a, b := item[0].values(), item[1].values()
				for c := range pairs {
					pairs[c] = append(pairs[c], [2]int{a[c], b[c]})
				}
			}
			if first := item[0]; first.ClaimedAt.Valid {
				sum, n := 0.0, 0
				for _, r := range item {
					for _, v := range r.values() {
						sum += float64(v)
						n++
					}
				}
				mean := sum / float64(n)
				secs := first.DecidedAt.Sub(first.ClaimedAt.Time.Time).Seconds()
				bucket := int(math.Round(mean))
				bk := buckets[bucket]
				if bk == nil {
					bk = &[2]float64{}
					buckets[bucket] = bk
				}
				bk[0]++
				bk[1] += secs
				xs, ys = append(xs, mean), append(ys, secs)
			}
			item = item[:0]
		}
	)
	for rows.Next() {
		// Scanned column by column: GORM's ScanRows resolves the struct
		// by reflection on every row, which cost most of the page at a few
		// thousand scores.
		var r scoreRow
		if err := rows.Scan(&r.EventID, &r.SessionID, &r.AtVersion, &r.Reviewer,
			&r.GoalClear, &r.StateCurrent, &r.EvidenceSufficient, &r.RisksExplicit, &r.NextStepActionable, &r.ScoredAt,
			&r.Queue, &r.ClaimedAt, &r.DecidedAt); err != nil {
			return ReviewStats{}, fmt.Errorf("review stats: scan: %w", err)
		}
		if len(item) > 0 && (item[0].SessionID != r.SessionID || item[0].AtVersion != r.AtVersion) {
			flushItem()
		}
		item = append(item, r)
		v := r.values()
		overall.add(v)
		qa := queues[r.Queue]
		if qa == nil {
			qa = &meansAcc{}
			queues[r.Queue] = qa
		}
		qa.add(v)
		w := WeekStart(r.ScoredAt.Time)
		wa := weeks[w]
		if wa == nil {
			wa = &meansAcc{}
			weeks[w] = wa
		}
		wa.add(v)
	}
	if err := rows.Err(); err != nil {
		return ReviewStats{}, fmt.Errorf("review stats: %w", err)
	}
	flushItem()

	st := ReviewStats{From: from.Time, To: to.Time, Overall: overall.means()}
	for q, a := range queues {
		st.ByQueue = append(st.ByQueue, QueueMeans{Queue: q, CriteriaMeans: a.means()})
	}
	sort.Slice(st.ByQueue, func(i, j int) bool { return st.ByQueue[i].Queue < st.ByQueue[j].Queue })
	for w, a := range weeks {
		st.ByWeek = append(st.ByWeek, WeekMeans{Week: w, CriteriaMeans: a.means()})
	}
	sort.Slice(st.ByWeek, func(i, j int) bool { return st.ByWeek[i].Week.Before(st.ByWeek[j].Week) })

	st.Agreement.Items = doubled
	var all [][2]int
	for _, ps := range pairs {
		st.Agreement.Criteria = append(st.Agreement.Criteria, agreementOf(ps))
		all = append(all, ps...)
	}
	st.Agreement.Overall = agreementOf(all)

	st.Clarity.Items = len(xs)
	for score := MinScore; score <= MaxScore; score++ {
		b := ClarityBucket{Score: score}
		if bk := buckets[score]; bk != nil {
			b.Items = int(bk[0])
			m := bk[1] / bk[0]
			b.MeanSeconds = &m
		}
		st.Clarity.Buckets = append(st.Clarity.Buckets, b)
	}
	if r, ok := Pearson(xs, ys); ok {
		st.Clarity.Pearson = &r
	}
	return st, nil
}
