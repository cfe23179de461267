package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestLeaseWakeMultiProcess runs the real binary as two servers on one
// PostgreSQL schema. A worker's lease long poll on server A must be woken by
// a delegation created through server B: B's announcer sends a NOTIFY, A's
// LISTEN loop wakes A's poll. Nothing else can hand the work over in time:
// A re-checks its queues only every hour (--lease-recheck=1h), the poll
// waits 30 s, and the work is queued only after A logged that the poll
// looked, found nothing and waits. A poll that was not woken sleeps to its
// deadline and leases the work in its last look, without the "lease poll
// woken" line this test requires.
//
// To see it fail, switch cross-process wake-ups off: in listenOnce
// (models/listen.go) skip s.Wake.Notify(n.Payload), or in sendNotices
// (models/notify.go) skip the pg_notify. Each round then fails after the
// poll's 30 s wait. (The feed's long poll across processes is
// TestFeedMultiProcess; skipping s.wakeFeed() for FeedChannel fails it.)
func TestLeaseWakeMultiProcess(t *testing.T) {
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
	s, err := models.Open(ctx, dbURL, models.OpenOpts{Logger: slog.New(slog.DiscardHandler), MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctrlTok, _, err := s.CreateToken(ctx, "wake-controller", models.RoleController)
	if err != nil {
		t.Fatal(err)
	}
	workTok, _, err := s.CreateToken(ctx, "wake-worker", models.RoleWorker)
	if err != nil {
		t.Fatal(err)
	}
	urlA, logA := startServerWith(t, ctx, bin, dbURL, 0, "debug", "--lease-recheck=1h")
	urlB, _ := startServerWith(t, ctx, bin, dbURL, 1, "warn")
	worker := client.New(urlA, workTok)
	controller := client.New(urlB, ctrlTok)

	const queue = "wake-mp"
	for round := range 2 {
		name := fmt.Sprintf("wake-%d", round)
		sess, err := controller.CreateSession(ctx, client.CreateSessionInput{Goal: "wake A from B"})
		if err != nil {
			t.Fatal(err)
		}
		type answer struct {
			l   *client.Lease
			err error
		}
		done := make(chan answer, 1)
		go func() {
			l, err := worker.Lease(ctx, queue, client.LeaseInput{Worker: name, WaitSeconds: 30})
			done <- answer{l, err}
		}()
		waitLogLine(t, ctx, logA, `msg="lease poll waiting"`, "worker="+name)
		d, err := controller.Delegate(ctx, sess.SessionID, client.DelegateInput{
			Queue: queue, Step: "check", ExpectedVersion: sess.StateVersion})
		if err != nil {
			t.Fatal(err)
		}
		a := <-done
		if a.err != nil || a.l == nil || a.l.DelegationID != d.DelegationID {
			t.Fatalf("round %d: lease on A = %+v, %v; want delegation %s queued through B", round, a.l, a.err, d.DelegationID)
		}
		if !logHas(t, logA, `msg="lease poll woken"`, "worker="+name) {
			t.Fatalf("round %d: A's poll leased the work without being woken: it found it in its last look at the deadline, so no NOTIFY from B reached it", round)
		}
		if _, err := worker.Result(ctx, a.l.DelegationID, client.ResultInput{
			LeaseToken: a.l.LeaseToken, SessionID: sess.SessionID, Step: "check", ResultType: client.ResultCompleted, Output: map[string]any{"round": round},
			Evidence: []client.Evidence{{Claim: "woken across processes", Source: "test"}},
		}); err != nil {
			t.Fatalf("round %d: result: %v", round, err)
		}
	}
}

// waitLogLine waits until the log at path has a line holding every part.
func waitLogLine(t *testing.T, ctx context.Context, path string, parts ...string) {
	t.Helper()
	for !logHas(t, path, parts...) {
		select {
		case <-ctx.Done():
			t.Fatalf("no line with %q in %s: %v", parts, path, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// logHas reports whether the log at path has a line holding every part.
func logHas(t *testing.T, path string, parts ...string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
lines:
	for line := range strings.Lines(string(b)) {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue lines
			}
		}
		return true
	}
	return false
}
