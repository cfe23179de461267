package models_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func TestIdempotentRepeat(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid := storetest.Session(ctx, t, s, nil)
		in := models.DelegateInput{Queue: "refunds", Step: "check-eligibility", ExpectedVersion: v64(1)}
		first, err := s.Delegate(ctx, sid, "test:controller", "dlg-1", in)
		if err != nil || first.Replayed {
			t.Fatalf("first = %+v, %v", first, err)
		}
		before := snapshot(t, s, sid)
		second, err := s.Delegate(ctx, sid, "test:controller", "dlg-1", in)
		if err != nil || !second.Replayed {
			t.Fatalf("second = %+v, %v", second, err)
		}
		second.Replayed = false
		if string(mustJSON(t, second)) != string(mustJSON(t, first)) || string(second.Data) != string(first.Data) {
			t.Fatalf("repeat outcome %+v differs from the first %+v", second, first)
		}
		assertUnchanged(t, s, sid, before)
		if len(before.Delegations) != 1 {
			t.Fatalf("%d delegations, want 1", len(before.Delegations))
		}

		// The same key from another caller is another request.
		other, err := s.Delegate(ctx, sid, "test:other-controller", "dlg-1", models.DelegateInput{Queue: "refunds", Step: "x", ExpectedVersion: v64(1)})
		var ce *models.ConflictError
		if !errors.As(err, &ce) || ce.CurrentVersion != 2 {
			t.Fatalf("same key, other actor = %+v, %v", other, err)
		}
	})
}

func TestIdempotencyMismatch(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid := storetest.Session(ctx, t, s, nil)
		if _, err := s.Transition(ctx, sid, models.EventSessionPaused, "test:controller", "k-pause",
			models.TransitionInput{ExpectedVersion: v64(1), Reason: "weekend"}); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, s, sid)
		for _, tc := range []struct {
			name string
			run  func() (models.Outcome, error)
		}{
			{"other reason", func() (models.Outcome, error) {
				return s.Transition(ctx, sid, models.EventSessionPaused, "test:controller", "k-pause",
					models.TransitionInput{ExpectedVersion: v64(1), Reason: "holiday"})
			}},
			{"other command", func() (models.Outcome, error) {
				return s.Transition(ctx, sid, models.EventSessionResumed, "test:controller", "k-pause",
					models.TransitionInput{ExpectedVersion: v64(2), Reason: "weekend"})
			}},
			{"other session", func() (models.Outcome, error) {
				return s.Delegate(ctx, storetest.Session(ctx, t, s, nil), "test:controller", "k-pause",
					models.DelegateInput{Queue: "refunds", Step: "s", ExpectedVersion: v64(1)})
			}},
		} {
			_, err := tc.run()
			if !errors.Is(err, models.ErrIdempotencyMismatch) || models.ErrorCode(err) != models.EIDEMPOTENCY {
				t.Fatalf("%s: want ErrIdempotencyMismatch, got %T %v", tc.name, err, err)
			}
		}
		assertUnchanged(t, s, sid, before)
		var other int64
		s.DB.Model(&models.Delegation{}).Count(&other)
		if other != 0 {
			t.Fatalf("a refused command queued %d delegations", other)
		}
	})
}

