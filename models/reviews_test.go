package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// pairs builds rater pairs from a contingency table: m[i][j] items that
// rater A labelled i+1 and rater B labelled j+1.
func pairs(m [][]int) [][2]int {
	var out [][2]int
	for i, row := range m {
		for j, n := range row {
			for k := 0; k < n; k++ {
				out = append(out, [2]int{i + 1, j + 1})
			}
		}
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-4 }

// TestCohenKappa checks kappa against the worked examples of the Wikipedia
// article "Cohen's kappa" (a 2×2 table with κ = 0.4, and the two tables with
// the same 60% agreement but κ = 0.1304 and 0.2593), a 3×3 table worked by
// hand, and the edge cases.
func TestCohenKappa(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		table [][]int
		want  float64
	}{
		// 50 applications, two readers: yes/yes 20, yes/no 5, no/yes 10,
		// no/no 15: po = 0.7, pe = 0.5, κ = 0.4.
		{"wikipedia 2x2", [][]int{{20, 5}, {10, 15}}, 0.4},
		// po = 0.60, pe = 0.54: κ = 0.06/0.46.
		{"wikipedia same agreement, balanced", [][]int{{45, 15}, {25, 15}}, 0.1304},
		// po = 0.60, pe = 0.46: κ = 0.14/0.54.
		{"wikipedia same agreement, unbalanced", [][]int{{25, 35}, {5, 35}}, 0.2593},
		// n = 40, po = 32/40, pe = (12·11 + 12·12 + 16·17)/1600 = 0.3425.
		{"3x3 by hand", [][]int{{10, 2, 0}, {1, 8, 3}, {0, 2, 14}}, (0.8 - 0.3425) / (1 - 0.3425)},
		{"perfect agreement", [][]int{{3, 0}, {0, 4}}, 1},
		// Agreement exactly at chance.
		{"chance", [][]int{{1, 1}, {1, 1}}, 0},
	} {
		got, ok := models.CohenKappa(pairs(tc.table))
		if !ok || !near(got, tc.want) {
			t.Errorf("%s: kappa = %.4f (ok %v), want %.4f", tc.name, got, ok, tc.want)
		}
	}
	if _, ok := models.CohenKappa(nil); ok {
		t.Error("kappa of no pairs should be undefined")
	}
	// Both raters gave every item the same label: pe = 1, undefined.
	if _, ok := models.CohenKappa(pairs([][]int{{0, 0, 0}, {0, 0, 0}, {0, 0, 7}})); ok {
		t.Error("kappa with pe = 1 should be undefined")
	}
}

func TestPearson(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		xs, ys []float64
		want   float64
	}{
		{[]float64{1, 2, 3, 4, 5}, []float64{2, 4, 6, 8, 10}, 1},
		{[]float64{1, 2, 3, 4, 5}, []float64{10, 8, 6, 4, 2}, -1},
		// Σdxdy = 6, Σdx² = 10, Σdy² = 6: r = 6/√60.
		{[]float64{1, 2, 3, 4, 5}, []float64{2, 4, 5, 4, 5}, 6 / math.Sqrt(60)},
	} {
		if got, ok := models.Pearson(tc.xs, tc.ys); !ok || !near(got, tc.want) {
			t.Errorf("Pearson(%v, %v) = %.4f (ok %v), want %.4f", tc.xs, tc.ys, got, ok, tc.want)
		}
	}
	if _, ok := models.Pearson([]float64{1, 1, 1}, []float64{1, 2, 3}); ok {
		t.Error("no variation should be undefined")
	}
	// 0.1 three times has a float mean an ulp away from 0.1: the
	// deviations are rounding, and the rollup calls them no variation.
	if r, ok := models.Pearson([]float64{1, 2, 4}, []float64{0.1, 0.1, 0.1}); ok {
		t.Errorf("equal values with a rounded mean should be undefined, got %g", r)
	}
	if _, ok := models.Pearson([]float64{1}, []float64{1}); ok {
		t.Error("one point should be undefined")
	}
}

