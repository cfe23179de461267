package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
)

// bench cycles measures delegate → lease → result cycles per second through
// the models Go API, the figure to put beside River's one-call-at-a-time
// job rate: producers delegate one call at a time (concurrently, so
// that group commit can merge their commits), workers lease up to --batch
// delegations per call (ClaimBatch) and send their results together
// (SubmitResults) or one by one, and every session goes round again with
// its next step. Sessions are created before the clock starts.
type cyclesOpts struct {
	databaseURL  string
	sessions     int
	producers    int
	workers      int
	batch        int
	duration     time.Duration
	groupCommit  bool
	lanes        int
	batchResults bool
	maxConns     int
	json         bool
	cpuProfile   string
}

func cyclesFlags(env *cliEnv, args []string) (cyclesOpts, error) {
	fs := newFlagSet(env, "bench cycles")
	var o cyclesOpts
	dbURL := databaseFlag(env, fs)
	fs.IntVar(&o.sessions, "sessions", 2000, "sessions cycling (created before timing)")
	fs.IntVar(&o.producers, "producers", 16, "concurrent producers, each delegating one call at a time")
	fs.IntVar(&o.workers, "workers", 4, "concurrent workers, each leasing up to --batch per call")
	fs.IntVar(&o.batch, "batch", 32, "leases per ClaimBatch call (1 to the lease batch cap)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long to run")
	fs.BoolVar(&o.groupCommit, "group-commit", false, "group concurrent writes into one commit (PostgreSQL; serve's --group-commit)")
	fs.IntVar(&o.lanes, "group-lanes", models.DefaultGroupLanes, "writes or groups in flight at once with --group-commit")
	fs.BoolVar(&o.batchResults, "batch-results", true, "send a worker's results with one SubmitResults call (false: SubmitResult each)")
	fs.IntVar(&o.maxConns, "max-conns", 0, "database pool size (default: max(20, 2×(producers+workers)))")
	fs.BoolVar(&o.json, "json", false, "end the output with one line of JSON")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots bench cycles --database-url URL [--producers N --workers N --batch N --group-commit=BOOL --batch-results=BOOL] [--json]\n\n"+
			"Creates --sessions sessions, then for --duration runs delegate → lease → result\n"+
			"cycles on them through the Go API and prints cycles per second.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	o.databaseURL = *dbURL
	switch {
	case o.sessions < 1 || o.producers < 1 || o.workers < 1:
		return o, usageErr("--sessions, --producers and --workers must be at least 1")
	case o.batch < 1 || o.batch > models.MaxLeaseBatch:
		return o, usageErr("--batch must be between 1 and %d", models.MaxLeaseBatch)
	case o.duration <= 0:
		return o, usageErr("--duration must be positive")
	case o.lanes < 1:
		return o, usageErr("--group-lanes must be at least 1")
	}
	return o, nil
}

// cyclesReport is the summary; its JSON is the --json line.
type cyclesReport struct {
	Mode                string  `json:"mode"`
	Dialect             string  `json:"dialect"`
	Sessions            int     `json:"sessions"`
	Producers           int     `json:"producers"`
	Workers             int     `json:"workers"`
	Batch               int     `json:"batch"`
	GroupCommit         bool    `json:"group_commit"`
	GroupLanes          int     `json:"group_lanes"`
	BatchResults        bool    `json:"batch_results"`
	DurationS           float64 `json:"duration_s"`
	Cycles              int64   `json:"cycles"`
	CyclesPerSec        float64 `json:"cycles_per_sec"`
	Errors              int64   `json:"errors"`
	StatementsPerCycle  float64 `json:"db_statements_per_cycle"`
	RoundTripsPerCycle  float64 `json:"db_round_trips_per_cycle"`
	Groups              int64   `json:"groups"`
	MeanGroupSize       float64 `json:"mean_group_size"`
	LargestGroup        int64   `json:"largest_group"`
	MeanLeasesPerClaim  float64 `json:"mean_leases_per_claim"`
	DelegateCallsPerSec float64 `json:"delegate_calls_per_sec"`
	// CPU milliseconds per counted cycle from the start of the clock until
	// the last results are in: this process's, and that of the backends
	// connected to its database (not PostgreSQL's WAL writer or
	// checkpointer); 0 when PostgreSQL is not on this machine. On 2 cores
	// the rate is bound by CPU, so this says where a cycle's cost is.
	ClientCPUMsPerCycle float64 `json:"client_cpu_ms_per_cycle"`
	ServerCPUMsPerCycle float64 `json:"server_cpu_ms_per_cycle"`
	firstErr            error
}

