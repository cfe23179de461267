package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/web"
)

func init() {
	commands["bench"] = command{
		summary: "measure full lifecycles per second through the HTTP API or the Go API; bench seed builds a large database",
		run:     runBench,
	}
}

type benchOpts struct {
	databaseURL string
	mode        string
	workers     int
	duration    time.Duration
	json        bool
	cpuProfile  string
	idemKeys    bool
	maxConns    int
	wait        int
	ownQueues   bool
	groupCommit bool
	groupLanes  int
	// batch > 1 runs lifecycles in batches: a worker creates and
	// delegates batch sessions one call each, leases up to batch in one
	// call and sends their results in one call.
	batch int
	feed  feedBenchOpts
	// webhookRounds > 0 compares the write path without and with one
	// active webhook (bench_webhook.go).
	webhookRounds int
	asReceiver    bool
	// receiverNice is the webhook receiver process's nice value: in
	// production the receiver runs on another machine, here it shares the
	// writers' cores (bench_receiver.go).
	receiverNice int
}

func benchFlags(env *cliEnv, args []string) (benchOpts, error) {
	fs := newFlagSet(env, "bench")
	var o benchOpts
	dbURL := databaseFlag(env, fs)
	fs.StringVar(&o.mode, "mode", "http", "http (SDK → in-process server over localhost TCP) or inproc (the models Go API)")
	fs.IntVar(&o.workers, "workers", 8, "concurrent workers, each running lifecycles back to back")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long to run")
	fs.BoolVar(&o.json, "json", false, "end the output with one line of JSON")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file")
	fs.BoolVar(&o.idemKeys, "idempotency-keys", true, "send an idempotency key with every write (the SDK always does)")
	fs.IntVar(&o.maxConns, "max-conns", 0, "database pool size (default: max(20, 2×workers), lowered to what the server's max_connections allows)")
	fs.IntVar(&o.wait, "wait", 5, "long-poll seconds of each lease")
	fs.BoolVar(&o.ownQueues, "queue-per-worker", false, "give each worker its own queue (as scripts/pgbench-lifecycle.sql does) instead of one shared queue")
	fs.BoolVar(&o.groupCommit, "group-commit", false, "group concurrent writes into one commit (PostgreSQL; serve's --group-commit)")
	fs.IntVar(&o.groupLanes, "group-lanes", models.DefaultGroupLanes, "writes or groups in flight at once with --group-commit")
	fs.IntVar(&o.batch, "batch", 1, "lifecycles per batch: each worker creates and delegates this many sessions one call each, then leases up to this many in one call and sends their results in one call (1: one lease and one result per call)")
	feedBenchFlags(fs, &o.feed)
	fs.IntVar(&o.webhookRounds, "webhook-rounds", 0, "if set, run this many rounds of --duration each without and with one active webhook (receiver on localhost) and compare")
	fs.BoolVar(&o.asReceiver, "as-webhook-receiver", false, "internal: run as the webhook receiver process of --webhook-rounds")
	fs.IntVar(&o.receiverNice, "webhook-receiver-nice", 19, "nice value of the --webhook-rounds receiver process (0–19; 19: it gets only the CPU the product leaves, as a receiver on another machine would take none)")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots bench --database-url URL --mode http|inproc --workers N --duration D [--batch N] [--json]\n\n"+
			"Migrates the database, creates its own tokens and sessions, and runs full\n"+
			"lifecycles (create session → delegate → lease → completed result) with N\n"+
			"concurrent workers for D. Prints lifecycles per second and latencies.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	o.databaseURL = *dbURL
	switch {
	case o.mode != "http" && o.mode != "inproc":
		return o, usageErr("--mode must be http or inproc, not %q", o.mode)
	case o.workers < 1:
		return o, usageErr("--workers must be at least 1")
	case o.duration <= 0:
		return o, usageErr("--duration must be positive")
	case o.wait < 0 || o.wait > models.MaxWaitSeconds:
		return o, usageErr("--wait must be between 0 and %d", models.MaxWaitSeconds)
	case o.receiverNice < 0 || o.receiverNice > 19:
		return o, usageErr("--webhook-receiver-nice must be between 0 and 19")
	case o.batch < 1 || o.batch > models.MaxLeaseBatch || o.batch > models.MaxResultBatch:
		return o, usageErr("--batch must be between 1 and %d", min(models.MaxLeaseBatch, models.MaxResultBatch))
	case o.batch > 1 && o.webhookRounds > 0:
		return o, usageErr("--batch and --webhook-rounds cannot be combined")
	}
	return o, nil
}

