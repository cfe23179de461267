package models_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func TestSLAPolicyClock(t *testing.T) {
	t.Parallel()
	p := models.DefaultSLAPolicy()
	if p.For(1) != 15*time.Minute || p.For(5) != 72*time.Hour || p.For(9) != 4*time.Hour {
		t.Fatalf("defaults %v %v %v", p.For(1), p.For(5), p.For(9))
	}
	custom := models.SLAPolicy{1: time.Minute}
	if custom.For(1) != time.Minute || custom.For(2) != time.Hour {
		t.Fatalf("custom %v %v", custom.For(1), custom.For(2))
	}
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		after time.Duration
		want  models.SLAState
	}{
		{0, models.SLAOK}, {11*time.Minute + 59*time.Second, models.SLAOK}, {12 * time.Minute, models.SLANearBreach},
		{14*time.Minute + 59*time.Second, models.SLANearBreach}, {15 * time.Minute, models.SLABreached}, {time.Hour, models.SLABreached},
	} {
		got := p.Clock(1, t0, t0.Add(c.after))
		if got.State != c.want || !got.DueAt.Equal(t0.Add(15*time.Minute)) || got.Budget != 15*time.Minute {
			t.Errorf("after %v: %+v, want %s", c.after, got, c.want)
		}
	}
}

// slaEscalate creates a session of priority prio and escalates it.
func slaEscalate(ctx context.Context, t testing.TB, s *models.Store, prio int) string {
	t.Helper()
	id := storetest.Session(ctx, t, s, &storetest.SessionOpts{Priority: prio})
	v := int64(1)
	if _, err := s.Transition(ctx, id, models.EventSessionEscalated, fanActor, "", models.TransitionInput{ExpectedVersion: &v, Reason: "needs a human"}); err != nil {
		t.Fatal(err)
	}
	return id
}

func slaExec(ctx context.Context, t testing.TB, s *models.Store, id string, typ models.EventType, payload any) {
	t.Helper()
	if _, err := s.Execute(ctx, models.Command{SessionID: id, Type: typ, Actor: "user:usr_1", Payload: payload}); err != nil {
		t.Fatalf("%s: %v", typ, err)
	}
}

func dueOf(ctx context.Context, t testing.TB, s *models.Store) map[string]models.EscalationDue {
	t.Helper()
	rows, err := s.EscalationsDue(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]models.EscalationDue{}
	for _, r := range rows {
		out[r.SessionID] = r
	}
	return out
}

