package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestSDKs runs the Python (client/python: sync and async, in the venv that
// `make py-deps` makes) and TypeScript (client/typescript) client suites
// against the real binary serving a fresh PostgreSQL schema, with an admin, a
// controller and a worker token made by `taskpilots token create`. The suites
// cover a full lifecycle, typed 409/422 errors, fencing, heartbeats, keyed
// retries, paging, the feed, SIGTERM during a handler and a real webhook
// delivery; this test fails when either fails. It lives in cmd/ so that it
// runs once per CI run, not again in the -race run.
func TestSDKs(t *testing.T) {
	if testing.Short() {
		t.Skip("SDK suites: skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute) // a bound for a stuck child, not a speed check
	defer cancel()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is required for the SDK tests: %v", err)
	}
	tsDir, err := filepath.Abs(filepath.Join("..", "..", "client", "typescript"))
	if err != nil {
		t.Fatal(err)
	}
	pyDir := filepath.Join(filepath.Dir(tsDir), "python")
	// The venv that scripts/python-venv.sh makes: Debian's httpx and the
	// package installed from client/python/pyproject.toml.
	python := filepath.Join(pyDir, ".venv", "bin", "python")
	if _, err := os.Stat(filepath.Join(pyDir, ".venv", ".installed")); err != nil {
		t.Fatalf("client/python/.venv is missing: run `make py-deps` (scripts/python-venv.sh): %v", err)
	}
	if _, err := os.Stat(filepath.Join(tsDir, "node_modules", ".bin", "tsc")); err != nil {
		t.Fatalf("client/typescript/node_modules is missing: run `make npm-deps` (npm ci from the lock file): %v", err)
	}

	start := time.Now()
	bin := filepath.Join(t.TempDir(), "taskpilots")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dbURL := storetest.NewURL(t, models.Postgres)
	if out, err := exec.CommandContext(ctx, bin, "migrate", "up", "--database-url", dbURL).CombinedOutput(); err != nil {
		t.Fatalf("migrate up: %v\n%s", err, out)
	}
	env := append(os.Environ(), "TASKPILOTS_SDK_REQUIRE_SERVER=1")
	for _, role := range []string{"admin", "controller", "worker"} {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, "token", "create", "--name", "sdk-"+role, "--role", role, "--database-url", dbURL)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("token create %s: %v\n%s", role, err, stderr.String())
		}
		env = append(env, "TASKPILOTS_"+strings.ToUpper(role)+"_TOKEN="+strings.TrimSpace(stdout.String()))
	}
	env = append(env, "TASKPILOTS_URL="+startServer(t, ctx, bin, dbURL, 0))
	t.Logf("server built and started in %v", time.Since(start).Round(10*time.Millisecond))

	run := func(name, dir string, args ...string) {
		t.Helper()
		start := time.Now()
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s (%s): %v\n%s", name, strings.Join(args, " "), err, tail(out, 16<<10))
			return
		}
		t.Logf("%s: ok in %v", name, time.Since(start).Round(10*time.Millisecond))
	}
	// Both suites use their own queues and ticket references, so they may
	// share one server; they run one after the other to spare the CPUs.
	run("python", pyDir, python, "-m", "unittest", "-v")
	run("typescript build", tsDir, "node", filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json")
	run("typescript", tsDir, "node", "--test", filepath.Join("dist", "test", "offline.test.js"), filepath.Join("dist", "test", "live.test.js"))

	// The README's examples stay runnable: a worker (one lease) and a
	// controller that follows the feed until the step is completed.
	example := func(name, dir string, worker, controller []string) {
		t.Helper()
		start := time.Now()
		var wout bytes.Buffer
		w := exec.CommandContext(ctx, worker[0], worker[1:]...)
		w.Dir, w.Env, w.Stdout, w.Stderr = dir, env, &wout, &wout
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		c := exec.CommandContext(ctx, controller[0], controller[1:]...)
		c.Dir, c.Env = dir, env
		cout, cerr := c.CombinedOutput()
		werr := w.Wait()
		if cerr != nil || werr != nil || !bytes.Contains(cout, []byte("final status: completed")) {
			t.Errorf("%s examples: controller %v, worker %v\ncontroller:\n%s\nworker:\n%s", name, cerr, werr, tail(cout, 4096), tail(wout.Bytes(), 4096))
			return
		}
		t.Logf("%s examples: ok in %v", name, time.Since(start).Round(10*time.Millisecond))
	}
	example("python", pyDir, []string{python, "examples/worker.py", "--queue", "ex-py", "--max-leases", "1"},
		[]string{python, "examples/controller.py", "--queue", "ex-py"})
	example("typescript", tsDir, []string{"node", "dist/examples/worker.js", "ex-ts", "1"},
		[]string{"node", "dist/examples/controller.js", "ex-ts"})
}