// cycleSession is a session between cycles: its id and current version.
type cycleSession struct {
	id      string
	version int64
}

func runBenchCycles(ctx context.Context, env *cliEnv, args []string) error {
	o, err := cyclesFlags(env, args)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := models.Open(ctx, o.databaseURL, models.OpenOpts{Logger: quiet, MaxOpenConns: o.maxConns,
		WantConns: max(20, 2*(o.producers+o.workers)), GroupCommit: o.groupCommit, GroupLanes: o.lanes})
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.MigrateUp(ctx); err != nil {
		return schemaError(err)
	}
	queue := "cycles-" + strings.NewReplacer("_", "x", "-", "x").Replace(models.RandomSecret(6))
	fmt.Fprintf(env.stderr, "bench cycles: %d sessions, %d producers, %d workers, batch %d, group commit %v, batched results %v, %s, queue %s\n",
		o.sessions, o.producers, o.workers, o.batch, o.groupCommit, o.batchResults, o.duration, queue)

	// The sessions, created concurrently before the clock starts.
	ready := make(chan cycleSession, o.sessions)
	var (
		wg      sync.WaitGroup
		created atomic.Int64
		mkErr   atomic.Pointer[error]
	)
	for p := range o.producers {
		wg.Go(func() {
			for i := p; i < o.sessions; i += o.producers {
				out, err := s.CreateSession(ctx, "token:"+benchController, client.NewIdempotencyKey(), benchSession(int64(i)))
				if err != nil {
					mkErr.CompareAndSwap(nil, &err)
					return
				}
				created.Add(1)
				ready <- cycleSession{id: out.SessionID, version: out.StateVersion}
			}
		})
	}
	wg.Wait()
	if e := mkErr.Load(); e != nil {
		return fmt.Errorf("create sessions: %w", *e)
	}

	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	wire := countStatements(s)
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var (
		cycles, errs, delegates, claims, leases atomic.Int64
		firstErr                                atomic.Pointer[error]
	)
	fail := func(err error) {
		if runCtx.Err() != nil {
			return
		}
		errs.Add(1)
		firstErr.CompareAndSwap(nil, &err)
	}
	step := func(v int64) string { return fmt.Sprintf("%s-%d", benchStep, v) }
	g0 := s.GroupStats()
	st0, rt0 := wire()
	meter := &cpuMeter{s: s}
	self0, _, cpuOK := meter.read(ctx)
	start := time.Now()
	for range o.producers {
		wg.Go(func() {
			for {
				var cs cycleSession
				select {
				case <-runCtx.Done():
					return
				case cs = <-ready:
				}
				_, err := s.Delegate(runCtx, cs.id, "token:"+benchController, client.NewIdempotencyKey(), models.DelegateInput{
					Queue: queue, Step: step(cs.version), Instructions: "Check the order against the refund policy.", ExpectedVersion: &cs.version,
				})
				if err != nil {
					fail(fmt.Errorf("delegate: %w", err))
					continue // the session is dropped from the run
				}
				delegates.Add(1)
			}
		})
	}
	for w := range o.workers {
		worker := fmt.Sprintf("cycles-w%d", w)
		wg.Go(func() {
			for runCtx.Err() == nil {
				ls, err := s.ClaimBatchWait(runCtx, queue, worker, "token:"+benchWorker, client.NewIdempotencyKey(), o.batch, time.Second)
				if err != nil {
					fail(fmt.Errorf("lease: %w", err))
					continue
				}
				if len(ls) == 0 {
					continue
				}
				claims.Add(1)
				leases.Add(int64(len(ls)))
				// Results are sent even if the run ends meanwhile, so that
				// no lease is left dangling; only those before the end count.
				rctx := context.WithoutCancel(runCtx)
				items := make([]models.ResultSubmission, len(ls))
				for i, l := range ls {
					items[i] = models.ResultSubmission{DelegationID: l.DelegationID, IdempotencyKey: client.NewIdempotencyKey(), Input: models.ResultInput{
						LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step, ResultType: models.ResultCompleted,
						Output: json.RawMessage(`{"eligible":true}`), Evidence: benchEvidence, NextStep: "next",
					}}
				}
				outs := make([]models.ResultOutcome, len(items))
				if o.batchResults {
					if outs, err = s.SubmitResults(rctx, "token:"+benchWorker, items); err != nil {
						fail(fmt.Errorf("results: %w", err))
						continue
					}
				} else {
					for i, it := range items {
						outs[i].Outcome, outs[i].Err = s.SubmitResult(rctx, it.DelegationID, "token:"+benchWorker, it.IdempotencyKey, it.Input)
					}
				}
				done := runCtx.Err() != nil
				for i, r := range outs {
					if r.Err != nil {
						fail(fmt.Errorf("result: %w", r.Err))
						continue
					}
					if !done {
						cycles.Add(1)
					}
					ready <- cycleSession{id: ls[i].SessionID, version: r.Outcome.StateVersion}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	self1, server, cpuOK1 := meter.read(ctx)
	st1, rt1 := wire()
	g1 := s.GroupStats()
	n := cycles.Load()
	rep := cyclesReport{Mode: "cycles", Dialect: string(s.Dialect), Sessions: o.sessions, Producers: o.producers, Workers: o.workers,
		Batch: o.batch, GroupCommit: o.groupCommit, GroupLanes: o.lanes, BatchResults: o.batchResults,
		DurationS: round3(elapsed.Seconds()), Cycles: n, CyclesPerSec: round3(float64(n) / elapsed.Seconds()), Errors: errs.Load(),
		Groups: g1.Groups - g0.Groups, LargestGroup: g1.Largest,
		DelegateCallsPerSec: round3(float64(delegates.Load()) / elapsed.Seconds())}
	if n > 0 {
		rep.StatementsPerCycle = round3(float64(st1-st0) / float64(n))
		rep.RoundTripsPerCycle = round3(float64(rt1-rt0) / float64(n))
		if cpuOK && cpuOK1 {
			rep.ClientCPUMsPerCycle = round3((self1 - self0) * 1000 / float64(n))
			rep.ServerCPUMsPerCycle = round3(server * 1000 / float64(n))
		}
	}
	if rep.Groups > 0 {
		rep.MeanGroupSize = round3(float64(g1.Members-g0.Members) / float64(rep.Groups))
	}
	if c := claims.Load(); c > 0 {
		rep.MeanLeasesPerClaim = round3(float64(leases.Load()) / float64(c))
	}
	if e := firstErr.Load(); e != nil {
		rep.firstErr = *e
	}
	printCycles(env.stdout, rep)
	if o.json {
		b, _ := json.Marshal(rep)
		fmt.Fprintln(env.stdout, string(b))
	}
	if n == 0 {
		return errors.New("no cycle completed")
	}
	return nil
}

func printCycles(w io.Writer, r cyclesReport) {
	fmt.Fprintf(w, "cycles: %s, %d producers, %d workers (batch %d), group commit %v (%d lanes), batched results %v, %.1f s\n",
		r.Dialect, r.Producers, r.Workers, r.Batch, r.GroupCommit, r.GroupLanes, r.BatchResults, r.DurationS)
	fmt.Fprintf(w, "%d cycles, %.1f cycles/s (delegate → lease → result), %d errors\n", r.Cycles, r.CyclesPerSec, r.Errors)
	fmt.Fprintf(w, "per cycle: %.2f statements, %.2f round trips; %.1f leases per claim; %d groups, mean size %.2f, largest %d\n",
		r.StatementsPerCycle, r.RoundTripsPerCycle, r.MeanLeasesPerClaim, r.Groups, r.MeanGroupSize, r.LargestGroup)
	if r.ServerCPUMsPerCycle > 0 {
		fmt.Fprintf(w, "cpu per cycle: %.2f ms (server %.2f + client %.2f)\n",
			r.ServerCPUMsPerCycle+r.ClientCPUMsPerCycle, r.ServerCPUMsPerCycle, r.ClientCPUMsPerCycle)
	}
	if r.firstErr != nil {
		fmt.Fprintf(w, "first error: %v\n", r.firstErr)
	}
}
