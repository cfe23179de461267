package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/demo"
	"github.com/taskpilots/handoff/web"
)

func init() {
	commands["serve"] = command{
		summary: "migrate the database and serve the console and the JSON API",
		run:     runServe,
	}
}

// DefaultAddr is where serve listens unless told otherwise: loopback only,
// so that a first run on a laptop exposes nothing to the network. The worker
// uses it to find a local server.
const DefaultAddr = web.DefaultAddr

// serveOpts is everything serve reads from flags and the environment.
type serveOpts struct {
	databaseURL string
	// readURL is the read replica (--database-read-url); PostgreSQL only.
	readURL    string
	dbMaxConns int
	replicas   int
	// groupCommit and groupLanes become OpenOpts.GroupCommit, GroupLanes.
	groupCommit bool
	groupLanes  int
	demo        bool
	// leaseRecheck becomes the store's LeaseRecheck.
	leaseRecheck time.Duration
	// reviewDoubleShare is the flag's value: 0 means no double reviews,
	// where web.Config's zero means "the default".
	reviewDoubleShare float64
	// checkpointKeyPath and checkpointEvery are the flags' values; the key
	// is loaded (or created) by runServe.
	checkpointKeyPath string
	checkpointEvery   time.Duration
	// retention is the flags' values: 0 keeps the rows forever, where
	// models.RetentionPolicy's zero means "the default".
	retention models.RetentionPolicy
	web       web.Config
}

