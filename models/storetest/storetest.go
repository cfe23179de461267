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

// Dialects are the dialects Each runs on.
var Dialects = []models.Dialect{models.Postgres, models.SQLite}

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
func New(t testing.TB, d models.Dialect) *models.Store {
	t.Helper()
	u := NewURL(t, d)
	s, err := models.Open(context.Background(), u, models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open %s: %v", d, err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.MigrateUp(context.Background()); err != nil {
		t.Fatalf("migrate %s: %v", d, err)
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
