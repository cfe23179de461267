package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// TestServeRefusesNewerSchema: a database migrated by a newer binary must
// not be served, migrated or written to by this one.
func TestServeRefusesNewerSchema(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		migratedURL(t, dbURL)
		s := openTestStore(t, dbURL)
		if err := s.DB.Exec(`INSERT INTO goose_db_version (version_id, is_applied) VALUES (?, ?)`, 99999, true).Error; err != nil {
			t.Fatalf("pretend a newer binary migrated: %v", err)
		}

		r := runCLI(t, nil, "", "serve", "--database-url", dbURL, "--addr", "127.0.0.1:0", "--demo=false")
		if r.code == 0 {
			t.Fatalf("serve on a newer schema exited 0")
		}
		wantContains(t, "serve", r.stderr, "newer than this binary", "database at 99999", "migrated by a newer taskpilots")
		if strings.Contains(r.stderr, "password:") {
			t.Errorf("serve created an admin user on a schema it refused")
		}
		if n, err := s.CountUsers(context.Background()); err != nil || n != 0 {
			t.Fatalf("users after refusal: %d, %v", n, err)
		}

		r = runCLI(t, nil, "", "migrate", "up", "--database-url", dbURL)
		if r.code == 0 || !strings.Contains(r.stderr, "newer than this binary") {
			t.Fatalf("migrate up on a newer schema: %d", r.code)
		}
		r = runCLI(t, nil, "", "migrate", "down", "--database-url", dbURL)
		if r.code == 0 || !strings.Contains(r.stderr, "newer than this binary") {
			t.Fatalf("migrate down on a newer schema: %d", r.code)
		}
		r = runCLI(t, nil, "", "migrate", "status", "--database-url", dbURL)
		wantContains(t, "status", r.stdout, "current version: 99999\n", "state: newer than this binary")
	})
}

var passwordLine = regexp.MustCompile(`(?m)^\s+password: (\S+)$`)

// TestPrepareServe covers the start-up path on an empty database: migrate,
// first admin (password shown once), then nothing printed on a restart.
func TestPrepareServe(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		ctx := context.Background()
		s := openTestStore(t, dbURL)
		var errb, logb bytes.Buffer
		env := &cliEnv{stderr: &errb, stdout: &bytes.Buffer{}, getenv: func(string) string { return "" },
			log: slog.New(slog.NewTextHandler(&logb, nil))}
		if err := prepareServe(ctx, env, s, true); err != nil {
			t.Fatalf("prepareServe: %v", err)
		}
		if err := s.CheckSchema(ctx); err != nil {
			t.Fatalf("schema after start-up: %v", err)
		}
		m := passwordLine.FindStringSubmatch(errb.String())
		if m == nil {
			t.Fatalf("no admin password on stderr:\n%s", errb.String())
		}
		u, err := s.Authenticate(ctx, "admin@localhost.localdomain", m[1])
		if err != nil || u.Role != "admin" {
			t.Fatalf("printed admin password does not log in: %+v, %v", u, err)
		}
		// Printed once, to the terminal: never through the logger, whose
		// lines end up in log files; and it must be changed at once.
		if n := strings.Count(errb.String(), m[1]); n != 1 {
			t.Errorf("password printed %d times on stderr", n)
		}
		if strings.Contains(logb.String(), m[1]) {
			t.Errorf("password written through the logger:\n%s", logb.String())
		}
		if !u.MustChangePassword || !strings.Contains(errb.String(), "choose your own") {
			t.Errorf("first admin: must change %v; the note says:\n%s", u.MustChangePassword, errb.String())
		}
		wantDemo(t, s, errb.String()+logb.String(), s.Dialect == models.SQLite)

		errb.Reset()
		logb.Reset()
		if err := prepareServe(ctx, env, s, true); err != nil {
			t.Fatalf("second prepareServe: %v", err)
		}
		if strings.Contains(errb.String()+logb.String(), "password") {
			t.Fatalf("second start printed a password again:\n%s", errb.String())
		}
	})
}

var demoLine = regexp.MustCompile(`(?m)^\s+(\S+@demo\.local)\s+(\w+)\s+password (\S+)$`)

