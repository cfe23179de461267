package models_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// The tests below pin each metric definition of README "Product metrics" to a
// small history with exact figures, per queue and overall.

func (w *metricsWorld) heartbeat(l *models.Lease) {
	w.t.Helper()
	if _, err := w.s.Heartbeat(w.ctx, l.DelegationID, l.LeaseToken); err != nil {
		w.t.Fatalf("heartbeat: %v", err)
	}
}

func (w *metricsWorld) metrics() models.ProductMetrics {
	w.t.Helper()
	pm, err := w.s.ProductMetrics(w.ctx, models.MetricsOpts{From: w.t0, To: w.t0.Add(time.Hour)})
	if err != nil {
		w.t.Fatalf("metrics: %v", err)
	}
	return pm
}

// TestMetricRecoveryFromLastSignOfLife: a lease expiry's recovery starts at
// the worker's last heartbeat (or its lease start), not at the moment the
// expiry was detected, and machine recovery and human wait are apart.
func TestMetricRecoveryFromLastSignOfLife(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		w := newMetricsWorld(t, s)
		ms := func(d time.Duration) { w.at(d * time.Millisecond) }

		// a: leased at t0 for 3s, heartbeat at t0+2s (lease now ends at
		// t0+5s), the expiry detected at t0+5.5s, re-leased at t0+6s:
		// machine recovery 4s from the heartbeat (the detection was 0.5s
		// before the re-lease).
		a := w.session()
		w.delegate(a, "crashy", 3, 3)
		// b: leased at t0 for 3s, no heartbeat, detected at t0+5.5s,
		// re-leased at t0+7s: 7s from the lease start.
		b := w.session()
		w.delegate(b, "crashy", 3, 3)
		// c: one attempt, leased at t0, heartbeat at t0+1s, detected at
		// t0+5.5s: the attempts are exhausted and it escalates; a human
		// claims at t0+65s and hands back at t0+125s: one outage, a human
		// wait of 124s from the heartbeat.
		c := w.session()
		w.delegate(c, "crashy", 3, 1)

		la := w.claim("crashy", a, 1)
		w.claim("crashy", b, 1) // b sends no heartbeat: its lease is not needed
		lc := w.claim("crashy", c, 1)
		ms(1000)
		w.heartbeat(lc)
		ms(2000)
		w.heartbeat(la)
		ms(5500)
		w.rescue(3)
		ms(6000)
		la = w.claim("crashy", a, 2)
		ms(7000)
		lb := w.claim("crashy", b, 2)
		ms(8000)
		w.complete(la)
		w.complete(lb)
		ms(65000)
		w.exec(c, models.EventHumanClaimed, models.HumanPayload{User: "user:agent-1"})
		ms(125000)
		w.exec(c, models.EventHumanHandedBack, models.HumanDelegationPayload{User: "user:agent-1", DelegationPayload: models.DelegationPayload{
			DelegationID: models.NewID("dlg"), Queue: "crashy", Step: "check", MaxAttempts: 3, LeaseSeconds: 30,
		}})

		pm := w.metrics()
		for name, set := range map[string]models.MetricSet{"overall": pm.Overall, "crashy": pm.Queues["crashy"]} {
			wantRecovery(t, name+" machine", set.Recovery.Machine, 2, 11, 7)
			wantRecovery(t, name+" human", set.Recovery.Human, 1, 124, 124)
			if r := set.Recovery; r.Recoveries != 3 {
				t.Errorf("%s recoveries = %d, want 3", name, r.Recoveries)
			}
			wantRate(t, name+" mean recovery", set.Recovery.MeanSeconds, 135, 3)
		}

		// The expiry records the last sign of life it was measured from.
		evs, err := s.Timeline(w.ctx, a, models.EventDelegationExpired)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range evs {
			if e.Type == models.EventDelegationExpired {
				found = true
				if want := `"last_seen_at":"2026-11-02T09:00:02.000000Z"`; !strings.Contains(e.Payload, want) {
					t.Errorf("expiry payload %s lacks %s", e.Payload, want)
				}
			}
		}
		if !found {
			t.Fatalf("no expiry event in %v", evs)
		}
	})
}

