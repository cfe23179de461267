package models_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func flowResult(l *models.Lease) models.ResultInput {
	return models.ResultInput{ResultType: models.ResultCompleted, Output: json.RawMessage(`{}`),
		Evidence: []models.Evidence{{Claim: "done"}}, LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step}
}

// TestFlowMaxInFlight: with max_in_flight 2 a third lease is refused (single
// and batch) until a lease ends by a result or by expiring; a queue without
// limits and the other queues are not affected.
func TestFlowMaxInFlight(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clock := setFanClock(s)
		for range 7 {
			storetest.Delegated(ctx, t, s, "flow")
		}
		storetest.Delegated(ctx, t, s, "other")
		two := 2
		f, err := s.PutQueueFlow(ctx, "test:admin", "", "flow", models.QueueFlowInput{MaxInFlight: &two})
		if err != nil || f.MaxInFlight == nil || *f.MaxInFlight != 2 || f.MaxLeasesPerSecond != nil || f.InFlight != 0 {
			t.Fatalf("put flow = %+v, %v", f, err)
		}
		var leases []*models.Lease
		for i := range 3 {
			l, err := s.Claim(ctx, "flow", "w-1", "test:worker", "")
			if err != nil {
				t.Fatal(err)
			}
			if (l != nil) != (i < 2) {
				t.Fatalf("claim %d = %+v; want a lease for the first two only", i, l)
			}
			if l != nil {
				leases = append(leases, l)
			}
		}
		if ls, err := s.ClaimBatch(ctx, "flow", "w-2", "test:worker", "", 5); err != nil || len(ls) != 0 {
			t.Fatalf("batch at the limit = %d leases, %v", len(ls), err)
		}
		if l, err := s.Claim(ctx, "other", "w-1", "test:worker", ""); err != nil || l == nil {
			t.Fatalf("other queue = %+v, %v", l, err)
		}
		if g, err := s.GetQueueFlow(ctx, "flow"); err != nil || g.InFlight != 2 {
			t.Fatalf("get flow = %+v, %v", g, err)
		}
		// A result frees a slot: a batch of 5 gets exactly one.
		if _, err := s.SubmitResult(ctx, leases[0].DelegationID, "test:worker", "", flowResult(leases[0])); err != nil {
			t.Fatal(err)
		}
		ls, err := s.ClaimBatch(ctx, "flow", "w-2", "test:worker", "", 5)
		if err != nil || len(ls) != 1 {
			t.Fatalf("batch after a result = %d leases, %v; want 1", len(ls), err)
		}
		// Leases that ran out no longer count (leased and unexpired).
		clock.Add(time.Duration(models.DefaultLeaseSeconds+1) * time.Second)
		ls, err = s.ClaimBatch(ctx, "flow", "w-3", "test:worker", "", 5)
		if err != nil || len(ls) != 2 {
			t.Fatalf("batch after expiry = %d leases, %v; want 2", len(ls), err)
		}
		// Clearing the limit: the rest at once.
		if _, err := s.PutQueueFlow(ctx, "test:admin", "", "flow", models.QueueFlowInput{}); err != nil {
			t.Fatal(err)
		}
		ls, err = s.ClaimBatch(ctx, "flow", "w-3", "test:worker", "", 5)
		if err != nil || len(ls) != 2 {
			t.Fatalf("batch without limits = %d leases, %v; want the remaining 2", len(ls), err)
		}
		if rep, err := s.Verify(ctx, models.VerifyOpts{}); err != nil || !rep.OK() {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}

// TestFlowRate: max_leases_per_second 2 is a bucket of 2 tokens refilled at
// 2 per second (on the store's clock), taken by single and batch claims.
func TestFlowRate(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clock := setFanClock(s)
		for range 12 {
			storetest.Delegated(ctx, t, s, "rated")
		}
		rate := 2.0
		f, err := s.PutQueueFlow(ctx, "test:admin", "", "rated", models.QueueFlowInput{MaxLeasesPerSecond: &rate})
		if err != nil || f.Burst == nil || *f.Burst != 2 {
			t.Fatalf("put flow = %+v, %v", f, err)
		}
		claims := func(n int) int {
			t.Helper()
			got := 0
			for range n {
				l, err := s.Claim(ctx, "rated", "w-1", "test:worker", "")
				if err != nil {
					t.Fatal(err)
				}
				if l != nil {
					got++
				}
			}
			return got
		}
		if got := claims(3); got != 2 {
			t.Fatalf("at t0: %d leases; want the burst, 2", got)
		}
		clock.Add(500 * time.Millisecond)
		if got := claims(3); got != 1 {
			t.Fatalf("after 0.5s: %d leases; want 1", got)
		}
		clock.Add(10 * time.Second) // the bucket holds at most its burst
		ls, err := s.ClaimBatch(ctx, "rated", "w-2", "test:worker", "", 5)
		if err != nil || len(ls) != 2 {
			t.Fatalf("batch after 10s = %d leases, %v; want 2", len(ls), err)
		}
		if got := claims(1); got != 0 {
			t.Fatalf("right after the batch: %d leases; want 0", got)
		}
	})
}