// benchLease is what a lifecycle needs from a lease.
type benchLease struct {
	delegationID, sessionID, step, token string
}

// lifecycler runs the four commands of a lifecycle through one API.
type lifecycler interface {
	create(ctx context.Context, key string) (sessionID string, version int64, err error)
	delegate(ctx context.Context, key, queue, sessionID string, version int64) error
	lease(ctx context.Context, key, queue, worker string) (*benchLease, error)
	result(ctx context.Context, key string, l *benchLease) error
	// leaseBatch leases up to max delegations in one call; results sends
	// the completed results of ls in one call and returns how many were
	// accepted, with the first item's error if any was not.
	leaseBatch(ctx context.Context, key, queue, worker string, max int) ([]benchLease, error)
	results(ctx context.Context, ls []benchLease) (int, error)
}

// benchSession is the session every lifecycle creates: a realistic refund
// with constraints, resources, done criteria and facts.
func benchSession(i int64) models.CreateSessionInput {
	return models.CreateSessionInput{
		Goal:         fmt.Sprintf("Refund order %d if eligible", 100000+i),
		TicketRef:    fmt.Sprintf("T-%d", 100000+i),
		Constraints:  []string{"refunds over 200 EUR need a human", "never refund twice"},
		Resources:    []models.Resource{{Name: "orders-db", URI: "db://orders"}, {Name: "payments-api", URI: "https://payments.internal"}},
		DoneCriteria: []string{"refund issued or denial explained"},
		Facts:        map[string]any{"order_total": "120 EUR", "customer": "c-4411"},
	}
}

const (
	benchStep       = "check-eligibility"
	benchController = "bench-controller"
	benchWorker     = "bench-worker"
)

var benchEvidence = []models.Evidence{{Claim: "order paid 2026-11-20", Source: "orders-db:1182"}}

// inprocBench calls the models Go API directly.
type inprocBench struct {
	s       *models.Store
	wait    time.Duration
	useKeys bool
	seq     atomic.Int64
}

func (b *inprocBench) key(k string) string {
	if b.useKeys {
		return k
	}
	return ""
}

func (b *inprocBench) create(ctx context.Context, key string) (string, int64, error) {
	out, err := b.s.CreateSession(ctx, "token:"+benchController, b.key(key), benchSession(b.seq.Add(1)))
	return out.SessionID, out.StateVersion, err
}

func (b *inprocBench) delegate(ctx context.Context, key, queue, sid string, v int64) error {
	_, err := b.s.Delegate(ctx, sid, "token:"+benchController, b.key(key), models.DelegateInput{
		Queue: queue, Step: benchStep, Instructions: "Check the order against the refund policy.", ExpectedVersion: &v,
	})
	return err
}

func (b *inprocBench) lease(ctx context.Context, key, queue, worker string) (*benchLease, error) {
	l, err := b.s.ClaimWait(ctx, queue, worker, "token:"+benchWorker, b.key(key), b.wait)
	if err != nil || l == nil {
		return nil, err
	}
	return &benchLease{delegationID: l.DelegationID, sessionID: l.SessionID, step: l.Step, token: l.LeaseToken}, nil
}

func (b *inprocBench) result(ctx context.Context, key string, l *benchLease) error {
	_, err := b.s.SubmitResult(ctx, l.delegationID, "token:"+benchWorker, b.key(key), models.ResultInput{
		LeaseToken: l.token, SessionID: l.sessionID, Step: l.step, ResultType: models.ResultCompleted,
		Output: json.RawMessage(`{"eligible":true}`), Evidence: benchEvidence,
	})
	return err
}