// TestMetricInfraRetriesAreNotRework: a lease expiry and a retried transient
// failure are infrastructure retries; a needs_input loop and a hand-back are
// rework; handoff success counts only delegations completed on their first
// lease without retry or human.
func TestMetricInfraRetriesAreNotRework(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		w := newMetricsWorld(t, s)

		// crash (queue q1): the worker dies, the lease expires, attempt 2
		// completes. Infra retry (expiry), not rework, not a success.
		crash := w.session()
		w.delegate(crash, "q1", 30, 3)
		w.claim("q1", crash, 1)
		w.at(40 * xSec)
		w.rescue(1)
		w.complete(w.claim("q1", crash, 2))

		// flaky (q1): a transient failure is retried, attempt 2 completes.
		// Infra retry (transient), not rework, not a success.
		flaky := w.session()
		w.delegate(flaky, "q1", 30, 3)
		l := w.claim("q1", flaky, 1)
		w.result(l, models.ResultFailed, models.ResultInput{Failure: &models.Failure{Class: models.FailureTransient, Message: "503"}})
		w.at(10 * xMin) // past the retry's backoff
		w.complete(w.claim("q1", flaky, 2))

		// clean (q1): completed on its first lease: the one success of q1.
		clean := w.session()
		w.delegate(clean, "q1", 30, 3)
		w.complete(w.claim("q1", clean, 1))

		// asks (q2): needs_input, then the step is delegated again and
		// completed on its first lease: rework; one of its two delegations
		// a success.
		asks := w.session()
		w.delegate(asks, "q2", 30, 3)
		w.result(w.claim("q2", asks, 1), models.ResultNeedsInput, models.ResultInput{Question: "Which order?"})
		w.delegate(asks, "q2", 30, 3)
		w.complete(w.claim("q2", asks, 1))

		// stuck (q2): escalates; a human hands the step back: rework (and
		// the escalated delegation ended without success).
		stuck := w.session()
		w.delegate(stuck, "q2", 30, 3)
		w.result(w.claim("q2", stuck, 1), models.ResultEscalated, models.ResultInput{Question: "Approve?"})
		w.exec(stuck, models.EventHumanClaimed, models.HumanPayload{User: "user:agent-1"})
		w.exec(stuck, models.EventHumanHandedBack, models.HumanDelegationPayload{User: "user:agent-1", DelegationPayload: models.DelegationPayload{
			DelegationID: models.NewID("dlg"), Queue: "q2", Step: "check", MaxAttempts: 3, LeaseSeconds: 30,
		}})

		// held (q2): paused while running (a controller revokes the
		// lease), resumed, leased again and completed on attempt 1: not on
		// its first lease, so not a success; neither rework nor an infra
		// retry.
		held := w.session()
		w.delegate(held, "q2", 30, 3)
		w.claim("q2", held, 1)
		w.transition(held, models.EventSessionPaused)
		w.transition(held, models.EventSessionResumed)
		w.complete(w.claim("q2", held, 1))

		pm := w.metrics()
		q1, q2, all := pm.Queues["q1"], pm.Queues["q2"], pm.Overall

		if r := q1.Rework; r.Sessions != 3 || r.Reworked != 0 || r.Redelegations != 0 {
			t.Errorf("q1 rework = %+v, want 0 of 3: crashes and transient failures are not rework", r)
		}
		if ir := q1.InfraRetries; ir.Sessions != 3 || ir.Affected != 2 || ir.Retries != 2 || ir.LeaseExpiries != 1 || ir.TransientFailures != 1 {
			t.Errorf("q1 infra retries = %+v, want 2 of 3 (one expiry, one transient)", ir)
		}
		wantRate(t, "q1 infra rate", q1.InfraRetries.Rate, 2, 3)
		if r := q2.Rework; r.Sessions != 3 || r.Reworked != 2 || r.Redelegations != 2 {
			t.Errorf("q2 rework = %+v, want 2 of 3 (input loop, hand-back)", r)
		}
		if ir := q2.InfraRetries; ir.Affected != 0 || ir.Retries != 0 {
			t.Errorf("q2 infra retries = %+v, want none", ir)
		}
		if r := all.Rework; r.Sessions != 6 || r.Reworked != 2 {
			t.Errorf("overall rework = %+v, want 2 of 6", r)
		}
		wantRate(t, "overall rework rate", all.Rework.Rate, 2, 6)
		if ir := all.InfraRetries; ir.Affected != 2 || ir.Retries != 2 {
			t.Errorf("overall infra retries = %+v, want 2", ir)
		}

		// Handoff success: q1 ended crash, flaky, clean (1 success); q2
		// ended asks×2 (1 success), stuck's first (the hand-back's
		// delegation is still open) and held.
		if h := q1.HandoffSuccess; h.Ended != 3 || h.Succeeded != 1 {
			t.Errorf("q1 handoff = %+v, want 1 of 3", h)
		}
		if h := q2.HandoffSuccess; h.Ended != 4 || h.Succeeded != 1 {
			t.Errorf("q2 handoff = %+v, want 1 of 4", h)
		}
		wantRate(t, "overall handoff rate", all.HandoffSuccess.Rate, 2, 7)
	})
}

