package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// holdLane occupies group commit's only lane with a write that waits for
// the returned release, so that the writes started meanwhile queue up and
// run as one group once it is released (no sleeps: the test waits until
// they are queued).
func holdLane(t *testing.T, s *models.Store) (release func()) {
	t.Helper()
	started, unblock, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- s.Write(context.Background(), func(tx *models.Tx) error {
			close(started)
			<-unblock
			return nil
		})
	}()
	<-started
	return func() {
		close(unblock)
		if err := <-done; err != nil {
			t.Errorf("holding write: %v", err)
		}
	}
}

// waitQueued waits until n writes wait for the next group.
func waitQueued(t *testing.T, s *models.Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.QueuedWrites() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", s.QueuedWrites(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGroupCommitMixed runs concurrent writes as one group where some fail
// (a stale version, an idempotency key reused with another body, a fenced
// result, a repeat of a committed key) and checks that each failure is the
// command's own, writes nothing, and leaves the others committed.
func TestGroupCommitMixed(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	s.SetGroupCommit(1)
	ctx := context.Background()
	const n = 12
	ids := make([]string, n)
	for i := range ids {
		ids[i] = storetest.Session(ctx, t, s, nil)
	}
	// A leased delegation and a token that does not hold its lease.
	fencedSID, fencedDID := storetest.Delegated(ctx, t, s, "gc-fenced")
	old, err := s.Claim(ctx, "gc-fenced", "w-old", "test:worker", "")
	if err != nil || old == nil {
		t.Fatalf("claim = %v, %v", old, err)
	}
	old.LeaseToken = "superseded-token"
	// A key used before the group, with the same body: a replay.
	v1 := int64(1)
	first, err := s.Delegate(ctx, ids[0], "test:controller", "gc-replay", models.DelegateInput{Queue: "gc", Step: "check", ExpectedVersion: &v1})
	if err != nil {
		t.Fatal(err)
	}
	st0, rt0 := s.WireStats()
	g0 := s.GroupStats()

	mis := storetest.Session(ctx, t, s, nil)
	release := holdLane(t, s)
	type result struct {
		out models.Outcome
		err error
	}
	results := make([]result, n+7)
	var wg sync.WaitGroup
	queued := 0
	// run starts a write and waits until it is queued, so that the group
	// runs its members in the order they are started here.
	run := func(i int, fn func() (models.Outcome, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].out, results[i].err = fn()
		}()
		queued++
		waitQueued(t, s, queued)
	}
	// A member whose last write fails on the server: it travels with the
	// next member's first statements, so that member runs again.
	fails := func(i int, query string) {
		run(i, func() (models.Outcome, error) {
			return models.Outcome{}, s.Write(ctx, func(tx *models.Tx) error {
				tx.Later(func(err error) error { return fmt.Errorf("member %d: %w", i, err) }, query)
				return nil
			})
		})
	}
	fails(n+3, `SELECT 1/(count(*)-count(*)) FROM sessions`)
	// A member whose own read fails on the server, in its first batch.
	run(n+4, func() (models.Outcome, error) {
		return models.Outcome{}, s.Write(ctx, func(tx *models.Tx) error {
			_, err := tx.Exec(`SELECT 3/(count(*)-count(*)) FROM sessions`)
			return err
		})
	})
	// A key used before, on another session whose command succeeds in
	// Go: its idempotency insert fails on the server.
	run(n+5, func() (models.Outcome, error) {
		return s.Delegate(ctx, mis, "test:controller", "gc-replay", models.DelegateInput{Queue: "gc", Step: "check", ExpectedVersion: &v1})
	})
	stale := int64(7)
	for i := 1; i < n; i++ {
		i := i
		run(i, func() (models.Outcome, error) {
			v := int64(1)
			if i%4 == 1 {
				v = stale // stale version
			}
			return s.Delegate(ctx, ids[i], "test:controller", fmt.Sprintf("gc-%d", i), models.DelegateInput{Queue: "gc", Step: "check", ExpectedVersion: &v})
		})
	}
	// The replay of the earlier key, and the same key with another body.
	run(0, func() (models.Outcome, error) {
		return s.Delegate(ctx, ids[0], "test:controller", "gc-replay", models.DelegateInput{Queue: "gc", Step: "check", ExpectedVersion: &v1})
	})
	run(n, func() (models.Outcome, error) {
		return s.Delegate(ctx, ids[2], "test:controller", "gc-replay", models.DelegateInput{Queue: "gc", Step: "other", ExpectedVersion: &v1})
	})
	// The fenced result.
	run(n+1, func() (models.Outcome, error) {
		return s.SubmitResult(ctx, old.DelegationID, "test:worker", "gc-fenced", models.ResultInput{
			LeaseToken: old.LeaseToken, SessionID: fencedSID, Step: old.Step, ResultType: models.ResultCompleted,
			Output: json.RawMessage(`{}`), Evidence: []models.Evidence{{Claim: "late"}},
		})
	})
	// Two writes to one session in the same group: the second sees the
	// first's version, so the same expected version is stale for it.
	run(n+2, func() (models.Outcome, error) {
		v := int64(1)
		return s.Transition(ctx, ids[3], models.EventSessionPaused, "test:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "hold"})
	})
	// The last member's tail fails with COMMIT in its batch.
	fails(n+6, `SELECT 2/(count(*)-count(*)) FROM sessions`)
	release()
	wg.Wait()

	gs := s.GroupStats()
	if gs.Groups-g0.Groups != 1 || gs.Largest != n+7 {
		t.Errorf("group stats %+v (before %+v), want one group of %d", gs, g0, n+7)
	}
	for _, i := range []int{n + 3, n + 4, n + 6} {
		if results[i].err == nil {
			t.Errorf("member %d: no error from a failing statement", i)
		}
	}
	if r := results[n+5]; models.ErrorCode(r.err) != models.EIDEMPOTENCY {
		t.Errorf("key reused on another session: %+v, %v", r.out, r.err)
	}
	if evs, err := s.ListEvents(ctx, mis, 0, 100); err != nil || len(evs) != 1 {
		t.Errorf("session of the reused key: %d events, %v; want 1", len(evs), err)
	}
	if fencedDID != old.DelegationID {
		t.Fatalf("fenced delegation %s, leased %s", fencedDID, old.DelegationID)
	}
	for i := 1; i < n; i++ {
		r := results[i]
		if i%4 == 1 {
			var ce *models.ConflictError
			if !errors.As(r.err, &ce) || ce.CurrentVersion != 1 {
				t.Errorf("stale delegate %d: %+v, %v; want a conflict at version 1", i, r.out, r.err)
			}
			continue
		}
		if i == 3 {
			continue // raced with the pause on the same session; checked below
		}
		if r.err != nil || r.out.StateVersion != 2 || r.out.Status != models.StatusQueued {
			t.Errorf("delegate %d: %+v, %v", i, r.out, r.err)
		}
	}
	// On ids[3] exactly one of the delegate and the pause won.
	if (results[3].err == nil) == (results[n+2].err == nil) {
		t.Errorf("same session: delegate %v, pause %v; want exactly one to fail", results[3].err, results[n+2].err)
	}
	if r := results[0]; r.err != nil || !r.out.Replayed || r.out.EventID != first.EventID {
		t.Errorf("replay: %+v, %v; want the first outcome %+v", r.out, r.err, first)
	}
	if r := results[n]; models.ErrorCode(r.err) != models.EIDEMPOTENCY {
		t.Errorf("key reused with another body: %+v, %v", r.out, r.err)
	}
	var le *models.LeaseError
	if r := results[n+1]; !errors.As(r.err, &le) {
		t.Errorf("fenced result: %+v, %v; want a lease error", r.out, r.err)
	}
	// Failing members left nothing: the stale ones are still at version 1
	// with one event.
	for i := 1; i < n; i += 4 {
		evs, err := s.ListEvents(ctx, ids[i], 0, 100)
		if err != nil || len(evs) != 1 {
			t.Errorf("session %d after a stale write: %d events, %v", i, len(evs), err)
		}
	}
	st1, rt1 := s.WireStats()
	t.Logf("group of %d: %d statements, %d round trips", n+7, st1-st0, rt1-rt0)
	rep, err := s.Verify(ctx, models.VerifyOpts{})
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %+v, %v", rep.Problems, err)
	}
}

