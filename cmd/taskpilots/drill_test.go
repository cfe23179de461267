package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/cmd/taskpilots/drill"
	"github.com/taskpilots/handoff/models/storetest"
)

// The drill tests run the real binary against a private, throwaway
// PostgreSQL cluster made with initdb in the test's temporary directory, so
// that restarting the database in the middle of a drill disturbs no other
// test. They need PostgreSQL's server binaries (Debian's postgresql package,
// which scripts/test-postgres.sh installs); they never skip.

// pgCluster is a throwaway PostgreSQL cluster owned by the test.
type pgCluster struct {
	url  string
	data string
}

// startCluster makes and starts a cluster on a free port. As root it runs
// PostgreSQL as the postgres user, which must be able to reach the
// directory.
func startCluster(t *testing.T) *pgCluster {
	t.Helper()
	bin := storetest.PGBinDir(t)
	dir := t.TempDir()
	data, sock, logPath := filepath.Join(dir, "data"), filepath.Join(dir, "sock"), filepath.Join(dir, "postgres.log")
	asPG := func(name string, args ...string) *exec.Cmd {
		if os.Getuid() == 0 {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
		}
		return exec.Command(name, args...)
	}
	for _, d := range []string{data, sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, PostgreSQL needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		// t.TempDir's directories are private to root; postgres must
		// traverse them.
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []string{data, sock, logPath} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	if out, err := asPG(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=100 "+
		"-c fsync=off -c synchronous_commit=off -c full_page_writes=off", port, sock)
	if out, err := asPG(filepath.Join(bin, "pg_ctl"), "-D", data, "-l", logPath, "-w", "-t", "60", "-o", opts, "start").CombinedOutput(); err != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("start PostgreSQL: %v\n%s\n%s", err, out, b)
	}
	t.Cleanup(func() {
		if out, err := asPG(filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
			t.Logf("stop PostgreSQL: %v\n%s", err, out)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("PostgreSQL log (last 3 KiB):\n%s", tail(b, 3000))
		}
	})
	return &pgCluster{url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), data: data}
}

// buildBinary builds this command into the test's temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "taskpilots")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// cleanEnv is the test process's environment without TASKPILOTS_*
// variables, so that nothing configures the binary behind the test's back.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TASKPILOTS_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// runDrillBinary runs `taskpilots drill ARGS --json` and returns its exit
// status and report (the last line of standard output).
func runDrillBinary(t *testing.T, bin string, env []string, args ...string) (int, drill.Report, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append([]string{"drill", "--json"}, args...)...)
	cmd.Stdout, cmd.Stderr, cmd.Env = &stdout, &stderr, env
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run drill: %v\n%s", err, stderr.String())
	}
	out := strings.TrimRight(stdout.String(), "\n")
	var rep drill.Report
	last := out[strings.LastIndexByte(out, '\n')+1:]
	if err := json.Unmarshal([]byte(last), &rep); err != nil {
		t.Fatalf("the last line of the drill's output is not its JSON report (%v); exit %d\nstdout:\n%s\nstderr:\n%s", err, code, out, stderr.String())
	}
	if code != 0 || !rep.OK {
		t.Errorf("drill exited %d, ok=%t\nstdout:\n%s\nstderr:\n%s", code, rep.OK, out, lastBytes(stderr.Bytes(), 8000))
	}
	return code, rep, out
}

// logFigures logs one line a person can compare between runs.
func logFigures(t *testing.T, rep drill.Report) {
	t.Helper()
	m := rep.Metrics
	f := func(p *float64) string {
		if p == nil {
			return "n/a"
		}
		return strconv.FormatFloat(*p, 'f', 3, 64)
	}
	line := fmt.Sprintf("DRILL seed=%d ok=%t scenario=%.1fs total=%.1fs sessions=%d/%d events=%d faults=%v expectations=%d mismatches=%d retries=%v",
		rep.Seed, rep.OK, rep.ScenarioSeconds, rep.ElapsedSeconds, rep.Sessions.Settled, rep.Sessions.Planned, rep.Checks.Events,
		rep.Faults, rep.Expectations.Checked, rep.Expectations.Mismatches, rep.Retries)
	if m != nil {
		line += fmt.Sprintf(" handoff=%s rework=%s infra_retries=%d(%s) machine_recovery_mean=%ss max=%ss human_wait_mean=%ss conflicts_per_1000=",
			f(m.HandoffSuccess.Rate), f(m.Rework.Rate), m.InfraRetries.Retries, f(m.InfraRetries.Rate),
			f(m.Recovery.Machine.MeanSeconds), f(m.Recovery.Machine.MaxSeconds), f(m.Recovery.Human.MeanSeconds))
		if m.StateConflicts != nil {
			line += f(m.StateConflicts.PerThousand)
		}
	}
	line += fmt.Sprintf(" db_outage=%v server_back=%v", rep.Chaos.DBOutageSeconds, rep.Chaos.ServerRestartSeconds)
	t.Log(line)
}