// TestMetricConflictRate: rejected stale and fenced writes per 1,000 write
// attempts, per queue; replays are neither conflicts nor attempts; the
// counters are in the database when the rejection is returned and survive
// a restart of the process.
func TestMetricConflictRate(t *testing.T) {
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			u := storetest.NewURL(t, d)
			open := func() *models.Store {
				s, err := models.Open(ctx, u, models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				return s
			}
			s := open()
			if _, err := s.MigrateUp(ctx); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			w := newMetricsWorld(t, s)

			// refunds: created, delegated, leased, completed (3 events
			// after the delegation, 4 in all).
			a := w.session()
			w.delegate(a, "refunds", 30, 3)
			l := w.claim("refunds", a, 1)
			res := models.ResultInput{LeaseToken: l.LeaseToken, SessionID: a, Step: l.Step, ResultType: models.ResultCompleted,
				Evidence: []models.Evidence{{Claim: "paid", Source: "orders-db"}}}
			if _, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "r-1", res); err != nil {
				t.Fatalf("result: %v", err)
			}
			// billing: created, delegated (1 event after the delegation).
			b := w.session()
			w.delegate(b, "billing", 30, 3)

			// Stale: a delegation based on version 1 of each session.
			v1 := int64(1)
			for _, sid := range []string{a, b} {
				if _, err := s.Delegate(ctx, sid, "test:controller", "", models.DelegateInput{Queue: "refunds", Step: "again", ExpectedVersion: &v1}); models.ErrorCode(err) != models.ECONFLICT {
					t.Fatalf("stale delegate: %v", err)
				}
			}
			// Fenced: a result on a lease that is not held.
			gone := res
			gone.LeaseToken = "lt_gone"
			if _, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "", gone); models.ErrorCode(err) != models.ECONFLICT {
				t.Fatalf("fenced result: %v", err)
			}
			// A key reused with another request: refused, not a conflict.
			other := res
			other.Evidence = []models.Evidence{{Claim: "refunded", Source: "ledger"}}
			if _, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "r-1", other); models.ErrorCode(err) != models.EIDEMPOTENCY {
				t.Fatalf("reused key: %v", err)
			}

			// refunds: 3 committed + stale, fenced, key_reused = 6
			// attempts, 2 conflicts. billing: 1 committed + stale = 2
			// attempts, 1 conflict. Overall: 6 committed + 4 rejected =
			// 10 attempts, 3 conflicts.
			check := func(s *models.Store, replays int64) {
				t.Helper()
				pm, err := s.ProductMetrics(ctx, models.MetricsOpts{From: w.t0, To: w.t0.Add(time.Hour)})
				if err != nil {
					t.Fatalf("metrics: %v", err)
				}
				for _, c := range []struct {
					name                                     string
					got                                      *models.StateConflicts
					committed, rejected, conflicts, replayed int64
				}{
					{"overall", pm.Overall.StateConflicts, 6, 4, 3, replays},
					{"refunds", pm.Queues["refunds"].StateConflicts, 3, 3, 2, replays},
					{"billing", pm.Queues["billing"].StateConflicts, 1, 1, 1, 0},
				} {
					g := c.got
					if g == nil {
						t.Fatalf("%s: no state conflicts", c.name)
					}
					if g.Committed != c.committed || g.Rejected != c.rejected || g.WriteAttempts != c.committed+c.rejected ||
						g.Conflicts != c.conflicts || g.Replays != c.replayed || g.AppliedConflicts != 0 {
						t.Errorf("%s conflicts = %+v, want %d committed, %d rejected, %d conflicts, %d replays",
							c.name, *g, c.committed, c.rejected, c.conflicts, c.replayed)
					}
					wantRate(t, c.name+" per thousand", g.PerThousand, float64(1000*c.conflicts), float64(c.committed+c.rejected))
				}
				if r := pm.Queues["refunds"].StateConflicts.ByReason; r["stale"] != 1 || r["fenced"] != 1 || r["key_reused"] != 1 || len(r) != 3 {
					t.Errorf("refunds by reason = %v", r)
				}
			}
			check(s, 0)

			// Replays return the first outcome and change nothing but the
			// replay count.
			for range 3 {
				if out, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "r-1", res); err != nil || !out.Replayed {
					t.Fatalf("replay: %+v %v", out, err)
				}
			}
			check(s, 3)

			// A new process on the same database sees every count.
			if err := s.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			s2 := open()
			defer s2.Close()
			check(s2, 3)
		})
	}
}

