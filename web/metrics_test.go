package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// scrape reads h's Prometheus text output into "name{labels}" → value.
func scrape(t *testing.T, h http.Handler) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape: bad line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

func wantSamples(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("no sample %s", k)
		} else if g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
}

// testClock is a settable Store.Now safe for the flush goroutine.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Set(t time.Time)     { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }
func (c *testClock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

// TestMetricsObserver drives writes through the store with the observer
// installed and checks the scraped counters, the recovery histogram and the
// rejection counters the conflict rate reads.
func TestMetricsObserver(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
		clock := &testClock{now: t0}
		s.Now = clock.Now
		m := newMetrics(s)
		if s.Observer != m {
			t.Fatalf("newMetrics did not install the observer")
		}

		sid, did := storetest.Delegated(ctx, t, s, "refunds")
		l1, err := s.Claim(ctx, "refunds", "w-1", "test:worker", "")
		if err != nil || l1 == nil {
			t.Fatalf("claim: %v %v", l1, err)
		}
		// Stale: the session is at version 3.
		v1 := int64(1)
		if _, err := s.Delegate(ctx, sid, "test:controller", "", models.DelegateInput{Queue: "refunds", Step: "again", ExpectedVersion: &v1}); models.ErrorCode(err) != models.ECONFLICT {
			t.Fatalf("stale delegate: %v", err)
		}
		// A heartbeat at +10s extends the lease to +40s; the rescuer
		// re-queues it at +45s.
		clock.Set(t0.Add(10 * time.Second))
		if _, err := s.Heartbeat(ctx, did, l1.LeaseToken); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		clock.Set(t0.Add(45 * time.Second))
		if n, err := s.RescueExpired(ctx, 10); err != nil || n != 1 {
			t.Fatalf("rescue = %d, %v", n, err)
		}
		// Fenced: a result on the lost lease.
		res := models.ResultInput{LeaseToken: "lt_gone", SessionID: sid, Step: "check-eligibility", ResultType: models.ResultCompleted,
			Evidence: []models.Evidence{{Claim: "paid", Source: "orders-db"}}}
		if _, err := s.SubmitResult(ctx, did, "test:worker", "", res); models.ErrorCode(err) != models.ECONFLICT {
			t.Fatalf("fenced result: %v", err)
		}
		// Re-leased at +60s: a machine recovery of 50s from the heartbeat
		// (not 15s from the expiry's detection).
		clock.Set(t0.Add(60 * time.Second))
		l, err := s.Claim(ctx, "refunds", "w-2", "test:worker", "")
		if err != nil || l == nil || l.Attempt != 2 {
			t.Fatalf("second claim: %+v %v", l, err)
		}
		res.LeaseToken = l.LeaseToken
		if _, err := s.SubmitResult(ctx, did, "test:worker", "r-1", res); err != nil {
			t.Fatalf("result: %v", err)
		}
		// Replay: the same result again (not a conflict).
		if out, err := s.SubmitResult(ctx, did, "test:worker", "r-1", res); err != nil || !out.Replayed {
			t.Fatalf("repeat: %+v %v", out, err)
		}
		// Illegal: pausing a completed session.
		v := int64(6)
		if _, err := s.Transition(ctx, sid, models.EventSessionPaused, "test:controller", "", models.TransitionInput{ExpectedVersion: &v}); models.ErrorCode(err) != models.EILLEGAL {
			t.Fatalf("illegal pause: %v", err)
		}
		// An escalation a human claims after 30s and completes 60s later:
		// a human wait of 90s, on no queue (the session was never
		// delegated).
		s2 := storetest.Session(ctx, t, s, nil)
		if _, err := s.Transition(ctx, s2, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: &v1, Reason: "unsure"}); err != nil {
			t.Fatalf("escalate: %v", err)
		}
		clock.Add(30 * time.Second)
		v2 := int64(2)
		if _, err := s.Execute(ctx, models.Command{SessionID: s2, Type: models.EventHumanClaimed, Actor: "user:a", ExpectedVersion: &v2,
			Payload: models.HumanPayload{User: "user:a"}}); err != nil {
			t.Fatalf("claim escalation: %v", err)
		}
		clock.Add(60 * time.Second)
		v3 := int64(3)
		if _, err := s.Execute(ctx, models.Command{SessionID: s2, Type: models.EventHumanCompleted, Actor: "user:a", ExpectedVersion: &v3,
			Payload: models.HumanPayload{User: "user:a", Resolution: "done by hand"}}); err != nil {
			t.Fatalf("complete escalation: %v", err)
		}

		wantSamples(t, scrape(t, m.handler()), map[string]float64{
			`taskpilots_events_committed_total{type="session.created"}`:                  2,
			`taskpilots_events_committed_total{type="delegation.created"}`:               1,
			`taskpilots_events_committed_total{type="delegation.leased"}`:                2,
			`taskpilots_events_committed_total{type="delegation.lease_expired"}`:         1,
			`taskpilots_events_committed_total{type="result.completed"}`:                 1,
			`taskpilots_events_committed_total{type="session.escalated"}`:                1,
			`taskpilots_events_committed_total{type="human.claimed"}`:                    1,
			`taskpilots_events_committed_total{type="human.completed"}`:                  1,
			`taskpilots_leases_granted_total`:                                            2,
			`taskpilots_results_total{result_type="completed"}`:                          1,
			`taskpilots_writes_committed_total{queue="refunds"}`:                         5,
			`taskpilots_writes_committed_total{queue=""}`:                                5,
			`taskpilots_write_rejections_total{queue="refunds",reason="stale"}`:          1,
			`taskpilots_write_rejections_total{queue="refunds",reason="fenced"}`:         1,
			`taskpilots_write_rejections_total{queue="refunds",reason="replay"}`:         1,
			`taskpilots_write_rejections_total{queue="refunds",reason="illegal"}`:        1,
			`taskpilots_infra_retries_total{cause="lease_expired",queue="refunds"}`:      1,
			`taskpilots_escalations_opened_total{queue=""}`:                              1,
			`taskpilots_recovery_seconds_count{kind="machine",queue="refunds"}`:          1,
			`taskpilots_recovery_seconds_sum{kind="machine",queue="refunds"}`:            50,
			`taskpilots_recovery_seconds_bucket{kind="machine",queue="refunds",le="30"}`: 0,
			`taskpilots_recovery_seconds_bucket{kind="machine",queue="refunds",le="60"}`: 1,
			`taskpilots_recovery_seconds_count{kind="human",queue=""}`:                   1,
			`taskpilots_recovery_seconds_sum{kind="human",queue=""}`:                     90,
		})
		got := scrape(t, m.handler())
		if _, ok := got["go_goroutines"]; !ok {
			t.Errorf("no Go collector samples")
		}

		// The store counted the rejections in write_rejections when they
		// happened (no flush), which the state conflict rate reads: 2
		// conflicts (stale, fenced), one illegal transition, one replay
		// (neither a conflict nor an attempt).
		pm, err := s.ProductMetrics(ctx, models.MetricsOpts{From: t0, To: t0.Add(time.Hour)})
		if err != nil {
			t.Fatalf("product metrics: %v", err)
		}
		c := pm.Overall.StateConflicts
		if c.Rejected != 3 || c.Conflicts != 2 || c.Replays != 1 || c.Committed != 10 || c.WriteAttempts != 13 ||
			c.ByReason["stale"] != 1 || c.ByReason["fenced"] != 1 || c.ByReason["illegal"] != 1 {
			t.Errorf("conflicts = %+v", *c)
		}
		if rc := pm.Queues["refunds"].StateConflicts; rc.Rejected != 3 || rc.Committed != 5 || rc.Conflicts != 2 {
			t.Errorf("refunds conflicts = %+v", *rc)
		}
		// The API's recovery agrees with the histogram.
		if r := pm.Overall.Recovery; r.Machine.Recoveries != 1 || *r.Machine.MeanSeconds != 50 || r.Human.Recoveries != 1 || *r.Human.MeanSeconds != 90 {
			t.Errorf("recovery = %+v", r)
		}
	})
}