// TestDrill is the CI-sized recovery drill: two server processes started by
// the drill on a private cluster, one of them killed and restarted, the
// database restarted in the middle, every fault injected, and everything
// verified.
func TestDrill(t *testing.T) {
	pg := startCluster(t)
	bin := buildBinary(t)
	code, rep, out := runDrillBinary(t, bin, cleanEnv(),
		"--database-url", pg.url, "--servers", "2", "--server-kills", "1", "--restart-db",
		"--sessions", "20", "--steps", "3", "--workers", "4", "--lease-seconds", "2",
		"--duration", "3m", "--timeout", "4m")
	logFigures(t, rep)
	if code != 0 {
		return
	}
	if rep.Sessions.Settled != 20 || rep.Sessions.Created != 20 {
		t.Errorf("sessions: %+v; want all 20 created and settled", rep.Sessions)
	}
	if rep.Chaos.DBRestarts != 1 || rep.Chaos.ServerKills != 1 {
		t.Errorf("chaos: %+v; want one database restart and one server kill", rep.Chaos)
	}
	if !strings.Contains(rep.Chaos.DBRestartCommand, "pg_ctl") || !strings.Contains(rep.Chaos.DBRestartCommand, pg.data) {
		t.Errorf("restart command %q does not restart the cluster in %s", rep.Chaos.DBRestartCommand, pg.data)
	}
	for _, k := range []string{"crash", "duplicate", "invalid_result", "stale_result", "pause", "stale_version",
		"takeover", "console_stale_form", "console_invalid_form", "server_kill", "db_restart"} {
		if rep.Faults[k] == 0 {
			t.Errorf("fault %s was never injected: %v", k, rep.Faults)
		}
	}
	for _, k := range []string{"duplicate_same_key", "duplicate_new_key", "stale_result", "invalid_result",
		"pause_revoked_result", "console_stale_form", "console_invalid_form", "crash"} {
		if ks := rep.Expectations.ByKind[k]; ks == nil || ks.Matched == 0 {
			t.Errorf("no %s write was checked and matched: %+v", k, ks)
		}
	}
	if rep.Chaos.Human != "console" || len(rep.Sessions.Takeovers) != 3 {
		t.Errorf("humans: via %q, takeovers %v; want the console and all three choices", rep.Chaos.Human, rep.Sessions.Takeovers)
	}
	if v := rep.Checks.DBVerify; v == nil || v.Sessions != 20 || v.Problems != 0 || !rep.Checks.DelegationRows {
		t.Errorf("database checks: %+v, delegation rows %t", v, rep.Checks.DelegationRows)
	}
	m := rep.Metrics
	if m == nil || m.HandoffSuccess.Ended == 0 || m.HandoffSuccess.Rate == nil || m.Rework.Sessions != 20 ||
		m.Recovery.Recoveries == 0 || m.StateConflicts == nil || m.StateConflicts.Conflicts == 0 {
		t.Errorf("metrics: %+v", m)
	}
	for _, want := range []string{"TaskPilots recovery drill", "faults injected", "replay = projection", "handoff success", "result                 PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}

// TestDrillAgainstURL drills a server the test runs, the way a staging
// deployment is drilled: tokens and a console user made with the CLI, then
// once through the console with API checks only, and once with the
// database given, the human acting through the models functions.
func TestDrillAgainstURL(t *testing.T) {
	pg := startCluster(t)
	bin := buildBinary(t)
	env := cleanEnv()
	cli := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--database-url", pg.url)...)
		cmd.Env, cmd.Stdin = env, strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("taskpilots %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(stdout.String())
	}
	cli("", "migrate", "up")
	ctrl := cli("", "token", "create", "--name", "staging-drill-controller", "--role", "controller")
	work := cli("", "token", "create", "--name", "staging-drill-worker", "--role", "worker")
	cli("drill-agent-password\n", "user", "create", "--email", "drill@example.com", "--name", "Drill Agent", "--role", "agent", "--password-stdin")
	url := startServer(t, context.Background(), bin, pg.url, 0)

	// Somebody else's session on the same server: the drill must not touch it.
	other, err := client.New(url, ctrl).CreateSession(context.Background(), client.CreateSessionInput{Goal: "not the drill's"})
	if err != nil {
		t.Fatal(err)
	}
	small := []string{"--url", url, "--controller-token", ctrl, "--worker-token", work,
		"--sessions", "6", "--steps", "2", "--workers", "3", "--lease-seconds", "2", "--takeover-rate", "0.5",
		"--duration", "2m", "--timeout", "3m"}

	t.Run("console", func(t *testing.T) {
		code, rep, _ := runDrillBinary(t, bin, cleanEnv("TASKPILOTS_CONSOLE_PASSWORD=drill-agent-password"),
			append(small, "--console-user", "drill@example.com")...)
		logFigures(t, rep)
		if code != 0 {
			return
		}
		if rep.Mode != "url" || rep.Chaos.Human != "console" || rep.Checks.DBVerify != nil || rep.Checks.DelegationRows {
			t.Errorf("mode %s, human %s, db checks %+v %t; want url, console and API checks only",
				rep.Mode, rep.Chaos.Human, rep.Checks.DBVerify, rep.Checks.DelegationRows)
		}
		if rep.Sessions.Settled != 6 || rep.Faults["takeover"] == 0 || rep.Metrics == nil || !strings.HasPrefix(rep.Metrics.Source, "api") {
			t.Errorf("sessions %+v, faults %v, metrics %+v", rep.Sessions, rep.Faults, rep.Metrics)
		}
	})
	t.Run("direct", func(t *testing.T) {
		code, rep, _ := runDrillBinary(t, bin, env, append(small, "--database-url", pg.url, "--human", "direct")...)
		logFigures(t, rep)
		if code != 0 {
			return
		}
		if rep.Chaos.Human != "direct" || rep.Checks.DBVerify == nil || rep.Checks.DBVerify.Problems != 0 || rep.Faults["takeover"] == 0 {
			t.Errorf("human %s, db verify %+v, faults %v", rep.Chaos.Human, rep.Checks.DBVerify, rep.Faults)
		}
	})

	s, err := client.New(url, ctrl).GetSession(context.Background(), other.SessionID)
	if err != nil || s.StateVersion != 1 || s.Status != client.StatusOpen {
		t.Errorf("the other session changed: %+v %v", s, err)
	}
}

// TestDrillFlags checks that bad flags are usage errors naming every
// offending flag, before anything is started.
func TestDrillFlags(t *testing.T) {
	r := runCLI(t, nil, "", "drill", "--crash-rate", "1.5", "--sessions", "0", "--lease-seconds", "0",
		"--duration", "1m", "--timeout", "30s", "--human", "robot")
	if r.code != 2 {
		t.Fatalf("exit %d; want 2", r.code)
	}
	for _, f := range []string{"crash-rate", "sessions", "lease-seconds", "timeout", "human"} {
		if !strings.Contains(r.stderr, "  "+f+":") {
			t.Errorf("stderr does not name %s:\n%s", f, r.stderr)
		}
	}
	r = runCLI(t, nil, "", "drill", "--url", "http://127.0.0.1:1", "--crash-rate", "0.5", "--stale-rate", "0.6", "--restart-db",
		"--console-user", "a@example.com")
	if r.code != 2 {
		t.Fatalf("exit %d; want 2", r.code)
	}
	for _, f := range []string{"controller-token", "worker-token", "console-password", "restart-db", "crash-rate+duplicate-rate+stale-rate+invalid-rate"} {
		if !strings.Contains(r.stderr, "  "+f+":") {
			t.Errorf("stderr does not name %s:\n%s", f, r.stderr)
		}
	}
	r = runCLI(t, nil, "", "drill", "--database-url", "postgres://db.example.com/x", "--restart-db")
	if r.code != 2 || !strings.Contains(r.stderr, "not on this machine") {
		t.Errorf("a remote database with --restart-db: exit %d\n%s", r.code, r.stderr)
	}
}

// lastBytes is the end of b, at most n bytes.
func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