func TestReviewPolicyNeeded(t *testing.T) {
	t.Parallel()
	p := models.ReviewPolicy{}
	doubled := 0
	const n = 20000
	for i := 0; i < n; i++ {
		sid := fmt.Sprintf("ses_%06d", i)
		a, b := p.Needed(sid, 4), p.Needed(sid, 4)
		if a != b {
			t.Fatalf("Needed is not deterministic for %s", sid)
		}
		if a == 2 {
			doubled++
		}
	}
	if share := float64(doubled) / n; share < 0.09 || share > 0.11 {
		t.Errorf("default share of double-scored items = %.3f, want about 0.10", share)
	}
	if got := (models.ReviewPolicy{DoubleShare: -1}).Needed("ses_x", 3); got != 1 {
		t.Errorf("no double scoring: Needed = %d", got)
	}
	if got := (models.ReviewPolicy{DoubleShare: 1}).Needed("ses_x", 3); got != 2 {
		t.Errorf("all double scored: Needed = %d", got)
	}
	// The escalation version is part of the key: the same session's next
	// escalation is drawn afresh.
	differs := false
	for v := int64(1); v < 200 && !differs; v++ {
		differs = p.Needed("ses_y", v) != p.Needed("ses_y", 1)
	}
	if !differs {
		t.Error("Needed ignores the escalation version")
	}
}

