package models_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// BenchmarkVerify measures Verify's throughput in events per second on
// PostgreSQL with one worker and with one per CPU, over
// TASKPILOTS_BENCH_VERIFY_EVENTS events (default 200,000) in sessions of a
// real lifecycle (create, delegate, lease, completed result, pause and
// resume cycles), cloned with fresh ids and recomputed hash chains:
//
//	go test -run '^$' -bench Verify -benchtime 1x ./models
//
// events/s is the figure to compare; events/s/cpu divides it by the
// workers' share of the machine (min(workers, NumCPU)), which says how
// well checking scales with cores on a machine shared with other work.
func BenchmarkVerify(b *testing.B) {
	want := 200_000
	if v := os.Getenv("TASKPILOTS_BENCH_VERIFY_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("TASKPILOTS_BENCH_VERIFY_EVENTS=%q: want a positive number", v)
		}
		want = n
	}
	s := storetest.New(b, models.Postgres)
	ctx := context.Background()
	n := cloneSessions(ctx, b, s, want, 0)
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			var rep models.VerifyReport
			for b.Loop() {
				var err error
				if rep, err = s.Verify(ctx, models.VerifyOpts{Workers: workers}); err != nil || !rep.OK() || rep.Events != int64(n) {
					b.Fatalf("verify: %d events, problems %v, %v", rep.Events, rep.Problems, err)
				}
			}
			perSec := float64(rep.Events) * float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(perSec, "events/s")
			b.ReportMetric(perSec/float64(min(workers, runtime.NumCPU())), "events/s/cpu")
		})
	}
}

// cloneSessions writes one session through the store and copies it until
// the log holds at least want events; it returns the event count. With
// spread, the copies' events are moved back in time so that the copies
// start evenly over the spread before now.
func cloneSessions(ctx context.Context, b *testing.B, s *models.Store, want int, spread time.Duration) int {
	b.Helper()
	sid, did := storetest.Delegated(ctx, b, s, "bench-verify")
	row, err := s.GetSession(ctx, sid)
	if err != nil {
		b.Fatal(err)
	}
	v := row.StateVersion
	for i := range 12 {
		t := models.EventSessionPaused
		if i%2 == 1 {
			t = models.EventSessionResumed
		}
		o, err := s.Transition(ctx, sid, t, "bench:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "bench"})
		if err != nil {
			b.Fatalf("%s: %v", t, err)
		}
		v = o.StateVersion
	}
	l, err := s.Claim(ctx, "bench-verify", "w-bench", "bench:worker", "")
	if err != nil || l == nil || l.DelegationID != did {
		b.Fatalf("claim: %+v, %v", l, err)
	}
	in := models.ResultInput{ResultType: models.ResultCompleted, Output: json.RawMessage(`{"eligible":true}`),
		Evidence: []models.Evidence{{Claim: "order paid", Source: "orders-db:1182"}}, LeaseToken: l.LeaseToken, SessionID: sid, Step: l.Step}
	_, err = s.SubmitResult(ctx, did, "bench:worker", "", in)
	if err != nil {
		b.Fatalf("result: %v", err)
	}
	tmpl, err := s.GetSession(ctx, sid)
	if err != nil {
		b.Fatal(err)
	}
	evs, err := s.ListEvents(ctx, sid, 0, 1000)
	if err != nil {
		b.Fatal(err)
	}
	total := len(evs)
	var sessions []models.Session
	var batch []models.Event
	flush := func() {
		if err := s.DB.CreateInBatches(sessions, 500).Error; err != nil {
			b.Fatalf("insert sessions: %v", err)
		}
		if err := s.DB.CreateInBatches(batch, 1000).Error; err != nil {
			b.Fatalf("insert events: %v", err)
		}
		batch, sessions = batch[:0], sessions[:0]
	}
	copies := (want + len(evs) - 1) / len(evs)
	for i := 0; total < want; i++ {
		id := fmt.Sprintf("ses_bench%08d", i)
		var shift time.Duration
		if spread > 0 {
			shift = evs[0].CreatedAt.Sub(time.Now().Add(-spread + time.Duration(i)*spread/time.Duration(copies)))
		}
		row := tmpl
		row.ID = id
		row.State = strings.ReplaceAll(tmpl.State, sid, id)
		prev := ""
		for _, e := range evs {
			e.ID = models.NewID("evt")
			e.SessionID = id
			e.PrevHash = prev
			e.CreatedAt = models.NewUTCTime(e.CreatedAt.Add(-shift))
			e.Hash = models.ComputeHash(e)
			prev = e.Hash
			batch = append(batch, e)
		}
		row.LastHash = prev
		sessions = append(sessions, row)
		total += len(evs)
		if len(batch) >= 20_000 {
			flush()
		}
	}
	flush()
	if err := s.DB.Exec(`ANALYZE events`).Error; err != nil {
		b.Fatal(err)
	}
	return total
}

// BenchmarkProductMetrics measures a metrics request on PostgreSQL over
// TASKPILOTS_BENCH_METRICS_EVENTS events (default 1,000,000) of sessions
// spread over the last 30 days, after the rollups' backfill (logged), for
// the 24 h, 7 d and 30 d windows, a custom range, and the 30 d window
// folded from the events without rollups, for comparison:
//
//	go test -run '^$' -bench ProductMetrics -benchtime 5x ./models
func BenchmarkProductMetrics(b *testing.B) {
	want := 1_000_000
	if v := os.Getenv("TASKPILOTS_BENCH_METRICS_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("TASKPILOTS_BENCH_METRICS_EVENTS=%q: want a positive number", v)
		}
		want = n
	}
	s := storetest.New(b, models.Postgres)
	ctx := context.Background()
	began := time.Now()
	n := cloneSessions(ctx, b, s, want, 30*24*time.Hour)
	b.Logf("%d events written in %v", n, time.Since(began).Round(time.Millisecond))
	began = time.Now()
	pass, err := s.RollupMetrics(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("backfilled %d hours of rollups in %v", pass.Hours, time.Since(began).Round(time.Millisecond))
	now := time.Now()
	windows := []struct {
		name     string
		from, to time.Time
		fold     bool
	}{
		{"24h", now.Add(-24 * time.Hour), now, false},
		{"7d", now.Add(-7 * 24 * time.Hour), now, false},
		{"30d", now.Add(-30 * 24 * time.Hour), now, false},
		{"custom", now.Add(-20*24*time.Hour - 17*time.Minute), now.Add(-5*24*time.Hour + 23*time.Minute), false},
		{"30d-fold-only", now.Add(-30 * 24 * time.Hour), now, true},
	}
	for _, w := range windows {
		b.Run(w.name, func(b *testing.B) {
			o := models.MetricsOpts{From: w.from, To: w.to}
			for b.Loop() {
				var err error
				if w.fold {
					_, err = s.ProductMetricsFromEvents(ctx, o)
				} else {
					_, err = s.ProductMetrics(ctx, o)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
