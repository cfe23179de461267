package models_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestMetricsRollupsMatchFold: the product metrics read from the hourly
// rollups (plus the folded ends of the window) are exactly the figures the
// fold over the event log computes, for windows aligned to hours or not,
// inside, across and beyond the hours rolled up, on both dialects.
func TestMetricsRollupsMatchFold(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		w := newMetricsWorld(t, s)
		buildMetricsHistory(w)
		// More activity across hour boundaries: a lease taken in one hour,
		// lost in the next and completed on its retry in a third.
		w.at(2*time.Hour + 50*xMin)
		sx := w.session()
		w.delegate(sx, "billing", 600, 3)
		w.claim("billing", sx, 1)
		w.at(3*time.Hour + 5*xMin)
		w.rescue(1)
		w.at(4*time.Hour + 10*xMin)
		w.complete(w.claim("billing", sx, 2))

		windows := [][2]time.Duration{
			{-time.Hour, 6 * time.Hour}, {0, time.Hour}, {10 * xMin, 2*time.Hour + 5*xMin},
			{-40 * xMin, 3*time.Hour + 1*xSec}, {30 * xMin, 70 * xMin}, {2 * time.Hour, 5 * time.Hour},
			{3*time.Hour + 30*xMin, 4*time.Hour + 15*xMin}, {-2 * time.Hour, -time.Hour},
		}
		compare := func(stage string) {
			t.Helper()
			for _, win := range windows {
				rollupsMatchFold(t, s, fmt.Sprintf("%s, window %v", stage, win), w.t0.Add(win[0]), w.t0.Add(win[1]))
			}
		}
		// Before any rollup, the request folds everything; a statement per
		// session gives the same figures as one for them all.
		compare("no rollups")
		whole := models.MetricsOpts{From: w.t0.Add(-time.Hour), To: w.t0.Add(6 * time.Hour)}
		s.SetFoldChunkSize(1)
		oneByOne, err := s.ProductMetricsFromEvents(w.ctx, whole)
		s.SetFoldChunkSize(0)
		if err != nil {
			t.Fatal(err)
		}
		all, err := s.ProductMetricsFromEvents(w.ctx, whole)
		if err != nil {
			t.Fatal(err)
		}
		if g, e := string(mustJSON(t, oneByOne)), string(mustJSON(t, all)); g != e || all.Overall.Rework.Sessions < 3 {
			t.Errorf("a session per statement gives\n%s\none statement gives\n%s", g, e)
		}
		// At 12:10, rolled up to 12:00 (the hour that ended 5 minutes ago),
		// and the first slice of 12:00 (12:00-12:05, settled at 12:06).
		w.at(3*time.Hour + 10*xMin)
		if n, err := s.RollupMetrics(w.ctx); err != nil || n.Hours == 0 || n.Slices != 1 {
			t.Fatalf("rollup = %+v, %v; want the hours up to 12:00 and one slice", n, err)
		}
		compare("partly rolled up")
		w.at(8 * time.Hour)
		if n, err := s.RollupMetrics(w.ctx); err != nil || n.Hours != 4 || n.Slices != 11 {
			t.Fatalf("rollup = %+v, %v; want 4 more hours (12:00-16:00) and 11 slices (16:00-16:55)", n, err)
		}
		if n, err := s.RollupMetrics(w.ctx); err != nil || n != (models.MetricRollupPass{}) {
			t.Fatalf("second rollup = %+v, %v; want none", n, err)
		}
		compare("rolled up")

		// Migration 00024 derives metric_session_firsts from the session
		// rows of the hours rolled up before it: the same rows the pass
		// writes.
		firsts := func() string {
			t.Helper()
			var rows []struct {
				Bucket models.UTCTime
				Queue  string
				Kind   string
				Prev   models.UTCTime
				N      int64
			}
			if err := s.DB.Raw(`SELECT bucket, queue, kind, prev, n FROM metric_session_firsts ORDER BY bucket, queue, kind, prev`).Scan(&rows).Error; err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(rows)
			return string(b)
		}
		want := firsts()
		if want == "null" || !strings.Contains(want, `"Kind":"reworked"`) || !strings.Contains(want, `"Kind":"infra"`) {
			t.Fatalf("session firsts after the rollups = %s", want)
		}
		mig, err := os.ReadFile(filepath.Join("..", "migrations", string(s.Dialect), "00028_metric_session_firsts.sql"))
		if err != nil {
			t.Fatal(err)
		}
		up, _, _ := strings.Cut(string(mig), "-- +goose Down")
		_, backfill, ok := strings.Cut(up, "INSERT INTO metric_session_firsts")
		if !ok {
			t.Fatal("migration 00024 has no backfill")
		}
		if err := s.DB.Exec(`DELETE FROM metric_session_firsts`).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB.Exec("INSERT INTO metric_session_firsts" + backfill).Error; err != nil {
			t.Fatalf("backfill: %v", err)
		}
		if got := firsts(); got != want {
			t.Errorf("migration 00024's backfill gives\n%s\nthe rollup pass wrote\n%s", got, want)
		}
		compare("backfilled by the migration")
	})
}

