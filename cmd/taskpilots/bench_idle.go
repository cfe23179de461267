package main

// bench idle: what N idle replicas cost the database (README, "Benchmarks").

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/web"
)

type idleOpts struct {
	databaseURL string
	replicas    int
	duration    time.Duration
	warmup      time.Duration
	inbox       bool
	json        bool
}

// idleReport is the summary; its JSON is the --json line.
type idleReport struct {
	Dialect  string  `json:"dialect"`
	Replicas int     `json:"replicas"`
	Seconds  float64 `json:"seconds"`
	Sessions int64   `json:"sessions"`
	Events   int64   `json:"events"`
	// EventsWritten counts events the replicas wrote during the run: what
	// came due meanwhile (SLA breaches, expired leases), the only work of
	// an idle server.
	EventsWritten int64 `json:"events_written"`
	// SettleS is how long the catch-up before the run took (numbering
	// unsequenced events, due timers).
	SettleS float64 `json:"settle_s"`
	// ServerCPUSeconds is the CPU time of the replicas' PostgreSQL
	// backends over the run; PerMinute the same scaled to a minute.
	ServerCPUSeconds   float64 `json:"server_cpu_s"`
	ServerCPUPerMinute float64 `json:"server_cpu_s_per_min"`
	// ClientCPUSeconds is this process's CPU time: all the replicas' Go
	// side (and the inbox client's, with --inbox).
	ClientCPUSeconds float64 `json:"client_cpu_s"`
	Backends         int     `json:"backends"`
	InboxReads       int     `json:"inbox_reads,omitempty"`
	InboxP50Ms       float64 `json:"inbox_p50_ms,omitempty"`
	InboxP99Ms       float64 `json:"inbox_p99_ms,omitempty"`
}

func runBenchIdle(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet(env, "bench idle")
	var o idleOpts
	dbURL := databaseFlag(env, fs)
	fs.IntVar(&o.replicas, "replicas", 1, "idle servers to run, each with its own pool and background loops, as `serve` runs them")
	fs.DurationVar(&o.duration, "duration", time.Minute, "how long to measure")
	fs.DurationVar(&o.warmup, "warmup", 5*time.Second, "how long the replicas run before measuring (their start-up passes)")
	fs.BoolVar(&o.inbox, "inbox", false, "also run one client reading the inbox's first page back to back, and report its p50 and p99")
	fs.BoolVar(&o.json, "json", false, "end the output with one line of JSON")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots bench idle --database-url URL --replicas N --duration D [--inbox] [--json]\n\n"+
			"Runs N servers on the database (an existing one, e.g. from `bench seed`), with\n"+
			"their maintenance loop, feed sequencer, webhook dispatcher and listener, and no\n"+
			"requests. On PostgreSQL on this machine it reports the CPU time of the\n"+
			"replicas' backends (from /proc) over D.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o.databaseURL = *dbURL
	switch {
	case o.replicas < 1:
		return usageErr("--replicas must be at least 1")
	case o.duration <= 0:
		return usageErr("--duration must be positive")
	case o.warmup < 0:
		return usageErr("--warmup must not be negative")
	}
	quiet := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	run := strings.ToLower(strings.NewReplacer("_", "x", "-", "x").Replace(models.RandomSecret(6)))
	app := "tp-idle-" + run

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		stores []*models.Store
		wg     sync.WaitGroup
	)
	defer func() {
		cancel()
		wg.Wait()
		for _, s := range stores {
			s.Close()
		}
	}()
	for i := range o.replicas {
		s, err := models.Open(ctx, withAppName(o.databaseURL, app), models.OpenOpts{Logger: quiet, Replicas: o.replicas})
		if err != nil {
			return err
		}
		stores = append(stores, s)
		if i == 0 {
			if err := s.CheckSchema(ctx); err != nil {
				return schemaError(err)
			}
		}
	}
	s := stores[0]
	rep := idleReport{Dialect: string(s.Dialect), Replicas: o.replicas}
	s.DB.WithContext(ctx).Raw(`SELECT count(*) FROM sessions`).Scan(&rep.Sessions)
	fmt.Fprintf(env.stderr, "bench idle: %d replicas on %s (%d sessions); settling, warming up %s, measuring %s\n",
		o.replicas, s.Dialect, rep.Sessions, o.warmup, o.duration)
	t0 := time.Now()
	if err := settle(ctx, s); err != nil {
		return err
	}
	rep.SettleS = round3(time.Since(t0).Seconds())
	for i, s := range stores {
		wg.Go(func() {
			err := web.Serve(ctx, s, web.Config{Addr: "127.0.0.1:0", Logger: quiet, SessionKey: models.RandomSecret(32)})
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(env.stderr, "bench idle: replica %d: %v\n", i, err)
			}
		})
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(o.warmup):
	}
	s.DB.WithContext(ctx).Raw(`SELECT count(*) FROM events`).Scan(&rep.Events)

	m := &appCPU{s: s, app: app}
	self0, _ := procCPU("self")
	server0, server0ok := m.read(ctx)
	start := time.Now()
	var lat []time.Duration
	if o.inbox {
		lat = inboxClient(ctx, s, o.duration)
	} else {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.duration):
		}
	}
	el := time.Since(start)
	self1, _ := procCPU("self")
	server1, server1ok := m.read(ctx)
	var after int64
	s.DB.WithContext(ctx).Raw(`SELECT count(*) FROM events`).Scan(&after)
	rep.EventsWritten = after - rep.Events
	rep.Seconds = round3(el.Seconds())
	rep.ClientCPUSeconds = round3(self1 - self0)
	if server0ok && server1ok {
		rep.ServerCPUSeconds = round3(server1 - server0)
		rep.ServerCPUPerMinute = round3(rep.ServerCPUSeconds / el.Minutes())
		rep.Backends = len(m.last)
	}
	if o.inbox {
		rep.InboxReads = len(lat)
		rep.InboxP50Ms, rep.InboxP99Ms = pct(lat, 0.50), pct(lat, 0.99)
	}
	if server0ok && server1ok {
		fmt.Fprintf(env.stdout, "%d idle replicas, %.0f s: PostgreSQL backends %.3f s CPU (%.3f s per minute, %d backends); this process %.3f s CPU; %d events came due\n",
			rep.Replicas, rep.Seconds, rep.ServerCPUSeconds, rep.ServerCPUPerMinute, rep.Backends, rep.ClientCPUSeconds, rep.EventsWritten)
	} else {
		fmt.Fprintf(env.stdout, "%d idle replicas, %.0f s: this process %.3f s CPU (no PostgreSQL backends readable in /proc)\n",
			rep.Replicas, rep.Seconds, rep.ClientCPUSeconds)
	}
	if o.inbox {
		fmt.Fprintf(env.stdout, "inbox, one client: %d reads, p50 %.2f ms, p99 %.2f ms\n", rep.InboxReads, rep.InboxP50Ms, rep.InboxP99Ms)
	}
	if o.json {
		b, _ := json.Marshal(rep)
		fmt.Fprintln(env.stdout, string(b))
	}
	return nil
}

