package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func validationFields(t testing.TB, err error) string {
	t.Helper()
	var ve *models.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want a validation error, got %v", err)
	}
	var out []string
	for _, f := range ve.Fields {
		out = append(out, f.Field)
	}
	return fmt.Sprint(out)
}

func noLease(ctx context.Context, t testing.TB, s *models.Store, queue string) {
	t.Helper()
	l, err := s.Claim(ctx, queue, "w-early", "test:worker", "")
	if err != nil || l != nil {
		t.Fatalf("claim on %s: %+v %v, want nothing yet", queue, l, err)
	}
}

func TestScheduledDelegation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clk := setFanClock(s)
		v := int64(1)

		delayed := storetest.Session(ctx, t, s, nil)
		out, err := s.Delegate(ctx, delayed, fanActor, "", models.DelegateInput{Queue: "later", Step: "s", ExpectedVersion: &v, DelaySeconds: storetest.Ptr(60)})
		if err != nil || out.Status != models.StatusQueued {
			t.Fatalf("delegate: %+v %v", out, err)
		}
		evs := eventsOf(ctx, t, s, delayed, models.EventDelegationCreated)
		var p models.DelegationPayload
		if err := json.Unmarshal([]byte(evs[0].Payload), &p); err != nil || p.AvailableAt != models.NewUTCTime(clk.Now().Add(time.Minute)).String() {
			t.Fatalf("payload %s %v", evs[0].Payload, err)
		}
		noLease(ctx, t, s, "later")
		clk.Add(59 * time.Second)
		noLease(ctx, t, s, "later")
		clk.Add(time.Second)
		if l := leaseOn(ctx, t, s, "later"); l.SessionID != delayed {
			t.Fatalf("lease %+v", l)
		}

		at := storetest.Session(ctx, t, s, nil)
		if _, err := s.Delegate(ctx, at, fanActor, "", models.DelegateInput{Queue: "at", Step: "s", ExpectedVersion: &v, AvailableAt: clk.In(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		noLease(ctx, t, s, "at")
		// Pausing and resuming keeps the schedule.
		for i, typ := range []models.EventType{models.EventSessionPaused, models.EventSessionResumed} {
			ev := int64(2 + i)
			if _, err := s.Transition(ctx, at, typ, fanActor, "", models.TransitionInput{ExpectedVersion: &ev}); err != nil {
				t.Fatal(err)
			}
		}
		noLease(ctx, t, s, "at")
		clk.Add(time.Hour)
		if l := leaseOn(ctx, t, s, "at"); l.SessionID != at {
			t.Fatalf("lease %+v", l)
		}

		past := storetest.Session(ctx, t, s, nil)
		if _, err := s.Delegate(ctx, past, fanActor, "", models.DelegateInput{Queue: "past", Step: "s", ExpectedVersion: &v, AvailableAt: clk.In(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
		leaseOn(ctx, t, s, "past")

		bad := storetest.Session(ctx, t, s, nil)
		for _, c := range []struct {
			in   models.DelegateInput
			want string
		}{
			{models.DelegateInput{AvailableAt: "tomorrow"}, "[available_at]"},
			{models.DelegateInput{AvailableAt: clk.In(time.Hour), DelaySeconds: storetest.Ptr(5)}, "[delay_seconds]"},
			{models.DelegateInput{DelaySeconds: storetest.Ptr(-1)}, "[delay_seconds]"},
			{models.DelegateInput{DelaySeconds: storetest.Ptr(31 * 24 * 3600)}, "[delay_seconds]"},
			{models.DelegateInput{AvailableAt: clk.In(31 * 24 * time.Hour)}, "[available_at]"},
		} {
			c.in.Queue, c.in.Step, c.in.ExpectedVersion = "bad", "s", &v
			_, err := s.Delegate(ctx, bad, fanActor, "", c.in)
			if got := validationFields(t, err); got != c.want {
				t.Fatalf("%+v: fields %s, want %s", c.in, got, c.want)
			}
		}
		if st := loadState(ctx, t, s, bad); st.Version != 1 {
			t.Fatalf("refused delegation wrote: %+v", st)
		}
		verifyAll(ctx, t, s)
	})
}

func TestSnooze(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clk := setFanClock(s)
		id, did := storetest.Delegated(ctx, t, s, "snoozy")
		v := int64(2)
		until := clk.In(10 * time.Minute)

		for _, c := range []struct {
			typ   models.EventType
			until string
		}{
			{models.EventSessionPaused, clk.In(-time.Second)},
			{models.EventSessionPaused, "soon"},
			{models.EventSessionPaused, clk.In(31 * 24 * time.Hour)},
			{models.EventSessionCancelled, until},
		} {
			_, err := s.Transition(ctx, id, c.typ, fanActor, "", models.TransitionInput{ExpectedVersion: &v, Until: c.until})
			if got := validationFields(t, err); got != "[until]" {
				t.Fatalf("%s until %q: %s", c.typ, c.until, got)
			}
		}

		if _, err := s.Transition(ctx, id, models.EventSessionPaused, fanActor, "", models.TransitionInput{ExpectedVersion: &v, Reason: "wait for the bank", Until: until}); err != nil {
			t.Fatal(err)
		}
		st := loadState(ctx, t, s, id)
		row, _ := s.GetSession(ctx, id)
		if st.Status != models.StatusPaused || st.PausedUntil == "" || !row.ResumeAt.Valid || !row.ResumeAt.Time.Equal(clk.Now().Add(10*time.Minute)) {
			t.Fatalf("snoozed: %+v row %+v", st, row.ResumeAt)
		}
		noLease(ctx, t, s, "snoozy")
		clk.Add(9 * time.Minute)
		if r := maintainTogether(ctx, t, s, s); r.Resumed != 0 {
			t.Fatalf("resumed early: %+v", r)
		}
		clk.Add(time.Minute)
		if r := maintainTogether(ctx, t, s, s, s); r.Resumed != 1 {
			t.Fatalf("concurrent passes resumed %d times, want 1", r.Resumed)
		}
		evs := eventsOf(ctx, t, s, id, models.EventSessionResumed)
		if len(evs) != 1 || evs[0].Actor != models.SchedulerActor {
			t.Fatalf("resume events %+v", evs)
		}
		st = loadState(ctx, t, s, id)
		row, _ = s.GetSession(ctx, id)
		if st.Status != models.StatusQueued || st.PausedUntil != "" || row.ResumeAt.Valid {
			t.Fatalf("after snooze: %+v %+v", st, row.ResumeAt)
		}
		if l := leaseOn(ctx, t, s, "snoozy"); l.DelegationID != did {
			t.Fatalf("lease %+v", l)
		}
		if r := maintainTogether(ctx, t, s, s); r.Resumed != 0 {
			t.Fatalf("resumed twice: %+v", r)
		}

		// Resumed by hand first: the snooze is over, nothing fires later.
		other := storetest.Session(ctx, t, s, nil)
		v = 1
		if _, err := s.Transition(ctx, other, models.EventSessionPaused, fanActor, "", models.TransitionInput{ExpectedVersion: &v, Until: clk.In(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		v = 2
		if _, err := s.Transition(ctx, other, models.EventSessionResumed, fanActor, "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		clk.Add(2 * time.Minute)
		if r, err := s.Maintain(ctx); err != nil || r.Resumed != 0 {
			t.Fatalf("maintain %+v %v", r, err)
		}
		if st := loadState(ctx, t, s, other); st.Status != models.StatusOpen || st.Version != 3 {
			t.Fatalf("other %+v", st)
		}
		verifyAll(ctx, t, s)
	})
}

// TestMaintainTwoStoresPostgres runs the maintenance passes of two stores on
// one PostgreSQL schema, as two server processes would, and checks that each
// timer fires exactly once.
func TestMaintainTwoStoresPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s1 := storetest.New(t, models.Postgres)
	s2, err := models.Open(ctx, s1.URL(), models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	clk := setFanClock(s1, s2)

	// A snoozed session, a scheduled delegation, a fan-out that will time
	// out, one whose last child finished without its hook, an escalation.
	snoozed := storetest.Session(ctx, t, s1, nil)
	v := int64(1)
	if _, err := s1.Transition(ctx, snoozed, models.EventSessionPaused, fanActor, "", models.TransitionInput{ExpectedVersion: &v, Until: clk.In(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	later := storetest.Session(ctx, t, s1, nil)
	if _, err := s1.Delegate(ctx, later, fanActor, "", models.DelegateInput{Queue: "two-later", Step: "s", ExpectedVersion: &v, DelaySeconds: storetest.Ptr(60)}); err != nil {
		t.Fatal(err)
	}
	slow := fanParent(ctx, t, s1)
	spawn(ctx, t, s1, slow, 1, models.JoinInput{Policy: "all", TimeoutSeconds: storetest.Ptr(60)}, "two-slow")
	lost := fanParent(ctx, t, s1)
	lostKids := spawn(ctx, t, s1, lost, 1, models.JoinInput{Policy: "any"}, "two-lost")
	cancelWithoutHook(ctx, t, s1, lostKids[0])
	urgent := slaEscalate(ctx, t, s1, 1)

	clk.Add(15 * time.Minute)
	var sum models.MaintenanceReport
	for range 3 {
		r := maintainTogether(ctx, t, s1, s2, s1, s2)
		sum.Joined += r.Joined
		sum.Resumed += r.Resumed
		sum.SLABreaches += r.SLABreaches
	}
	if sum.Joined != 2 || sum.Resumed != 1 || sum.SLABreaches != 1 {
		t.Fatalf("two stores did %+v, want 2 joins, 1 resume, 1 breach", sum)
	}
	for _, c := range []struct {
		id  string
		typ models.EventType
	}{
		{snoozed, models.EventSessionResumed}, {slow, models.EventChildrenJoined},
		{lost, models.EventChildrenJoined}, {urgent, models.EventEscalationSLABreached},
	} {
		if evs := eventsOf(ctx, t, s1, c.id, c.typ); len(evs) != 1 {
			t.Fatalf("%s has %d %s events, want 1", c.id, len(evs), c.typ)
		}
	}
	if p := joinOf(ctx, t, s1, slow); p.Result != models.JoinTimeout {
		t.Fatalf("slow join %+v", p)
	}
	if p := joinOf(ctx, t, s1, lost); p.Result != models.JoinUnmet {
		t.Fatalf("lost join %+v", p)
	}

	// The scheduled delegation is now claimable, by exactly one of two
	// workers polling different processes.
	var (
		wg     sync.WaitGroup
		leases = make([]*models.Lease, 2)
		errs   = make([]error, 2)
	)
	for i, s := range []*models.Store{s1, s2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leases[i], errs[i] = s.Claim(ctx, "two-later", fmt.Sprintf("w-%d", i), "test:worker", "")
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if (leases[0] == nil) == (leases[1] == nil) {
		t.Fatalf("leases %+v %+v, want exactly one", leases[0], leases[1])
	}
	verifyAll(ctx, t, s1)
}
