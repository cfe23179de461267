package models_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestSequencerKeepsItsPlan: the feed sequencer's statement runs on one
// generic plan from its first pass, so a pass costs no planning (left to
// choose, PostgreSQL planned it again on most passes: 0.6 ms of planning
// for 0.4 ms of work), and the setting that asks for it ends with the
// pass's transaction. On one connection, so that every pass uses the same
// prepared statement and the check reads that connection's.
func TestSequencerKeepsItsPlan(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t, models.Postgres)
	one, err := models.Open(ctx, s.URL(), models.OpenOpts{Logger: slog.New(slog.DiscardHandler), MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	const passes = 10
	for i := range passes {
		storetest.Session(ctx, t, one, nil)
		n, err := one.SequenceFeed(ctx)
		if err != nil || n != 1 {
			t.Fatalf("pass %d: numbered %d events (%v), want the one just written", i, n, err)
		}
	}
	var plans struct{ Generic, Custom int64 }
	if err := one.DB.Raw(`SELECT generic_plans AS generic, custom_plans AS custom FROM pg_prepared_statements
		WHERE statement LIKE 'WITH pending AS%'`).Scan(&plans).Error; err != nil {
		t.Fatal(err)
	}
	if plans.Generic != passes || plans.Custom != 0 {
		t.Fatalf("sequencer over %d passes: %d generic plans, %d custom (want every pass on the generic plan)", passes, plans.Generic, plans.Custom)
	}
	var mode string
	if err := one.DB.Raw(`SHOW plan_cache_mode`).Scan(&mode).Error; err != nil {
		t.Fatal(err)
	}
	if mode != "auto" {
		t.Fatalf("plan_cache_mode is %q on the connection after a pass, want auto: the setting outlived the pass", mode)
	}
}
