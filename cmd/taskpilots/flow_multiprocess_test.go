package main

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestFlowMultiProcess runs the real binary as two servers on one
// PostgreSQL schema and 16 workers, half on each, leasing over HTTP:
//
//   - from a queue with max_in_flight 3 (set through the API by an admin
//     token): the workers' own count of the leases they hold, and a sampler
//     reading the database, never see more than 3;
//   - from a queue with max_leases_per_second 10 (burst 10): the leases
//     granted in the run are at most burst + rate × its length.
//
// To see it fail, drop the queue_flow row update (CTE fu) from the claim
// statements in models/queue.go: the in-flight peak then exceeds 3.
func TestFlowMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test: skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "taskpilots")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dbURL := storetest.NewURL(t, models.Postgres)
	if out, err := exec.CommandContext(ctx, bin, "migrate", "up", "--database-url", dbURL).CombinedOutput(); err != nil {
		t.Fatalf("migrate up: %v\n%s", err, out)
	}
	s, err := models.Open(ctx, dbURL, models.OpenOpts{Logger: slog.New(slog.DiscardHandler), MaxOpenConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	token := func(name string, role models.Role) string {
		tok, _, err := s.CreateToken(ctx, name, role)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	adminTok, ctrlTok, workTok := token("flow-admin", models.RoleAdmin), token("flow-ctl", models.RoleController), token("flow-worker", models.RoleWorker)
	urls := []string{startServer(t, ctx, bin, dbURL, 0), startServer(t, ctx, bin, dbURL, 1)}
	admin, controller := client.New(urls[0], adminTok), client.New(urls[1], ctrlTok)

	queueWork := func(queue string, n int) {
		for range n {
			sess, err := controller.CreateSession(ctx, client.CreateSessionInput{Goal: "flow " + queue})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := controller.Delegate(ctx, sess.SessionID, client.DelegateInput{Queue: queue, Step: "work", ExpectedVersion: sess.StateVersion}); err != nil {
				t.Fatal(err)
			}
		}
	}
	result := func(w *client.Client, l *client.Lease) error {
		_, err := w.Result(ctx, l.DelegationID, client.ResultInput{LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step,
			ResultType: client.ResultCompleted, Output: map[string]any{}, Evidence: []client.Evidence{{Claim: "done", Source: "test"}}})
		return err
	}
	const workers = 16

	t.Run("max_in_flight", func(t *testing.T) {
		const queue, n, limit = "mp-bounded", 64, 3
		queueWork(queue, n)
		max := limit
		if _, err := admin.PutQueue(ctx, queue, client.QueueFlowInput{MaxInFlight: &max}); err != nil {
			t.Fatal(err)
		}
		var held, peak, dbPeak, done atomic.Int64
		raise := func(p *atomic.Int64, v int64) {
			for {
				if o := p.Load(); v <= o || p.CompareAndSwap(o, v) {
					return
				}
			}
		}
		stop := make(chan struct{})
		var sampled sync.WaitGroup
		sampled.Add(1)
		go func() {
			defer sampled.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
				if f, err := s.GetQueueFlow(ctx, queue); err == nil {
					raise(&dbPeak, f.InFlight)
				}
			}
		}()
		var wg sync.WaitGroup
		for i := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := client.New(urls[i%2], workTok)
				for done.Load() < n && ctx.Err() == nil {
					l, err := w.Lease(ctx, queue, client.LeaseInput{Worker: fmt.Sprintf("w-%d", i)})
					if err != nil {
						t.Error(err)
						return
					}
					if l == nil {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					raise(&peak, held.Add(1))
					time.Sleep(10 * time.Millisecond)
					held.Add(-1) // before the result commits: never above the database's count
					if err := result(w, l); err != nil {
						t.Error(err)
						return
					}
					done.Add(1)
				}
			}()
		}
		wg.Wait()
		close(stop)
		sampled.Wait()
		t.Logf("%d delegations by %d workers on 2 servers: peak held %d, peak in the database %d, limit %d", done.Load(), workers, peak.Load(), dbPeak.Load(), limit)
		if done.Load() != n || peak.Load() > limit || dbPeak.Load() > limit {
			t.Fatalf("done %d of %d, peak held %d, peak in database %d; limit %d", done.Load(), n, peak.Load(), dbPeak.Load(), limit)
		}
	})

	t.Run("max_leases_per_second", func(t *testing.T) {
		const queue, n = "mp-rated", 80
		rate, burst := 10.0, 10.0
		queueWork(queue, n)
		if _, err := admin.PutQueue(ctx, queue, client.QueueFlowInput{MaxLeasesPerSecond: &rate}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var mu sync.Mutex
		var grants []time.Time
		var wg sync.WaitGroup
		for i := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := client.New(urls[i%2], workTok)
				for time.Since(start) < 2*time.Second {
					l, err := w.Lease(ctx, queue, client.LeaseInput{Worker: fmt.Sprintf("w-%d", i)})
					if err != nil {
						t.Error(err)
						return
					}
					if l == nil {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					mu.Lock()
					grants = append(grants, l.LeaseExpiresAt.Add(-time.Duration(models.DefaultLeaseSeconds)*time.Second))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start).Seconds()
		sort.Slice(grants, func(i, j int) bool { return grants[i].Before(grants[j]) })
		t.Logf("%d leases in %.2fs by %d workers on 2 servers at %g/s, burst %g: bound %.1f", len(grants), elapsed, workers, rate, burst, burst+rate*elapsed)
		if float64(len(grants)) > burst+rate*elapsed+1 || len(grants) < int(burst) {
			t.Fatalf("%d leases in %.2fs; want between %g and %.1f", len(grants), elapsed, burst, burst+rate*elapsed)
		}
	})
}