// maintainTogether runs Maintain from n goroutines at once (n server
// processes' passes colliding) and sums their reports.
func maintainTogether(ctx context.Context, t testing.TB, stores ...*models.Store) models.MaintenanceReport {
	t.Helper()
	var (
		mu    sync.Mutex
		sum   models.MaintenanceReport
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for _, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := s.Maintain(ctx)
			if err != nil {
				t.Errorf("maintain: %v", err)
			}
			mu.Lock()
			sum.Rescued += r.Rescued
			sum.Joined += r.Joined
			sum.Resumed += r.Resumed
			sum.SLABreaches += r.SLABreaches
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return sum
}

func TestSLABreachRecordedOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clk := setFanClock(s)
		urgent := slaEscalate(ctx, t, s, 1)
		relaxed := slaEscalate(ctx, t, s, 5)
		open := storetest.Session(ctx, t, s, &storetest.SessionOpts{Priority: 1})
		t0 := clk.Now()

		due := dueOf(ctx, t, s)
		if len(due) != 2 || due[urgent].State != models.SLAOK || !due[urgent].DueAt.Equal(t0.Add(15*time.Minute)) ||
			!due[relaxed].DueAt.Equal(t0.Add(72*time.Hour)) || due[open].SessionID != "" {
			t.Fatalf("due %+v", due)
		}
		rows, _ := s.EscalationsDue(ctx, 0)
		if rows[0].SessionID != urgent {
			t.Fatalf("soonest due first: %+v", rows)
		}

		clk.Add(13 * time.Minute)
		if d := dueOf(ctx, t, s)[urgent]; d.State != models.SLANearBreach {
			t.Fatalf("at 13m: %+v", d)
		}
		st, err := s.SLAStats(ctx)
		if err != nil || st.Open != 2 || st.NearBreach != 1 || st.OK != 1 || st.Breached != 0 || st.BreachEvents != 0 {
			t.Fatalf("stats at 13m %+v %v", st, err)
		}
		if r := maintainTogether(ctx, t, s, s); r.SLABreaches != 0 {
			t.Fatalf("breach before due: %+v", r)
		}

		clk.Add(2 * time.Minute)
		if d := dueOf(ctx, t, s)[urgent]; d.State != models.SLABreached || d.BreachRecorded {
			t.Fatalf("at 15m: %+v", d)
		}
		if r := maintainTogether(ctx, t, s, s); r.SLABreaches != 1 {
			t.Fatalf("concurrent passes recorded %d breaches, want 1", r.SLABreaches)
		}
		evs := eventsOf(ctx, t, s, urgent, models.EventEscalationSLABreached)
		if len(evs) != 1 || evs[0].Actor != models.SLAActor {
			t.Fatalf("breach events %+v", evs)
		}
		var p models.SLABreachPayload
		if err := json.Unmarshal([]byte(evs[0].Payload), &p); err != nil || p.Priority != 1 || p.SLASeconds != 900 || p.EscalationVersion != 2 {
			t.Fatalf("payload %s %v", evs[0].Payload, err)
		}
		if d := dueOf(ctx, t, s)[urgent]; !d.BreachRecorded {
			t.Fatalf("breach not marked: %+v", d)
		}

		// Claims and releases do not restart the clock or breach again.
		slaExec(ctx, t, s, urgent, models.EventHumanClaimed, models.HumanPayload{User: "user:usr_1"})
		clk.Add(time.Hour)
		slaExec(ctx, t, s, urgent, models.EventHumanReleased, models.HumanPayload{User: "user:usr_1"})
		if r := maintainTogether(ctx, t, s, s); r.SLABreaches != 0 {
			t.Fatalf("breach again: %+v", r)
		}
		st, _ = s.SLAStats(ctx)
		if st.Breached != 1 || st.BreachEvents != 1 {
			t.Fatalf("stats %+v", st)
		}

		// A new escalation of the same session has its own SLA and breach.
		slaExec(ctx, t, s, urgent, models.EventHumanClaimed, models.HumanPayload{User: "user:usr_1"})
		slaExec(ctx, t, s, urgent, models.EventHumanRequestedInput, models.HumanPayload{User: "user:usr_1", Question: "Which order?"})
		slaExec(ctx, t, s, urgent, models.EventInputProvided, models.InputPayload{Answer: "1182"})
		row, _ := s.GetSession(ctx, urgent)
		if _, err := s.Transition(ctx, urgent, models.EventSessionEscalated, fanActor, "", models.TransitionInput{ExpectedVersion: &row.StateVersion}); err != nil {
			t.Fatal(err)
		}
		if d := dueOf(ctx, t, s)[urgent]; d.State != models.SLAOK || d.BreachRecorded {
			t.Fatalf("new escalation %+v", d)
		}
		clk.Add(15 * time.Minute)
		if r := maintainTogether(ctx, t, s, s, s); r.SLABreaches != 1 {
			t.Fatalf("second escalation: %+v", r)
		}
		if evs := eventsOf(ctx, t, s, urgent, models.EventEscalationSLABreached); len(evs) != 2 {
			t.Fatalf("%d breach events", len(evs))
		}
		if evs := eventsOf(ctx, t, s, relaxed, models.EventEscalationSLABreached); len(evs) != 0 {
			t.Fatal("priority 5 breached early")
		}
		verifyAll(ctx, t, s)
	})
}

func TestSLAConfigurable(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clk := setFanClock(s)
		s.SLA = models.SLAPolicy{1: 15 * time.Minute, 2: time.Hour, 3: 2 * time.Minute, 4: 24 * time.Hour, 5: 72 * time.Hour}
		id := slaEscalate(ctx, t, s, 3)
		clk.Add(2 * time.Minute)
		if r, err := s.Maintain(ctx); err != nil || r.SLABreaches != 1 {
			t.Fatalf("maintain %+v %v", r, err)
		}
		if d := dueOf(ctx, t, s)[id]; d.Budget != 2*time.Minute || d.State != models.SLABreached || !d.BreachRecorded {
			t.Fatalf("due %+v", d)
		}
		// A session that left human hands is no longer due.
		row, _ := s.GetSession(ctx, id)
		if _, err := s.Transition(ctx, id, models.EventSessionCancelled, fanActor, "", models.TransitionInput{ExpectedVersion: &row.StateVersion}); err != nil {
			t.Fatal(err)
		}
		if st, _ := s.SLAStats(ctx); st.Open != 0 || st.BreachEvents != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}