// wantDemo checks the demo data of a database prepared by serve: with demo
// true, both demo users were printed with passwords that log them in, and
// there are demo sessions; with demo false, no demo user and no session.
func wantDemo(t *testing.T, s *models.Store, out string, demo bool) {
	t.Helper()
	ctx := context.Background()
	page, err := s.ListSessions(ctx, models.SessionQuery{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	users, err := s.ListUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var demoUsers int
	for _, u := range users {
		if strings.HasSuffix(u.Email, "@demo.local") {
			demoUsers++
		}
	}
	lines := demoLine.FindAllStringSubmatch(out, -1)
	if !demo {
		if demoUsers != 0 || len(page.Sessions) != 0 || len(lines) != 0 {
			t.Fatalf("%d demo users, %d sessions, %d demo password lines on a database that must get no demo data:\n%s",
				demoUsers, len(page.Sessions), len(lines), out)
		}
		return
	}
	if demoUsers != 2 || len(lines) != 2 || len(page.Sessions) == 0 {
		t.Fatalf("%d demo users, %d printed, %d sessions:\n%s", demoUsers, len(lines), len(page.Sessions), out)
	}
	for _, l := range lines {
		u, err := s.Authenticate(ctx, l[1], l[3])
		if err != nil || string(u.Role) != l[2] {
			t.Fatalf("printed demo password of %s does not log in: %+v, %v", l[1], u, err)
		}
	}
}

// TestServeDemoOnlyIntoNewDatabase: a database that had users before serve
// started gets no demo users (nor demo sessions, which need them), even on
// SQLite and even with no sessions.
func TestServeDemoOnlyIntoNewDatabase(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t, "sqlite:"+filepath.Join(t.TempDir(), "users.db"))
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateUser(ctx, models.CreateUserInput{Email: "ops@example.com", Name: "Ops", Role: models.RoleAdmin,
		Password: "a real password"}); err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	env := &cliEnv{stderr: &errb, stdout: io.Discard, getenv: func(string) string { return "" },
		log: slog.New(slog.NewTextHandler(&errb, nil))}
	if err := prepareServe(ctx, env, s, true); err != nil {
		t.Fatal(err)
	}
	wantDemo(t, s, errb.String(), false)
	wantContains(t, "log", errb.String(), "no demo data")
}

func TestServeFlags(t *testing.T) {
	env := func(vars map[string]string) *cliEnv {
		return &cliEnv{stderr: &bytes.Buffer{}, getenv: func(k string) string { return vars[k] }}
	}
	o, err := serveFlags(env(nil), nil)
	if err != nil || o.web.Addr != web.DefaultAddr || !o.demo || o.databaseURL != "./data/taskpilots.db" {
		t.Fatalf("defaults = %+v, %v", o, err)
	}
	o, err = serveFlags(env(map[string]string{"TASKPILOTS_ADDR": ":9000", "TASKPILOTS_DEMO": "false", "TASKPILOTS_DATABASE_URL": "sqlite:/tmp/x.db"}), nil)
	if err != nil || o.web.Addr != ":9000" || o.demo || o.databaseURL != "sqlite:/tmp/x.db" {
		t.Fatalf("from env = %+v, %v", o, err)
	}
	// Flags win over the environment.
	o, err = serveFlags(env(map[string]string{"TASKPILOTS_ADDR": ":9000"}), []string{"--addr", "127.0.0.1:7000", "--demo=true"})
	if err != nil || o.web.Addr != "127.0.0.1:7000" || !o.demo {
		t.Fatalf("flags = %+v, %v", o, err)
	}
	// 0 means "no double reviews" on the command line, where web.Config's
	// zero value would mean "the default share".
	o, err = serveFlags(env(map[string]string{"TASKPILOTS_REVIEW_DOUBLE_SHARE": "0"}), nil)
	if err != nil || o.web.Reviews.DoubleShare >= 0 {
		t.Fatalf("double share 0 = %+v, %v", o.web.Reviews, err)
	}
	o, err = serveFlags(env(nil), []string{"--review-double-share", "0.25", "--review-claim-ttl", "5m"})
	if err != nil || o.web.Reviews.DoubleShare != 0.25 || o.web.Reviews.ClaimTTL != 5*time.Minute {
		t.Fatalf("reviews = %+v, %v", o.web.Reviews, err)
	}
	if _, err := serveFlags(env(nil), []string{"--review-double-share", "1.5", "--body-limit", "0"}); err == nil ||
		!strings.Contains(err.Error(), "review-double-share") || !strings.Contains(err.Error(), "body-limit") {
		t.Fatalf("out-of-range flags: %v", err)
	}
	if _, err := serveFlags(env(map[string]string{"TASKPILOTS_DEMO": "maybe"}), nil); err == nil || !strings.Contains(err.Error(), "TASKPILOTS_DEMO") {
		t.Fatalf("malformed TASKPILOTS_DEMO: %v", err)
	}
}

// lockedBuffer is a bytes.Buffer that the server's goroutines and the test
// may use at the same time.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var (
	listeningURL = regexp.MustCompile(`msg=listening url=(http://\S+/)`)
	seededCount  = regexp.MustCompile(`seeded demo sessions.* sessions=(\d+)`)
)