// serveFlagSet registers serve's flags, each defaulting to its TASKPILOTS_*
// variable. Every usage string ends in "(env NAME)": the README test relies
// on it to check that each flag is documented.
func serveFlagSet(env *cliEnv, o *serveOpts, d *envDefaults) *flag.FlagSet {
	fs := newFlagSet(env, "serve")
	fs.StringVar(&o.databaseURL, "database-url", d.String("TASKPILOTS_DATABASE_URL", models.DefaultDatabaseURL),
		"postgres://… URL, sqlite:PATH or a path ending in .db (env TASKPILOTS_DATABASE_URL)")
	redactDefault(fs, "database-url")
	fs.StringVar(&o.readURL, "database-read-url", d.String("TASKPILOTS_DATABASE_READ_URL", ""),
		"postgres:// URL of a streaming-replication standby of the database: console lists, the audit trail, metrics and "+
			"API reads go there, a reader's own writes stay visible to it, and reads use the primary while it is down; "+
			"PostgreSQL only; empty: every read goes to the primary (env TASKPILOTS_DATABASE_READ_URL)")
	redactDefault(fs, "database-read-url")
	fs.IntVar(&o.dbMaxConns, "db-max-conns", d.Int("TASKPILOTS_DB_MAX_CONNS", 0),
		"PostgreSQL connection pool size of this process; 0: 20, or less to fit the server's max_connections "+
			"shared by --replicas processes; a size that cannot fit is refused at start (env TASKPILOTS_DB_MAX_CONNS)")
	fs.IntVar(&o.replicas, "replicas", d.Int("TASKPILOTS_REPLICAS", 1),
		"how many server processes share the PostgreSQL database, for sizing each one's pool (env TASKPILOTS_REPLICAS)")
	fs.BoolVar(&o.groupCommit, "group-commit", d.Bool("TASKPILOTS_GROUP_COMMIT", false),
		"commit concurrent writes together (PostgreSQL): writes that arrive while --group-lanes writes are in flight run as one "+
			"transaction in which each keeps its own outcome; at low load every write runs alone at once (env TASKPILOTS_GROUP_COMMIT)")
	fs.IntVar(&o.groupLanes, "group-lanes", d.Int("TASKPILOTS_GROUP_LANES", models.DefaultGroupLanes),
		"with --group-commit, how many writes or groups run at once before further writes wait for the next group (env TASKPILOTS_GROUP_LANES)")
	fs.BoolVar(&o.demo, "demo", d.Bool("TASKPILOTS_DEMO", true),
		"seed demo sessions and demo users into a new embedded SQLite database; never on PostgreSQL (env TASKPILOTS_DEMO)")
	fs.StringVar(&o.web.Addr, "addr", d.String("TASKPILOTS_ADDR", web.DefaultAddr),
		"listen address host:port; use :8080 to listen on every interface (env TASKPILOTS_ADDR)")
	fs.Int64Var(&o.web.BodyLimit, "body-limit", d.Int64("TASKPILOTS_BODY_LIMIT", web.DefaultBodyLimit),
		"largest request body in bytes; larger bodies get 413 (env TASKPILOTS_BODY_LIMIT)")
	fs.StringVar(&o.web.SessionKey, "session-key", d.String("TASKPILOTS_SESSION_KEY", ""),
		"secret of at least 32 characters that signs login cookies; replicas must share it; empty: random per process, "+
			"logins end at restart. Prefer the variable: flags show in ps (env TASKPILOTS_SESSION_KEY)")
	fs.BoolVar(&o.web.TrustProxy, "trust-proxy", d.Bool("TASKPILOTS_TRUST_PROXY", false),
		"honour X-Forwarded-For/-Proto from a reverse proxy; only behind one (env TASKPILOTS_TRUST_PROXY)")
	fs.DurationVar(&o.web.MaintainEvery, "maintain-every", d.Duration("TASKPILOTS_MAINTAIN_EVERY", web.DefaultMaintainEvery),
		"longest sleep of the maintenance loop, which otherwise wakes when a lease expires or a timer is due; "+
			"bounds how late a timer created by another replica is found if that replica stops (env TASKPILOTS_MAINTAIN_EVERY)")
	fs.DurationVar(&o.web.IndexUpkeepEvery, "index-upkeep-every", d.Duration("TASKPILOTS_INDEX_UPKEEP_EVERY", models.DefaultIndexUpkeepEvery),
		"how often to check the indexes of sessions for bloat and rebuild a bloated one with REINDEX CONCURRENTLY (PostgreSQL); 0: never (env TASKPILOTS_INDEX_UPKEEP_EVERY)")
	fs.DurationVar(&o.web.LeaseWaitMax, "lease-wait-max", d.Duration("TASKPILOTS_LEASE_WAIT_MAX", models.MaxWaitSeconds*time.Second),
		"longest a lease long poll may wait (env TASKPILOTS_LEASE_WAIT_MAX)")
	fs.DurationVar(&o.leaseRecheck, "lease-recheck", d.Duration("TASKPILOTS_LEASE_RECHECK", models.DefaultLeaseRecheck),
		"how often a waiting lease long poll looks at its queue when nothing woke it; new work wakes it at once (env TASKPILOTS_LEASE_RECHECK)")
	fs.DurationVar(&o.web.ShutdownTimeout, "shutdown-timeout", d.Duration("TASKPILOTS_SHUTDOWN_TIMEOUT", web.DefaultShutdownTimeout),
		"how long a graceful shutdown may take (env TASKPILOTS_SHUTDOWN_TIMEOUT)")
	fs.IntVar(&o.web.LoginFailuresPerAccount, "login-failures-per-account", d.Int("TASKPILOTS_LOGIN_FAILURES_PER_ACCOUNT", models.DefaultLoginFreePerPair),
		"failed logins per account from one client address before each further one doubles the wait, from 1s; "+
			"other addresses are not slowed (env TASKPILOTS_LOGIN_FAILURES_PER_ACCOUNT)")
	fs.IntVar(&o.web.LoginFailuresPerAddress, "login-failures-per-address", d.Int("TASKPILOTS_LOGIN_FAILURES_PER_ADDRESS", models.DefaultLoginFreePerAddress),
		"failed logins per client address, any account, before waits start (env TASKPILOTS_LOGIN_FAILURES_PER_ADDRESS)")
	fs.DurationVar(&o.web.LoginWindow, "login-window", d.Duration("TASKPILOTS_LOGIN_WINDOW", web.DefaultLoginWindow),
		"longest wait after failed logins, and the quiet time after which failures are forgotten (env TASKPILOTS_LOGIN_WINDOW)")
	fs.DurationVar(&o.web.LoginIdleTimeout, "login-idle-timeout", d.Duration("TASKPILOTS_LOGIN_IDLE_TIMEOUT", web.DefaultLoginIdle),
		"a browser login unused this long ends (env TASKPILOTS_LOGIN_IDLE_TIMEOUT)")
	fs.DurationVar(&o.web.LoginLifetime, "login-lifetime", d.Duration("TASKPILOTS_LOGIN_LIFETIME", web.DefaultLoginLifetime),
		"a browser login ends this long after sign-in, however busy (env TASKPILOTS_LOGIN_LIFETIME)")
	fs.Float64Var(&o.reviewDoubleShare, "review-double-share", d.Float64("TASKPILOTS_REVIEW_DOUBLE_SHARE", models.DefaultReviewDoubleShare),
		"share of escalations scored by two reviewers, 0 to 1 (env TASKPILOTS_REVIEW_DOUBLE_SHARE)")
	fs.DurationVar(&o.web.Reviews.ClaimTTL, "review-claim-ttl", d.Duration("TASKPILOTS_REVIEW_CLAIM_TTL", models.DefaultReviewClaimTTL),
		"how long a reviewer's claim on an item lasts (env TASKPILOTS_REVIEW_CLAIM_TTL)")
	checkpointKeyFlag(fs, d, &o.checkpointKeyPath)
	fs.DurationVar(&o.checkpointEvery, "checkpoint-every", d.Duration("TASKPILOTS_CHECKPOINT_EVERY", web.DefaultCheckpointEvery),
		"how often to sign a checkpoint over every session's head when anything changed; 0: only on demand (env TASKPILOTS_CHECKPOINT_EVERY)")
	fs.DurationVar(&o.retention.IdempotencyKeys, "idempotency-key-ttl", d.Duration("TASKPILOTS_IDEMPOTENCY_KEY_TTL", models.DefaultIdempotencyKeyTTL),
		"how long an idempotency key and its first outcome are kept; a retry with the key after that is a new command; "+
			"0: keep forever (env TASKPILOTS_IDEMPOTENCY_KEY_TTL)")
	fs.DurationVar(&o.retention.Rejections, "rejection-retention", d.Duration("TASKPILOTS_REJECTION_RETENTION", models.DefaultRejectionRetention),
		"how long the per-minute counters of rejected writes (the state conflict rate) are kept; 0: keep forever (env TASKPILOTS_REJECTION_RETENTION)")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots serve [flags]\n\nMigrates the database up, creates the first admin user if there is none,\n"+
			"seeds demo users and sessions into a new embedded SQLite database (never PostgreSQL),\n"+
			"printing every generated password once, then serves the console and the API.\n"+
			"Log verbosity: TASKPILOTS_LOG_LEVEL=debug|info|warn|error.\n\nflags:")
		fs.PrintDefaults()
	}
	return fs
}

