package models_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestReviewStatsRollupMatchesScores scores random items at random times
// over two weeks (single and double reviews, second scores on the same day
// or days later, some at midnight, some items decided without a claim,
// some double items left half-scored) and compares ReviewStatsFor, which
// reads the rollup, with the old computation over every score
// (ReviewStatsFromScores) for many windows: aligned and unaligned days,
// windows inside one day, ends exactly on a score. It compares again after
// archiving part of the sessions (which takes their items out) and after
// the migration's backfill rebuilt the rollup from review_scores.
func TestReviewStatsRollupMatchesScores(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(16, 29))
		t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC) // a Monday
		clock := t0.Add(-36 * time.Hour)
		s.Now = func() time.Time { return clock }
		s.Reviews = models.ReviewPolicy{DoubleShare: 0.5}
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		reviewers := []models.User{
			mustUser(t, s, "rita@example.com", models.RoleReviewer),
			mustUser(t, s, "rolf@example.com", models.RoleReviewer),
			mustUser(t, s, "rosa@example.com", models.RoleReviewer),
		}
		queues := []string{"billing", "refunds", "shipping"}

		type scoreAt struct {
			at  time.Time
			sid string
			who models.User
		}
		var plan []scoreAt
		const items = 48
		for n := 0; n < items; n++ {
			sid, _ := workerEscalated(ctx, t, s, queues[rng.IntN(len(queues))])
			if _, err := s.ClaimEscalation(ctx, sid, agent, "", models.ClaimInput{ExpectedVersion: v64(4)}); err != nil {
				t.Fatal(err)
			}
			// Microseconds too: both dialects' backfill must keep them.
			clock = clock.Add(time.Duration(1+rng.Int64N(3000e6)) * time.Microsecond)
			if _, err := s.CompleteHuman(ctx, sid, agent, "", models.CompleteInput{ExpectedVersion: v64(5), Resolution: "done"}); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(5) == 0 {
				// Decided without a claim: no clarity timing.
				if err := s.DB.Exec(`UPDATE review_items SET claimed_at = NULL WHERE session_id = ?`, sid).Error; err != nil {
					t.Fatal(err)
				}
			}
			item, err := s.GetReviewItem(ctx, models.ReviewKey{SessionID: sid, AtVersion: 4})
			if err != nil {
				t.Fatal(err)
			}
			first := t0.Add(time.Duration(rng.IntN(12*24*3600)) * time.Second)
			if rng.IntN(6) == 0 {
				first = first.Truncate(24 * time.Hour) // at midnight
			}
			who := rng.Perm(len(reviewers))
			plan = append(plan, scoreAt{first, sid, reviewers[who[0]]})
			if item.Needed == 2 && rng.IntN(8) != 0 { // some stay half-scored
				var second time.Time
				switch rng.IntN(3) {
				case 0:
					second = first.Add(time.Duration(rng.IntN(3600)) * time.Second)
				case 1:
					second = first.Add(time.Duration(rng.IntN(5*24*3600)) * time.Second)
				default:
					second = first.Add(24 * time.Hour).Truncate(24 * time.Hour)
				}
				plan = append(plan, scoreAt{second, sid, reviewers[who[1]]})
			}
		}
		sort.Slice(plan, func(i, j int) bool { return plan[i].at.Before(plan[j].at) })
		doubles := 0
		seen := map[string]bool{}
		for _, p := range plan {
			clock = p.at
			if seen[p.sid] {
				doubles++
			}
			seen[p.sid] = true
			if _, err := s.ScoreReview(ctx, p.who, "", models.ScoreInput{Key: models.ReviewKey{SessionID: p.sid, AtVersion: 4},
				Scores: randomScores(rng)}); err != nil {
				t.Fatalf("score %s by %s: %v", p.sid, p.who.Email, err)
			}
		}
		if doubles < 8 {
			t.Fatalf("only %d double-scored items: the test covers too little", doubles)
		}

		// Windows: whole days, unaligned ends, inside a day, ends on a score.
		day := 24 * time.Hour
		windows := [][2]time.Time{
			{t0.Add(-day), t0.Add(20 * day)},
			{t0, t0.Add(7 * day)},
			{t0.Add(3 * day), t0.Add(4 * day)},
			{t0.Add(3*day + time.Hour), t0.Add(3*day + 5*time.Hour)},
			{t0.Add(2*day + 23*time.Hour), t0.Add(4*day + time.Hour)},
			{t0.Add(2*day + 23*time.Hour), t0.Add(3*day + time.Hour)},
		}
		// Ends in a day whose other scores are all inside (as a window that
		// ends now): that day is read from the rollup.
		last := plan[len(plan)-1].at
		windows = append(windows, [2]time.Time{t0.Add(-5 * time.Hour), last.Add(time.Second)},
			[2]time.Time{plan[0].at, last.Add(time.Microsecond)}, [2]time.Time{last.Add(-90 * day), last.Add(time.Second)})
		for i := 0; i < 6; i++ {
			p := plan[rng.IntN(len(plan))].at
			q := plan[rng.IntN(len(plan))].at
			if q.Before(p) {
				p, q = q, p
			}
			windows = append(windows, [2]time.Time{p, q.Add(time.Microsecond)})
			if q.After(p.Add(time.Microsecond)) {
				windows = append(windows, [2]time.Time{p.Add(time.Microsecond), q})
			}
		}
		for len(windows) < 80 {
			a := t0.Add(time.Duration(rng.Int64N(int64(14*day))) - day)
			b := a.Add(time.Duration(rng.Int64N(int64(9 * day))))
			if rng.IntN(3) == 0 {
				a = a.Truncate(day)
			}
			if rng.IntN(3) == 0 {
				b = b.Truncate(day).Add(day)
			}
			if b.After(a) {
				windows = append(windows, [2]time.Time{a, b})
			}
		}
		compare := func(stage string) {
			t.Helper()
			for _, w := range windows {
				o := models.ReviewStatsOpts{From: w[0], To: w[1]}
				want, err := s.ReviewStatsFromScores(ctx, o)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.ReviewStatsFor(ctx, o)
				if err != nil {
					t.Fatal(err)
				}
				if diff := diffReviewStats(want, got); diff != "" {
					t.Fatalf("%s: window [%s, %s): %s", stage, w[0].Format(time.RFC3339Nano), w[1].Format(time.RFC3339Nano), diff)
				}
			}
		}
		compare("scored")

		// A window of whole days reads the rollup alone; one that starts
		// mid-day also reads that day's scores (the first score planned
		// falls in the part the window leaves out).
		captured := captureSQL(t, s)
		readsScores := func(o models.ReviewStatsOpts) bool {
			*captured = (*captured)[:0]
			if _, err := s.ReviewStatsFor(ctx, o); err != nil {
				t.Fatal(err)
			}
			for _, q := range *captured {
				if strings.Contains(q, "FROM review_scores r JOIN review_items") {
					return true
				}
			}
			return false
		}
		if readsScores(models.ReviewStatsOpts{From: t0, To: t0.Add(7 * day)}) {
			t.Error("a window of whole days read review_scores")
		}
		if from := plan[0].at.Add(time.Second); !readsScores(models.ReviewStatsOpts{From: from, To: from.Truncate(day).Add(3 * day)}) {
			t.Errorf("a window from %s did not read the scores of its first day", from)
		}
		all, err := s.ReviewStatsFor(ctx, models.ReviewStatsOpts{From: t0.Add(-day), To: t0.Add(20 * day)})
		if err != nil || all.Agreement.Items < 8 || all.Clarity.Items < 10 || all.Clarity.Pearson == nil {
			t.Fatalf("the data covers too little: %+v %v", all, err)
		}

		// Archiving takes the sessions' items out of the statistics.
		// (A score is an event of the session, so its last score closes it.)
		clock = t0.Add(30 * day)
		rep, err := s.Archive(ctx, models.CLIOperator("ops"), models.ArchiveOpts{ClosedBefore: t0.Add(6 * day), Dir: t.TempDir()})
		if err != nil || rep.Archived < items/5 {
			t.Fatalf("archive: %+v %v", rep, err)
		}
		compare("archived")

		// The migration's backfill builds the same rollup from the scores.
		migrateDownThrough(ctx, t, s, 30)
		if _, err := s.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		compare("backfilled")
	})
}

