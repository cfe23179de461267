package models_test

import (
	"context"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestChainedCommandsCommitTogether checks Command.Then: a follow-up command
// runs in the same transaction on the state the first one produced, its
// event gets the next seq in the same hash chain, and when the follow-up is
// refused nothing of either command is written.
func TestChainedCommandsCommitTogether(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		chain := func(id string, follow models.EventType) (models.Outcome, error) {
			v := int64(1)
			return s.Execute(ctx, models.Command{
				SessionID: id, Type: models.EventDelegationCreated, Actor: "test:controller", ExpectedVersion: &v,
				Payload: models.DelegationPayload{DelegationID: models.NewID("dlg"), Queue: "refunds", Step: "check",
					MaxAttempts: 3, LeaseSeconds: 30},
				Then: func(tx *models.Tx, next models.State, ev models.Event) (*models.Command, error) {
					if next.Status != models.StatusQueued || ev.Seq != 2 {
						t.Errorf("follow-up sees status %s after seq %d, want queued after 2", next.Status, ev.Seq)
					}
					return &models.Command{Type: follow, Actor: "system:test", Payload: models.PausePayload{Reason: "chained"}}, nil
				},
			})
		}

		id := storetest.Session(ctx, t, s, nil)
		out, err := chain(id, models.EventSessionPaused)
		if err != nil {
			t.Fatalf("chained delegate+pause: %v", err)
		}
		if out.StateVersion != 3 || out.Status != models.StatusPaused || out.Seq != 3 {
			t.Fatalf("outcome = v%d %s seq %d, want v3 paused seq 3", out.StateVersion, out.Status, out.Seq)
		}
		var evs []models.Event
		if err := s.DB.Where("session_id = ?", id).Order("seq").Find(&evs).Error; err != nil {
			t.Fatal(err)
		}
		if len(evs) != 3 || evs[1].Type != models.EventDelegationCreated || evs[2].Type != models.EventSessionPaused {
			t.Fatalf("events = %v, want created, delegation.created, session.paused", evs)
		}
		if evs[2].PrevHash != evs[1].Hash || evs[2].Actor != "system:test" {
			t.Fatalf("chained event prev_hash %q actor %q, want %q system:test", evs[2].PrevHash, evs[2].Actor, evs[1].Hash)
		}
		rep, err := s.Verify(ctx, models.VerifyOpts{SessionIDs: []string{id}})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Problems) != 0 {
			t.Fatalf("verify after a chain: %v", rep.Problems)
		}

		// A refused follow-up (resume is illegal from queued) undoes both.
		id2 := storetest.Session(ctx, t, s, nil)
		if _, err := chain(id2, models.EventSessionResumed); models.ErrorCode(err) != models.EINVALID && models.ErrorCode(err) != models.EILLEGAL {
			t.Fatalf("illegal follow-up = %v (code %s), want an illegal transition", err, models.ErrorCode(err))
		}
		row, err := s.GetSession(ctx, id2)
		if err != nil {
			t.Fatal(err)
		}
		var n, d int64
		s.DB.Model(&models.Event{}).Where("session_id = ?", id2).Count(&n)
		s.DB.Model(&models.Delegation{}).Where("session_id = ?", id2).Count(&d)
		if row.StateVersion != 1 || n != 1 {
			t.Fatalf("after a refused follow-up: version %d, %d events, want 1 and 1", row.StateVersion, n)
		}
	})
}
