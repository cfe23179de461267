package models_test

import (
	"context"
	"database/sql"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
)

// explainAnalyze runs EXPLAIN (ANALYZE, BUFFERS) on one captured statement
// and returns the plan and the shared buffers the statement touched (hit
// plus read, from the plan's root).
func explainAnalyze(t *testing.T, s *models.Store, sql string) (string, int) {
	t.Helper()
	var plan []string
	if err := s.DB.Raw("EXPLAIN (ANALYZE, BUFFERS) " + sql).Scan(&plan).Error; err != nil {
		t.Fatalf("explain %s: %v", sql, err)
	}
	text := strings.Join(plan, "\n")
	buffers := 0
	if m := buffersRE.FindStringSubmatch(text); m != nil {
		for _, g := range m[1:] {
			if g != "" {
				n, _ := strconv.Atoi(g)
				buffers += n
			}
		}
	}
	return text, buffers
}

var buffersRE = regexp.MustCompile(`Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?`)

// maxBuffers bounds the shared buffers a console statement may touch. Each
// LIMIT branch (a bounded count, a page of a priority, the review queue)
// reads one index range of the backlog (about 8,000 sessions in human hands,
// 4,000 waiting, 4,000 stalled, 2,000 open review items at any n), stopping
// at CountCap+1 matches where it can; per row it touches a heap page and the
// index probes of its subplans (the review queue probes three indexes per
// item, three pages each: nine buffers a row at a million sessions). The bound is a constant of the backlog, not of the history:
// a statement whose cost followed the million sessions or their scores would
// pass it by an order of magnitude.
func maxBuffers(sql string) int {
	return strings.Count(sql, "LIMIT ")*10*(models.CountCap+1) + 1000
}

// checkConsolePlans runs every query of the console's list pages on the
// million sessions of TestListSessionsPlansAtScale: the inbox (each filter,
// each chip count, the search, keyset pages), its tabs and its "Waiting on
// input" and "Stalled" views, the sessions list's counts, and the review
// queue with its counts. Each statement is run again under EXPLAIN (ANALYZE,
// BUFFERS): none may scan sessions or the review tables sequentially, and
// none may touch more than maxConsoleBuffers buffers. Times are logged, never
// asserted.
func checkConsolePlans(t *testing.T, s *models.Store, n int) {
	ctx := context.Background()
	bulkReviews(t, s, n)
	captured := captureSQL(t, s)
	checked := 0
	check := func(name string, call func() error) {
		t.Helper()
		*captured = (*captured)[:0]
		if err := call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(*captured) == 0 {
			t.Fatalf("%s: no statement captured", name)
		}
		for _, q := range *captured {
			checked++
			text, buffers := explainAnalyze(t, s, q)
			for _, table := range []string{"sessions", "review_items", "review_scores", "review_claims"} {
				if strings.Contains(text, "Seq Scan on "+table+" ") || strings.HasSuffix(text, "Seq Scan on "+table) {
					t.Errorf("%s scans %s sequentially:\n%s\n%s", name, table, q, text)
				}
			}
			if bound := maxBuffers(q); buffers == 0 || buffers > bound {
				t.Errorf("%s touches %d buffers (bound %d):\n%.2000s\n%s", name, buffers, bound, q, text)
			}
			t.Logf("%s: %d buffers: %.160s", name, buffers, strings.ReplaceAll(q, "\n", " "))
		}
	}

	me := "user:usr_3"
	inbox := []struct {
		name string
		f    models.InboxFilter
	}{
		{"everything", models.InboxFilter{}},
		{"status", models.InboxFilter{Status: models.StatusHumanActive}},
		{"queue", models.InboxFilter{Queue: "billing"}},
		{"rare queue", models.InboxFilter{Queue: "legal"}},
		{"priority", models.InboxFilter{Priority: 2}},
		{"mine", models.InboxFilter{Assignment: models.AssignedToMe}},
		{"unassigned", models.InboxFilter{Assignment: models.Unassigned}},
		{"reason", models.InboxFilter{Reason: models.ReasonJoinTimeout}},
		{"search common word", models.InboxFilter{Search: "refund"}},
		{"search rare word", models.InboxFilter{Search: "chargeback"}},
		{"search notes", models.InboxFilter{Search: "callback customer"}},
		{"search ticket", models.InboxFilter{Search: "T-4242"}},
		{"search id", models.InboxFilter{Search: "ses_00000042"}},
		{"search and filters", models.InboxFilter{Search: "refund", Queue: "refunds", Priority: 3, Assignment: models.Unassigned}},
	}
	for _, tc := range inbox {
		after := ""
		for p := range 2 {
			var page models.InboxPage
			check("inbox "+tc.name+" page "+strconv.Itoa(p), func() (err error) {
				page, err = s.Inbox(ctx, models.InboxOpts{InboxFilter: tc.f, Me: me, After: after})
				return err
			})
			if page.Counts.Total < int64(len(page.Rows)) || page.Counts.Total > models.CountCap+1 {
				t.Errorf("inbox %s: count %d for %d rows", tc.name, page.Counts.Total, len(page.Rows))
			}
			if after = page.Next; after == "" {
				break
			}
		}
	}
	check("inbox tabs", func() error {
		tabs, err := s.InboxTabs(ctx)
		if err == nil && (tabs.Humans != models.CountCap+1 || tabs.Waiting != models.CountCap+1 || tabs.Stalled != models.CountCap+1) {
			t.Errorf("tabs %+v: want each at the bound", tabs)
		}
		return err
	})
	after := ""
	for p := range 2 {
		check("waiting on input page "+strconv.Itoa(p), func() error {
			page, err := s.WaitingOnInput(ctx, after, models.DefaultInboxLimit)
			after = page.Next
			return err
		})
	}
	cursor := ""
	for p := range 2 {
		check("stalled page "+strconv.Itoa(p), func() error {
			page, err := s.ListSessions(ctx, models.SessionQuery{Stalled: true, Cursor: cursor, Limit: 50})
			cursor = page.NextCursor
			return err
		})
	}
	check("sessions by status", func() error {
		c, err := s.CountByStatusCapped(ctx)
		if err == nil && (c[models.StatusCompleted] != models.CountCap+1 || !models.CountMore(c[models.StatusOpen])) {
			t.Errorf("status counts %v", c)
		}
		return err
	})
	check("stalled count", func() error { _, err := s.CountStalledCapped(ctx); return err })
	check("waiting count", func() error { _, err := s.CountWaitingOnInput(ctx); return err })
	check("inbox count", func() error { _, err := s.CountInHumanHands(ctx); return err })

	reviewer := models.User{ID: "usr_11", Role: models.RoleReviewer}
	var rq models.ReviewQueuePage
	check("review queue", func() (err error) {
		rq, err = s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: reviewer})
		return err
	})
	if rq.Counts.Open != models.CountCap+1 || rq.Counts.Available != models.CountCap+1 || rq.Counts.Mine != 10 || len(rq.Rows) != 50 {
		t.Errorf("review counts %+v, %d rows", rq.Counts, len(rq.Rows))
	}
	check("review queue page 2", func() error {
		_, err := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: reviewer, After: rq.Next})
		return err
	})
	check("review queue mine", func() error {
		_, err := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: reviewer, Mine: true})
		return err
	})
	t.Logf("checked %d statements", checked)
}