// TestMetricsMiddlewareAndProductMetricsHandler checks the HTTP collectors
// label by route pattern and status class, and that GET /api/v1/metrics
// answers the window it was asked for, or a 422 problem.
func TestMetricsMiddlewareAndProductMetricsHandler(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		now := time.Date(2026, 11, 9, 12, 0, 0, 0, time.UTC)
		s.Now = func() time.Time { return now }
		m := newMetrics(s)
		e := echo.New()
		e.HTTPErrorHandler = handlers.ErrorHandler(slog.New(slog.DiscardHandler))
		e.Use(m.middleware())
		e.GET("/api/v1/sessions/:id", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
		e.GET("/api/v1/gone/:id", func(c echo.Context) error { return &models.NotFoundError{Kind: "session", ID: c.Param("id")} })
		e.GET("/api/v1/metrics", handlers.ProductMetrics(s))

		// A day and a half ago one delegation completed on its first lease.
		s.Now = func() time.Time { return now.Add(-36 * time.Hour) }
		sid, did := storetest.Delegated(ctx, t, s, "refunds")
		l, err := s.Claim(ctx, "refunds", "w-1", "test:worker", "")
		if err != nil || l == nil {
			t.Fatalf("claim: %v %v", l, err)
		}
		if _, err := s.SubmitResult(ctx, did, "test:worker", "", models.ResultInput{LeaseToken: l.LeaseToken, SessionID: sid,
			Step: l.Step, ResultType: models.ResultCompleted, Evidence: []models.Evidence{{Claim: "paid"}}}); err != nil {
			t.Fatalf("result: %v", err)
		}
		s.Now = func() time.Time { return now }

		get := func(u string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, u, nil))
			return rec
		}
		for _, u := range []string{"/api/v1/sessions/ses_1", "/api/v1/sessions/ses_2", "/api/v1/gone/ses_3", "/no/such/page"} {
			get(u)
		}

		bad := get("/api/v1/metrics?window=1y")
		var p handlers.Problem
		if err := json.Unmarshal(bad.Body.Bytes(), &p); err != nil || bad.Code != http.StatusUnprocessableEntity ||
			len(p.Errors) != 1 || p.Errors[0].Field != "window" || bad.Header().Get(echo.HeaderContentType) != handlers.ProblemContentType {
			t.Errorf("bad window = %d %s %s", bad.Code, bad.Header().Get(echo.HeaderContentType), bad.Body)
		}
		if r := get("/api/v1/metrics?queue=no%20spaces"); r.Code != http.StatusUnprocessableEntity {
			t.Errorf("bad queue = %d %s", r.Code, r.Body)
		}
		if r := get("/api/v1/metrics?from=2026-11-09T12:00:00Z"); r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Body.String(), `"to"`) {
			t.Errorf("custom range without to = %d %s", r.Code, r.Body)
		}
		// A range that ends before it starts names the parameter to change.
		backwards := get("/api/v1/metrics?from=2026-11-09T12:00:00Z&to=2026-11-08T12:00:00Z")
		p = handlers.Problem{}
		if err := json.Unmarshal(backwards.Body.Bytes(), &p); err != nil || backwards.Code != http.StatusUnprocessableEntity ||
			len(p.Errors) != 1 || p.Errors[0].Field != "to" || p.Errors[0].Message != "must be after from" {
			t.Errorf("backwards range = %d %s", backwards.Code, backwards.Body)
		}

		for _, tc := range []struct {
			query, window string
			days          int
			ended         int64
		}{
			{"", "24h", 1, 0},
			{"?window=7d&queue=refunds", "7d", 7, 1},
			{"?window=30d", "30d", 30, 1},
			{"?from=2026-10-10T12:00:00Z&to=2026-11-09T12:00:00Z", "custom", 30, 1},
		} {
			r := get("/api/v1/metrics" + tc.query)
			if r.Code != http.StatusOK {
				t.Fatalf("metrics%s = %d %s", tc.query, r.Code, r.Body)
			}
			var body handlers.MetricsResponse
			if err := json.Unmarshal(r.Body.Bytes(), &body); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if body.Window != tc.window || !body.To.Equal(now) || !body.From.Equal(now.Add(-time.Duration(tc.days)*24*time.Hour)) {
				t.Errorf("metrics%s window = %s %v..%v", tc.query, body.Window, body.From, body.To)
			}
			if h := body.Overall.HandoffSuccess; h.Ended != tc.ended || h.Succeeded != tc.ended {
				t.Errorf("metrics%s handoff = %+v, want %d of %d", tc.query, h, tc.ended, tc.ended)
			}
			if body.Overall.StateConflicts == nil || body.Overall.StateConflicts.Committed != 4*tc.ended {
				t.Errorf("metrics%s conflicts = %+v, want %d events", tc.query, body.Overall.StateConflicts, 4*tc.ended)
			}
			if tc.query == "?window=7d&queue=refunds" {
				q, ok := body.Queues["refunds"]
				if len(body.Queues) != 1 || !ok || q.HandoffSuccess.Rate == nil || *q.HandoffSuccess.Rate != 1 {
					t.Errorf("refunds = %+v", body.Queues)
				}
			}
		}

		got := scrape(t, m.handler())
		wantSamples(t, got, map[string]float64{
			`taskpilots_http_requests_total{method="GET",route="/api/v1/sessions/:id",status_class="2xx"}`: 2,
			`taskpilots_http_requests_total{method="GET",route="/api/v1/gone/:id",status_class="4xx"}`:     1,
			`taskpilots_http_requests_total{method="GET",route="unmatched",status_class="4xx"}`:            1,
			`taskpilots_http_requests_total{method="GET",route="/api/v1/metrics",status_class="4xx"}`:      4,
			`taskpilots_http_requests_total{method="GET",route="/api/v1/metrics",status_class="2xx"}`:      4,
			`taskpilots_http_request_duration_seconds_count{method="GET",route="/api/v1/sessions/:id"}`:    2,
		})
		for k := range got {
			if strings.Contains(k, "ses_1") || strings.Contains(k, "/no/such") {
				t.Errorf("raw URL leaked into a label: %s", k)
			}
		}
	})
}

// TestMetricsSeriesBoundedForAnonymousRequests is the regression test for
// made-up methods and paths: anonymous requests must not add a series each.
func TestMetricsSeriesBoundedForAnonymousRequests(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := testEcho(t, s, Config{})
		series := func() int {
			n := 0
			for k := range scrape(t, e) {
				if strings.HasPrefix(k, "taskpilots_http_request") {
					n++
				}
			}
			return n
		}
		send := func(i int) {
			paths := []string{"/", "/login", "/api/v1/sessions", "/healthz", "/static/app.js"}
			for _, p := range []string{fmt.Sprintf("/made/up/%d", i), paths[i%len(paths)]} {
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, httptest.NewRequest(fmt.Sprintf("XMETHOD%d", i), p, nil))
			}
		}
		for i := range 5 {
			send(i)
		}
		series() // the scrape itself is a request with its own series
		before := series()
		for i := 5; i < 105; i++ {
			send(i)
		}
		// 200 more requests with fresh methods and paths add no series: the
		// warm-up already used every label they can have.
		if after := series(); after != before {
			t.Errorf("%d series after 200 requests with made-up methods, %d before", after, before)
		}
	})
}
