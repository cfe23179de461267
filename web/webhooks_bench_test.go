package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// benchReceiverEnv makes the test binary a webhook receiver (TestMain):
// the dispatch benchmark runs its receiver in a process of its own, so that
// the CPU it measures is the dispatcher's alone.
const benchReceiverEnv = "TASKPILOTS_WEBHOOK_BENCH_RECEIVER"

func TestMain(m *testing.M) {
	if os.Getenv(benchReceiverEnv) == "1" {
		serveBenchReceiver()
		return
	}
	os.Exit(m.Run())
}

// serveBenchReceiver answers every POST with 204, prints its address and
// returns when stdin closes.
func serveBenchReceiver() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	fmt.Println(ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func startBenchReceiver(b *testing.B) string {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchReceiverEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("receiver process: %v", err)
	}
	return strings.TrimSpace(line)
}

// procCPU is the user + system CPU of a process, from /proc (Linux).
func procCPU(pid string) time.Duration {
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(raw), ')')
	f := strings.Fields(string(raw[i+1:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond // USER_HZ = 100
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDispatchPage measures what delivering an event costs the
// dispatcher: one op is one event of a catch-all webhook, delivered from
// the feed to a receiver in another process that answers 204, through
// Dispatcher.Pass with its defaults (pages of 500). It reports, per event,
// the CPU of this process (the dispatcher's Go side: HTTP client, signing,
// the page's reads and writes through pgx), the CPU of the PostgreSQL
// backends of the store's pool (read from /proc, so PostgreSQL must run on
// this machine; 0 otherwise), the statements sent, and the allocations.
// The lifecycles are written once; each round moves the cursor back and
// deletes the delivery rows, outside the measure.
//
//	go test -run '^$' -bench DispatchPage -benchtime 20x ./web/
func BenchmarkDispatchPage(b *testing.B) {
	ctx := context.Background()
	app := "whbench_" + strings.ToLower(models.RandomSecret(6))
	u := storetest.NewURL(b, models.Postgres)
	if strings.Contains(u, "?") {
		u += "&application_name=" + app
	} else {
		u += "?application_name=" + app
	}
	s, err := models.Open(ctx, u, models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.MigrateUp(ctx); err != nil {
		b.Fatal(err)
	}
	// Lifecycles as the bench writes them: create, delegate, claim, result.
	for i := range 250 {
		sid, _ := storetest.Delegated(ctx, b, s, "wb")
		l, err := s.Claim(ctx, "wb", "w1", "test:worker", "")
		if err != nil || l == nil {
			b.Fatalf("claim: %v %v", l, err)
		}
		if _, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "", models.ResultInput{
			LeaseToken: l.LeaseToken, SessionID: sid, Step: l.Step, ResultType: models.ResultCompleted,
			Output:   json.RawMessage(fmt.Sprintf(`{"eligible": true, "order": %d, "note": "refund approved by policy R-7"}`, i)),
			Evidence: []models.Evidence{{Claim: "order paid"}},
		}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.SequenceFeed(ctx); err != nil {
		b.Fatal(err)
	}
	var events int64
	if err := s.DB.Raw(`SELECT count(*) FROM feed`).Scan(&events).Error; err != nil {
		b.Fatal(err)
	}
	addr := startBenchReceiver(b)
	w, _, err := s.CreateWebhook(ctx, "test:admin", "", models.WebhookInput{URL: "http://" + addr + "/hook"})
	if err != nil {
		b.Fatal(err)
	}
	d := &Dispatcher{Store: s, Log: slog.New(slog.DiscardHandler)}

	backends := func() time.Duration {
		var pids []int
		if err := s.DB.Raw(`SELECT pid FROM pg_stat_activity WHERE application_name = ?`, app).Scan(&pids).Error; err != nil {
			b.Fatal(err)
		}
		var t time.Duration
		for _, p := range pids {
			t += procCPU(strconv.Itoa(p))
		}
		return t
	}
	var (
		goCPU, pgCPU   time.Duration
		stmts, trips   int64
		allocs         uint64
		delivered      int64
		ms0, ms1       runtime.MemStats
		st0, rt0       int64
		self0, server0 time.Duration
	)
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		if err := s.DB.Exec(`DELETE FROM webhook_deliveries`).Error; err != nil {
			b.Fatal(err)
		}
		if err := s.DB.Exec(`UPDATE webhooks SET cursor_pos = 0 WHERE id = ?`, w.ID).Error; err != nil {
			b.Fatal(err)
		}
		// The backends' CPU is read in whole ticks (10 ms): reading it
		// around a round of ~1000 events is precise enough.
		server0 = backends()
		runtime.ReadMemStats(&ms0)
		st0, rt0 = s.PoolStats()
		self0 = selfCPU()
		b.StartTimer()
		var (
			rep PassReport
			err error
		)
		// Labelled, so that a -cpuprofile can be narrowed to the
		// dispatcher's goroutines (HTTP connections included) with
		// -tagfocus part=dispatch.
		pprof.Do(ctx, pprof.Labels("part", "dispatch"), func(ctx context.Context) { rep, err = d.Pass(ctx) })
		b.StopTimer()
		self1 := selfCPU()
		st1, rt1 := s.PoolStats()
		runtime.ReadMemStats(&ms1)
		if err != nil {
			b.Fatal(err)
		}
		if int64(rep.Delivered) != events {
			b.Fatalf("delivered %d of %d events", rep.Delivered, events)
		}
		// The statement reading the backends' pids is not the
		// dispatcher's; its CPU (one tiny query) is noise next to a round.
		pgCPU += backends() - server0
		goCPU += self1 - self0
		stmts += st1 - st0
		trips += rt1 - rt0
		allocs += ms1.Mallocs - ms0.Mallocs
		delivered += events
	}
	n := float64(delivered)
	b.ReportMetric(float64(goCPU.Microseconds())/n, "go-cpu-µs/event")
	b.ReportMetric(float64(pgCPU.Microseconds())/n, "pg-cpu-µs/event")
	b.ReportMetric(float64(stmts)/n, "stmts/event")
	b.ReportMetric(float64(trips)/n, "trips/event")
	b.ReportMetric(float64(allocs)/n, "allocs/event")
	b.ReportMetric(float64(events), "events/op")
}