// TestMetricsRollupSlices: the hour still open is rolled up in 5-minute
// slices, a minute after each ends, so that a request folds at most the
// last few minutes of events; the figures stay exactly the fold's for
// windows that start or end inside the open hour, and the hour's own
// rollup replaces its slices once it is settled.
func TestMetricsRollupSlices(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		w := newMetricsWorld(t, s) // t0 is 09:00
		buildMetricsHistory(w)
		// sa: asked for input in the 11:00 hour, then the step is
		// delegated again (rework) and completed across two slices of the
		// 12:00 hour.
		w.at(2*time.Hour + 30*xMin)
		sa := w.session()
		w.delegate(sa, "billing", 600, 3)
		w.result(w.claim("billing", sa, 1), models.ResultNeedsInput, models.ResultInput{Question: "Which order?"})
		w.at(3*time.Hour + 7*xMin)
		w.delegate(sa, "billing", 1800, 3)
		la := w.claim("billing", sa, 1)
		w.at(3*time.Hour + 22*xMin)
		w.complete(la)
		// sb: a lease lost in one slice (an infrastructure retry), leased
		// again and completed in the next.
		w.at(3*time.Hour + 3*xMin)
		sb := w.session()
		w.delegate(sb, "refunds", 60, 3)
		w.claim("refunds", sb, 1)
		w.at(3*time.Hour + 9*xMin)
		w.rescue(1)
		w.at(3*time.Hour + 16*xMin)
		w.complete(w.claim("refunds", sb, 2))
		// sc: a whole delegation inside one slice; sd: after the last
		// slice rolled up at 12:50.
		w.at(3*time.Hour + 31*xMin)
		sc := w.session()
		w.delegate(sc, "refunds", 600, 3)
		w.complete(w.claim("refunds", sc, 1))
		w.at(3*time.Hour + 47*xMin)
		sd := w.session()
		w.delegate(sd, "billing", 600, 3)
		w.claim("billing", sd, 1)

		at := func(d time.Duration) time.Time { return w.t0.Add(d) }
		compare := func(stage string, now time.Duration) {
			t.Helper()
			windows := [][2]time.Duration{
				{now - 24*time.Hour, now}, {2 * time.Hour, now}, {3*time.Hour + 2*xMin, now},
				{3*time.Hour + 10*xMin, 3*time.Hour + 33*xMin}, {2*time.Hour + 20*xMin, 3*time.Hour + 46*xMin},
				{-time.Hour, 3*time.Hour + 45*xMin}, {3 * time.Hour, 3*time.Hour + 45*xMin},
				{3*time.Hour + 31*xMin, 3*time.Hour + 34*xMin}, {3*time.Hour + 5*xMin, 3*time.Hour + 20*xMin},
			}
			for _, win := range windows {
				rollupsMatchFold(t, s, fmt.Sprintf("%s, window %v", stage, win), at(win[0]), at(win[1]))
			}
		}
		// 12:50: the hours up to 12:00 are rolled up whole, and the slices
		// of 12:00-12:45 (the 12:45 one ends at 12:50 and waits a minute).
		w.at(3*time.Hour + 50*xMin)
		if n, err := s.RollupMetrics(w.ctx); err != nil || n.Hours != 4 || n.Slices != 9 {
			t.Fatalf("rollup at 12:50 = %+v, %v; want 4 hours (08:00-12:00) and 9 slices", n, err)
		}
		compare("open hour in slices", 3*time.Hour+50*xMin)
		// The last 24 hours fold only their two ends: the partial hour at
		// the start (no events) and the 5 minutes after the last slice.
		spans, err := s.MetricsFoldedSpans(w.ctx, at(3*time.Hour+50*xMin-24*time.Hour), at(3*time.Hour+50*xMin))
		if err != nil {
			t.Fatal(err)
		}
		if len(spans) != 2 || !spans[1][0].Equal(at(3*time.Hour+45*xMin)) {
			t.Errorf("folded spans of the last 24 hours = %v; want the end folded from 12:45 on", spans)
		}
		// A window starting inside the open hour starts its rolled-up part
		// at the next slice.
		spans, err = s.MetricsFoldedSpans(w.ctx, at(3*time.Hour+2*xMin), at(3*time.Hour+50*xMin))
		if err != nil {
			t.Fatal(err)
		}
		if len(spans) != 2 || !spans[0][1].Equal(at(3*time.Hour+5*xMin)) || !spans[1][0].Equal(at(3*time.Hour+45*xMin)) {
			t.Errorf("folded spans of 12:02-12:50 = %v; want 12:02-12:05 and 12:45-12:50", spans)
		}

		// 13:03: every slice of the 12:00 hour is rolled up, and the hour
		// is not settled yet (13:05): the present's window folds 13:00-13:03.
		w.at(4*time.Hour + 3*xMin)
		if n, err := s.RollupMetrics(w.ctx); err != nil || n.Hours != 0 || n.Slices != 3 {
			t.Fatalf("rollup at 13:03 = %+v, %v; want the last 3 slices of 12:00", n, err)
		}
		compare("every slice of the open hour", 4*time.Hour+3*xMin)
		if spans, err := s.MetricsFoldedSpans(w.ctx, at(3*time.Hour+20*xMin), at(4*time.Hour+3*xMin)); err != nil ||
			len(spans) != 1 || !spans[0][0].Equal(at(4*time.Hour)) {
			t.Errorf("folded spans of 12:20-13:03 = %v, %v; want 13:00-13:03 alone", spans, err)
		}

		// 13:06: the 12:00 hour is settled; its own fold replaces its
		// slices, and the first slice of 13:00 follows.
		w.at(4*time.Hour + 6*xMin)
		if n, err := s.RollupMetrics(w.ctx); err != nil || n.Hours != 1 || n.Slices != 1 {
			t.Fatalf("rollup at 13:06 = %+v, %v; want the 12:00 hour and one slice", n, err)
		}
		for _, table := range []string{"metric_rollups", "metric_session_hours", "metric_session_firsts"} {
			var buckets []models.UTCTime
			if err := s.DB.Raw(`SELECT DISTINCT bucket FROM `+table+` WHERE bucket >= ? AND bucket < ? ORDER BY bucket`,
				models.NewUTCTime(at(3*time.Hour)), models.NewUTCTime(at(4*time.Hour))).Scan(&buckets).Error; err != nil {
				t.Fatal(err)
			}
			if len(buckets) != 1 || !buckets[0].Equal(at(3*time.Hour)) {
				t.Errorf("%s buckets in the 12:00 hour after its rollup = %v; want the hour alone", table, buckets)
			}
		}
		compare("hour rolled up", 4*time.Hour+6*xMin)
	})
}

