package models_test

import (
	"context"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestIndexUpkeep bloats the indexes of sessions the way session writes do
// (every row's updated_at moved again and again, vacuumed in between as
// autovacuum would) and checks that UpkeepIndexes judges fresh indexes
// compact, rebuilds the bloated ones to a fraction of their size and leaves
// them valid, then has nothing left to do; and that it drops the invalid
// leftover of an interrupted concurrent build.
func TestIndexUpkeep(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t, models.Postgres)
	bulkSessions(t, s, 20_000)
	exec := func(sql string) {
		t.Helper()
		if err := s.DB.Exec(sql).Error; err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`ANALYZE sessions`)
	opts := models.IndexUpkeepOpts{MinBytes: 1}

	// Freshly built: no index is over its estimate by the factor, nothing is
	// rebuilt. (A deduplicated index of few distinct keys is smaller than
	// its estimate: that errs on the side of leaving it alone.)
	rep, err := s.UpkeepIndexes(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Checked) < 4 || len(rep.Rebuilt) != 0 {
		t.Fatalf("fresh indexes: checked %+v, rebuilt %+v; want several checked and none rebuilt", rep.Checked, rep.Rebuilt)
	}
	fresh := map[string]int64{}
	for _, is := range rep.Checked {
		if r := float64(is.Bytes) / float64(is.Estimate); r > 2.5 {
			t.Errorf("fresh index %s: %d bytes against an estimate of %d (%.2f×)", is.Name, is.Bytes, is.Estimate, r)
		}
		fresh[is.Name] = is.Bytes
	}

	for range 12 {
		exec(`UPDATE sessions SET updated_at = updated_at + interval '37 minutes'`)
		exec(`VACUUM sessions`)
	}
	exec(`ANALYZE sessions`)
	rep, err = s.UpkeepIndexes(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	rebuilt := map[string]models.IndexSize{}
	for _, is := range rep.Rebuilt {
		t.Logf("rebuilt %s: %d → %d bytes (fresh %d, estimate %d)", is.Name, is.Bytes, is.After, fresh[is.Name], is.Estimate)
		rebuilt[is.Name] = is
		if is.After <= 0 || is.After*2 > is.Bytes || float64(is.After) > 2.5*float64(is.Estimate) {
			t.Errorf("rebuilt %s: %d → %d bytes (estimate %d); want it back near its estimate", is.Name, is.Bytes, is.After, is.Estimate)
		}
	}
	if _, ok := rebuilt["sessions_updated_idx"]; !ok {
		t.Errorf("the updated_at index was not rebuilt: checked %+v, rebuilt %+v", rep.Checked, rep.Rebuilt)
	}
	var invalid int64
	if err := s.DB.Raw(`SELECT count(*) FROM pg_index WHERE indrelid = 'sessions'::regclass AND NOT indisvalid`).Scan(&invalid).Error; err != nil || invalid != 0 {
		t.Fatalf("invalid indexes after the rebuild: %d (%v)", invalid, err)
	}
	// The rebuilt index still serves its query.
	if _, err := s.ListSessions(ctx, models.SessionQuery{Limit: 5}); err != nil {
		t.Fatal(err)
	}

	exec(`ANALYZE sessions`)
	if rep, err = s.UpkeepIndexes(ctx, opts); err != nil || len(rep.Rebuilt) != 0 {
		t.Fatalf("a second pass rebuilt %+v (%v); want nothing", rep.Rebuilt, err)
	}

	// A concurrent build that failed leaves an invalid index behind, as an
	// interrupted REINDEX CONCURRENTLY leaves its _ccnew copy.
	if err := s.DB.Exec(`CREATE UNIQUE INDEX CONCURRENTLY sessions_status_updated_idx_ccnew ON sessions (status)`).Error; err == nil {
		t.Fatal("a unique index on status was built")
	}
	if rep, err = s.UpkeepIndexes(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if len(rep.Dropped) != 1 || rep.Dropped[0] != "sessions_status_updated_idx_ccnew" {
		t.Fatalf("dropped %v; want the invalid leftover", rep.Dropped)
	}
	if err := s.DB.Raw(`SELECT count(*) FROM pg_index WHERE indrelid = 'sessions'::regclass AND NOT indisvalid`).Scan(&invalid).Error; err != nil || invalid != 0 {
		t.Fatalf("invalid indexes after the upkeep: %d (%v)", invalid, err)
	}
}

// On SQLite the upkeep has nothing to do and says so by doing nothing.
func TestIndexUpkeepSQLite(t *testing.T) {
	s := storetest.New(t, models.SQLite)
	rep, err := s.UpkeepIndexes(context.Background(), models.IndexUpkeepOpts{MinBytes: 1})
	if err != nil || len(rep.Checked) != 0 || len(rep.Rebuilt) != 0 {
		t.Fatalf("SQLite upkeep: %+v, %v", rep, err)
	}
}
