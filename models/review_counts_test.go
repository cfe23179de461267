package models_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// listReviewQueue pages through u's whole queue (or their Mine filter) the
// way the console does and returns the rows: the queue as availableTo
// decides it, to check the derived counts against.
func listReviewQueue(ctx context.Context, t *testing.T, s *models.Store, u models.User, mine bool) []models.ReviewQueueRow {
	t.Helper()
	var rows []models.ReviewQueueRow
	after := ""
	for {
		page, err := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: u, Mine: mine, After: after, Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, page.Rows...)
		if page.Next == "" {
			return rows
		}
		after = page.Next
	}
}

// checkReviewCounts compares every reviewer's derived counts with an exact
// count of the open items and with the rows their queue lists.
func checkReviewCounts(ctx context.Context, t *testing.T, s *models.Store, users []models.User, when string) {
	t.Helper()
	var open int64
	if err := s.DB.Raw(`SELECT count(*) FROM review_items WHERE scored < needed`).Scan(&open).Error; err != nil {
		t.Fatal(err)
	}
	if drift, err := s.VerifyReviewCounts(ctx); err != nil || len(drift) != 0 {
		t.Errorf("%s: verify review counts: %+v %v", when, drift, err)
	}
	for _, u := range users {
		page, err := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: u, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		all := listReviewQueue(ctx, t, s, u, false)
		var held int64
		for _, r := range all {
			if r.MyClaimExpires.Valid {
				held++
			}
		}
		mine := listReviewQueue(ctx, t, s, u, true)
		if page.Counts.Open != open || page.Counts.Available != int64(len(all)) || page.Counts.Mine != held || int64(len(mine)) != held {
			t.Errorf("%s, %s: counts %+v; %d open, %d listed, %d held, %d on the Mine page",
				when, u.Email, page.Counts, open, len(all), held, len(mine))
		}
	}
}

// TestReviewCountsUnderConcurrentWrites has reviewers claim, release and
// score items concurrently (single and blind double items, some decided by
// the reviewers themselves), with claims left behind and then lapsing;
// after each phase the maintained counts equal the items, verify finds
// nothing, and every reviewer's Open, Available and Mine equal what their
// queue lists.
func TestReviewCountsUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		var offset atomic.Int64
		t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
		s.Now = func() time.Time { return t0.Add(time.Duration(offset.Add(1)) * time.Millisecond) }
		p := models.ReviewPolicy{DoubleShare: 0.5, ClaimTTL: time.Hour}
		s.Reviews = p
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		users := []models.User{
			mustUser(t, s, "ada@example.com", models.RoleAdmin),
			mustUser(t, s, "abe@example.com", models.RoleAdmin),
			mustUser(t, s, "rita@example.com", models.RoleReviewer),
			mustUser(t, s, "rolf@example.com", models.RoleReviewer),
		}
		// The admins decide some of the items, which they may not review.
		deciders := []models.User{agent, users[0], users[1]}
		for i := range 30 {
			decided(ctx, t, s, deciders[i%len(deciders)], "refunds")
		}
		checkReviewCounts(ctx, t, s, users, "before")
		var keys []models.ReviewKey
		if err := s.DB.Raw(`SELECT session_id, at_version FROM review_items ORDER BY decided_at`).Scan(&keys).Error; err != nil {
			t.Fatal(err)
		}

		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			applied   = map[string]int{}
			unexpectd []error
		)
		for w, u := range users {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 31))
				for i := range 12 {
					if i%3 == 2 {
						// A score without a claim, on an item others may be
						// scoring or completing at the same moment.
						var err error
						k := keys[rng.IntN(len(keys))]
						_, err = s.ScoreReview(ctx, u, "", models.ScoreInput{Key: k, Scores: allScores(1 + rng.IntN(5))})
						var taken *models.ReviewTakenError
						mu.Lock()
						switch {
						case err == nil:
							applied["score unclaimed"]++
						case errors.As(err, &taken), errors.Is(err, models.ErrOwnDecision):
							applied["lost race"]++
						default:
							unexpectd = append(unexpectd, fmt.Errorf("score unclaimed by %s: %w", u.Email, err))
						}
						mu.Unlock()
						continue
					}
					k, ok, err := s.ClaimNextReview(ctx, u, p)
					op := "claim"
					if err == nil && ok {
						switch rng.IntN(5) {
						case 0, 1, 2:
							op = "score"
							_, err = s.ScoreReview(ctx, u, "", models.ScoreInput{Key: k, Scores: allScores(1 + rng.IntN(5))})
						case 3:
							op = "release"
							err = s.ReleaseReview(ctx, k, u)
						}
					}
					var taken *models.ReviewTakenError
					mu.Lock()
					switch {
					case err == nil && !ok:
						applied["empty"]++
					case err == nil:
						applied[op]++
					case errors.As(err, &taken), errors.Is(err, models.ErrOwnDecision):
						applied["lost race"]++
					default:
						unexpectd = append(unexpectd, fmt.Errorf("%s by %s: %w", op, u.Email, err))
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for _, err := range unexpectd {
			t.Error(err)
		}
		t.Logf("applied %v", applied)
		if applied["score"] == 0 || applied["score unclaimed"] == 0 || applied["claim"] == 0 || applied["release"] == 0 || applied["lost race"] == 0 {
			t.Errorf("the workload did not claim, score and release: %v", applied)
		}
		// Leave work in flight: a first blind score of a double item, and a
		// live claim by everyone who still has something to claim.
		// (New decisions until one is a double item nobody scored yet, if
		// the workload scored them all.)
		var doubles []models.ReviewKey
		for range 20 {
			if err := s.DB.Raw(`SELECT session_id, at_version FROM review_items WHERE needed = 2 AND scored = 0 AND decided_by <> ? ORDER BY decided_at`,
				users[2].Actor()).Scan(&doubles).Error; err != nil {
				t.Fatal(err)
			}
			if len(doubles) > 0 {
				break
			}
			decided(ctx, t, s, agent, "billing")
		}
		if len(doubles) == 0 {
			t.Fatal("no double item to start")
		}
		if _, err := s.ScoreReview(ctx, users[2], "", models.ScoreInput{Key: doubles[0], Scores: allScores(2)}); err != nil {
			t.Fatal(err)
		}
		for _, u := range users {
			if _, _, err := s.ClaimNextReview(ctx, u, p); err != nil {
				t.Fatal(err)
			}
		}
		var half, live int64
		if err := s.DB.Raw(`SELECT count(*) FROM review_items WHERE scored > 0 AND scored < needed`).Scan(&half).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB.Raw(`SELECT count(*) FROM review_claims WHERE expires_at > ?`, models.NewUTCTime(s.Now())).Scan(&live).Error; err != nil {
			t.Fatal(err)
		}
		if half == 0 || live == 0 {
			t.Errorf("want items halfway through a double review (%d) and live claims (%d) to count around", half, live)
		}
		checkReviewCounts(ctx, t, s, users, "with live claims")
		// The claims lapse: the held items are everyone's again.
		offset.Add(int64(2 * time.Hour / time.Millisecond))
		checkReviewCounts(ctx, t, s, users, "claims lapsed")
	})
}