// TestServeFromEmptyDirectory is a first-time user: no configuration, an
// empty directory, `taskpilots serve`. It must create ./data/taskpilots.db,
// print the admin password, seed the demo data, answer HTTP, and stop
// cleanly when interrupted.
func TestServeFromEmptyDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	logs := &lockedBuffer{}
	env := &cliEnv{stdin: strings.NewReader(""), stdout: io.Discard, stderr: logs,
		// Port 0: the kernel picks a free one, which the server then logs.
		getenv: func(k string) string {
			if k == "TASKPILOTS_ADDR" {
				return "127.0.0.1:0"
			}
			return ""
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- run(ctx, env, []string{"serve"}) }()

	var base string
	for base == "" {
		select {
		case code := <-done:
			t.Fatalf("serve exited %d before listening:\n%s", code, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if m := listeningURL.FindStringSubmatch(logs.String()); m != nil {
			base = m[1]
		}
	}
	for _, path := range []string{"healthz", "readyz"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET /%s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /%s = %d", path, resp.StatusCode)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d after interrupt:\n%s", code, logs.String())
	}

	out := logs.String()
	if _, err := os.Stat(filepath.Join("data", "taskpilots.db")); err != nil {
		t.Fatalf("./data/taskpilots.db: %v", err)
	}
	if !passwordLine.MatchString(out) {
		t.Errorf("no admin password printed:\n%s", out)
	}
	wantDemo(t, openTestStore(t, models.DefaultDatabaseURL), out, true)
	// The demo data went through the real write path, so it verifies clean.
	s := openTestStore(t, models.DefaultDatabaseURL)
	page, err := s.ListSessions(context.Background(), models.SessionQuery{Limit: models.MaxSessionsLimit})
	if err != nil {
		t.Fatal(err)
	}
	rows := page.Sessions
	want := 0
	if m := seededCount.FindStringSubmatch(out); m != nil {
		want, _ = strconv.Atoi(m[1])
	}
	if len(rows) != want {
		t.Errorf("%d sessions in the database, the log says %d were seeded", len(rows), want)
	}
	if r := runCLI(t, nil, "", "verify", "--quiet"); r.code != 0 {
		t.Errorf("verify after the demo seed exited %d", r.code)
	}
}

// TestServeWithoutDemo: --demo=false leaves an empty database empty.
func TestServeWithoutDemo(t *testing.T) {
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "nodemo.db")
	s := openTestStore(t, dbURL)
	env := &cliEnv{stderr: io.Discard, stdout: io.Discard, getenv: func(string) string { return "" },
		log: slog.New(slog.DiscardHandler)}
	if err := prepareServe(context.Background(), env, s, false); err != nil {
		t.Fatal(err)
	}
	if page, _ := s.ListSessions(context.Background(), models.SessionQuery{}); len(page.Sessions) != 0 {
		t.Fatalf("%d sessions without --demo", len(page.Sessions))
	}
}

// TestReadmeDocumentsServeFlags keeps the configuration table honest: every
// serve flag and its variable must appear in README.md.
func TestReadmeDocumentsServeFlags(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	envName := regexp.MustCompile(`\(env (TASKPILOTS_[A-Z_]+)\)`)
	var o serveOpts
	env := &cliEnv{stderr: io.Discard, getenv: func(string) string { return "" }}
	fs := serveFlagSet(env, &o, newEnvDefaults(env))
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		m := envName.FindStringSubmatch(f.Usage)
		if m == nil {
			t.Errorf("flag --%s has no (env TASKPILOTS_…) in its usage", f.Name)
			return
		}
		row := "| `--" + f.Name + "` | `" + m[1] + "` |"
		if !strings.Contains(string(readme), row) {
			t.Errorf("README.md has no configuration row starting %q", row)
		}
	})
	if n < 10 {
		t.Fatalf("only %d serve flags", n)
	}
}