// decided escalates a session through a worker and has agent claim it and
// complete it; it returns the session id. The escalation is at version 4.
func decided(ctx context.Context, t *testing.T, s *models.Store, agent models.User, queue string) string {
	t.Helper()
	sid, _ := workerEscalated(ctx, t, s, queue)
	if _, err := s.ClaimEscalation(ctx, sid, agent, "", models.ClaimInput{ExpectedVersion: v64(4)}); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if _, err := s.CompleteHuman(ctx, sid, agent, "", models.CompleteInput{ExpectedVersion: v64(5), Resolution: "refunded"}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	return sid
}

func allScores(v int) map[string]int {
	m := map[string]int{}
	for _, c := range models.Rubric {
		m[c.Key] = v
	}
	return m
}

func wantTaken(t *testing.T, err error, reason string) {
	t.Helper()
	var taken *models.ReviewTakenError
	if !errors.As(err, &taken) || taken.Reason != reason || models.ErrorCode(err) != models.ECONFLICT {
		t.Fatalf("want ReviewTakenError %q (conflict), got %T %v", reason, err, err)
	}
}

func TestReviewQueueSingle(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clock := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
		s.Now = func() time.Time { return clock }
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		rita := mustUser(t, s, "rita@example.com", models.RoleReviewer)
		rolf := mustUser(t, s, "rolf@example.com", models.RoleReviewer)
		p := models.ReviewPolicy{DoubleShare: -1}
		s.Reviews = p

		// An escalation still in human hands is not due for review; a
		// decided one is queued by the decision itself, so the catch-up
		// sync of the maintenance pass finds nothing to add.
		pending, _ := workerEscalated(ctx, t, s, "refunds")
		sid := decided(ctx, t, s, agent, "refunds")
		if n, err := s.SyncReviewItems(ctx, p); err != nil || n != 0 {
			t.Fatalf("sync added %d, %v; want 0 (the decision queued its item)", n, err)
		}
		page, err := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: rita})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Rows) != 1 || page.Rows[0].SessionID != sid || page.Rows[0].SessionID == pending {
			t.Fatalf("queue = %+v", page.Rows)
		}
		item := page.Rows[0]
		if item.AtVersion != 4 || item.DecisionType != models.EventHumanCompleted || item.DecidedBy != agent.Actor() ||
			item.Queue != "refunds" || !item.ClaimedAt.Valid || item.Needed != 1 || item.Scored != 0 {
			t.Fatalf("item = %+v", item.ReviewItem)
		}

		// The package is the state at the escalation version, not today's.
		view, err := s.GetReviewView(ctx, item.Key(), rita)
		if err != nil {
			t.Fatal(err)
		}
		if view.Package.Version != 4 || view.Package.Status != models.StatusEscalated || view.Package.Escalation == nil ||
			view.Package.Escalation.Question != "Approve a 240 EUR refund?" || !view.Claimable {
			t.Fatalf("package = v%d %s %+v claimable %v", view.Package.Version, view.Package.Status, view.Package.Escalation, view.Claimable)
		}

		// Rita claims; Rolf can neither claim nor score it.
		if _, err := s.ClaimReview(ctx, item.Key(), rita, p); err != nil {
			t.Fatalf("claim: %v", err)
		}
		_, err = s.ClaimReview(ctx, item.Key(), rolf, p)
		wantTaken(t, err, models.ReviewHeldByOthers)
		_, err = s.ScoreReview(ctx, rolf, "", models.ScoreInput{Key: item.Key(), Scores: allScores(3)})
		wantTaken(t, err, models.ReviewHeldByOthers)
		if pg, _ := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: rolf}); len(pg.Rows) != 0 || pg.Counts.Open != 1 {
			t.Fatalf("rolf's queue = %+v %+v", pg.Rows, pg.Counts)
		}
		if pg, _ := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: rita, Mine: true}); len(pg.Rows) != 1 || pg.Counts.Mine != 1 {
			t.Fatalf("rita's claims = %+v %+v", pg.Rows, pg.Counts)
		}

		// The claim lapses after 30 minutes; then Rolf may take it over.
		clock = clock.Add(31 * time.Minute)
		if _, err := s.ClaimReview(ctx, item.Key(), rolf, p); err != nil {
			t.Fatalf("claim after expiry: %v", err)
		}
		_, err = s.ScoreReview(ctx, rita, "", models.ScoreInput{Key: item.Key(), Scores: allScores(3)})
		wantTaken(t, err, models.ReviewHeldByOthers)

		// Invalid scores name every criterion and write nothing.
		bad := map[string]int{models.CriterionGoalClear: 6, "tone": 3}
		_, err = s.ScoreReview(ctx, rolf, "", models.ScoreInput{Key: item.Key(), Scores: bad})
		wantFields(t, err, models.CriterionGoalClear, models.CriterionStateCurrent, models.CriterionEvidenceSufficient,
			models.CriterionRisksExplicit, models.CriterionNextStepActionable, "tone")

		scores := map[string]int{models.CriterionGoalClear: 5, models.CriterionStateCurrent: 4,
			models.CriterionEvidenceSufficient: 3, models.CriterionRisksExplicit: 2, models.CriterionNextStepActionable: 1}
		in := models.ScoreInput{Key: item.Key(), Scores: scores, Comment: " clear goal, vague next step "}
		out, err := s.ScoreReview(ctx, rolf, "form-1", in)
		if err != nil {
			t.Fatalf("score: %v", err)
		}
		// A double submit returns the first outcome and writes nothing.
		again, err := s.ScoreReview(ctx, rolf, "form-1", in)
		if err != nil || !again.Replayed || again.EventID != out.EventID {
			t.Fatalf("repeat = %+v, %v", again, err)
		}
		evs, err := s.Timeline(ctx, sid, models.EventReviewScored)
		if err != nil || len(evs) != 1 {
			t.Fatalf("review events = %d, %v", len(evs), err)
		}
		var payload models.ReviewPayload
		if err := json.Unmarshal([]byte(evs[0].Payload), &payload); err != nil {
			t.Fatal(err)
		}
		if evs[0].Actor != rolf.Actor() || payload.Reviewer != rolf.Actor() || payload.AtVersion != 4 ||
			payload.Comment != "clear goal, vague next step" || payload.Scores[models.CriterionRisksExplicit] != 2 {
			t.Fatalf("event = %s %+v", evs[0].Actor, payload)
		}
		if st := mustState(t, s, sid); st.Reviews != 1 || st.Status != models.StatusCompleted {
			t.Fatalf("state after review = %s reviews %d", st.Status, st.Reviews)
		}
		// Scored items leave every queue.
		for _, u := range []models.User{rita, rolf} {
			if pg, _ := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: u}); len(pg.Rows) != 0 || pg.Counts.Open != 0 {
				t.Fatalf("queue after scoring = %+v %+v", pg.Rows, pg.Counts)
			}
		}
		_, err = s.ClaimReview(ctx, item.Key(), rita, p)
		wantTaken(t, err, models.ReviewFullyScored)
		_, err = s.ClaimReview(ctx, item.Key(), rolf, p)
		wantTaken(t, err, models.ReviewAlreadyDone)
		rep, err := s.Verify(ctx, models.VerifyOpts{})
		if err != nil || !rep.OK() {
			t.Fatalf("verify after reviews: %+v %v", rep.Problems, err)
		}
	})
}