func (b *inprocBench) leaseBatch(ctx context.Context, key, queue, worker string, max int) ([]benchLease, error) {
	ls, err := b.s.ClaimBatchWait(ctx, queue, worker, "token:"+benchWorker, b.key(key), max, b.wait)
	out := make([]benchLease, len(ls))
	for i, l := range ls {
		out[i] = benchLease{delegationID: l.DelegationID, sessionID: l.SessionID, step: l.Step, token: l.LeaseToken}
	}
	return out, err
}

func (b *inprocBench) results(ctx context.Context, ls []benchLease) (int, error) {
	items := make([]models.ResultSubmission, len(ls))
	for i, l := range ls {
		items[i] = models.ResultSubmission{DelegationID: l.delegationID, IdempotencyKey: b.key(client.NewIdempotencyKey()), Input: models.ResultInput{
			LeaseToken: l.token, SessionID: l.sessionID, Step: l.step, ResultType: models.ResultCompleted,
			Output: json.RawMessage(`{"eligible":true}`), Evidence: benchEvidence,
		}}
	}
	outs, err := b.s.SubmitResults(ctx, "token:"+benchWorker, items)
	if err != nil {
		return 0, err
	}
	return accepted(outs, func(o models.ResultOutcome) error { return o.Err })
}

// accepted counts the results of a batch that were accepted and returns
// the first error among the others.
func accepted[T any](outs []T, errOf func(T) error) (n int, first error) {
	for _, o := range outs {
		if err := errOf(o); err != nil {
			first = cmp.Or(first, err)
			continue
		}
		n++
	}
	return n, first
}

// httpBench calls the JSON API through the SDK.
type httpBench struct {
	controller, worker *client.Client
	wait               int
	seq                atomic.Int64
}

func (b *httpBench) create(ctx context.Context, key string) (string, int64, error) {
	m := benchSession(b.seq.Add(1))
	in := client.CreateSessionInput{Goal: m.Goal, TicketRef: m.TicketRef, Constraints: m.Constraints,
		DoneCriteria: m.DoneCriteria, Facts: m.Facts}
	for _, r := range m.Resources {
		in.Resources = append(in.Resources, client.Resource{Name: r.Name, URI: r.URI})
	}
	out, err := b.controller.CreateSession(ctx, in, client.WithIdempotencyKey(key))
	return out.SessionID, out.StateVersion, err
}

func (b *httpBench) delegate(ctx context.Context, key, queue, sid string, v int64) error {
	_, err := b.controller.Delegate(ctx, sid, client.DelegateInput{
		Queue: queue, Step: benchStep, Instructions: "Check the order against the refund policy.", ExpectedVersion: v,
	}, client.WithIdempotencyKey(key))
	return err
}

func (b *httpBench) lease(ctx context.Context, key, queue, worker string) (*benchLease, error) {
	l, err := b.worker.Lease(ctx, queue, client.LeaseInput{Worker: worker, WaitSeconds: b.wait}, client.WithIdempotencyKey(key))
	if err != nil || l == nil {
		return nil, err
	}
	return &benchLease{delegationID: l.DelegationID, sessionID: l.SessionID, step: l.Step, token: l.LeaseToken}, nil
}

func (b *httpBench) result(ctx context.Context, key string, l *benchLease) error {
	_, err := b.worker.Result(ctx, l.delegationID, client.ResultInput{
		LeaseToken: l.token, SessionID: l.sessionID, Step: l.step, ResultType: client.ResultCompleted,
		Output: map[string]any{"eligible": true}, Evidence: []client.Evidence{{Claim: benchEvidence[0].Claim, Source: benchEvidence[0].Source}},
	}, client.WithIdempotencyKey(key))
	return err
}

func (b *httpBench) leaseBatch(ctx context.Context, key, queue, worker string, max int) ([]benchLease, error) {
	ls, err := b.worker.LeaseBatch(ctx, queue, client.LeaseInput{Worker: worker, WaitSeconds: b.wait}, max, client.WithIdempotencyKey(key))
	out := make([]benchLease, len(ls))
	for i, l := range ls {
		out[i] = benchLease{delegationID: l.DelegationID, sessionID: l.SessionID, step: l.Step, token: l.LeaseToken}
	}
	return out, err
}

