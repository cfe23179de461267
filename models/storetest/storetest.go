// Package storetest gives tests a migrated, private database: a fresh schema
// on the real PostgreSQL or a fresh SQLite file, so tests run in parallel.
//
// PostgreSQL tests never skip: when the server does not answer, they fail and
// say how to start it. `make test` starts a throwaway cluster when needed.
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver for schema setup
	"golang.org/x/crypto/bcrypt"

	"github.com/taskpilots/handoff/models"
)

// DefaultPostgresURL is used when TASKPILOTS_TEST_DATABASE_URL is unset.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func init() {
	// Passwords in tests need not resist brute force; keep them fast.
	models.BcryptCost = bcrypt.MinCost
}

// PostgresURL is the base URL of the test server.
func PostgresURL() string {
	if u := os.Getenv("TASKPILOTS_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultPostgresURL
}

var (
	adminOnce sync.Once
	adminDB   *sql.DB
	adminErr  error
)

func admin() (*sql.DB, error) {
	adminOnce.Do(func() {
		adminDB, adminErr = sql.Open("pgx", PostgresURL())
		if adminErr == nil {
			adminDB.SetMaxOpenConns(4)
			adminErr = adminDB.Ping()
		}
	})
	return adminDB, adminErr
}

// Dialects are the dialects Each runs on: both, unless
// TASKPILOTS_TEST_DIALECTS names some (comma-separated). `make test` runs
// the race detector with Each on PostgreSQL only and the SQLite subtests in
// a run of their own without it: our concurrent code is the same on both
// dialects, and the race-instrumented pure-Go SQLite cost a third of the
// race run.
var Dialects = dialectsFromEnv(os.Getenv("TASKPILOTS_TEST_DIALECTS"))

func dialectsFromEnv(v string) []models.Dialect {
	if strings.TrimSpace(v) == "" {
		return []models.Dialect{models.Postgres, models.SQLite}
	}
	var out []models.Dialect
	for _, name := range strings.Split(v, ",") {
		switch d := models.Dialect(strings.TrimSpace(name)); d {
		case models.Postgres, models.SQLite:
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		default:
			panic(fmt.Sprintf("TASKPILOTS_TEST_DIALECTS=%q: want postgres, sqlite or both, comma-separated", v))
		}
	}
	return out
}

// Each runs fn as a subtest per dialect, in parallel.
func Each(t *testing.T, fn func(t *testing.T, s *models.Store)) {
	t.Helper()
	for _, d := range Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			fn(t, New(t, d))
		})
	}
}

// New returns a migrated store of dialect d, removed when the test ends.
//
// A SQLite store starts as a copy of a file that MigrateUp built once per
// test binary (see migratedSQLite); a PostgreSQL store is migrated in its
// fresh schema.
func New(t testing.TB, d models.Dialect) *models.Store {
	t.Helper()
	var u string
	if d == models.SQLite {
		u = migratedSQLite(t)
	} else {
		u = NewURL(t, d)
	}
	s, err := models.Open(context.Background(), u, models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open %s: %v", d, err)
	}
	t.Cleanup(func() { s.Close() })
	if d != models.SQLite {
		if _, err := s.MigrateUp(context.Background()); err != nil {
			t.Fatalf("migrate %s: %v", d, err)
		}
	}
	if os.Getenv("TASKPILOTS_TEST_GROUP_COMMIT") != "" {
		// Every test's writes through group commit, with one lane so that
		// concurrent writes group as much as they can: the suite's
		// concurrency, idempotency and atomicity tests then run against it.
		s.SetGroupCommit(1)
	}
	return s
}

// NewURL returns the URL of a fresh, empty (unmigrated) database of dialect
// d, for tests that run the binary or migrations themselves.
func NewURL(t testing.TB, d models.Dialect) string {
	t.Helper()
	if d == models.SQLite {
		return "sqlite:" + filepath.Join(t.TempDir(), "test.db")
	}
	db, err := admin()
	if err != nil {
		t.Fatalf("PostgreSQL at %s does not answer (%v); run `make test`, which starts one, or set TASKPILOTS_TEST_DATABASE_URL", redact(PostgresURL()), err)
	}
	schema := "t_" + strings.ToLower(models.RandomSecret(9))
	schema = strings.NewReplacer("-", "_").Replace(schema)
	if _, err := db.Exec(fmt.Sprintf(`CREATE SCHEMA %q`, schema)); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec(fmt.Sprintf(`DROP SCHEMA %q CASCADE`, schema)); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	return WithSearchPath(PostgresURL(), schema)
}

// sqliteTemplate holds the bytes of a SQLite file that MigrateUp built, once
// per test binary. Migrating SQLite costs about 40 ms per store, and about
// 670 ms under -race (the pure-Go SQLite is instrumented too), while most
// tests make two or more stores; a copy of the file costs about 1 ms. The
// migrations themselves are still run, here and by the tests that migrate
// an empty database (NewURL) on purpose.
var sqliteTemplate struct {
	once sync.Once
	data []byte
	err  error
}

// migratedSQLite writes a copy of the migrated template into the test's
// temporary directory and returns its URL.
func migratedSQLite(t testing.TB) string {
	t.Helper()
	sqliteTemplate.once.Do(func() { sqliteTemplate.data, sqliteTemplate.err = buildSQLiteTemplate() })
	if sqliteTemplate.err != nil {
		t.Fatalf("migrate sqlite template: %v", sqliteTemplate.err)
	}
	path := filepath.Join(t.TempDir(), "test.db")
	if err := os.WriteFile(path, sqliteTemplate.data, 0o600); err != nil {
		t.Fatalf("copy sqlite template: %v", err)
	}
	return "sqlite:" + path
}

// buildSQLiteTemplate migrates an empty SQLite file and returns its bytes.
// Closing the store checkpoints the write-ahead log into the file and
// removes the log, so the file alone is the whole database; a log left
// behind would mean the copy misses writes, so it is an error.
func buildSQLiteTemplate() ([]byte, error) {
	dir, err := os.MkdirTemp("", "taskpilots-sqlite-template-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "template.db")
	ctx := context.Background()
	s, err := models.Open(ctx, "sqlite:"+path, models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if _, err := s.MigrateUp(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.Close(); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("%s-wal still holds %d bytes after close", path, fi.Size())
	}
	return os.ReadFile(path)
}

// WithSearchPath adds a search_path to a PostgreSQL URL.
func WithSearchPath(raw, schema string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}
