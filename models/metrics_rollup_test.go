package models_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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
				o := models.MetricsOpts{From: w.t0.Add(win[0]), To: w.t0.Add(win[1])}
				got, err := s.ProductMetrics(w.ctx, o)
				if err != nil {
					t.Fatalf("%s %v: %v", stage, win, err)
				}
				want, err := s.ProductMetricsFromEvents(w.ctx, o)
				if err != nil {
					t.Fatal(err)
				}
				g, _ := json.Marshal(got)
				e, _ := json.Marshal(want)
				if string(g) != string(e) {
					t.Errorf("%s, window %v: rollups give\n%s\nthe fold gives\n%s", stage, win, g, e)
				}
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
		// At 12:10, rolled up to 12:00 (the hour that ended 5 minutes ago).
		w.at(3*time.Hour + 10*xMin)
		if n, err := s.RollupMetrics(w.ctx); err != nil || n == 0 {
			t.Fatalf("rollup = %d hours, %v; want the hours up to 12:00", n, err)
		}
		compare("partly rolled up")
		w.at(8 * time.Hour)
		if n, err := s.RollupMetrics(w.ctx); err != nil || n != 4 {
			t.Fatalf("rollup = %d hours, %v; want 4 more (12:00-16:00)", n, err)
		}
		if n, err := s.RollupMetrics(w.ctx); err != nil || n != 0 {
			t.Fatalf("second rollup = %d hours, %v; want none", n, err)
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