func (b *httpBench) results(ctx context.Context, ls []benchLease) (int, error) {
	items := make([]client.ResultItem, len(ls))
	for i, l := range ls {
		items[i] = client.ResultItem{DelegationID: l.delegationID, ResultInput: client.ResultInput{
			LeaseToken: l.token, SessionID: l.sessionID, Step: l.step, ResultType: client.ResultCompleted,
			Output: map[string]any{"eligible": true}, Evidence: []client.Evidence{{Claim: benchEvidence[0].Claim, Source: benchEvidence[0].Source}},
		}}
	}
	outs, err := b.worker.SubmitResults(ctx, items)
	if err != nil {
		return 0, err
	}
	return accepted(outs, func(e client.ResultEntry) error { return e.Err })
}

// benchReport is the summary; its JSON is the --json line.
type benchReport struct {
	Mode             string  `json:"mode"`
	QueuePerWorker   bool    `json:"queue_per_worker"`
	Dialect          string  `json:"dialect"`
	Workers          int     `json:"workers"`
	Batch            int     `json:"batch"`
	DurationS        float64 `json:"duration_s"`
	Lifecycles       int64   `json:"lifecycles"`
	LifecyclesPerSec float64 `json:"lifecycles_per_sec"`
	Errors           int64   `json:"errors"`
	EmptyLeases      int64   `json:"empty_leases"`
	// LeasesPerCall is the mean number of leases a granting lease call
	// returned (1 without --batch).
	LeasesPerCall  float64 `json:"leases_per_call"`
	CreateP50Ms    float64 `json:"create_p50_ms"`
	CreateP99Ms    float64 `json:"create_p99_ms"`
	DelegateP50Ms  float64 `json:"delegate_p50_ms"`
	DelegateP99Ms  float64 `json:"delegate_p99_ms"`
	LeaseP50Ms     float64 `json:"lease_p50_ms"`
	LeaseP99Ms     float64 `json:"lease_p99_ms"`
	ResultP50Ms    float64 `json:"result_p50_ms"`
	ResultP99Ms    float64 `json:"result_p99_ms"`
	LifecycleP50Ms float64 `json:"lifecycle_p50_ms"`
	LifecycleP99Ms float64 `json:"lifecycle_p99_ms"`
	// DBStatementsPerLifecycle counts the SQL statements the store sent,
	// BEGIN and COMMIT included, over all lifecycles; DBRoundTripsPerLifecycle
	// the round trips they took (the write path pipelines on PostgreSQL).
	DBStatementsPerLifecycle float64 `json:"db_statements_per_lifecycle"`
	DBRoundTripsPerLifecycle float64 `json:"db_round_trips_per_lifecycle"`
	IdempotencyKeys          bool    `json:"idempotency_keys"`
	feedReport
}

// benchSamples are one worker's latencies.
type benchSamples struct {
	create, delegate, lease, result, whole []time.Duration
	lifecycles, errs, empty                int64
	leaseCalls, leases                     int64
	firstErr                               error
}

