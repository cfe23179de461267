package drill

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/taskpilots/handoff/cmd/taskpilots/cliout"
	"github.com/taskpilots/handoff/models"
)

// drillOpts is everything drill reads from flags and the environment.
type drillOpts struct {
	url             string
	controllerToken string
	workerToken     string
	consoleUser     string
	consolePassword string
	databaseURL     string
	// dbGiven reports whether --database-url (or its variable) was given;
	// against --url the database is then used for the deeper checks.
	dbGiven bool

	servers     int
	serverKills int
	restartDB   bool
	restartCmd  string
	sessions    int
	steps       int
	workers     int
	parallel    int
	human       string

	crashRate     float64
	duplicateRate float64
	staleRate     float64
	invalidRate   float64
	pauseRate     float64
	takeoverRate  float64

	leaseSeconds int
	maxAttempts  int
	duration     time.Duration
	timeout      time.Duration
	seed         uint64
	json         bool
	quiet        bool
	keepLogs     bool

	// The queue fault mode (queuefault.go): expire a share of a real
	// queue's leases and time its recovery.
	queue       string
	expireShare float64
	adminToken  string
}

// ownServers reports whether the drill starts its own server processes.
func (o drillOpts) ownServers() bool { return o.url == "" }

func drillFlags(env *Env, args []string) (drillOpts, error) {
	fs := env.NewFlagSet("drill")
	d := newEnvDefaults(env)
	var o drillOpts
	fs.StringVar(&o.url, "url", d.String("TASKPILOTS_URL", ""),
		"base URL of a running deployment to drill; empty: start --servers processes of this binary on --database-url (env TASKPILOTS_URL)")
	fs.StringVar(&o.controllerToken, "controller-token", d.String("TASKPILOTS_CONTROLLER_TOKEN", ""),
		"controller (or admin) API token, with --url (env TASKPILOTS_CONTROLLER_TOKEN)")
	fs.StringVar(&o.workerToken, "worker-token", d.String("TASKPILOTS_WORKER_TOKEN", ""),
		"worker (or admin) API token, with --url (env TASKPILOTS_WORKER_TOKEN)")
	fs.StringVar(&o.consoleUser, "console-user", d.String("TASKPILOTS_CONSOLE_USER", ""),
		"email of an agent or admin console user for the human takeover paths, with --url (env TASKPILOTS_CONSOLE_USER)")
	fs.StringVar(&o.consolePassword, "console-password", d.String("TASKPILOTS_CONSOLE_PASSWORD", ""),
		"password of --console-user; prefer the variable (env TASKPILOTS_CONSOLE_PASSWORD)")
	against := fs.String("against", "", "same as --url: the deployment to drill (with --queue: whose queue to inject faults into)")
	fs.StringVar(&o.queue, "queue", "", "inject faults into this real queue of --against instead of running the drill's own scenario: expire --expire-share of its live leases and time the recovery")
	fs.Float64Var(&o.expireShare, "expire-share", 0, "with --queue: the share of the queue's live leases to expire at once, in (0, 1]")
	fs.StringVar(&o.adminToken, "admin-token", d.String("TASKPILOTS_ADMIN_TOKEN", ""), "with --queue: an admin API token (env TASKPILOTS_ADMIN_TOKEN)")
	dbURL := env.DatabaseFlag(fs)
	fs.IntVar(&o.servers, "servers", 2, "server processes to start when there is no --url")
	fs.IntVar(&o.serverKills, "server-kills", 1, "times a server process is killed with SIGKILL and restarted (own servers only)")
	fs.BoolVar(&o.restartDB, "restart-db", false, "restart the (local) PostgreSQL server in the middle of the drill")
	fs.StringVar(&o.restartCmd, "restart-db-command", "",
		"shell command that restarts the database; default: detected (pg_ctlcluster --skip-systemctl-redirect VER main restart, or pg_ctl restart of the data directory)")
	fs.IntVar(&o.sessions, "sessions", 50, "sessions to create and drive to an end")
	fs.IntVar(&o.steps, "steps", 3, "delegated steps per session (1-20)")
	fs.IntVar(&o.workers, "workers", 4, "simulated workers leasing from the drill's queue")
	fs.IntVar(&o.parallel, "parallel", 0, "sessions in flight at once; 0: sessions/3, between 4 and 32")
	fs.StringVar(&o.human, "human", "auto", "how simulated humans act: console (HTTP forms), direct (models takeover functions; needs --database-url), auto, none")
	fs.Float64Var(&o.crashRate, "crash-rate", 0.10, "share of leases a worker abandons mid-lease (the rescuer must re-queue them)")
	fs.Float64Var(&o.duplicateRate, "duplicate-rate", 0.10, "share of results delivered twice with the same Idempotency-Key, then once with a new key")
	fs.Float64Var(&o.staleRate, "stale-rate", 0.05, "share of results held past their lease's expiry before being sent; also stale console forms")
	fs.Float64Var(&o.invalidRate, "invalid-rate", 0.10, "share of results first sent violating the contract; also invalid console forms")
	fs.Float64Var(&o.pauseRate, "pause-rate", 0.10, "share of sessions paused (and resumed) while a worker holds the lease")
	fs.Float64Var(&o.takeoverRate, "takeover-rate", 0.15, "share of sessions whose worker escalates a step to a human")
	fs.IntVar(&o.leaseSeconds, "lease-seconds", 3, "lease length of the drill's delegations (1-60); crashed and stale leases recover after it")
	fs.IntVar(&o.maxAttempts, "max-attempts", 5, "max_attempts of the drill's delegations (2-20)")
	fs.DurationVar(&o.duration, "duration", 5*time.Minute, "cap on the scenario; sessions not settled by then are reported")
	fs.DurationVar(&o.timeout, "timeout", 0, "cap on the whole drill, verification included; default --duration + 2m")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the scenario's dice; 0: random")
	fs.BoolVar(&o.json, "json", false, "end standard output with the report as one JSON object")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress on standard error")
	fs.BoolVar(&o.keepLogs, "keep-logs", false, "keep the started servers' logs even when the drill passes")
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "usage: taskpilots drill [--url URL --controller-token T --worker-token T [--console-user E]] [flags]\n"+
			"       taskpilots drill --against URL --queue Q --expire-share 0.2 [--duration 2m] [--admin-token T]\n\n"+
			"Creates its own sessions on its own queue and drives them to an end with simulated\n"+
			"workers and humans through the public API and the console, injecting faults: worker\n"+
			"crashes, duplicate and late results, contract violations, pauses, human takeovers,\n"+
			"and (with its own servers) server kills and a database restart. Then it checks that\n"+
			"every session is consistent, nothing was applied twice, every injected fault was\n"+
			"refused for the right reason, replay equals the stored state and every hash chain is\n"+
			"intact, and reports the product metrics. Exit status 1 on any violation.\n\n"+
			"Without --url it migrates --database-url, creates tokens and a console user, and runs\n"+
			"--servers processes of this binary itself.\n\n"+
			"With --queue it drills a real queue of --against instead: it expires --expire-share\n"+
			"of the queue's live leases at once (an admin API call) and reports how long the\n"+
			"rescuer and the queue's workers took to lease each step again, with the queue's\n"+
			"own metrics before and after. Exit status 1 when one did not recover in --duration.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := env.ParseFlags(fs, args); err != nil {
		return o, err
	}
	if err := d.Err(); err != nil {
		return o, err
	}
	o.databaseURL = *dbURL
	o.dbGiven = env.Getenv("TASKPILOTS_DATABASE_URL") != ""
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "database-url" {
			o.dbGiven = true
		}
	})
	if *against != "" {
		o.url = *against
	}
	if o.timeout == 0 {
		o.timeout = o.duration + 2*time.Minute
	}
	if o.queue != "" {
		return o, o.validateQueueMode()
	}
	if o.parallel == 0 {
		o.parallel = min(max(o.sessions/3, 4), 32)
	}
	return o, o.validate()
}

