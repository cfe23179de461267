package models_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

var migrationName = regexp.MustCompile(`^(\d+)_[a-z0-9_]+\.sql$`)

func migrationVersions(t *testing.T, d models.Dialect) []int64 {
	t.Helper()
	files, err := models.MigrationFiles(d)
	if err != nil {
		t.Fatalf("%s migrations: %v", d, err)
	}
	var vs []int64
	for _, f := range files {
		m := migrationName.FindStringSubmatch(f)
		if m == nil {
			t.Fatalf("%s migration %q is not named NNNNN_name.sql", d, f)
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

// TestMigrationsMatch checks that both dialect folders carry the same
// versions, numbered 1..n without gaps.
func TestMigrationsMatch(t *testing.T) {
	t.Parallel()
	pg, lite := migrationVersions(t, models.Postgres), migrationVersions(t, models.SQLite)
	if !slices.Equal(pg, lite) {
		t.Fatalf("postgres migrations %v, sqlite migrations %v", pg, lite)
	}
	if len(pg) == 0 {
		t.Fatal("no migrations")
	}
	for i, v := range pg {
		if v != int64(i+1) {
			t.Fatalf("migration versions %v: want 1..%d without gaps or duplicates", pg, len(pg))
		}
	}
}

func openFresh(t *testing.T, d models.Dialect) *models.Store {
	t.Helper()
	s, err := models.Open(context.Background(), storetest.NewURL(t, d), models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestMigrateUpDownUp applies every migration, rolls all of them back, and
// applies them again; the schema works after each way up.
func TestMigrateUpDownUp(t *testing.T) {
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := openFresh(t, d)
			want := migrationVersions(t, d)
			if err := s.CheckSchema(ctx); !errors.Is(err, models.ErrSchemaBehind) {
				t.Fatalf("check of an empty database = %v, want ErrSchemaBehind", err)
			}
			applied, err := s.MigrateUp(ctx)
			if err != nil || !slices.Equal(applied, want) {
				t.Fatalf("first up applied %v (%v), want %v", applied, err, want)
			}
			if err := s.CheckSchema(ctx); err != nil {
				t.Fatalf("check after up: %v", err)
			}
			usable(t, s)

			for i := len(want) - 1; i >= 0; i-- {
				v, err := s.MigrateDown(ctx)
				if err != nil || v != want[i] {
					t.Fatalf("down rolled back %d (%v), want %d", v, err, want[i])
				}
			}
			st, err := s.MigrationStatus(ctx)
			if err != nil || st.Current != 0 || len(st.Pending) != len(want) {
				t.Fatalf("status after down to zero = %+v, %v", st, err)
			}
			var tables int64
			q := `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name IN ('sessions', 'events', 'delegations')`
			if d == models.SQLite {
				q = `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('sessions', 'events', 'delegations')`
			}
			if err := s.DB.Raw(q).Scan(&tables).Error; err != nil || tables != 0 {
				t.Fatalf("%d domain tables left after down to zero (%v)", tables, err)
			}

			applied, err = s.MigrateUp(ctx)
			if err != nil || !slices.Equal(applied, want) {
				t.Fatalf("second up applied %v (%v), want %v", applied, err, want)
			}
			if err := s.CheckSchema(ctx); err != nil {
				t.Fatalf("check after second up: %v", err)
			}
			usable(t, s)
			if again, err := s.MigrateUp(ctx); err != nil || len(again) != 0 {
				t.Fatalf("up on an up-to-date schema applied %v (%v)", again, err)
			}
		})
	}
}

// usable writes and verifies a session, proving the schema is complete.
func usable(t *testing.T, s *models.Store) {
	t.Helper()
	ctx := context.Background()
	sid, _ := storetest.Delegated(ctx, t, s, "refunds")
	if l, err := s.Claim(ctx, "refunds", "w-1", "test:worker", ""); err != nil || l == nil || l.SessionID != sid {
		t.Fatalf("claim on the migrated schema: %v %v", l, err)
	}
	if rep, err := s.Verify(ctx, models.VerifyOpts{}); err != nil || !rep.OK() {
		t.Fatalf("verify = %+v, %v", rep, err)
	}
}

// TestSchemaNewer records a migration this binary does not know: the
// binary must refuse to run on it and refuse to migrate it.
func TestSchemaNewer(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		st, err := s.MigrationStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DB.Exec(`INSERT INTO goose_db_version (version_id, is_applied) VALUES (?, ?)`, st.Latest+1, true).Error; err != nil {
			t.Fatalf("record a future migration: %v", err)
		}
		if err := s.CheckSchema(ctx); !errors.Is(err, models.ErrSchemaNewer) {
			t.Fatalf("check = %v, want ErrSchemaNewer", err)
		}
		if _, err := s.MigrateUp(ctx); !errors.Is(err, models.ErrSchemaNewer) {
			t.Fatalf("migrate up = %v, want ErrSchemaNewer", err)
		}
	})
}