// serveFlags parses serve's command line over its environment.
func serveFlags(env *cliEnv, args []string) (serveOpts, error) {
	var o serveOpts
	d := newEnvDefaults(env)
	fs := serveFlagSet(env, &o, d)
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if err := d.Err(); err != nil {
		return o, err
	}
	v := &models.ValidationError{}
	if o.readURL != "" {
		d, _, err := models.ParseDatabaseURL(o.databaseURL)
		rd, _, rerr := models.ParseDatabaseURL(o.readURL)
		if err == nil && (rerr != nil || d != models.Postgres || rd != models.Postgres) {
			v.Add("database-read-url", "needs PostgreSQL: a postgres:// standby of a postgres:// --database-url (SQLite has no read replicas)")
		}
	}
	if o.dbMaxConns < 0 {
		v.Add("db-max-conns", "must be 0 (derived) or more")
	}
	if o.replicas < 1 {
		v.Add("replicas", "must be at least 1")
	}
	if o.web.BodyLimit < 1 {
		v.Add("body-limit", "must be at least 1 byte")
	}
	if o.web.LoginFailuresPerAccount < 1 || o.web.LoginFailuresPerAddress < 1 {
		v.Add("login-failures-per-account/-address", "must be at least 1")
	}
	if o.web.LoginIdleTimeout > o.web.LoginLifetime {
		v.Add("login-idle-timeout", "must not be longer than --login-lifetime")
	}
	if o.reviewDoubleShare < 0 || o.reviewDoubleShare > 1 {
		v.Add("review-double-share", "must be between 0 and 1")
	}
	if o.checkpointEvery < 0 {
		v.Add("checkpoint-every", "must be 0 (on demand only) or a positive duration")
	}
	o.web.CheckpointEvery = o.checkpointEvery
	if o.checkpointEvery == 0 {
		o.web.CheckpointEvery = -1
	}
	if o.groupLanes < 1 {
		v.Add("group-lanes", "must be at least 1")
	}
	switch {
	case o.web.IndexUpkeepEvery < 0:
		v.Add("index-upkeep-every", "must be 0 (never) or a positive duration")
	case o.web.IndexUpkeepEvery == 0:
		o.web.IndexUpkeepEvery = -1 // web: never
	}
	for name, dur := range map[string]*time.Duration{"idempotency-key-ttl": &o.retention.IdempotencyKeys, "rejection-retention": &o.retention.Rejections} {
		switch {
		case *dur < 0:
			v.Add(name, "must be 0 (keep forever) or a positive duration")
		case *dur == 0:
			*dur = -1 // models: keep forever
		}
	}
	o.web.Reviews.DoubleShare = o.reviewDoubleShare
	if o.reviewDoubleShare == 0 {
		o.web.Reviews.DoubleShare = -1
	}
	for name, dur := range map[string]time.Duration{"maintain-every": o.web.MaintainEvery, "lease-wait-max": o.web.LeaseWaitMax,
		"lease-recheck":    o.leaseRecheck,
		"shutdown-timeout": o.web.ShutdownTimeout, "login-window": o.web.LoginWindow, "review-claim-ttl": o.web.Reviews.ClaimTTL,
		"login-idle-timeout": o.web.LoginIdleTimeout, "login-lifetime": o.web.LoginLifetime} {
		if dur <= 0 {
			v.Add(name, "must be a positive duration")
		}
	}
	if err := v.Err(); err != nil {
		return o, &exitError{code: 2, err: err}
	}
	o.web.Logger = env.log
	return o, nil
}

