package models

import (
	"context"
	"sync"
)

// MaxResultBatch bounds the results of one SubmitResults call, so that a
// batch stays a group of bounded size (MaxGroupSize members per group; a
// larger batch is split into several groups).
const MaxResultBatch = 100

// ResultSubmission is one result of a batch: the delegation it answers,
// its idempotency key and the return contract, as for SubmitResult.
type ResultSubmission struct {
	DelegationID   string
	IdempotencyKey string
	Input          ResultInput
}

// ResultOutcome is what one result of a batch came to: its Outcome, or the
// error SubmitResult would have returned for it alone (a *ValidationError,
// *LeaseError, *ConflictError, …).
type ResultOutcome struct {
	Outcome Outcome
	Err     error
}

// SubmitResults applies a batch of worker results, each as SubmitResult
// would apply it alone (its contract check, lease fence, version rules and
// idempotency key), and returns their outcomes in the order given. On
// PostgreSQL the items write in one group transaction (group.go), up to
// MaxGroupSize at a time: one COMMIT for the batch and, per item, the
// round trips of one result less one; an item that fails is rolled back
// alone and never takes the others down. On SQLite the items run one after
// another, each in its own transaction.
//
// The error is for the batch as a whole (too many items); an empty batch
// returns no outcomes.
func (s *Store) SubmitResults(ctx context.Context, actor string, items []ResultSubmission) ([]ResultOutcome, error) {
	if len(items) > MaxResultBatch {
		v := &ValidationError{}
		v.Add("results", "at most %d results per batch, got %d", MaxResultBatch, len(items))
		return nil, v
	}
	out := make([]ResultOutcome, len(items))
	if s.pool == nil {
		for i, it := range items {
			out[i].Outcome, out[i].Err = s.SubmitResult(ctx, it.DelegationID, actor, it.IdempotencyKey, it.Input)
		}
		return out, nil
	}
	for start := 0; start < len(items); start += MaxGroupSize {
		end := min(start+MaxGroupSize, len(items))
		b := &resultBatch{waiting: end - start}
		var wg sync.WaitGroup
		for i := start; i < end; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each item goes through SubmitResult unchanged; its first
				// write joins the batch's group (Write, writeBatched), and
				// everything after the commit (the idempotent replay's
				// lookup, wake-ups, observers) runs for it as for a lone
				// result.
				slot := &batchSlot{b: b, order: i}
				it := items[i]
				out[i].Outcome, out[i].Err = s.SubmitResult(context.WithValue(ctx, batchSlotKey{}, slot), it.DelegationID, actor, it.IdempotencyKey, it.Input)
				if !slot.joined {
					b.leave(s)
				}
			}()
		}
		wg.Wait()
	}
	return out, nil
}