// TestServeLogRedactsDatabasePassword: a password given in the database
// URL's query (or userinfo) never reaches the start-up log line or the
// output of `migrate status`.
func TestServeLogRedactsDatabasePassword(t *testing.T) {
	const secret = "s3cret-in-query"
	dbURL := storetest.NewURL(t, models.Postgres)
	if strings.Contains(dbURL, "?") {
		dbURL += "&password=" + secret
	} else {
		dbURL += "?password=" + secret
	}
	// The test cluster trusts local connections, so the password is ignored
	// by the server; what matters is where it is printed. An address that
	// cannot be listened on ends serve right after its start-up line.
	r := runCLI(t, nil, "", "serve", "--database-url", dbURL, "--addr", "127.0.0.1:99999", "--demo=false")
	if !strings.Contains(r.stderr, "starting TaskPilots Handoff") {
		t.Fatalf("no start-up line in the log:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "password=xxxxx") {
		t.Errorf("the start-up line does not show the redacted URL:\n%s", r.stderr)
	}
	r2 := runCLI(t, nil, "", "migrate", "status", "--database-url", dbURL)
	// -h prints the flag's default, which comes from the environment.
	env := map[string]string{"TASKPILOTS_DATABASE_URL": dbURL}
	h1, h2 := runCLI(t, env, "", "serve", "-h"), runCLI(t, env, "", "migrate", "status", "-h")
	for name, out := range map[string]string{"serve": r.stdout + r.stderr, "migrate status": r2.stdout + r2.stderr,
		"serve -h": h1.stdout + h1.stderr, "migrate status -h": h2.stdout + h2.stderr} {
		if strings.Contains(out, secret) {
			t.Errorf("%s printed the database password:\n%s", name, out)
		}
	}
}

// TestServeRetentionFlags: defaults, the variables, 0 as "keep forever".
func TestServeRetentionFlags(t *testing.T) {
	env := func(vars map[string]string) *cliEnv {
		return &cliEnv{stderr: &bytes.Buffer{}, getenv: func(k string) string { return vars[k] }}
	}
	o, err := serveFlags(env(nil), nil)
	if err != nil || o.retention.IdempotencyKeys != 7*24*time.Hour || o.retention.Rejections != 30*24*time.Hour {
		t.Fatalf("retention defaults = %+v, %v", o.retention, err)
	}
	o, err = serveFlags(env(map[string]string{"TASKPILOTS_IDEMPOTENCY_KEY_TTL": "48h", "TASKPILOTS_REJECTION_RETENTION": "0"}), nil)
	if err != nil || o.retention.IdempotencyKeys != 48*time.Hour || o.retention.Rejections >= 0 {
		t.Fatalf("retention from env = %+v, %v", o.retention, err)
	}
	if _, err := serveFlags(env(nil), []string{"--idempotency-key-ttl", "-1h"}); err == nil || !strings.Contains(err.Error(), "idempotency-key-ttl") {
		t.Fatalf("negative ttl: %v", err)
	}
}

// TestServeReplicaFlag: --database-read-url (and its variable) needs
// PostgreSQL on both sides, said at start with exit status 2.
func TestServeReplicaFlag(t *testing.T) {
	env := func(vars map[string]string) *cliEnv {
		return &cliEnv{stderr: &bytes.Buffer{}, getenv: func(k string) string { return vars[k] }}
	}
	pg := "postgres://u@db:5432/x"
	o, err := serveFlags(env(map[string]string{"TASKPILOTS_DATABASE_URL": pg, "TASKPILOTS_DATABASE_READ_URL": "postgres://u@standby:5432/x"}), nil)
	if err != nil || o.readURL != "postgres://u@standby:5432/x" {
		t.Fatalf("read url from env = %q, %v", o.readURL, err)
	}
	for _, args := range [][]string{
		{"--database-read-url", "postgres://u@standby:5432/x"}, // SQLite default database
		{"--database-url", pg, "--database-read-url", "sqlite:/tmp/r.db"},
	} {
		_, err := serveFlags(env(nil), args)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "database-read-url") || !strings.Contains(err.Error(), "PostgreSQL") {
			t.Fatalf("serve %v: %v, want a usage error naming database-read-url", args, err)
		}
	}
}

// TestServeIndexUpkeepFlag: the index upkeep runs every ten minutes by
// default, never with 0, and a negative period is a usage error.
func TestServeIndexUpkeepFlag(t *testing.T) {
	env := func(vars map[string]string) *cliEnv {
		return &cliEnv{stderr: &bytes.Buffer{}, getenv: func(k string) string { return vars[k] }}
	}
	o, err := serveFlags(env(nil), nil)
	if err != nil || o.web.IndexUpkeepEvery != models.DefaultIndexUpkeepEvery {
		t.Fatalf("default = %v, %v", o.web.IndexUpkeepEvery, err)
	}
	o, err = serveFlags(env(map[string]string{"TASKPILOTS_INDEX_UPKEEP_EVERY": "0"}), nil)
	if err != nil || o.web.IndexUpkeepEvery >= 0 {
		t.Fatalf("0 from env = %v, %v; want never (negative)", o.web.IndexUpkeepEvery, err)
	}
	if _, err := serveFlags(env(nil), []string{"--index-upkeep-every", "-1m"}); err == nil || !strings.Contains(err.Error(), "index-upkeep-every") {
		t.Fatalf("negative period: %v", err)
	}
}
