package models_test

import (
	"encoding/json"
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
		// Before any rollup, the request folds everything.
		compare("no rollups")
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
	})
}