// TestIdempotentRepeatWhenTheLookupFails repeats a result that went
// through, with its key, while the stored answer cannot be read (the
// recovery drill caught this during a database restart: the repeat's write
// is fenced, its lookup fails). The repeat must not be told 409, as if the
// result had been refused: the lookup's error is the answer, so the client
// retries; once the lookup works again the repeat replays the first answer.
func TestIdempotentRepeatWhenTheLookupFails(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid, did := storetest.Delegated(ctx, t, s, "lookups")
		l, err := s.Claim(ctx, "lookups", "w-1", "test:worker", "")
		if err != nil || l == nil {
			t.Fatalf("claim: %v %v", l, err)
		}
		submit := func() (models.Outcome, error) {
			return s.SubmitResult(ctx, did, "test:worker", "res-1", models.ResultInput{
				LeaseToken: l.LeaseToken, SessionID: sid, Step: l.Step, ResultType: models.ResultCompleted,
				Evidence: []models.Evidence{{Claim: "refund eligible", Source: "policy-v3"}},
			})
		}
		first, err := submit()
		if err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, s, sid)
		// A lookup that fails as a lost table does: the write before it is
		// fenced in the session, never reaching the key's table.
		rename := func(from, to string) {
			t.Helper()
			if err := s.DB.Exec("ALTER TABLE " + from + " RENAME TO " + to).Error; err != nil {
				t.Fatal(err)
			}
		}
		rename("idempotency_keys", "idempotency_keys_away")
		_, err = submit()
		rename("idempotency_keys_away", "idempotency_keys")
		if err == nil || models.ErrorCode(err) == models.ECONFLICT || !strings.Contains(err.Error(), "idempotency key") {
			t.Fatalf("repeat while the lookup fails = %v (code %q), want the lookup's error, not a conflict", err, models.ErrorCode(err))
		}
		assertUnchanged(t, s, sid, before)
		again, err := submit()
		if err != nil || !again.Replayed || again.EventID != first.EventID || again.StateVersion != first.StateVersion {
			t.Fatalf("repeat once the lookup works = %+v, %v; first was %+v", again, err, first)
		}
	})
}

// TestIdempotentConcurrentDuplicates delivers the same command ten times at
// once, as a retrying client or a redelivering queue would: one event, and
// every caller gets the same outcome.
func TestIdempotentConcurrentDuplicates(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		t.Run("pause", func(t *testing.T) {
			sid := storetest.Session(ctx, t, s, nil)
			outs := concurrently(t, 10, func() (models.Outcome, error) {
				return s.Transition(ctx, sid, models.EventSessionPaused, "test:controller", "dup-pause",
					models.TransitionInput{ExpectedVersion: v64(1), Reason: "wait"})
			})
			sameOutcome(t, outs)
			if n := snapshot(t, s, sid).Events; n != 2 {
				t.Fatalf("%d events, want 2", n)
			}
		})
		t.Run("result", func(t *testing.T) {
			sid, did := storetest.Delegated(ctx, t, s, "dups")
			l, err := s.Claim(ctx, "dups", "w-1", "test:worker", "")
			if err != nil || l == nil {
				t.Fatalf("claim: %v %v", l, err)
			}
			outs := concurrently(t, 10, func() (models.Outcome, error) {
				return s.SubmitResult(ctx, did, "test:worker", "dup-result", models.ResultInput{
					LeaseToken: l.LeaseToken, SessionID: sid, Step: l.Step, ResultType: models.ResultCompleted,
					Evidence: []models.Evidence{{Claim: "refund eligible", Source: "policy-v3"}},
				})
			})
			sameOutcome(t, outs)
			if n := snapshot(t, s, sid).Events; n != 4 {
				t.Fatalf("%d events, want 4", n)
			}
		})
		if rep, err := s.Verify(ctx, models.VerifyOpts{}); err != nil || !rep.OK() {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}

func concurrently(t *testing.T, n int, fn func() (models.Outcome, error)) []models.Outcome {
	t.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		outs  = make([]models.Outcome, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			outs[i], errs[i] = fn()
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("duplicate %d: %T %v", i, err, err)
		}
	}
	return outs
}

// sameOutcome checks that all outcomes are the first one, and that exactly
// one call did the work.
func sameOutcome(t *testing.T, outs []models.Outcome) {
	t.Helper()
	fresh := 0
	for _, o := range outs {
		if !o.Replayed {
			fresh++
		}
		o.Replayed = false
		if string(mustJSON(t, o)) != string(mustJSON(t, outs[0])) || o.EventID == "" {
			t.Fatalf("outcomes differ: %+v vs %+v", o, outs[0])
		}
	}
	if fresh != 1 {
		t.Fatalf("%d calls applied the command, want 1", fresh)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := models.Canonical(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