// TestGroupCommitFailsAll makes COMMIT itself fail (a deferred constraint
// trigger that rejects one member's event at commit): every member of the
// group gets the error and nothing of any of them is committed.
func TestGroupCommitFailsAll(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	s.SetGroupCommit(1)
	ctx := context.Background()
	for _, q := range []string{
		`CREATE FUNCTION gc_poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			IF NEW.actor = 'test:poison' THEN RAISE EXCEPTION 'poisoned at commit'; END IF; RETURN NULL; END $$`,
		`CREATE CONSTRAINT TRIGGER gc_poison AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION gc_poison()`,
	} {
		if err := s.DB.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	const n = 6
	ids := make([]string, n)
	for i := range ids {
		ids[i] = storetest.Session(ctx, t, s, nil)
	}
	release := holdLane(t, s)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actor := "test:controller"
			if i == 2 {
				actor = "test:poison"
			}
			v := int64(1)
			_, errs[i] = s.Delegate(ctx, ids[i], actor, "", models.DelegateInput{Queue: "gc", Step: "check", ExpectedVersion: &v})
		}()
	}
	waitQueued(t, s, n)
	release()
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			t.Errorf("member %d committed in a group whose COMMIT failed", i)
		}
		evs, _ := s.ListEvents(ctx, ids[i], 0, 100)
		if len(evs) != 1 {
			t.Errorf("session %d: %d events after a failed group, want 1", i, len(evs))
		}
	}
}