func TestReviewQueueRules(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		admin := mustUser(t, s, "root@example.com", models.RoleAdmin)
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		rita := mustUser(t, s, "rita@example.com", models.RoleReviewer)
		p := models.ReviewPolicy{DoubleShare: -1}
		s.Reviews = p
		sid := decided(ctx, t, s, admin, "refunds")
		if _, err := s.SyncReviewItems(ctx, p); err != nil {
			t.Fatal(err)
		}
		k := models.ReviewKey{SessionID: sid, AtVersion: 4}
		// Nobody scores their own decision; agents do not score at all.
		_, err := s.ClaimReview(ctx, k, admin, p)
		if !errors.Is(err, models.ErrOwnDecision) || models.ErrorCode(err) != models.EFORBIDDEN {
			t.Fatalf("own decision: %v", err)
		}
		_, err = s.ClaimReview(ctx, k, agent, p)
		wantForbidden(t, err)
		_, err = s.ScoreReview(ctx, agent, "", models.ScoreInput{Key: k, Scores: allScores(3)})
		wantForbidden(t, err)
		if _, ok, err := s.ClaimNextReview(ctx, admin, p); err != nil || ok {
			t.Fatalf("admin's next = %v %v, want none", ok, err)
		}
		// Claim next takes the oldest item; an unknown item is not found.
		got, ok, err := s.ClaimNextReview(ctx, rita, p)
		if err != nil || !ok || got != k {
			t.Fatalf("next = %+v %v %v", got, ok, err)
		}
		_, err = s.ClaimReview(ctx, models.ReviewKey{SessionID: sid, AtVersion: 2}, rita, p)
		if models.ErrorCode(err) != models.ENOTFOUND {
			t.Fatalf("unknown item: %v", err)
		}
		// Without a claim, scoring takes a free slot.
		if err := s.ReleaseReview(ctx, k, rita); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ScoreReview(ctx, rita, "", models.ScoreInput{Key: k, Scores: allScores(4)}); err != nil {
			t.Fatalf("score without claim: %v", err)
		}
		_, err = s.ScoreReview(ctx, rita, "", models.ScoreInput{Key: k, Scores: allScores(4)})
		wantTaken(t, err, models.ReviewAlreadyDone)
	})
}

// TestReviewDoubleScored: a double-scored item takes two reviewers, blind to
// each other, and feeds the agreement statistics.
func TestReviewDoubleScored(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		rs := []models.User{
			mustUser(t, s, "rita@example.com", models.RoleReviewer),
			mustUser(t, s, "rolf@example.com", models.RoleReviewer),
			mustUser(t, s, "ruth@example.com", models.RoleReviewer),
		}
		p := models.ReviewPolicy{DoubleShare: 1}
		s.Reviews = p
		sid := decided(ctx, t, s, agent, "refunds")
		if _, err := s.SyncReviewItems(ctx, p); err != nil {
			t.Fatal(err)
		}
		k := models.ReviewKey{SessionID: sid, AtVersion: 4}
		for _, u := range rs[:2] {
			if _, err := s.ClaimReview(ctx, k, u, p); err != nil {
				t.Fatalf("claim by %s: %v", u.Email, err)
			}
		}
		_, err := s.ClaimReview(ctx, k, rs[2], p)
		wantTaken(t, err, models.ReviewHeldByOthers)
		if _, err := s.ScoreReview(ctx, rs[0], "", models.ScoreInput{Key: k, Scores: allScores(4)}); err != nil {
			t.Fatal(err)
		}
		// The second reviewer does not see the first one's score.
		v, err := s.GetReviewView(ctx, k, rs[1])
		if err != nil || v.Mine != nil || !v.MyClaimExpires.Valid {
			t.Fatalf("second reviewer's view = %+v, %v", v, err)
		}
		if _, err := s.ScoreReview(ctx, rs[1], "", models.ScoreInput{Key: k, Scores: allScores(4)}); err != nil {
			t.Fatal(err)
		}
		item, err := s.GetReviewItem(ctx, k)
		if err != nil || item.Scored != 2 || item.Needed != 2 {
			t.Fatalf("item = %+v, %v", item, err)
		}
		_, err = s.ScoreReview(ctx, rs[2], "", models.ScoreInput{Key: k, Scores: allScores(4)})
		wantTaken(t, err, models.ReviewFullyScored)
	})
}