func randomScores(rng *rand.Rand) map[string]int {
	m := map[string]int{}
	for _, c := range models.Rubric {
		m[c.Key] = models.MinScore + rng.IntN(models.MaxScore-models.MinScore+1)
	}
	return m
}

// diffReviewStats reports how got differs from want: counts exactly,
// floating-point figures to 1e-9 (the rollup sums in another order).
func diffReviewStats(want, got models.ReviewStats) string {
	means := func(what string, w, g models.CriteriaMeans) string {
		if w.Scores != g.Scores || len(w.Means) != len(g.Means) {
			return fmt.Sprintf("%s: %d scores %v, want %d %v", what, g.Scores, g.Means, w.Scores, w.Means)
		}
		for i := range w.Means {
			if w.Means[i] != g.Means[i] { // integer sums over the same count: exact
				return fmt.Sprintf("%s: means %v, want %v", what, g.Means, w.Means)
			}
		}
		return ""
	}
	if d := means("overall", want.Overall, got.Overall); d != "" {
		return d
	}
	if len(want.ByQueue) != len(got.ByQueue) {
		return fmt.Sprintf("by queue: %+v, want %+v", got.ByQueue, want.ByQueue)
	}
	for i := range want.ByQueue {
		if want.ByQueue[i].Queue != got.ByQueue[i].Queue {
			return fmt.Sprintf("by queue: %+v, want %+v", got.ByQueue, want.ByQueue)
		}
		if d := means("queue "+want.ByQueue[i].Queue, want.ByQueue[i].CriteriaMeans, got.ByQueue[i].CriteriaMeans); d != "" {
			return d
		}
	}
	if len(want.ByWeek) != len(got.ByWeek) {
		return fmt.Sprintf("by week: %+v, want %+v", got.ByWeek, want.ByWeek)
	}
	for i := range want.ByWeek {
		if !want.ByWeek[i].Week.Equal(got.ByWeek[i].Week) {
			return fmt.Sprintf("by week: %+v, want %+v", got.ByWeek, want.ByWeek)
		}
		if d := means("week "+want.ByWeek[i].Week.String(), want.ByWeek[i].CriteriaMeans, got.ByWeek[i].CriteriaMeans); d != "" {
			return d
		}
	}
	agreement := func(what string, w, g models.AgreementStat) string {
		if w.Pairs != g.Pairs || !nearPtr(w.Percent, g.Percent) || !nearPtr(w.Kappa, g.Kappa) {
			return fmt.Sprintf("%s: %d pairs %s %s, want %d %s %s", what, g.Pairs, fp(g.Percent), fp(g.Kappa), w.Pairs, fp(w.Percent), fp(w.Kappa))
		}
		return ""
	}
	if want.Agreement.Items != got.Agreement.Items || len(want.Agreement.Criteria) != len(got.Agreement.Criteria) {
		return fmt.Sprintf("agreement: %d items, want %d", got.Agreement.Items, want.Agreement.Items)
	}
	for i := range want.Agreement.Criteria {
		if d := agreement(models.Rubric[i].Key, want.Agreement.Criteria[i], got.Agreement.Criteria[i]); d != "" {
			return d
		}
	}
	if d := agreement("overall agreement", want.Agreement.Overall, got.Agreement.Overall); d != "" {
		return d
	}
	wc, gc := want.Clarity, got.Clarity
	if wc.Items != gc.Items || len(wc.Buckets) != len(gc.Buckets) || !nearPtr(wc.Pearson, gc.Pearson) {
		return fmt.Sprintf("clarity: %d items pearson %s, want %d %s", gc.Items, fp(gc.Pearson), wc.Items, fp(wc.Pearson))
	}
	for i := range wc.Buckets {
		w, g := wc.Buckets[i], gc.Buckets[i]
		if w.Score != g.Score || w.Items != g.Items || !nearPtr(w.MeanSeconds, g.MeanSeconds) {
			return fmt.Sprintf("clarity bucket %d: %d items %s s, want %d %s s", w.Score, g.Items, fp(g.MeanSeconds), w.Items, fp(w.MeanSeconds))
		}
	}
	return ""
}