// TestGroupCommitConcurrent runs many writers through group commit (with
// -race in CI's group test) and checks that groups of more than one formed
// and every invariant holds.
func TestGroupCommitConcurrent(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	s.SetGroupCommit(2)
	ctx := context.Background()
	const writers, rounds = 16, 6
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := storetest.Session(ctx, t, s, nil)
			queue := fmt.Sprintf("gc-w%d", w)
			v := int64(1)
			for r := range rounds {
				out, err := s.Delegate(ctx, id, "test:controller", fmt.Sprintf("d-%d-%d", w, r), models.DelegateInput{Queue: queue, Step: "check", ExpectedVersion: &v})
				if err != nil {
					errs <- fmt.Errorf("delegate: %w", err)
					return
				}
				l, err := s.Claim(ctx, queue, "w", "test:worker", fmt.Sprintf("l-%d-%d", w, r))
				if err != nil || l == nil {
					errs <- fmt.Errorf("claim: %v, %v", l, err)
					return
				}
				if out, err = s.SubmitResult(ctx, l.DelegationID, "test:worker", fmt.Sprintf("r-%d-%d", w, r), models.ResultInput{
					LeaseToken: l.LeaseToken, SessionID: id, Step: l.Step, ResultType: models.ResultCompleted,
					Output: json.RawMessage(`{}`), Evidence: []models.Evidence{{Claim: "ok"}}, NextStep: fmt.Sprintf("step-%d", r+1),
				}); err != nil {
					errs <- fmt.Errorf("result: %w", err)
					return
				}
				v = out.StateVersion
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if gs := s.GroupStats(); gs.Largest < 2 {
		t.Errorf("group stats %+v: no group of more than one formed", gs)
	} else {
		t.Logf("group stats %+v", gs)
	}
	rep, err := s.Verify(ctx, models.VerifyOpts{})
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %+v, %v", rep.Problems, err)
	}
}