// TestReviewStats builds scores by hand and checks every statistic.
func TestReviewStats(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC) // a Monday
		clock := t0
		s.Now = func() time.Time { return clock }
		s.Reviews = models.ReviewPolicy{DoubleShare: -1}
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		ra := mustUser(t, s, "rita@example.com", models.RoleReviewer)
		rb := mustUser(t, s, "rolf@example.com", models.RoleReviewer)

		// decide escalates, claims, waits d, then completes.
		decide := func(queue string, d time.Duration) string {
			sid, _ := workerEscalated(ctx, t, s, queue)
			if _, err := s.ClaimEscalation(ctx, sid, agent, "", models.ClaimInput{ExpectedVersion: v64(4)}); err != nil {
				t.Fatal(err)
			}
			clock = clock.Add(d)
			if _, err := s.CompleteHuman(ctx, sid, agent, "", models.CompleteInput{ExpectedVersion: v64(5), Resolution: "done"}); err != nil {
				t.Fatal(err)
			}
			return sid
		}
		score := func(u models.User, sid string, scores map[string]int) {
			t.Helper()
			if _, err := s.ScoreReview(ctx, u, "", models.ScoreInput{Key: models.ReviewKey{SessionID: sid, AtVersion: 4}, Scores: scores}); err != nil {
				t.Fatalf("score %s by %s: %v", sid, u.Email, err)
			}
		}
		// Week 1: refunds, clear (5) and decided in 1 minute; billing,
		// unclear (1) and decided in 21 minutes.
		fast := decide("refunds", time.Minute)
		slow := decide("billing", 21*time.Minute)
		// Week 2: a double-scored item, decided in 11 minutes.
		clock = t0.Add(7 * 24 * time.Hour)
		both := decide("refunds", 11*time.Minute)
		if _, err := s.SyncReviewItems(ctx, models.ReviewPolicy{DoubleShare: -1}); err != nil {
			t.Fatal(err)
		}
		// Make the last item double-scored, as the policy would for its share.
		if err := s.DB.Exec(`UPDATE review_items SET needed = 2 WHERE session_id = ?`, both).Error; err != nil {
			t.Fatal(err)
		}
		clock = t0.Add(time.Hour)
		score(ra, fast, allScores(5))
		score(ra, slow, allScores(1))
		clock = t0.Add(8 * 24 * time.Hour)
		a := map[string]int{models.CriterionGoalClear: 3, models.CriterionStateCurrent: 3, models.CriterionEvidenceSufficient: 3,
			models.CriterionRisksExplicit: 2, models.CriterionNextStepActionable: 4}
		b := map[string]int{models.CriterionGoalClear: 3, models.CriterionStateCurrent: 3, models.CriterionEvidenceSufficient: 2,
			models.CriterionRisksExplicit: 2, models.CriterionNextStepActionable: 3}
		score(ra, both, a)
		score(rb, both, b)

		st, err := s.ReviewStatsFor(ctx, models.ReviewStatsOpts{From: t0.Add(-time.Hour), To: t0.Add(30 * 24 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if st.Overall.Scores != 4 || !near(st.Overall.Means[0], (5+1+3+3)/4.0) {
			t.Fatalf("overall = %+v", st.Overall)
		}
		if len(st.ByQueue) != 2 || st.ByQueue[0].Queue != "billing" || st.ByQueue[0].Scores != 1 || st.ByQueue[0].Means[0] != 1 ||
			st.ByQueue[1].Queue != "refunds" || st.ByQueue[1].Scores != 3 || !near(st.ByQueue[1].Means[4], (5+4+3)/3.0) {
			t.Fatalf("by queue = %+v", st.ByQueue)
		}
		if len(st.ByWeek) != 2 || !st.ByWeek[0].Week.Equal(t0.Truncate(24*time.Hour)) || st.ByWeek[0].Scores != 2 || st.ByWeek[1].Scores != 2 {
			t.Fatalf("by week = %+v", st.ByWeek)
		}
		// The double-scored item: 3 of 5 criteria agree.
		ag := st.Agreement
		if ag.Items != 1 || ag.Overall.Pairs != 5 || !near(*ag.Overall.Percent, 0.6) {
			t.Fatalf("agreement = %+v", ag)
		}
		wantKappa, _ := models.CohenKappa([][2]int{{3, 3}, {3, 3}, {3, 2}, {2, 2}, {4, 3}})
		if ag.Overall.Kappa == nil || !near(*ag.Overall.Kappa, wantKappa) {
			t.Fatalf("overall kappa = %v, want %.4f", ag.Overall.Kappa, wantKappa)
		}
		if ag.Criteria[0].Pairs != 1 || ag.Criteria[0].Kappa != nil || !near(*ag.Criteria[0].Percent, 1) {
			t.Fatalf("goal_clear agreement = %+v", ag.Criteria[0])
		}
		// Clarity against time: score 5 → 60s, score 1 → 1260s, the double
		// item (mean 2.8 → 3) → 660s; clearer was faster.
		cl := st.Clarity
		if cl.Items != 3 || *cl.Buckets[4].MeanSeconds != 60 || *cl.Buckets[0].MeanSeconds != 1260 ||
			cl.Buckets[2].Items != 1 || *cl.Buckets[2].MeanSeconds != 660 || cl.Buckets[1].MeanSeconds != nil {
			t.Fatalf("clarity buckets = %+v", cl.Buckets)
		}
		if cl.Pearson == nil || *cl.Pearson >= -0.9 {
			t.Fatalf("pearson = %v, want strongly negative", cl.Pearson)
		}
		// The window bounds what is counted.
		st, err = s.ReviewStatsFor(ctx, models.ReviewStatsOpts{From: t0.Add(7 * 24 * time.Hour), To: t0.Add(30 * 24 * time.Hour)})
		if err != nil || st.Overall.Scores != 2 {
			t.Fatalf("second week only: %+v %v", st.Overall, err)
		}
	})
}