func nearPtr(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return math.Abs(*a-*b) <= 1e-9*math.Max(1, math.Abs(*a))
}

func fp(p *float64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprintf("%.12g", *p)
}

// TestReviewRollupConcurrentScores completes items of the same day and queue
// from concurrent transactions on PostgreSQL: the upserts of the shared
// rollup rows serialize (no lost update, no deadlock) and the statistics
// still equal the scan of every score.
func TestReviewRollupConcurrentScores(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	s.Reviews = models.ReviewPolicy{DoubleShare: 1} // every item scored twice
	agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
	ra := mustUser(t, s, "rita@example.com", models.RoleReviewer)
	rb := mustUser(t, s, "rolf@example.com", models.RoleReviewer)
	var sids []string
	for i := 0; i < 16; i++ {
		sids = append(sids, decided(ctx, t, s, agent, "refunds"))
	}
	errs := make(chan error, 2*len(sids))
	for _, sid := range sids {
		for _, u := range []models.User{ra, rb} {
			go func() {
				_, err := s.ScoreReview(ctx, u, "", models.ScoreInput{Key: models.ReviewKey{SessionID: sid, AtVersion: 4}, Scores: allScores(1 + len(sid)%5)})
				errs <- err
			}()
		}
	}
	for range 2 * len(sids) {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent score: %v", err)
		}
	}
	o := models.ReviewStatsOpts{From: time.Now().Add(-48 * time.Hour), To: time.Now().Add(time.Hour)}
	want, err := s.ReviewStatsFromScores(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ReviewStatsFor(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffReviewStats(want, got); d != "" || got.Agreement.Items != len(sids) {
		t.Fatalf("after concurrent scores (%d double items): %s", got.Agreement.Items, d)
	}
}

// migrateDownThrough rolls migrations back, newest first, up to and
// including version v, whatever has been added since.
func migrateDownThrough(ctx context.Context, t testing.TB, s *models.Store, v int64) {
	t.Helper()
	for {
		got, err := s.MigrateDown(ctx)
		if err != nil || got < v {
			t.Fatalf("migrate down to %d: at %d, %v", v, got, err)
		}
		if got == v {
			return
		}
	}
}
