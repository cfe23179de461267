package models_test

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestMetricsDashboardFoldsEachEndOnce: the dashboard's window and its
// trend buckets read the rollups for every whole hour and fold the event
// log only for the window's two partial hours, once each (the trend's
// inner boundaries are on the hour); every figure is the fold's.
func TestMetricsDashboardFoldsEachEndOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		w := newMetricsWorld(t, s)
		buildMetricsHistory(w)
		w.at(2*time.Hour + 50*xMin)
		sx := w.session()
		w.delegate(sx, "billing", 600, 3)
		w.claim("billing", sx, 1)
		w.at(3*time.Hour + 5*xMin)
		w.rescue(1)
		w.at(4*time.Hour + 10*xMin)
		w.complete(w.claim("billing", sx, 2))
		w.at(9 * time.Hour)
		if _, err := s.RollupMetrics(w.ctx); err != nil {
			t.Fatal(err)
		}

		// The sessions of the folded spans are read in one statement, a
		// branch per span: count both.
		var folds, reads atomic.Int64
		count := func(db *gorm.DB) {
			if n := strings.Count(db.Statement.SQL.String(), "session_id FROM events WHERE created_at >= "); n > 0 {
				folds.Add(int64(n))
				reads.Add(1)
			}
		}
		cb := s.DB.Callback()
		if err := cb.Row().After("gorm:row").Register("test:folds", count); err != nil {
			t.Fatal(err)
		}
		if err := cb.Raw().After("gorm:raw").Register("test:folds", count); err != nil {
			t.Fatal(err)
		}

		same := func(what string, got, want models.ProductMetrics) {
			t.Helper()
			g, _ := json.Marshal(got)
			e, _ := json.Marshal(want)
			if string(g) != string(e) {
				t.Errorf("%s: dashboard gives\n%s\nthe fold gives\n%s", what, g, e)
			}
		}
		for _, queue := range []string{"", "billing"} {
			o := models.MetricsOpts{From: w.t0.Add(-40 * xMin), To: w.t0.Add(7*time.Hour + 20*xMin), Queue: queue}
			folds.Store(0)
			reads.Store(0)
			total, trend, err := s.MetricsDashboard(w.ctx, o, 4)
			if err != nil {
				t.Fatal(err)
			}
			if n, r := folds.Load(), reads.Load(); n != 2 || r != 1 {
				t.Errorf("queue %q: the dashboard folded %d spans of the event log in %d reads, want 2 (the window's partial hours) in 1", queue, n, r)
			}
			all := o
			all.Queue = ""
			want, err := s.ProductMetricsFromEvents(w.ctx, all)
			if err != nil {
				t.Fatal(err)
			}
			same("total", total, want)
			if len(trend) != 4 || !trend[0].From.Equal(o.From) || !trend[3].To.Equal(o.To) {
				t.Fatalf("trend = %d buckets from %v", len(trend), trend[0].From)
			}
			for i, pm := range trend {
				if i > 0 && (!pm.From.Equal(trend[i-1].To) || !pm.From.Equal(pm.From.Truncate(time.Hour))) {
					t.Errorf("bucket %d starts at %v, want the hour the previous one ends at (%v)", i, pm.From, trend[i-1].To)
				}
				want, err := s.ProductMetricsFromEvents(w.ctx, models.MetricsOpts{From: pm.From, To: pm.To, Queue: queue})
				if err != nil {
					t.Fatal(err)
				}
				same("bucket "+pm.From.Format(time.TimeOnly), pm, want)
			}
		}
	})
}

// TestMetricsDashboardStatements pins the statements of a metrics request:
// the dashboard's window and all its trend buckets share each read, so a
// request sends as many statements with 12 buckets as with 4, and as many
// as the API's one window: the rollup state, the sessions of the folded
// ends, their histories, the whole hours' counters, their distinct
// sessions, which of the ends' sessions those hours counted, the rejected
// writes, and the figures that are not windowed (SLA and stalled). It sent
// about 60 with 12 buckets, four per bucket.
func TestMetricsDashboardStatements(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		w := newMetricsWorld(t, s)
		buildMetricsHistory(w)
		w.at(9 * time.Hour)
		if _, err := s.RollupMetrics(w.ctx); err != nil {
			t.Fatal(err)
		}
		var statements atomic.Int64
		count := func(*gorm.DB) { statements.Add(1) }
		cb := s.DB.Callback()
		for _, reg := range []func() error{
			func() error { return cb.Row().After("gorm:row").Register("test:statements", count) },
			func() error { return cb.Raw().After("gorm:raw").Register("test:statements", count) },
			func() error { return cb.Query().After("gorm:query").Register("test:statements", count) },
		} {
			if err := reg(); err != nil {
				t.Fatal(err)
			}
		}
		// Both ends inside hours with events, so that every read runs.
		o := models.MetricsOpts{From: w.t0.Add(30 * xMin), To: w.t0.Add(2*time.Hour + 5*xMin)}
		const want = 8
		for _, n := range []int{1, 4, 12} {
			statements.Store(0)
			if _, _, err := s.MetricsDashboard(w.ctx, o, n); err != nil {
				t.Fatal(err)
			}
			if got := statements.Load(); got != want {
				t.Errorf("dashboard with %d buckets: %d statements, want %d", n, got, want)
			}
		}
		statements.Store(0)
		if _, err := s.ProductMetrics(w.ctx, o); err != nil {
			t.Fatal(err)
		}
		if got := statements.Load(); got != want {
			t.Errorf("API metrics: %d statements, want %d", got, want)
		}
	})
}

// TestMetricsEndsPlannedPerRequest: the read of the sessions at a window's
// ends is planned for its time ranges on every request. As a prepared
// statement PostgreSQL could switch it to a generic plan after five
// executions, which assumes 0.5 % of all events in any range and went
// parallel at a million events: 50-130 ms of worker start-up for the empty
// minutes at the end of a window. Sent in pgx's exec mode it is never a
// named prepared statement of the connection, so it has no generic plan to
// switch to; the other reads of the request still are.
func TestMetricsEndsPlannedPerRequest(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	sqlDB, err := s.DB.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(1) // every statement below on one connection
	w := newMetricsWorld(t, s)
	buildMetricsHistory(w)
	w.at(3*time.Hour + 10*xMin)
	if _, err := s.RollupMetrics(w.ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		o := models.MetricsOpts{From: w.t0.Add(time.Duration(i)*xMin - time.Hour), To: w.t0.Add(3*time.Hour + time.Duration(i)*xMin)}
		if _, _, err := s.MetricsDashboard(w.ctx, o, 4); err != nil {
			t.Fatal(err)
		}
	}
	var prepared []struct {
		Statement   string
		CustomPlans int64
	}
	if err := s.DB.Raw(`SELECT statement, custom_plans FROM pg_prepared_statements`).Scan(&prepared).Error; err != nil {
		t.Fatal(err)
	}
	sums := false
	for _, p := range prepared {
		if strings.Contains(p.Statement, "session_id FROM events WHERE created_at >=") {
			t.Errorf("the ends' sessions are a prepared statement of the connection (%d custom plans so far): %s", p.CustomPlans, p.Statement)
		}
		sums = sums || strings.Contains(p.Statement, "FROM metric_rollups")
	}
	if !sums {
		t.Fatalf("the rollup sums are not among the connection's %d prepared statements: not the requests' connection?", len(prepared))
	}
}
