package models_test

import (
	"context"
	"errors"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestWriteIsAtomic checks invariant 5: the state change, the event append
// and the queue change commit in one transaction. A command whose queue
// effect fails after the event was appended and a delegation row written
// must leave no trace: no event, the projection unchanged, no queue row,
// and no idempotency record.
func TestWriteIsAtomic(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		id := storetest.Session(ctx, t, s, nil)
		before, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("queue write failed")
		v := int64(1)
		_, err = s.Execute(ctx, models.Command{
			SessionID: id, Type: models.EventDelegationCreated, Actor: "test:controller", ExpectedVersion: &v,
			IdempotencyKey: "atomic-1",
			Payload: models.DelegationPayload{DelegationID: "dlg_atomic", Queue: "refunds", Step: "check",
				MaxAttempts: 3, LeaseSeconds: 30},
			Effect: func(tx *models.Tx, next models.State, ev models.Event) (any, error) {
				// Exec sends the event and the projection queued before it
				// too: the failure below must undo statements that ran.
				_, err := tx.Exec(`INSERT INTO delegations (id, session_id, queue, step, status, attempt, max_attempts,
					lease_seconds, available_at, created_at, updated_at)
					VALUES ('dlg_atomic', ?, 'refunds', 'check', 'queued', 1, 3, 30, ?, ?, ?)`,
					id, ev.CreatedAt, ev.CreatedAt, ev.CreatedAt)
				if err != nil {
					t.Fatalf("effect insert: %v", err)
				}
				return nil, boom
			},
		})
		if !errors.Is(err, boom) {
			t.Fatalf("execute = %v, want the effect's error", err)
		}
		after, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if after.StateVersion != before.StateVersion || after.State != before.State || after.LastHash != before.LastHash {
			t.Fatalf("projection changed: version %d→%d", before.StateVersion, after.StateVersion)
		}
		var events, delegations, keys int64
		s.DB.Model(&models.Event{}).Where("session_id = ?", id).Count(&events)
		s.DB.Model(&models.Delegation{}).Where("id = ?", "dlg_atomic").Count(&delegations)
		s.DB.Table("idempotency_keys").Where("key = ?", "atomic-1").Count(&keys)
		if events != 1 || delegations != 0 || keys != 0 {
			t.Fatalf("after a failed effect: %d events (want 1), %d delegation rows, %d idempotency keys (want 0)",
				events, delegations, keys)
		}
		// The same command without the failure then applies normally.
		out, err := s.Delegate(ctx, id, "test:controller", "atomic-1", models.DelegateInput{Queue: "refunds", Step: "check", ExpectedVersion: &v})
		if err != nil || out.StateVersion != 2 {
			t.Fatalf("delegate after rollback = %+v, %v", out, err)
		}
	})
}

// TestMissedVersionGuardCommitsNothing covers the case the session lock
// normally rules out: the projection update, conditional on the last seq
// read, matching no row. On
// PostgreSQL the COMMIT travels in the same batch as the last queued
// statements, so the miss must fail on the server, before the COMMIT; a
// check in Go would come too late and the queued effect would commit. The
// command's Prepare moves the seq on behind the write path's back,
// and its Effect queues a delegation row.
func TestMissedVersionGuardCommitsNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		id := storetest.Session(ctx, t, s, nil)
		before, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Execute(ctx, models.Command{
			SessionID: id, Type: models.EventDelegationCreated, Actor: "test:controller", IdempotencyKey: "guard-1",
			Payload: models.DelegationPayload{DelegationID: "dlg_guard", Queue: "refunds", Step: "check", MaxAttempts: 3, LeaseSeconds: 30},
			Prepare: func(tx *models.Tx, cur models.State) (any, error) {
				_, err := tx.Exec(`UPDATE sessions SET last_seq = last_seq + 1 WHERE id = ?`, id)
				return nil, err
			},
			Effect: func(tx *models.Tx, next models.State, ev models.Event) (any, error) {
				tx.Later(func(err error) error { return err }, `INSERT INTO delegations (id, session_id, queue, step, status,
					attempt, max_attempts, lease_seconds, available_at, created_at, updated_at)
					VALUES ('dlg_guard', ?, 'refunds', 'check', 'queued', 1, 3, 30, ?, ?, ?)`, id, ev.CreatedAt, ev.CreatedAt, ev.CreatedAt)
				return nil, nil
			},
		})
		if code := models.ErrorCode(err); code != models.ECONFLICT {
			t.Fatalf("execute = %v (%s), want a conflict", err, code)
		}
		after, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if after.StateVersion != before.StateVersion || after.State != before.State {
			t.Fatalf("projection changed: version %d→%d", before.StateVersion, after.StateVersion)
		}
		var events, delegations, keys int64
		s.DB.Model(&models.Event{}).Where("session_id = ?", id).Count(&events)
		s.DB.Model(&models.Delegation{}).Where("id = ?", "dlg_guard").Count(&delegations)
		s.DB.Table("idempotency_keys").Where("key = ?", "guard-1").Count(&keys)
		if events != 1 || delegations != 0 || keys != 0 {
			t.Fatalf("after a missed version guard: %d events (want 1), %d delegation rows, %d idempotency keys (want 0)",
				events, delegations, keys)
		}
	})
}