// TestReviewCountsVerifyAndRepair: counts that drifted from the items (a
// write with the triggers off, a hand edit) are reported by
// VerifyReviewCounts and by a whole verify, and RepairReviewCounts
// rebuilds them; the triggers keep working after the rebuild.
func TestReviewCountsVerifyAndRepair(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		p := models.ReviewPolicy{DoubleShare: 1}
		s.Reviews = p
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		rita := mustUser(t, s, "rita@example.com", models.RoleReviewer)
		rolf := mustUser(t, s, "rolf@example.com", models.RoleReviewer)
		sid := decided(ctx, t, s, agent, "refunds")
		decided(ctx, t, s, agent, "refunds")
		if _, err := s.ScoreReview(ctx, rita, "", models.ScoreInput{Key: models.ReviewKey{SessionID: sid, AtVersion: 4}, Scores: allScores(3)}); err != nil {
			t.Fatal(err)
		}
		if drift, err := s.VerifyReviewCounts(ctx); err != nil || len(drift) != 0 {
			t.Fatalf("the triggers' counts: %+v %v", drift, err)
		}
		for _, q := range []string{
			`UPDATE review_counts SET n = n + 4`,
			`INSERT INTO review_counts VALUES ('user:usr_ghost', 7)`,
			`DELETE FROM review_reviewer_counts`,
		} {
			if err := s.DB.Exec(q).Error; err != nil {
				t.Fatal(err)
			}
		}
		drift, err := s.VerifyReviewCounts(ctx)
		if err != nil || len(drift) != 3 {
			t.Fatalf("drift %+v, %v: want 3 rows", drift, err)
		}
		wantVerifyProblems(ctx, t, s, models.ProblemReviewCounts, 3)
		fixed, err := s.RepairReviewCounts(ctx)
		if err != nil || len(fixed) != 3 {
			t.Fatalf("repair: %+v, %v", fixed, err)
		}
		checkReviewCounts(ctx, t, s, []models.User{rita, rolf}, "after repair")
		// The counters keep working after the rebuild: rolf completes the
		// double item rita started, another item is decided.
		if _, err := s.ScoreReview(ctx, rolf, "", models.ScoreInput{Key: models.ReviewKey{SessionID: sid, AtVersion: 4}, Scores: allScores(3)}); err != nil {
			t.Fatal(err)
		}
		decided(ctx, t, s, agent, "billing")
		checkReviewCounts(ctx, t, s, []models.User{rita, rolf}, "after writes following the repair")
	})
}