// TestFlowValidation: bad settings are refused naming the field, and
// nothing is written (no row, no admin log entry); a change is in the admin
// log with its before and after.
func TestFlowValidation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		neg, zero, huge := -1, 0, models.MaxFlowInFlight+1
		fneg, fzero, fhuge := -0.5, 0.0, models.MaxFlowLeasesPerSecond*2
		ftiny := models.MinFlowLeasesPerSecond / 2
		cases := []struct {
			queue string
			in    models.QueueFlowInput
			field string
		}{
			{"q", models.QueueFlowInput{MaxInFlight: &neg}, "max_in_flight"},
			{"q", models.QueueFlowInput{MaxInFlight: &zero}, "max_in_flight"},
			{"q", models.QueueFlowInput{MaxInFlight: &huge}, "max_in_flight"},
			{"q", models.QueueFlowInput{MaxLeasesPerSecond: &fneg}, "max_leases_per_second"},
			{"q", models.QueueFlowInput{MaxLeasesPerSecond: &fzero}, "max_leases_per_second"},
			{"q", models.QueueFlowInput{MaxLeasesPerSecond: &fhuge}, "max_leases_per_second"},
			{"q", models.QueueFlowInput{MaxLeasesPerSecond: &ftiny}, "max_leases_per_second"},
			{"bad queue!", models.QueueFlowInput{}, "queue"},
		}
		for _, c := range cases {
			_, err := s.PutQueueFlow(ctx, "test:admin", "", c.queue, c.in)
			var ve *models.ValidationError
			if !asValidation(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != c.field {
				t.Errorf("put %q %+v = %v; want a validation error on %s", c.queue, c.in, err, c.field)
			}
		}
		if fs, err := s.ListQueueFlows(ctx); err != nil || len(fs) != 0 {
			t.Fatalf("after refusals: %+v, %v", fs, err)
		}
		page, err := s.ListAdminAudit(ctx, models.AdminAuditOpts{})
		if err != nil || len(page.Rows) != 0 {
			t.Fatalf("admin log after refusals = %+v, %v", page.Rows, err)
		}
		three, rate := 3, 1.5
		if _, err := s.PutQueueFlow(ctx, "test:admin", "", "q", models.QueueFlowInput{MaxInFlight: &three}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutQueueFlow(ctx, "test:admin", "", "q", models.QueueFlowInput{MaxInFlight: &three, MaxLeasesPerSecond: &rate}); err != nil {
			t.Fatal(err)
		}
		page, err = s.ListAdminAudit(ctx, models.AdminAuditOpts{})
		if err != nil || len(page.Rows) != 2 {
			t.Fatalf("admin log = %+v, %v", page.Rows, err)
		}
		last := page.Rows[0]
		if last.Action != models.AdminQueueFlowPut || last.TargetKind != "queue" || last.TargetID != "q" || last.Before == nil || last.After == nil ||
			*last.Before != `{"max_in_flight":3,"max_leases_per_second":null,"queue":"q"}` ||
			*last.After != `{"max_in_flight":3,"max_leases_per_second":1.5,"queue":"q"}` {
			t.Fatalf("admin log row = %+v (%s → %s)", last, deref(last.Before), deref(last.After))
		}
		g, err := s.GetQueueFlow(ctx, "q")
		if err != nil || *g.MaxInFlight != 3 || *g.MaxLeasesPerSecond != 1.5 || *g.Burst != 2 || g.UpdatedBy != "test:admin" {
			t.Fatalf("get = %+v, %v", g, err)
		}
		if g, err := s.GetQueueFlow(ctx, "never-set"); err != nil || g.Limited() || g.Queue != "never-set" {
			t.Fatalf("get of a queue without settings = %+v, %v", g, err)
		}
	})
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func asValidation(err error, ve **models.ValidationError) bool {
	v, ok := err.(*models.ValidationError)
	*ve = v
	return ok
}