func TestWeekStart(t *testing.T) {
	t.Parallel()
	mon := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	for _, at := range []time.Time{mon, mon.Add(36 * time.Hour), mon.Add(7*24*time.Hour - time.Second)} {
		if got := models.WeekStart(at); !got.Equal(mon) {
			t.Errorf("WeekStart(%v) = %v", at, got)
		}
	}
}

// TestReviewItemQueuedByDecision: the decision's transaction queues the
// review item, and it is the item the log-reading sync derives (which
// remains as the maintenance pass's catch-up for older binaries).
func TestReviewItemQueuedByDecision(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		s.Reviews = models.ReviewPolicy{DoubleShare: 1}
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		sid := decided(ctx, t, s, agent, "refunds")
		k := models.ReviewKey{SessionID: sid, AtVersion: 4}
		queued, err := s.GetReviewItem(ctx, k)
		if err != nil {
			t.Fatalf("no item after the decision: %v", err)
		}
		if queued.Needed != 2 || !queued.ClaimedAt.Valid || queued.DecisionType != models.EventHumanCompleted {
			t.Fatalf("queued item %+v", queued)
		}
		if err := s.DB.Exec(`DELETE FROM review_items`).Error; err != nil {
			t.Fatal(err)
		}
		if n, err := s.SyncReviewItems(ctx, s.Reviews); err != nil || n != 1 {
			t.Fatalf("sync added %d, %v", n, err)
		}
		synced, err := s.GetReviewItem(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		queued.CreatedAt, synced.CreatedAt = models.UTCTime{}, models.UTCTime{}
		if fmt.Sprint(queued) != fmt.Sprint(synced) {
			t.Fatalf("queued by the decision %+v\nderived by the sync    %+v", queued, synced)
		}
	})
}