// validate lists every problem with the options, as a usage error.
func (o drillOpts) validate() error {
	v := &models.ValidationError{}
	rate := func(name string, r float64) {
		if math.IsNaN(r) || r < 0 || r > 1 {
			v.Add(name, "must be between 0 and 1")
		}
	}
	rate("crash-rate", o.crashRate)
	rate("duplicate-rate", o.duplicateRate)
	rate("stale-rate", o.staleRate)
	rate("invalid-rate", o.invalidRate)
	rate("pause-rate", o.pauseRate)
	rate("takeover-rate", o.takeoverRate)
	if sum := o.crashRate + o.duplicateRate + o.staleRate + o.invalidRate; sum > 1 {
		v.Add("crash-rate+duplicate-rate+stale-rate+invalid-rate", "must add up to at most 1 (one fault per lease)")
	}
	if o.sessions < 1 {
		v.Add("sessions", "must be at least 1")
	}
	if o.steps < 1 || o.steps > 20 {
		v.Add("steps", "must be between 1 and 20")
	}
	if o.workers < 1 {
		v.Add("workers", "must be at least 1")
	}
	if o.parallel < 1 {
		v.Add("parallel", "must be at least 1")
	}
	if o.leaseSeconds < 1 || o.leaseSeconds > 60 {
		v.Add("lease-seconds", "must be between 1 and 60")
	}
	if o.maxAttempts < 2 || o.maxAttempts > models.MaxMaxAttempts {
		v.Add("max-attempts", "must be between 2 and 20")
	}
	if o.duration <= 0 {
		v.Add("duration", "must be positive")
	}
	if o.timeout <= o.duration {
		v.Add("timeout", "must be longer than --duration")
	}
	switch o.human {
	case "auto", "console", "direct", "none":
	default:
		v.Add("human", "must be auto, console, direct or none")
	}
	if o.human == "direct" && !o.ownServers() && !o.dbGiven {
		v.Add("human", "direct needs --database-url")
	}
	if o.ownServers() {
		if o.servers < 1 || o.servers > 16 {
			v.Add("servers", "must be between 1 and 16")
		}
		if o.serverKills < 0 {
			v.Add("server-kills", "must be at least 0")
		}
	} else {
		if o.controllerToken == "" {
			v.Add("controller-token", "is required with --url (env TASKPILOTS_CONTROLLER_TOKEN)")
		}
		if o.workerToken == "" {
			v.Add("worker-token", "is required with --url (env TASKPILOTS_WORKER_TOKEN)")
		}
		if (o.consoleUser == "") != (o.consolePassword == "") {
			v.Add("console-password", "--console-user and --console-password go together")
		}
		if o.human == "console" && o.consoleUser == "" {
			v.Add("console-user", "is required for --human console with --url")
		}
	}
	if o.restartDB {
		if d, _, err := models.ParseDatabaseURL(o.databaseURL); err != nil || d != models.Postgres || (!o.ownServers() && !o.dbGiven) {
			v.Add("restart-db", "needs --database-url of a PostgreSQL database")
		} else if o.restartCmd == "" && !localDatabase(o.databaseURL) {
			v.Add("restart-db", "the database is not on this machine; give --restart-db-command")
		}
	}
	if err := v.Err(); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	return nil
}

