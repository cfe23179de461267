package main

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestMultiProcess runs the real binary as two servers on one PostgreSQL
// schema, queues 5,000 delegations through both, and works them with 16 SDK
// workers split across both servers, some attempts failing transiently.
// Every delegation must complete exactly once and the log must verify.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test: skipped in -short mode")
	}
	const (
		sessions = 5000
		workers  = 16
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	bin := filepath.Join(t.TempDir(), "taskpilots")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
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
	ctrlTok, _, err := s.CreateToken(ctx, "mp-controller", models.RoleController)
	if err != nil {
		t.Fatal(err)
	}
	workTok, _, err := s.CreateToken(ctx, "mp-worker", models.RoleWorker)
	if err != nil {
		t.Fatal(err)
	}

	var urls []string
	for i := range 2 {
		urls = append(urls, startServer(t, ctx, bin, dbURL, i))
	}
	controllers := []*client.Client{client.New(urls[0], ctrlTok), client.New(urls[1], ctrlTok)}

	// Workers first: their long polls must wake for work queued through
	// either server (LISTEN/NOTIFY across processes).
	var (
		mu        sync.Mutex
		completed = map[string]int{} // delegation id → completed results applied
		failedRes atomic.Int64
		resultErr []error
	)
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var wg sync.WaitGroup
	for i := range workers {
		w := &client.Worker{
			Client: client.New(urls[i%2], workTok), Queue: "mp", Name: fmt.Sprintf("mp-w%d", i),
			Concurrency: 1, WaitSeconds: 2, GracePeriod: 10 * time.Second,
			Handler: func(ctx context.Context, l *client.Lease) (client.ResultInput, error) {
				// About 3% of first attempts fail transiently and are retried.
				h := fnv.New32a()
				h.Write([]byte(l.DelegationID))
				if l.Attempt == 1 && h.Sum32()%32 == 0 {
					return client.ResultInput{}, fmt.Errorf("simulated outage")
				}
				return client.ResultInput{
					ResultType: client.ResultCompleted, Output: map[string]any{"worker": i},
					Evidence: []client.Evidence{{Claim: "goal checked: " + l.Packet.Goal, Source: "packet"}},
				}, nil
			},
			OnResult: func(l *client.Lease, in client.ResultInput, out client.Outcome, err error) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					resultErr = append(resultErr, err)
				case in.ResultType == client.ResultCompleted:
					completed[l.DelegationID]++
				default:
					failedRes.Add(1)
				}
			},
		}
		wg.Go(func() {
			if err := w.Run(wctx); err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
		})
	}

	// 5,000 sessions and delegations through both servers.
	start := time.Now()
	delegations := make(map[string]string, sessions) // delegation → session
	var dmu sync.Mutex
	idx := make(chan int)
	var cg sync.WaitGroup
	for range 16 {
		cg.Go(func() {
			for i := range idx {
				c := controllers[i%2]
				sess, err := c.CreateSession(ctx, client.CreateSessionInput{
					Goal: fmt.Sprintf("Check order %d", i), TicketRef: fmt.Sprintf("T-%d", i),
					Facts: map[string]any{"order_total": fmt.Sprintf("%d EUR", i%300)},
				})
				if err != nil {
					t.Errorf("create %d: %v", i, err)
					continue
				}
				d, err := controllers[(i+1)%2].Delegate(ctx, sess.SessionID, client.DelegateInput{
					Queue: "mp", Step: "check", ExpectedVersion: sess.StateVersion, MaxAttempts: 5,
				})
				if err != nil {
					t.Errorf("delegate %d: %v", i, err)
					continue
				}
				dmu.Lock()
				delegations[d.DelegationID] = sess.SessionID
				dmu.Unlock()
			}
		})
	}
	for i := range sessions {
		select {
		case idx <- i:
		case <-ctx.Done():
		}
	}
	close(idx)
	cg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("queued %d delegations in %s", len(delegations), time.Since(start).Round(time.Millisecond))

	// Wait until every session completed (or the deadline).
	for {
		var n int64
		if err := s.DB.WithContext(ctx).Model(&models.Session{}).Where("status = ?", models.StatusCompleted).Count(&n).Error; err != nil {
			t.Fatalf("count completed: %v", err)
		}
		if n == sessions {
			break
		}
		select {
		case <-ctx.Done():
			counts, _ := s.CountByStatus(context.Background())
			t.Fatalf("only %d of %d sessions completed before the deadline; statuses %v", n, sessions, counts)
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Logf("all %d lifecycles done in %s", sessions, time.Since(start).Round(time.Millisecond))
	stopWorkers()
	wg.Wait()

	// Client side: each delegation's completed result was applied once.
	mu.Lock()
	if len(completed) != sessions {
		t.Errorf("completed results for %d delegations; want %d", len(completed), sessions)
	}
	for id, n := range completed {
		if n != 1 {
			t.Errorf("delegation %s: %d completed results applied; want 1", id, n)
		}
		if _, ok := delegations[id]; !ok {
			t.Errorf("completed a delegation %s nobody queued", id)
		}
	}
	if len(resultErr) > 0 {
		t.Logf("%d results refused (a lease lost to a retry is allowed; none expected): first %v", len(resultErr), resultErr[0])
	}
	t.Logf("transient failures reported: %d", failedRes.Load())
	mu.Unlock()

	// Database side.
	db := s.DB.WithContext(ctx)
	var bad []struct {
		SessionID string
		N         int
	}
	if err := db.Raw(`SELECT s.id AS session_id, count(e.id) AS n FROM sessions s
		LEFT JOIN events e ON e.session_id = s.id AND e.type = 'result.completed'
		GROUP BY s.id HAVING count(e.id) <> 1`).Scan(&bad).Error; err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("%d sessions without exactly one result.completed event, e.g. %+v", len(bad), bad[0])
	}
	var dup int64
	if err := db.Raw(`SELECT count(*) FROM (SELECT payload::jsonb->>'delegation_id' AS d FROM events
		WHERE type = 'result.completed' GROUP BY 1 HAVING count(*) > 1) x`).Scan(&dup).Error; err != nil {
		t.Fatal(err)
	}
	if dup != 0 {
		t.Errorf("%d delegations with more than one result.completed event", dup)
	}
	var notDone int64
	if err := db.Model(&models.Delegation{}).Where("status <> ?", models.DelegationDone).Count(&notDone).Error; err != nil {
		t.Fatal(err)
	}
	if notDone != 0 {
		t.Errorf("%d delegations not done", notDone)
	}
	var retried int64
	if err := db.Model(&models.Event{}).Where("type = ?", models.EventResultFailed).Count(&retried).Error; err != nil {
		t.Fatal(err)
	}
	if retried == 0 {
		t.Errorf("no transient failure was recorded; the retry path was not exercised")
	}
	rep, err := s.Verify(ctx, models.VerifyOpts{})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !rep.OK() || rep.Sessions != sessions {
		t.Fatalf("verify: %d sessions, %d events, problems %v", rep.Sessions, rep.Events, rep.Problems[:min(len(rep.Problems), 5)])
	}
	t.Logf("verified %d sessions, %d events", rep.Sessions, rep.Events)
}

// startServer runs `taskpilots serve` on a free loopback port and waits
// until it is ready; it is stopped with SIGTERM when the test ends.
func startServer(t *testing.T, ctx context.Context, bin, dbURL string, n int) string {
	t.Helper()
	url, _ := startServerWith(t, ctx, bin, dbURL, n, "warn")
	return url
}

// startServerWith is startServer at a log level and with extra serve flags;
// it returns the server's URL and the file its log goes to.
func startServerWith(t *testing.T, ctx context.Context, bin, dbURL string, n int, logLevel string, flags ...string) (url, logPath string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logf, err := os.Create(filepath.Join(t.TempDir(), fmt.Sprintf("serve-%d.log", n)))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--addr", addr, "--demo=false", "--database-url", dbURL}, flags...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "TASKPILOTS_LOG_LEVEL="+logLevel)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("server %d log (last 4 KiB):\n%s", n, tail(b, 4096))
		}
	})
	url = "http://" + addr
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, logf.Name()
			}
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("server %d exited before it was ready: %v\n%s", n, waitErr, tail(b, 4096))
		case <-ctx.Done():
			t.Fatalf("server %d not ready: %v", n, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}
