package clienttest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestClientSnoozeScheduleMetrics: the client's snooze reaches the state,
// a scheduled delegation cannot be leased before its time while an
// unscheduled one can, and the product metrics decode.
func TestClientSnoozeScheduleMetrics(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	ts := newTestServer(t, s, nil)

	sess, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Wait for the customer"})
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	out, err := ts.controller.Snooze(ctx, sess.SessionID, until, client.TransitionInput{ExpectedVersion: sess.StateVersion, Reason: "back on Monday"})
	if err != nil || out.Status != client.StatusPaused {
		t.Fatalf("snooze = %+v, %v", out, err)
	}
	got, err := ts.worker.GetSession(ctx, sess.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		PausedUntil time.Time `json:"paused_until"`
	}
	if err := json.Unmarshal(got.State, &st); err != nil || !st.PausedUntil.Equal(until) {
		t.Fatalf("state %s: paused_until %v, want %v (%v)", got.State, st.PausedUntil, until, err)
	}

	later, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund later"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.controller.Delegate(ctx, later.SessionID, client.DelegateInput{Queue: "sched", Step: "refund",
		ExpectedVersion: later.StateVersion, DelaySeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	at, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund tomorrow"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.controller.Delegate(ctx, at.SessionID, client.DelegateInput{Queue: "sched", Step: "refund",
		ExpectedVersion: at.StateVersion, AvailableAt: time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)}); err != nil {
		t.Fatal(err)
	}
	if l, err := ts.worker.Lease(ctx, "sched", client.LeaseInput{Worker: "w-1"}); err != nil || l != nil {
		t.Fatalf("lease of scheduled work = %+v, %v; want nothing yet", l, err)
	}
	now, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund now"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := ts.controller.Delegate(ctx, now.SessionID, client.DelegateInput{Queue: "sched", Step: "refund", ExpectedVersion: now.StateVersion})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := ts.worker.Lease(ctx, "sched", client.LeaseInput{Worker: "w-1"}); err != nil || l == nil || l.DelegationID != d.DelegationID {
		t.Fatalf("lease = %+v, %v; want %s, the only delegation due", l, err, d.DelegationID)
	}

	m, err := ts.worker.Metrics(ctx, client.MetricsOptions{Window: "7d"})
	if err != nil || m.Window != "7d" || m.To.Sub(m.From) != 7*24*time.Hour || len(m.Overall) == 0 || m.Overall["handoff_success"] == nil {
		t.Fatalf("metrics = %+v, %v", m, err)
	}
}