// Run runs the drill command with args (the flags after `taskpilots drill`).
func Run(ctx context.Context, env *Env, args []string) error {
	o, err := drillFlags(env, args)
	if err != nil {
		return err
	}
	if o.queue != "" {
		return runQueueFault(ctx, env, o)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	d := newDrill(env, o)
	defer d.close()
	if err := d.setup(ctx); err != nil {
		d.dumpServerLogs()
		return fmt.Errorf("set up the drill: %w", err)
	}
	d.runScenario(ctx)
	rep := d.verify(ctx)
	d.stopServers()
	if !rep.OK {
		d.dumpServerLogs()
	}
	printDrillReport(env.Stdout, rep)
	if o.json {
		b, err := json.Marshal(rep)
		if err != nil {
			return fmt.Errorf("encode report: %w", err)
		}
		fmt.Fprintln(env.Stdout, string(b))
	}
	if !rep.OK {
		return &ExitError{Code: 1, Err: fmt.Errorf("drill failed: %s", cliout.Plural(rep.ViolationCount, "violation", "violations"))}
	}
	return nil
}

// drillReport is what a drill found. It is printed as a table and, with
// --json, as one JSON object on the last line of standard output.
type drillReport struct {
	OK             bool    `json:"ok"`
	RunID          string  `json:"run_id"`
	Queue          string  `json:"queue"`
	Mode           string  `json:"mode"` // own-servers or url
	Servers        int     `json:"servers"`
	Dialect        string  `json:"dialect,omitempty"`
	Seed           uint64  `json:"seed"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// ScenarioSeconds is the time from the first session to the last one
	// settling (or the --duration cap).
	ScenarioSeconds float64 `json:"scenario_seconds"`
	StoppedByCap    bool    `json:"stopped_by_duration"`

	Sessions     sessionCounts    `json:"sessions"`
	Faults       map[string]int   `json:"faults"`
	Chaos        chaosReport      `json:"chaos"`
	Expectations expectationStats `json:"expectations"`
	Retries      map[string]int64 `json:"retries"`
	Checks       checkStats       `json:"checks"`
	Metrics      *drillMetrics    `json:"metrics"`

	ViolationCount int      `json:"violation_count"`
	Violations     []string `json:"violations"`
}

type sessionCounts struct {
	Planned   int            `json:"planned"`
	Created   int            `json:"created"`
	Settled   int            `json:"settled"`
	Unsettled int            `json:"unsettled"`
	ByStatus  map[string]int `json:"by_status"`
	// Takeovers counts human takeovers by what the human did.
	Takeovers map[string]int `json:"takeovers"`
}

type chaosReport struct {
	ServerKills          int       `json:"server_kills"`
	ServerRestartSeconds []float64 `json:"server_restart_seconds"`
	DBRestarts           int       `json:"db_restarts"`
	DBOutageSeconds      []float64 `json:"db_outage_seconds"`
	DBRestartCommand     string    `json:"db_restart_command,omitempty"`
	Human                string    `json:"human"` // console, direct or none
}

// expectationStats counts the writes whose outcome the drill predicted:
// every injected fault and every ordinary write of the scenario.
type expectationStats struct {
	Checked int `json:"checked"`
	// Rejected counts the predicted refusals (409, 422, duplicate replays)
	// that came as predicted.
	Rejected   int `json:"rejected_as_expected"`
	Matched    int `json:"matched"`
	LeaseLost  int `json:"lease_lost"`
	Mismatches int `json:"mismatches"`
	// ByKind is expected/matched/mismatched per kind of write.
	ByKind map[string]*kindStats `json:"by_kind"`
}

type kindStats struct {
	Expected   string `json:"expected"`
	Count      int    `json:"count"`
	Matched    int    `json:"matched"`
	LeaseLost  int    `json:"lease_lost,omitempty"`
	Mismatches int    `json:"mismatches"`
}

type checkStats struct {
	SessionsChecked  int `json:"sessions_checked"`
	Events           int `json:"events"`
	Consistent       int `json:"consistent"`
	Inconsistent     int `json:"inconsistent"`
	DoubleApplied    int `json:"double_applied"`
	DuplicateKeys    int `json:"duplicate_idempotency_keys"`
	ChainProblems    int `json:"chain_problems"`
	ReplayMismatches int `json:"replay_mismatches"`
	// DBVerify is Store.Verify over the drill's sessions, when the drill
	// has the database.
	DBVerify *dbVerifyStats `json:"db_verify"`
	// DelegationRows reports whether delegation rows were checked against
	// each session's status (needs the database).
	DelegationRows bool `json:"delegation_rows_checked"`
}

type dbVerifyStats struct {
	Sessions int64 `json:"sessions"`
	Events   int64 `json:"events"`
	Problems int   `json:"problems"`
}

// drillMetrics are the product metrics of the drill's queue over the
// drill's window.
type drillMetrics struct {
	Source         string                 `json:"source"` // database or api
	From           time.Time              `json:"from"`
	To             time.Time              `json:"to"`
	HandoffSuccess models.HandoffSuccess  `json:"handoff_success"`
	Rework         models.Rework          `json:"rework"`
	InfraRetries   models.InfraRetries    `json:"infra_retries"`
	Recovery       models.Recovery        `json:"recovery"`
	StateConflicts *models.StateConflicts `json:"state_conflicts"`
}

func ratePct(r *float64) string {
	if r == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", *r*100)
}

func secs(r *float64) string {
	if r == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2fs", *r)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func joinCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func joinSeconds(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.1fs", x))
	}
	return strings.Join(parts, ", ")
}

// printDrillReport writes the report as a two-column table.
func printDrillReport(w io.Writer, r drillReport) {
	row := func(k, format string, args ...any) {
		fmt.Fprintf(w, "  %-22s %s\n", k, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(w, "\nTaskPilots recovery drill %s (queue %s, %s, %s, seed %d)\n", r.RunID, r.Queue, r.Mode,
		cliout.Plural(r.Servers, "server", "servers"), r.Seed)
	s := r.Sessions
	row("sessions", "%d planned, %d created, %d settled, %d unsettled", s.Planned, s.Created, s.Settled, s.Unsettled)
	row("final statuses", "%s", joinCounts(s.ByStatus))
	row("human takeovers", "%s (via %s)", joinCounts(s.Takeovers), r.Chaos.Human)
	capNote := ""
	if r.StoppedByCap {
		capNote = " (stopped by --duration)"
	}
	row("duration", "scenario %.1fs%s, total %.1fs", r.ScenarioSeconds, capNote, r.ElapsedSeconds)
	row("faults injected", "%s", joinCounts(r.Faults))
	c := r.Chaos
	if c.ServerKills > 0 {
		row("server kills", "%d (SIGKILL; back after %s)", c.ServerKills, joinSeconds(c.ServerRestartSeconds))
	} else {
		row("server kills", "0")
	}
	if c.DBRestarts > 0 {
		row("database restarts", "%d (outage %s: %s)", c.DBRestarts, joinSeconds(c.DBOutageSeconds), c.DBRestartCommand)
	} else {
		row("database restarts", "0")
	}
	e := r.Expectations
	row("expected outcomes", "%d of %d writes as predicted (%d refused as expected, %d fenced after a lost lease), %d mismatches",
		e.Matched+e.LeaseLost, e.Checked, e.Rejected, e.LeaseLost, e.Mismatches)
	for _, k := range sortedKeys(e.ByKind) {
		ks := e.ByKind[k]
		if ks.Mismatches > 0 {
			row("  mismatched", "%s: %d of %d (expected %s)", k, ks.Mismatches, ks.Count, ks.Expected)
		}
	}
	retries := map[string]int{}
	for k, v := range r.Retries {
		retries[k] = int(v)
	}
	row("client retries", "%s", joinCounts(retries))
	k := r.Checks
	row("consistency", "%d of %d sessions consistent with their delegations (rows checked: %t)",
		k.Consistent, k.SessionsChecked, k.DelegationRows)
	row("applied twice", "%d transitions, %d duplicate idempotency keys", k.DoubleApplied, k.DuplicateKeys)
	row("replay = projection", "%d mismatches; hash chains: %d problems over %d events", k.ReplayMismatches, k.ChainProblems, k.Events)
	if k.DBVerify != nil {
		row("store verify", "%d sessions, %d events, %d problems", k.DBVerify.Sessions, k.DBVerify.Events, k.DBVerify.Problems)
	} else {
		row("store verify", "not run (no --database-url)")
	}
	if m := r.Metrics; m != nil {
		row("handoff success", "%s (%d of %d delegations ended on their first lease)", ratePct(m.HandoffSuccess.Rate),
			m.HandoffSuccess.Succeeded, m.HandoffSuccess.Ended)
		row("rework", "%s (%d of %d sessions, %d re-delegations)", ratePct(m.Rework.Rate), m.Rework.Reworked,
			m.Rework.Sessions, m.Rework.Redelegations)
		row("infra retries", "%d (%d lease expiries, %d transient failures; %d of %d sessions)", m.InfraRetries.Retries,
			m.InfraRetries.LeaseExpiries, m.InfraRetries.TransientFailures, m.InfraRetries.Affected, m.InfraRetries.Sessions)
		mr, hw := m.Recovery.Machine, m.Recovery.Human
		row("mean recovery time", "machine %s (%d recoveries, max %s), human wait %s (%d, max %s)",
			secs(mr.MeanSeconds), mr.Recoveries, secs(mr.MaxSeconds), secs(hw.MeanSeconds), hw.Recoveries, secs(hw.MaxSeconds))
		if sc := m.StateConflicts; sc != nil {
			per := "n/a"
			if sc.PerThousand != nil {
				per = fmt.Sprintf("%.1f", *sc.PerThousand)
			}
			row("state conflict rate", "%s per 1000 writes (%d of %d; %d replays apart), applied conflicts %d", per,
				sc.Conflicts, sc.WriteAttempts, sc.Replays, sc.AppliedConflicts)
		}
	} else {
		row("metrics", "unavailable")
	}
	verdict := "PASS"
	if !r.OK {
		verdict = fmt.Sprintf("FAIL (%s)", cliout.Plural(r.ViolationCount, "violation", "violations"))
	}
	row("result", "%s", verdict)
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  violation: %s\n", v)
	}
	if r.ViolationCount > len(r.Violations) {
		fmt.Fprintf(w, "  … and %d more\n", r.ViolationCount-len(r.Violations))
	}
}

// errDrillStopped ends a session script when the scenario is over.
var errDrillStopped = errors.New("the scenario ended")

// Report is what a drill found (the --json report).
type Report = drillReport