// TestProductMetricsPlansOnPostgres: the metrics read only the window's
// part of the log and of the rejection counters through indexes: with
// 40,000 sessions of 5 events over 100 days and a counter row per minute,
// the queries of a one-hour window never scan events or write_rejections
// sequentially. (No rollups: the figures are recomputed from the log.) It
// asserts on plans and results, not on time.
func TestProductMetricsPlansOnPostgres(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	const n = 40_000
	base := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	// Session i starts at base + i × 216 s (100 days for 40,000) and has a
	// created, a delegation on its queue, a lease, a result 10 s later and
	// nothing else.
	for _, q := range []string{
		`INSERT INTO sessions (id, ticket_ref, goal, status, priority, state_version, queue, assignee, last_hash, created_at, updated_at)
SELECT 'ses_' || lpad(i::text, 6, '0'), '', 'Goal', 'completed', 2, 4,
       CASE WHEN i % 2 = 0 THEN 'billing' ELSE 'refunds' END, '', '',
       ?::timestamptz + make_interval(secs => i * 216), ?::timestamptz + make_interval(secs => i * 216)
FROM generate_series(1, ?) AS i`,
		`INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, prev_hash, hash, created_at)
SELECT 'evt_' || i || '_' || k, 'ses_' || lpad(i::text, 6, '0'), k,
       (ARRAY['session.created', 'delegation.created', 'delegation.leased', 'result.completed'])[k],
       'test', k - 1, k,
       CASE k WHEN 2 THEN '{"delegation_id":"dlg_' || i || '","queue":"' || CASE WHEN i % 2 = 0 THEN 'billing' ELSE 'refunds' END || '","step":"check","max_attempts":3,"lease_seconds":30}'
              WHEN 3 THEN '{"delegation_id":"dlg_' || i || '","attempt":1,"worker":"w"}'
              WHEN 4 THEN '{"delegation_id":"dlg_' || i || '","attempt":1,"step":"check","result_type":"completed"}'
              ELSE '{"goal":"Goal","priority":2}' END,
       '', '', ?::timestamptz + make_interval(secs => i * 216 + k * 3)
FROM generate_series(1, ?) AS i, generate_series(1, 4) AS k`,
		`INSERT INTO write_rejections (bucket, reason, queue, count)
SELECT ?::timestamptz + make_interval(mins => m), 'stale', CASE WHEN m % 2 = 0 THEN 'billing' ELSE 'refunds' END, 1
FROM generate_series(0, 144000) AS m`,
	} {
		var args []any
		switch {
		case strings.HasPrefix(q, "INSERT INTO sessions"):
			args = []any{base, base, n}
		case strings.HasPrefix(q, "INSERT INTO events"):
			args = []any{base, n}
		default:
			args = []any{base}
		}
		if err := s.DB.Exec(q, args...).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DB.Exec(`ANALYZE sessions; ANALYZE events; ANALYZE write_rejections`).Error; err != nil {
		t.Fatal(err)
	}

	captured := captureSQL(t, s)
	// The hour starting at session 20,000's start holds sessions
	// 20,000-20,016 whole (17 × 4 events) and 60 counter minutes.
	from := base.Add(20_000 * 216 * time.Second)
	pm, err := s.ProductMetrics(ctx, models.MetricsOpts{From: from, To: from.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if h := pm.Overall.HandoffSuccess; h.Ended != 17 || h.Succeeded != 17 {
		t.Errorf("handoff = %+v, want 17 of 17", h)
	}
	if c := pm.Overall.StateConflicts; c.Committed != 68 || c.Conflicts != 60 {
		t.Errorf("conflicts = %+v, want 68 committed, 60 stale", *c)
	}
	if b, r := pm.Queues["billing"].StateConflicts, pm.Queues["refunds"].StateConflicts; b.Conflicts != 30 || r.Conflicts != 30 {
		t.Errorf("per queue conflicts = billing %+v, refunds %+v; want 30 each", *b, *r)
	}
	checked := 0
	for _, q := range *captured {
		if !strings.Contains(q, "FROM events e") && !strings.Contains(q, "FROM write_rejections") {
			continue
		}
		checked++
		var plan []string
		if err := s.DB.Raw("EXPLAIN " + q).Scan(&plan).Error; err != nil {
			t.Fatalf("explain %s: %v", q, err)
		}
		text := strings.Join(plan, "\n")
		if strings.Contains(text, "Seq Scan on events") || strings.Contains(text, "Seq Scan on write_rejections") {
			t.Errorf("scans sequentially:\n%s\n%s", q, text)
		}
		t.Logf("%s\n%s", q, text)
	}
	if checked != 2 {
		t.Errorf("checked %d metrics queries, want the fold and the rejections", checked)
	}
}