// TestMetricsRollupConcurrentPasses: processes roll up side by side (every
// server's maintenance loop runs the pass). Each hour and slice is rolled
// up by exactly one of them, and the figures are the fold's.
func TestMetricsRollupConcurrentPasses(t *testing.T) {
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			u := storetest.NewURL(t, d)
			stores := make([]*models.Store, 4)
			for i := range stores {
				s, err := models.Open(ctx, u, models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				t.Cleanup(func() { _ = s.Close() })
				if _, err := s.MigrateUp(ctx); err != nil {
					t.Fatalf("migrate: %v", err)
				}
				stores[i] = s
			}
			w := newMetricsWorld(t, stores[0])
			buildMetricsHistory(w)
			w.at(2*time.Hour + 40*xMin)
			sx := w.session()
			w.delegate(sx, "billing", 3600, 3)
			w.complete(w.claim("billing", sx, 1))
			// 11:50: the settled hours 08:00, 09:00 and 10:00, and the
			// slices of 11:00-11:45.
			w.at(2*time.Hour + 50*xMin)
			for _, s := range stores[1:] {
				s.Now = stores[0].Now
			}
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				total models.MetricRollupPass
				errs  []error
			)
			for _, s := range stores {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n, err := s.RollupMetrics(ctx)
					mu.Lock()
					defer mu.Unlock()
					total.Hours += n.Hours
					total.Slices += n.Slices
					if err != nil {
						errs = append(errs, err)
					}
				}()
			}
			wg.Wait()
			if len(errs) > 0 || total != (models.MetricRollupPass{Hours: 3, Slices: 9}) {
				t.Fatalf("passes side by side rolled up %+v in all (%v); want 3 hours and 9 slices, once each", total, errs)
			}
			for _, win := range [][2]time.Duration{{-24 * time.Hour, 2*time.Hour + 50*xMin}, {2*time.Hour + 10*xMin, 2*time.Hour + 48*xMin}} {
				rollupsMatchFold(t, stores[1], fmt.Sprintf("window %v", win), w.t0.Add(win[0]), w.t0.Add(win[1]))
			}
		})
	}
}