// bulkReviews adds twenty routes and the review history of a busy console
// to the sessions of bulkSessions: an item for one session in 8 (125,000 at
// a million), every one scored but the last 2,000 (the open backlog, the same
// at any n), and ten live claims of usr_11 on open items.
func bulkReviews(t *testing.T, s *models.Store, n int) {
	t.Helper()
	began := time.Now()
	for _, q := range []string{
		// Routes for a few steps, none of them "triage": the open sessions
		// waiting on triage are stalled.
		`INSERT INTO routes (step, queue, lease_seconds, max_attempts, created_by, updated_by, created_at, updated_at)
SELECT 'step-' || i, 'refunds', 60, 3, 'test', 'test', now(), now() FROM generate_series(1, 20) AS i WHERE @n > 0`,
		`INSERT INTO review_items (session_id, at_version, decision_event_id, decision_type, decided_by, queue, escalated_at, decided_at, needed, scored, created_at)
SELECT 'ses_' || lpad(i::text, 8, '0'), 3, 'evt_d' || i, 'human.resolved', 'user:usr_' || (i % 7), 'refunds',
       timestamptz '2026-01-01 00:00:00+00', timestamptz '2026-01-01 00:00:00+00' + make_interval(secs => i),
       1, CASE WHEN i > @n - 16000 THEN 0 ELSE 1 END, now()
FROM generate_series(1, @n) AS i WHERE i % 8 = 5`,
		`INSERT INTO review_scores (event_id, session_id, at_version, reviewer, goal_clear, state_current, evidence_sufficient, risks_explicit, next_step_actionable, scored_at)
SELECT 'evt_s' || i, 'ses_' || lpad(i::text, 8, '0'), 3, 'user:usr_' || ((i / 8) % 20 + 10), 4, 4, 4, 4, 4,
       timestamptz '2026-01-02 00:00:00+00' + make_interval(secs => i)
FROM generate_series(1, @n - 16000) AS i WHERE i % 8 = 5`,
		// Lapsed claims on a third of the scored items.
		`INSERT INTO review_claims (session_id, at_version, reviewer, claimed_at, expires_at)
SELECT 'ses_' || lpad(i::text, 8, '0'), 3, 'user:usr_' || (i % 20 + 10), now() - interval '29 days', now() - interval '29 days'
FROM generate_series(1, @n - 16000) AS i WHERE i % 24 = 21`,
		`INSERT INTO review_claims (session_id, at_version, reviewer, claimed_at, expires_at)
SELECT 'ses_' || lpad(i::text, 8, '0'), 3, 'user:usr_11', now(), now() + interval '30 minutes'
FROM generate_series(@n - 16000 + 1, @n - 16000 + 80) AS i WHERE i % 8 = 5`,
	} {
		if err := s.DB.Exec(q, sql.Named("n", n)).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DB.Exec(`ANALYZE routes; ANALYZE review_items; ANALYZE review_scores; ANALYZE review_claims`).Error; err != nil {
		t.Fatal(err)
	}
	t.Logf("review backlog: %v", time.Since(began).Round(time.Millisecond))
}