// TestReviewQueueDoesNotReadTheBacklog is the plan test of the review
// queue at scale: with 20,000 open items (a tenth of them double, 400
// halfway through), 40,000 scored ones and thousands of lapsed claims, the
// queue's page, its Mine page and its counts read no more review rows than
// the page itself needs plus the live claims. The bounded counts this
// replaced read 1,001 open items each; the Mine page walked every open item
// for the few held.
func TestReviewQueueDoesNotReadTheBacklog(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	const (
		open, scored = 20_000, 40_000
		n            = open + scored
	)
	for _, q := range []string{
		`INSERT INTO sessions (id, goal, status, priority, state_version, last_hash, created_at, updated_at)
SELECT 'ses_' || lpad(i::text, 6, '0'), 'Goal', 'completed', 2, 6, '', now() - interval '30 days', now() - interval '29 days'
FROM generate_series(1, 60000) AS i`,
		// Items 1..40,000 are scored; the rest are open, the oldest open
		// ones decided by the reviewer usr_11 (10 of them); every tenth
		// needs two scores, and 400 of those have their first.
		`INSERT INTO review_items (session_id, at_version, decision_event_id, decision_type, decided_by, queue, escalated_at, decided_at, needed, scored, created_at)
SELECT 'ses_' || lpad(i::text, 6, '0'), 3, 'evt_d' || i, 'human.resolved',
       CASE WHEN i BETWEEN 40001 AND 40010 THEN 'user:usr_11' ELSE 'user:usr_' || (i % 7) END, 'refunds',
       now() - interval '30 days', now() - interval '30 days' + make_interval(secs => i), CASE WHEN i % 10 = 0 THEN 2 ELSE 1 END,
       CASE WHEN i <= 40000 THEN CASE WHEN i % 10 = 0 THEN 2 ELSE 1 END WHEN i % 10 = 0 AND i % 50 = 0 THEN 1 ELSE 0 END, now()
FROM generate_series(1, 60000) AS i`,
		`INSERT INTO review_scores (event_id, session_id, at_version, reviewer, goal_clear, state_current, evidence_sufficient, risks_explicit, next_step_actionable, scored_at)
SELECT 'evt_s' || i || '_' || k, 'ses_' || lpad(i::text, 6, '0'), 3, 'user:usr_' || ((i + k) % 20 + 10), 4, 4, 4, 4, 4,
       now() - interval '29 days' + make_interval(secs => i)
FROM generate_series(1, 60000) AS i, generate_series(1, 2) AS k
WHERE (i <= 40000 AND (k = 1 OR i % 10 = 0)) OR (i > 40000 AND i % 50 = 0 AND k = 1)`,
		// usr_11 holds 10 live claims, others 20, all among the open items.
		`INSERT INTO review_claims (session_id, at_version, reviewer, claimed_at, expires_at)
SELECT 'ses_' || lpad(i::text, 6, '0'), 3, CASE WHEN i <= 40040 THEN 'user:usr_11' ELSE 'user:usr_12' END, now(), now() + interval '30 minutes'
FROM generate_series(40031, 40060) AS i`,
		// Lapsed claims of the scored items, as a busy history leaves them.
		`INSERT INTO review_claims (session_id, at_version, reviewer, claimed_at, expires_at)
SELECT 'ses_' || lpad(i::text, 6, '0'), 3, 'user:usr_' || (i % 20 + 10), now() - interval '29 days', now() - interval '29 days'
FROM generate_series(1, 40000) AS i WHERE i % 3 = 0`,
	} {
		if err := s.DB.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	if drift, err := s.VerifyReviewCounts(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("the triggers' counts: %+v %v", drift, err)
	}
	if err := s.DB.Exec(`VACUUM ANALYZE review_items, review_scores, review_claims, review_counts, review_reviewer_counts`).Error; err != nil {
		t.Fatal(err)
	}
	const limit = 50
	bound := float64(4*(limit+1) + 4*30)
	reviewer := models.User{ID: "usr_11", Role: models.RoleReviewer}
	captured := captureSQL(t, s)
	check := func(name string, call func() error) {
		t.Helper()
		*captured = (*captured)[:0]
		if err := call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, q := range *captured {
			if !strings.Contains(q, "review_") {
				continue
			}
			read, plan := rowsRead(t, s, q, "review_items", "review_scores", "review_claims")
			t.Logf("%s: %.0f review rows read: %.300s", name, read, q)
			if read > bound {
				t.Errorf("%s reads %.0f review rows (bound %.0f, %d open items):\n%.1500s\n%.4000s", name, read, bound, open, q, plan)
			}
		}
	}
	var next string
	check("queue", func() error {
		page, err := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: reviewer, Limit: limit})
		if err == nil {
			next = page.Next
			// 20,000 open, 10 decided by usr_11, 20 held by usr_12 (one
			// slot each: 18 single, 2 double with a slot free), none
			// scored by usr_11 among the open ones.
			if page.Counts.Open != models.CountCap+1 || page.Counts.Available != models.CountCap+1 || page.Counts.Mine != 10 || len(page.Rows) != limit {
				t.Errorf("counts %+v, %d rows", page.Counts, len(page.Rows))
			}
		}
		return err
	})
	check("next page", func() error {
		_, err := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: reviewer, Limit: limit, After: next})
		return err
	})
	check("mine", func() error {
		page, err := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: reviewer, Mine: true, Limit: limit})
		if err == nil && len(page.Rows) != 10 {
			t.Errorf("mine lists %d items, want 10", len(page.Rows))
		}
		return err
	})
	check("claim next", func() error { _, _, err := s.ClaimNextReview(ctx, reviewer, models.ReviewPolicy{}); return err })
}