// TestMetricsReadsOneSnapshot: a request reads the rollup state, plans its
// windows from it, then reads the buckets and folds the spans at the ends.
// A pass that commits in between (here the hour rolled up whole in place
// of its slices, which are a part of the window, while the window's end
// after the last slice is folded from the events) must not be seen
// half-way: the request reads in one snapshot.
func TestMetricsReadsOneSnapshot(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	w := newMetricsWorld(t, s)
	buildMetricsHistory(w)
	// Activity at 11:47, after the last slice rolled up at 11:50.
	w.at(2*time.Hour + 47*xMin)
	sx := w.session()
	w.delegate(sx, "billing", 600, 3)
	w.complete(w.claim("billing", sx, 1))
	w.at(2*time.Hour + 50*xMin)
	if n, err := s.RollupMetrics(w.ctx); err != nil || n.Slices != 9 {
		t.Fatalf("rollup at 11:50 = %+v, %v; want 9 slices of 11:00", n, err)
	}
	// Between the request's plan and its reads, 12:06 comes and a pass
	// rolls up the 11:00 hour whole. (The fold from the events reads no
	// rollup and runs no plan hook.)
	other, err := models.Open(w.ctx, s.URL(), models.OpenOpts{Logger: s.Logger})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.Now = func() time.Time { return w.t0.Add(3*time.Hour + 6*xMin) }
	rolled := false
	s.SetMetricsPlanHook(func() {
		if rolled {
			return
		}
		rolled = true
		if n, err := other.RollupMetrics(w.ctx); err != nil || n.Hours != 1 {
			t.Errorf("rollup at 12:06 = %+v, %v; want the 11:00 hour", n, err)
		}
	})
	rollupsMatchFold(t, s, "a pass committing during the request", w.t0.Add(-time.Hour), w.t0.Add(2*time.Hour+50*xMin))
	if !rolled {
		t.Fatal("the plan hook did not run")
	}
}

// rollupsMatchFold fails t unless the product metrics of [from, to) read
// with the rollups are exactly those of the fold over the event log.
func rollupsMatchFold(t *testing.T, s *models.Store, what string, from, to time.Time) {
	t.Helper()
	ctx := context.Background()
	o := models.MetricsOpts{From: from, To: to}
	got, err := s.ProductMetrics(ctx, o)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	want, err := s.ProductMetricsFromEvents(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if g, e := string(mustJSON(t, got)), string(mustJSON(t, want)); g != e {
		t.Errorf("%s: rollups give\n%s\nthe fold gives\n%s", what, g, e)
	}
}
