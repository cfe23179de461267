package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// cliResult is what one in-process run of the binary produced.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs the binary's run function in-process with the given standard
// input and environment (nothing leaks in from the test process's own).
func runCLI(t *testing.T, vars map[string]string, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	env := &cliEnv{
		stdin:  strings.NewReader(stdin),
		stdout: &out,
		stderr: &errb,
		getenv: func(k string) string { return vars[k] },
	}
	env.log = slog.New(slog.NewTextHandler(&errb, nil))
	code := run(context.Background(), env, args)
	r := cliResult{code: code, stdout: out.String(), stderr: errb.String()}
	t.Logf("taskpilots %s → %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, r.stdout, r.stderr)
	return r
}

// eachURL runs fn once per dialect, in parallel, with a fresh unmigrated
// database URL.
func eachURL(t *testing.T, fn func(t *testing.T, dbURL string)) {
	t.Helper()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			fn(t, storetest.NewURL(t, d))
		})
	}
}

// migratedURL returns dbURL after `migrate up` succeeded on it.
func migratedURL(t *testing.T, dbURL string) string {
	t.Helper()
	if r := runCLI(t, nil, "", "migrate", "up", "--database-url", dbURL); r.code != 0 {
		t.Fatalf("migrate up exited %d: %s", r.code, r.stderr)
	}
	return dbURL
}

// openTestStore opens dbURL for assertions and closes it at the end.
func openTestStore(t *testing.T, dbURL string) *models.Store {
	t.Helper()
	s, err := models.Open(context.Background(), dbURL, models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open %s: %v", dbURL, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func dialectOf(dbURL string) models.Dialect {
	d, _, _ := models.ParseDatabaseURL(dbURL)
	return d
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}

func TestMigrateStatusUpDownUp(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		latest, err := latestSchema()
		if err != nil || latest < 1 {
			t.Fatalf("latestSchema = %d, %v", latest, err)
		}
		db := []string{"--database-url", dbURL}

		r := runCLI(t, nil, "", append([]string{"migrate", "status"}, db...)...)
		if r.code != 0 {
			t.Fatalf("status on an empty database exited %d", r.code)
		}
		wantContains(t, "status before up", r.stdout, "current version: 0\n", "state: pending migrations")

		r = runCLI(t, nil, "", append([]string{"migrate", "up"}, db...)...)
		if r.code != 0 {
			t.Fatalf("up exited %d", r.code)
		}
		wantContains(t, "up", r.stdout, "applied migration 1\n")

		// Flags may also come before the action.
		r = runCLI(t, nil, "", append(append([]string{"migrate"}, db...), "status")...)
		wantContains(t, "status after up", r.stdout, "pending: none\n", "state: up to date\n")
		if r.code != 0 || !strings.Contains(r.stdout, "current version: ") || strings.Contains(r.stdout, "current version: 0\n") {
			t.Fatalf("status after up: code %d", r.code)
		}

		r = runCLI(t, nil, "", append([]string{"migrate", "up"}, db...)...)
		wantContains(t, "second up", r.stdout, "nothing to apply")

		// Roll everything back, one migration at a time, then up again: the
		// down sections must really undo the up sections.
		files, err := models.MigrationFiles(dialectOf(dbURL))
		if err != nil || len(files) == 0 {
			t.Fatalf("migration files: %v, %v", files, err)
		}
		for range files {
			r = runCLI(t, nil, "", append([]string{"migrate", "down"}, db...)...)
			if r.code != 0 {
				t.Fatalf("down exited %d", r.code)
			}
			wantContains(t, "down", r.stdout, "rolled back migration ")
		}
		r = runCLI(t, nil, "", append([]string{"migrate", "status"}, db...)...)
		wantContains(t, "status after down", r.stdout, "current version: 0\n")
		r = runCLI(t, nil, "", append([]string{"migrate", "down"}, db...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "nothing to roll back") {
			t.Fatalf("down with nothing applied: %d", r.code)
		}

		r = runCLI(t, nil, "", append([]string{"migrate", "up"}, db...)...)
		if r.code != 0 {
			t.Fatalf("up after down exited %d", r.code)
		}
		s := openTestStore(t, dbURL)
		if err := s.CheckSchema(context.Background()); err != nil {
			t.Fatalf("schema after down and up: %v", err)
		}
		storetest.Session(context.Background(), t, s, nil)
	})
}

func TestMigrateUsage(t *testing.T) {
	dir := t.TempDir()
	dbURL := "sqlite:" + filepath.Join(dir, "x.db")
	for _, args := range [][]string{
		{"migrate"},
		{"migrate", "sideways", "--database-url", dbURL},
		{"migrate", "up", "down", "--database-url", dbURL},
		{"migrate", "--no-such-flag", "up"},
	} {
		if r := runCLI(t, nil, "", args...); r.code != 2 {
			t.Errorf("%q exited %d, want 2 (usage)", args, r.code)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.db")); err == nil {
		t.Errorf("a usage error created the database file")
	}
}

// TestDefaultDatabaseIsCreated runs in a fresh directory with no
// configuration at all, as a first-time user would.
func TestDefaultDatabaseIsCreated(t *testing.T) {
	t.Chdir(t.TempDir())
	r := runCLI(t, nil, "", "migrate", "up")
	if r.code != 0 {
		t.Fatalf("migrate up with no configuration exited %d", r.code)
	}
	if _, err := os.Stat(filepath.FromSlash(models.DefaultDatabaseURL)); err != nil {
		t.Fatalf("default database not created: %v", err)
	}
}

func TestParseArgsIntersperses(t *testing.T) {
	env := &cliEnv{stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }}
	fs := newFlagSet(env, "x")
	a := fs.String("a", "", "")
	b := fs.Bool("b", false, "")
	pos, err := parseArgs(fs, []string{"one", "-a", "x", "two", "-b", "--", "-three"})
	if err != nil {
		t.Fatal(err)
	}
	if *a != "x" || !*b || strings.Join(pos, ",") != "one,two,-three" {
		t.Fatalf("a=%q b=%v pos=%q", *a, *b, pos)
	}
}