func runServe(ctx context.Context, env *cliEnv, args []string) error {
	o, err := serveFlags(env, args)
	if err != nil {
		return err
	}
	s, err := models.Open(ctx, o.databaseURL, models.OpenOpts{Logger: env.log, MaxOpenConns: o.dbMaxConns, Replicas: o.replicas, ReadURL: o.readURL,
		GroupCommit: o.groupCommit, GroupLanes: o.groupLanes})
	if err != nil {
		return err
	}
	defer s.Close()
	s.LeaseRecheck = o.leaseRecheck
	s.Retention = o.retention
	if err := prepareServe(ctx, env, s, o.demo); err != nil {
		return err
	}
	if o.web.CheckpointKey, err = checkpointKey(env, o.databaseURL, o.checkpointKeyPath, true); err != nil {
		return fmt.Errorf("checkpoint key: %w", err)
	}
	if o.readURL != "" {
		env.log.Info("reads may use a read replica", "database_read", redactURL(o.readURL))
	}
	env.log.Info("starting TaskPilots Handoff", "database", redactURL(s.URL()), "dialect", s.Dialect, "addr", o.web.Addr)
	if err := web.Serve(ctx, s, o.web); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// prepareServe brings a database to the point where the server may run on
// it: schema migrated (never past what this binary knows), a first admin
// user, and, when asked for, demo users and sessions in a new embedded
// SQLite database (seedDemo).
func prepareServe(ctx context.Context, env *cliEnv, s *models.Store, withDemo bool) error {
	applied, err := s.MigrateUp(ctx)
	if err != nil {
		return schemaError(err)
	}
	if len(applied) > 0 {
		env.log.Info("applied migrations", "versions", applied, "dialect", s.Dialect)
	}
	// Counted before the first admin is made: demo users may only join a
	// database that had no users at all.
	users, err := s.CountUsers(ctx)
	if err != nil {
		return fmt.Errorf("count users: %w", err)
	}
	email, password, created, err := s.EnsureAdmin(ctx)
	if err != nil {
		return fmt.Errorf("create the first admin user: %w", err)
	}
	if created {
		// Printed once, to the terminal (stderr), never through the
		// structured logger, whose lines may be shipped to and kept in log
		// files: the password is not stored in clear anywhere, so this is
		// the user's one chance to copy it, and it must be replaced at the
		// first sign-in (models.EnsureAdmin sets must_change_password).
		line := strings.Repeat("=", 66)
		fmt.Fprintf(env.stderr, "\n%s\n  Created the first admin user of this database.\n\n"+
			"    email:    %s\n    password: %s\n\n"+
			"  The password is shown only this once: copy it now. It is a\n"+
			"  one-time password: the console asks you to choose your own at\n"+
			"  the first sign-in. `taskpilots user create` adds more users.\n%s\n\n",
			line, email, password, line)
	}
	// Earlier releases gave the demo users a published password, on any
	// database; such accounts are closed whatever --demo says.
	retired, err := demo.RetireLegacyAccounts(ctx, s, operator(env))
	if err != nil {
		return err
	}
	if len(retired) > 0 {
		env.log.Warn("disabled demo users that still had the published demo password of earlier releases; "+
			"an admin may enable them and reset their passwords in the console", "users", retired)
	}
	if !withDemo {
		return nil
	}
	return seedDemo(ctx, env, s, users)
}

// seedDemo seeds the demo data into a database made for trying the product:
// embedded SQLite, with no users before this start and no sessions. Never
// PostgreSQL (production), and never a database with real users: the demo
// users are console accounts, and however random their passwords, nobody
// asked for them there. Each demo user's password is printed once, beside
// the first admin's.
func seedDemo(ctx context.Context, env *cliEnv, s *models.Store, usersBefore int64) error {
	some, err := s.ListSessions(ctx, models.SessionQuery{Limit: 1})
	if err != nil {
		return fmt.Errorf("check for existing sessions: %w", err)
	}
	if len(some.Sessions) > 0 {
		return nil
	}
	if s.Dialect != models.SQLite || usersBefore > 0 {
		env.log.Info("no demo data: it is seeded only into a new embedded SQLite database",
			"dialect", s.Dialect, "users_before", usersBefore)
		return nil
	}
	res, err := demo.Seed(ctx, s)
	if len(res.Accounts) > 0 {
		// Printed even when the seed failed later on: the users exist.
		line := strings.Repeat("=", 66)
		fmt.Fprintf(env.stderr, "%s\n  Created demo users (this demo database only).\n\n", line)
		for _, a := range res.Accounts {
			fmt.Fprintf(env.stderr, "    %-21s %-9s password %s\n", a.Email, a.Role, a.Password)
		}
		fmt.Fprintf(env.stderr, "\n  Their passwords are shown only this once, like the admin's.\n%s\n\n", line)
	}
	if err != nil {
		return fmt.Errorf("seed demo data (start with --demo=false to skip it): %w", err)
	}
	if res.Sessions > 0 {
		env.log.Info("seeded demo sessions into the empty database", "sessions", res.Sessions)
	}
	return nil
}
