package models_test

import (
	"context"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestReprojectOldStates checks the upgrade path of a database written by a
// release whose Apply derived less: its stored states no longer match replay
// (verify says so), and migrating re-projects them from their events once,
// after which verify is clean again and the events are untouched.
func TestReprojectOldStates(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		id, _ := storetest.Delegated(ctx, t, s, "refunds")
		row, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		// What a format-1 release stored: the same state without the fields
		// this release derives.
		old := strings.Replace(row.State, `"run_reason":`, `"x_run_reason":`, 1)
		if old == row.State {
			t.Fatalf("state has no run_reason to strip: %s", row.State)
		}
		old = strings.Replace(old, `"x_run_reason":{"kind":"first_run","attempt":1},`, ``, 1)
		if err := s.DB.Exec(`UPDATE session_states SET state = ? WHERE session_id = ?`, old, id).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB.Exec(`UPDATE state_format SET version = 1`).Error; err != nil {
			t.Fatal(err)
		}
		rep, err := s.Verify(ctx, models.VerifyOpts{SessionIDs: []string{id}})
		if err != nil || rep.OK() {
			t.Fatalf("verify before re-projection = %+v, %v; want a projection problem", rep.Problems, err)
		}
		var hashBefore string
		s.DB.Raw(`SELECT last_hash FROM sessions WHERE id = ?`, id).Scan(&hashBefore)

		if _, err := s.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		rep, err = s.Verify(ctx, models.VerifyOpts{SessionIDs: []string{id}})
		if err != nil || !rep.OK() {
			t.Fatalf("verify after re-projection = %+v, %v", rep.Problems, err)
		}
		after, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if after.State != row.State || after.LastHash != hashBefore || after.StateVersion != row.StateVersion {
			t.Fatalf("re-projected state differs from the live one:\n%s\n%s", after.State, row.State)
		}
		var format int
		s.DB.Raw(`SELECT version FROM state_format`).Scan(&format)
		if format != models.StateFormat {
			t.Fatalf("state format = %d, want %d", format, models.StateFormat)
		}
		// Once at the current format, nothing is rewritten again.
		r, err := s.Reproject(ctx)
		if err != nil || r.Sessions != 0 {
			t.Fatalf("second re-projection = %+v, %v; want nothing to do", r, err)
		}
	})
}