func runBench(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "seed":
			return runBenchSeed(ctx, env, args[1:])
		case "pages":
			return runBenchPages(ctx, env, args[1:])
		case "idle":
			return runBenchIdle(ctx, env, args[1:])
		case "cycles":
			return runBenchCycles(ctx, env, args[1:])
		}
	}
	o, err := benchFlags(env, args)
	if err != nil {
		return err
	}
	if o.asReceiver {
		return serveBenchReceiver(ctx, env)
	}
	// The bench's own log stays quiet: the store and server would log
	// every request otherwise.
	quiet := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := models.Open(ctx, o.databaseURL, models.OpenOpts{Logger: quiet, MaxOpenConns: o.maxConns, WantConns: max(20, 2*o.workers),
		GroupCommit: o.groupCommit, GroupLanes: o.groupLanes})
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.MigrateUp(ctx); err != nil {
		return schemaError(err)
	}
	wire := countStatements(s)
	run := models.RandomSecret(6)
	queue := "bench-" + strings.NewReplacer("_", "x", "-", "x").Replace(run)

	var (
		lc   lifecycler
		feed feedPager
	)
	switch o.mode {
	case "inproc":
		lc = &inprocBench{s: s, wait: time.Duration(o.wait) * time.Second, useKeys: o.idemKeys}
		feed = inprocFeed(s)
	case "http":
		// Token names are unique, and a database may see many runs: each
		// run's tokens carry its queue's name.
		ctrlTok, _, err := s.CreateToken(ctx, queue+"-controller", models.RoleController)
		if err != nil {
			return err
		}
		workTok, _, err := s.CreateToken(ctx, queue+"-worker", models.RoleWorker)
		if err != nil {
			return err
		}
		h, err := web.NewServer(s, web.Config{Logger: quiet})
		if err != nil {
			return fmt.Errorf("build the server: %w", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: h, ErrorLog: nil}
		go srv.Serve(ln)
		defer srv.Close()
		base := "http://" + ln.Addr().String()
		opts := []client.Option{client.WithLogger(quiet)}
		lc = &httpBench{controller: client.New(base, ctrlTok, opts...), worker: client.New(base, workTok, opts...), wait: o.wait}
		feed = httpFeed(client.New(base, ctrlTok, opts...))
	}
	if !o.idemKeys && o.mode == "http" {
		fmt.Fprintln(env.stderr, "note: --idempotency-keys=false has no effect in http mode: the SDK always sends keys")
	}

	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	fmt.Fprintf(env.stderr, "bench: %s mode, %d workers, %s, %s database, queue %s\n", o.mode, o.workers, o.duration, s.Dialect, queue)
	if o.webhookRounds > 0 {
		return runBenchWebhook(ctx, env, o, s, lc, queue, quiet)
	}

	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	samples := make([]*benchSamples, o.workers)
	stopFeed := startFeedBench(ctx, s, o.feed, feed)
	stmt0, rt0 := wire()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range o.workers {
		samples[i] = &benchSamples{}
		q := queue
		if o.ownQueues {
			q = fmt.Sprintf("%s-%d", queue, i)
		}
		name := fmt.Sprintf("bench-w%d", i)
		if o.batch > 1 {
			wg.Go(func() { benchBatchLoop(runCtx, lc, q, name, o.batch, samples[i]) })
		} else {
			wg.Go(func() { benchWorkerLoop(runCtx, lc, q, name, samples[i]) })
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	stmts, rts := wire()
	feedRes := stopFeed()

	rep := summarise(o, string(s.Dialect), elapsed, samples, stmts-stmt0, rts-rt0)
	rep.feedReport = summariseFeed(o.feed, feedRes, elapsed)
	printBench(env.stdout, rep, samples)
	printFeedBench(env.stdout, rep.feedReport, feedRes)
	if o.json {
		b, _ := json.Marshal(rep)
		fmt.Fprintln(env.stdout, string(b))
	}
	if rep.Lifecycles == 0 {
		return errors.New("no lifecycle completed")
	}
	return nil
}

// fail counts err, unless the run is over (a call cut short by its end is
// not a failure).
func (out *benchSamples) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	out.errs++
	if out.firstErr == nil {
		out.firstErr = err
	}
}

// benchWorkerLoop runs lifecycles back to back until ctx is done. A
// lifecycle cut short by the end of the run is not counted.
func benchWorkerLoop(ctx context.Context, lc lifecycler, queue, name string, out *benchSamples) {
	fail := func(err error) { out.fail(ctx, err) }
	for ctx.Err() == nil {
		t0 := time.Now()
		sid, v, err := lc.create(ctx, client.NewIdempotencyKey())
		if err != nil {
			fail(fmt.Errorf("create: %w", err))
			continue
		}
		t1 := time.Now()
		if err := lc.delegate(ctx, client.NewIdempotencyKey(), queue, sid, v); err != nil {
			fail(fmt.Errorf("delegate: %w", err))
			continue
		}
		t2 := time.Now()
		l, err := lc.lease(ctx, client.NewIdempotencyKey(), queue, name)
		if err != nil {
			fail(fmt.Errorf("lease: %w", err))
			continue
		}
		if l == nil {
			if ctx.Err() == nil {
				out.empty++
			}
			continue
		}
		t3 := time.Now()
		out.leaseCalls++
		out.leases++
		// The result is sent even if the run ends meanwhile, so that no
		// lease is left dangling.
		if err := lc.result(context.WithoutCancel(ctx), client.NewIdempotencyKey(), l); err != nil {
			fail(fmt.Errorf("result: %w", err))
			continue
		}
		t4 := time.Now()
		if ctx.Err() != nil {
			return
		}
		out.create = append(out.create, t1.Sub(t0))
		out.delegate = append(out.delegate, t2.Sub(t1))
		out.lease = append(out.lease, t3.Sub(t2))
		out.result = append(out.result, t4.Sub(t3))
		out.whole = append(out.whole, t4.Sub(t0))
		out.lifecycles++
	}
}

// benchBatchLoop runs lifecycles in batches until ctx is done: n sessions
// created and delegated one call each, then one lease call for up to n
// delegations of the queue (other workers' among them when they share it)
// and one call for their results. Lease and result latencies are per call;
// a lifecycle's is its batch's. Only results accepted before the end count.
func benchBatchLoop(ctx context.Context, lc lifecycler, queue, name string, n int, out *benchSamples) {
	fail := func(err error) { out.fail(ctx, err) }
	for ctx.Err() == nil {
		t0 := time.Now()
		for range n {
			c0 := time.Now()
			sid, v, err := lc.create(ctx, client.NewIdempotencyKey())
			if err != nil {
				fail(fmt.Errorf("create: %w", err))
				continue
			}
			c1 := time.Now()
			if err := lc.delegate(ctx, client.NewIdempotencyKey(), queue, sid, v); err != nil {
				fail(fmt.Errorf("delegate: %w", err))
				continue
			}
			out.create = append(out.create, c1.Sub(c0))
			out.delegate = append(out.delegate, time.Since(c1))
		}
		t2 := time.Now()
		ls, err := lc.leaseBatch(ctx, client.NewIdempotencyKey(), queue, name, n)
		if err != nil {
			fail(fmt.Errorf("lease: %w", err))
			continue
		}
		if len(ls) == 0 {
			if ctx.Err() == nil {
				out.empty++
			}
			continue
		}
		t3 := time.Now()
		out.leaseCalls++
		out.leases += int64(len(ls))
		// Sent even if the run ends meanwhile: no lease is left dangling.
		done, err := lc.results(context.WithoutCancel(ctx), ls)
		if err != nil {
			// Every result not accepted is an error of its own.
			for range len(ls) - done {
				fail(fmt.Errorf("results: %w", err))
			}
		}
		t4 := time.Now()
		if ctx.Err() != nil {
			return
		}
		out.lease = append(out.lease, t3.Sub(t2))
		out.result = append(out.result, t4.Sub(t3))
		out.whole = append(out.whole, t4.Sub(t0))
		out.lifecycles += int64(done)
	}
}

func summarise(o benchOpts, dialect string, elapsed time.Duration, samples []*benchSamples, stmts, roundTrips int64) benchReport {
	var (
		create, delegate, lease, result, whole []time.Duration
		calls, leases                          int64
	)
	rep := benchReport{Mode: o.mode, QueuePerWorker: o.ownQueues, Dialect: dialect, Workers: o.workers, Batch: o.batch, DurationS: round3(elapsed.Seconds()), IdempotencyKeys: o.idemKeys || o.mode == "http"}
	for _, s := range samples {
		create = append(create, s.create...)
		delegate = append(delegate, s.delegate...)
		lease = append(lease, s.lease...)
		result = append(result, s.result...)
		whole = append(whole, s.whole...)
		rep.Lifecycles += s.lifecycles
		rep.Errors += s.errs
		rep.EmptyLeases += s.empty
		calls += s.leaseCalls
		leases += s.leases
	}
	if calls > 0 {
		rep.LeasesPerCall = round3(float64(leases) / float64(calls))
	}
	rep.LifecyclesPerSec = round3(float64(rep.Lifecycles) / elapsed.Seconds())
	rep.CreateP50Ms, rep.CreateP99Ms = pct(create, 0.50), pct(create, 0.99)
	rep.DelegateP50Ms, rep.DelegateP99Ms = pct(delegate, 0.50), pct(delegate, 0.99)
	rep.LeaseP50Ms, rep.LeaseP99Ms = pct(lease, 0.50), pct(lease, 0.99)
	rep.ResultP50Ms, rep.ResultP99Ms = pct(result, 0.50), pct(result, 0.99)
	rep.LifecycleP50Ms, rep.LifecycleP99Ms = pct(whole, 0.50), pct(whole, 0.99)
	if rep.Lifecycles > 0 {
		rep.DBStatementsPerLifecycle = round3(float64(stmts) / float64(rep.Lifecycles))
		rep.DBRoundTripsPerLifecycle = round3(float64(roundTrips) / float64(rep.Lifecycles))
	}
	return rep
}

// pct returns the q-quantile of ds in milliseconds (nearest rank).
func pct(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	i = min(max(i, 0), len(ds)-1)
	return round3(float64(ds[i]) / float64(time.Millisecond))
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func printBench(w io.Writer, r benchReport, samples []*benchSamples) {
	fmt.Fprintf(w, "mode %s, %s, %d workers, batch %d, %.1f s\n", r.Mode, r.Dialect, r.Workers, r.Batch, r.DurationS)
	fmt.Fprintf(w, "lifecycles   %d (%.1f/s), errors %d, empty leases %d, %.1f leases per lease call\n", r.Lifecycles, r.LifecyclesPerSec, r.Errors, r.EmptyLeases, r.LeasesPerCall)
	fmt.Fprintf(w, "             %8s %8s\n", "p50 ms", "p99 ms")
	fmt.Fprintf(w, "create       %8.2f %8.2f\n", r.CreateP50Ms, r.CreateP99Ms)
	fmt.Fprintf(w, "delegate     %8.2f %8.2f\n", r.DelegateP50Ms, r.DelegateP99Ms)
	fmt.Fprintf(w, "lease        %8.2f %8.2f\n", r.LeaseP50Ms, r.LeaseP99Ms)
	fmt.Fprintf(w, "result       %8.2f %8.2f\n", r.ResultP50Ms, r.ResultP99Ms)
	fmt.Fprintf(w, "lifecycle    %8.2f %8.2f\n", r.LifecycleP50Ms, r.LifecycleP99Ms)
	fmt.Fprintf(w, "db statements per lifecycle: %.1f (BEGIN/COMMIT included) in %.1f round trips\n",
		r.DBStatementsPerLifecycle, r.DBRoundTripsPerLifecycle)
	for _, s := range samples {
		if s.firstErr != nil {
			fmt.Fprintf(w, "first error: %v\n", s.firstErr)
			break
		}
	}
}

// countStatements returns a reader of the statements and round trips s has
// sent so far: the write path's own counts, plus one of each per statement
// GORM sends (reads outside transactions, such as token lookups).
func countStatements(s *models.Store) func() (statements, roundTrips int64) {
	n := &atomic.Int64{}
	db := s.DB
	inc := func(*gorm.DB) { n.Add(1) }
	cb := db.Callback()
	_ = cb.Create().After("gorm:create").Register("bench:count", inc)
	_ = cb.Query().After("gorm:query").Register("bench:count", inc)
	_ = cb.Update().After("gorm:update").Register("bench:count", inc)
	_ = cb.Delete().After("gorm:delete").Register("bench:count", inc)
	_ = cb.Row().After("gorm:row").Register("bench:count", inc)
	_ = cb.Raw().After("gorm:raw").Register("bench:count", inc)
	return func() (int64, int64) {
		st, rt := s.WireStats()
		g := n.Load()
		return st + g, rt + g
	}
}

// startCPUProfile writes a CPU profile to path until the returned stop is
// called; an empty path profiles nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