// settle does what a server does when it starts on a busy database before
// the run measures it idle: the feed sequencer numbers the events that have
// no position yet (a seeded database has a million), and the maintenance
// pass handles what is due (SLA breaches, expired leases), until neither
// finds anything.
func settle(ctx context.Context, s *models.Store) error {
	for {
		n, err := s.SequenceFeed(ctx)
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		if n == 0 {
			break
		}
	}
	for {
		r, err := s.Maintain(ctx)
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		if r == (models.MaintenanceReport{}) {
			return nil
		}
	}
}

// inboxClient reads the inbox's first page back to back for d and returns
// the latencies.
func inboxClient(ctx context.Context, s *models.Store, d time.Duration) []time.Duration {
	var lat []time.Duration
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		t0 := time.Now()
		if _, err := s.Inbox(ctx, models.InboxOpts{Limit: models.DefaultInboxLimit}); err != nil {
			return lat
		}
		lat = append(lat, time.Since(t0))
	}
	return lat
}

// withAppName sets a PostgreSQL URL's application_name, by which the
// replicas' backends are told from everyone else's.
func withAppName(raw, app string) string {
	if d, _, err := models.ParseDatabaseURL(raw); err != nil || d != models.Postgres {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// appCPU sums the CPU time of the PostgreSQL backends whose
// application_name is app, from /proc (PostgreSQL on this machine). A
// backend that ended between two reads is lost from the sum; a backend
// first seen counts from its start.
type appCPU struct {
	s    *models.Store
	app  string
	last map[int]float64
	sum  float64
}

func (m *appCPU) read(ctx context.Context) (float64, bool) {
	if m.s.Dialect != models.Postgres {
		return 0, false
	}
	var pids []int
	if err := m.s.DB.WithContext(ctx).Raw(`SELECT pid FROM pg_stat_activity WHERE application_name = ?`, m.app).Scan(&pids).Error; err != nil {
		return 0, false
	}
	if m.last == nil {
		m.last = map[int]float64{}
	}
	for _, pid := range pids {
		c, ok := procCPU(strconv.Itoa(pid))
		if !ok {
			return 0, false
		}
		m.sum += c - m.last[pid]
		m.last[pid] = c
	}
	return m.sum, true
}
