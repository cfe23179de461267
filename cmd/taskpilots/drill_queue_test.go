package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/cmd/taskpilots/drill"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestDrillQueueFault: `drill --against URL --queue refunds --expire-share
// 0.5` against a server whose worker holds four long leases on the queue
// expires two of them through the admin API, sees the rescuer queue both
// again and the worker lease them as attempt 2, and reports the recovery
// with the queue's metrics; bad flags are usage errors, a worker token may
// not expire leases.
func TestDrillQueueFault(t *testing.T) {
	dbURL := storetest.NewURL(t, models.Postgres)
	bin := buildBinary(t)
	env := cleanEnv()
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--database-url", dbURL)...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("taskpilots %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(stdout.String())
	}
	cli("migrate", "up")
	admin := cli("token", "create", "--name", "drill-admin", "--role", "admin")
	ctrl := cli("token", "create", "--name", "ctrl", "--role", "controller")
	work := cli("token", "create", "--name", "refund-worker", "--role", "worker")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := startServer(t, ctx, bin, dbURL, 0)

	c := client.New(url, ctrl)
	for range 4 {
		out, err := c.CreateSession(ctx, client.CreateSessionInput{Goal: "refund"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Delegate(ctx, out.SessionID, client.DelegateInput{Queue: "refunds", Step: "check", ExpectedVersion: 1, LeaseSeconds: 120}); err != nil {
			t.Fatal(err)
		}
	}
	// The queue's worker: leases whatever is queued and holds it.
	w := client.New(url, work)
	var mu sync.Mutex
	leased := 0
	go func() {
		for ctx.Err() == nil {
			l, err := w.Lease(ctx, "refunds", client.LeaseInput{Worker: "refund-worker-1", WaitSeconds: 1})
			if err == nil && l != nil {
				mu.Lock()
				leased++
				mu.Unlock()
			}
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); ; {
		mu.Lock()
		n := leased
		mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker leased %d of 4", n)
		}
		time.Sleep(50 * time.Millisecond)
	}

	run := func(extraEnv []string, args ...string) (int, string, string) {
		cmd := exec.Command(bin, append([]string{"drill"}, args...)...)
		cmd.Env = append(cleanEnv(), extraEnv...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String()
	}
	if code, _, stderr := run(nil, "--against", url, "--queue", "refunds", "--expire-share", "1.5"); code != 2 ||
		!strings.Contains(stderr, "expire-share:") || !strings.Contains(stderr, "admin-token:") {
		t.Fatalf("bad flags: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := run(nil, "--against", url, "--queue", "refunds", "--expire-share", "0.5", "--admin-token", work); code != 1 || !strings.Contains(stderr, "403") {
		t.Fatalf("a worker token: exit %d\n%s", code, stderr)
	}
	code, stdout, stderr := run([]string{"TASKPILOTS_ADMIN_TOKEN=" + admin}, "--against", url, "--queue", "refunds", "--expire-share", "0.5", "--duration", "60s", "--json")
	out := strings.TrimRight(stdout, "\n")
	var rep drill.QueueFaultReport
	if err := json.Unmarshal([]byte(out[strings.LastIndexByte(out, '\n')+1:]), &rep); err != nil {
		t.Fatalf("report: %v\n%s\n%s", err, stdout, stderr)
	}
	t.Logf("queue fault: %s", out)
	if code != 0 || !rep.OK || rep.Leased != 4 || rep.Expired != 2 || rep.Rescued != 2 || rep.Released != 2 ||
		rep.TimeToRelease.Count != 2 || rep.TimeToRelease.Max <= 0 {
		t.Fatalf("exit %d, report %+v\n%s", code, rep, stderr)
	}
	if rep.After == nil || rep.After.InfraRetries.LeaseExpiries < 2 || !strings.Contains(out, "time to re-lease") {
		t.Fatalf("queue metrics after: %+v (%s)\n%s", rep.After, rep.MetricsError, out)
	}
}