// TestFlowConcurrentMaxInFlight: 16 workers on two stores (two server
// processes' pools) lease from a queue with max_in_flight 3, single and
// batch claims mixed, hold each lease a moment and report it; the workers'
// own count of leases held and a sampler reading the database never see
// more than 3. On PostgreSQL this is the cross-replica case; on SQLite the
// two stores share the file.
func TestFlowConcurrentMaxInFlight(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		other, err := models.Open(ctx, s.URL(), models.OpenOpts{Logger: slog.New(slog.DiscardHandler), MaxOpenConns: 10})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		const n, limit, workers = 120, 3, 16
		for range n {
			storetest.Delegated(ctx, t, s, "hot")
		}
		maxIF := limit
		if _, err := s.PutQueueFlow(ctx, "test:admin", "", "hot", models.QueueFlowInput{MaxInFlight: &maxIF}); err != nil {
			t.Fatal(err)
		}
		var held, peak, done atomic.Int64
		var dbPeak atomic.Int64
		stop := make(chan struct{})
		var sampler sync.WaitGroup
		sampler.Add(1)
		go func() {
			defer sampler.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if f, err := other.GetQueueFlow(ctx, "hot"); err == nil {
					for {
						p := dbPeak.Load()
						if f.InFlight <= p || dbPeak.CompareAndSwap(p, f.InFlight) {
							break
						}
					}
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := s
				if w%2 == 1 {
					st = other
				}
				deadline := time.Now().Add(60 * time.Second)
				for done.Load() < n && time.Now().Before(deadline) {
					var got []models.Lease
					if w%4 < 2 {
						l, err := st.Claim(ctx, "hot", "w", "test:worker", "")
						if err != nil {
							errs <- err
							return
						}
						if l != nil {
							got = append(got, *l)
						}
					} else {
						ls, err := st.ClaimBatch(ctx, "hot", "w", "test:worker", "", 2)
						if err != nil {
							errs <- err
							return
						}
						got = ls
					}
					if len(got) == 0 {
						time.Sleep(time.Millisecond)
						continue
					}
					h := held.Add(int64(len(got)))
					for {
						p := peak.Load()
						if h <= p || peak.CompareAndSwap(p, h) {
							break
						}
					}
					// Held long enough that other workers' claims (slow
					// under -race on SQLite's single connection) overlap it.
					time.Sleep(15 * time.Millisecond)
					for i := range got {
						// Released before the result commits: a worker's count
						// may only be lower than the database's, never higher.
						held.Add(-1)
						if _, err := st.SubmitResult(ctx, got[i].DelegationID, "test:worker", "", flowResult(&got[i])); err != nil {
							errs <- err
							return
						}
						done.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		sampler.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if done.Load() != n {
			t.Fatalf("%d of %d delegations done", done.Load(), n)
		}
		t.Logf("%s: peak held by workers %d, peak in flight in the database %d (limit %d)", s.Dialect, peak.Load(), dbPeak.Load(), limit)
		if peak.Load() > limit || dbPeak.Load() > limit {
			t.Fatalf("peak held %d, peak in database %d; limit %d", peak.Load(), dbPeak.Load(), limit)
		}
		if peak.Load() < 2 {
			t.Errorf("peak held %d: the workers never overlapped, the test proves little", peak.Load())
		}
	})
}

// TestFlowConcurrentRate: 16 workers on two stores claim from a queue with
// max_leases_per_second 20 (burst 20) for about 1.5 s of real time; in
// every window of the run, the leases granted are at most burst + rate ×
// window. A claim reads the clock before it queues for the bucket's row
// lock, and the bucket's clock is the latest reading of the claims granted
// so far (tokens_at never goes back), so a grant's place on the bucket's
// clock is at or after its own reading and before its call returned: a
// window runs from the first grant's reading to the latest return of the
// grants in it. (A fixed slack of two leases for the reordering failed
// under -race, where claims wait for the lock for 100 ms and more.)
func TestFlowConcurrentRate(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		other, err := models.Open(ctx, s.URL(), models.OpenOpts{Logger: slog.New(slog.DiscardHandler), MaxOpenConns: 10})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		const n, workers = 150, 16
		rate, burst := 20.0, 20.0
		for range n {
			storetest.Delegated(ctx, t, s, "rated")
		}
		if _, err := s.PutQueueFlow(ctx, "test:admin", "", "rated", models.QueueFlowInput{MaxLeasesPerSecond: &rate}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var mu sync.Mutex
		type grant struct{ read, returned time.Time } // the claim's clock reading, and when its call returned
		var grants []grant
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := s
				if w%2 == 1 {
					st = other
				}
				for time.Since(start) < 1500*time.Millisecond {
					var ls []models.Lease
					if w%4 < 2 {
						l, err := st.Claim(ctx, "rated", "w", "test:worker", "")
						if err != nil {
							t.Error(err)
							return
						}
						if l != nil {
							ls = append(ls, *l)
						}
					} else {
						var err error
						if ls, err = st.ClaimBatch(ctx, "rated", "w", "test:worker", "", 3); err != nil {
							t.Error(err)
							return
						}
					}
					returned := time.Now()
					mu.Lock()
					for _, l := range ls {
						grants = append(grants, grant{l.LeaseExpiresAt.Add(-time.Duration(models.DefaultLeaseSeconds) * time.Second), returned})
					}
					mu.Unlock()
					if len(ls) == 0 {
						time.Sleep(2 * time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
		sort.Slice(grants, func(i, j int) bool { return grants[i].read.Before(grants[j].read) })
		elapsed := time.Since(start).Seconds()
		t.Logf("%s: %d leases in %.2fs at max_leases_per_second %g, burst %g (bound %g)", s.Dialect, len(grants), elapsed, rate, burst, burst+rate*elapsed)
		if float64(len(grants)) > burst+rate*elapsed+1 {
			t.Fatalf("%d leases in %.2fs; the bucket allows at most %g", len(grants), elapsed, burst+rate*elapsed)
		}
		for i := range grants {
			last := grants[i].returned
			for j := i; j < len(grants); j++ {
				if grants[j].returned.After(last) {
					last = grants[j].returned
				}
				w := last.Sub(grants[i].read).Seconds()
				if float64(j-i+1) > burst+rate*w+1 { // 1: a token's fraction
					t.Fatalf("%d leases read the clock within %.3fs and returned within %.3fs of the first (lease %d); at most %g allowed",
						j-i+1, grants[j].read.Sub(grants[i].read).Seconds(), w, i, burst+rate*w)
				}
			}
		}
		if len(grants) < int(burst) {
			t.Fatalf("only %d leases: not even the burst", len(grants))
		}
	})
}

// TestFlowRoundTrips: a lease from a limited queue costs what a lease from
// a queue without limits costs (TestLifecycleRoundTrips: 2 round trips, 5
// statements; a batch of n, 4+n): the limits are checked and the bucket
// written inside the one claim statement.
func TestFlowRoundTrips(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	for range 4 {
		storetest.Delegated(ctx, t, s, "rt-flow")
	}
	n, rate := 10, 100.0
	if _, err := s.PutQueueFlow(ctx, "test:admin", "", "rt-flow", models.QueueFlowInput{MaxInFlight: &n, MaxLeasesPerSecond: &rate}); err != nil {
		t.Fatal(err)
	}
	st0, rt0 := s.WireStats()
	if l, err := s.Claim(ctx, "rt-flow", "w-1", "test:worker", "rt-flow-1"); err != nil || l == nil {
		t.Fatalf("claim = %v, %v", l, err)
	}
	st1, rt1 := s.WireStats()
	if rt1-rt0 != 2 || st1-st0 != 5 {
		t.Errorf("limited lease: %d round trips, %d statements; want 2 and 5", rt1-rt0, st1-st0)
	}
	ls, err := s.ClaimBatch(ctx, "rt-flow", "w-1", "test:worker", "rt-flow-2", 3)
	st2, rt2 := s.WireStats()
	if err != nil || len(ls) != 3 {
		t.Fatalf("batch = %d, %v", len(ls), err)
	}
	if rt2-rt1 != 2 || st2-st1 != 4+3 {
		t.Errorf("limited batch of 3: %d round trips, %d statements; want 2 and 7", rt2-rt1, st2-st1)
	}
}

// TestFlowThrottledPollRechecks: a lease long poll throttled by the rate
// limit keeps waiting and gets the next token when it is due (4/s: within
// about 250 ms), not only at the poll's usual one-second recheck; with no
// work at all it still waits to its end and gets nothing.
func TestFlowThrottledPollRechecks(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		for range 6 {
			storetest.Delegated(ctx, t, s, "paced")
		}
		rate := 4.0
		if _, err := s.PutQueueFlow(ctx, "test:admin", "", "paced", models.QueueFlowInput{MaxLeasesPerSecond: &rate}); err != nil {
			t.Fatal(err)
		}
		if ls, err := s.ClaimBatch(ctx, "paced", "w-1", "test:worker", "", 10); err != nil || len(ls) != 4 {
			t.Fatalf("burst = %d, %v", len(ls), err)
		}
		start := time.Now()
		l, err := s.ClaimWait(ctx, "paced", "w-1", "test:worker", "", 3*time.Second)
		if took := time.Since(start); err != nil || l == nil || took > 700*time.Millisecond {
			t.Fatalf("throttled poll = %v, %v after %v; want a lease within about 250ms", l, err, took)
		}
	})
}
