package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// fanClock is a settable clock shared safely by goroutines (and by two
// stores standing for two server processes).
type fanClock struct{ ns atomic.Int64 }

func setFanClock(stores ...*models.Store) *fanClock {
	c := &fanClock{}
	c.ns.Store(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC).UnixNano())
	for _, s := range stores {
		s.Now = c.Now
	}
	return c
}

func (c *fanClock) Now() time.Time            { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fanClock) Add(d time.Duration)       { c.ns.Add(int64(d)) }
func (c *fanClock) In(d time.Duration) string { return c.Now().Add(d).Format(time.RFC3339Nano) }

const fanActor = "test:controller"

// fanParent creates the parent session (open, version 1).
func fanParent(ctx context.Context, t testing.TB, s *models.Store) string {
	t.Helper()
	return storetest.Session(ctx, t, s, &storetest.SessionOpts{Goal: "Decide refund for order 1182", TicketRef: "T-1182", Priority: 2})
}

// spawn fans parentID (at version v) out into one child per queue.
func spawn(ctx context.Context, t testing.TB, s *models.Store, parentID string, v int64, join models.JoinInput, queues ...string) []string {
	t.Helper()
	in := models.SpawnInput{ExpectedVersion: &v, Join: join}
	for i, q := range queues {
		in.Children = append(in.Children, models.ChildInput{Goal: fmt.Sprintf("Check source %d", i+1), Queue: q, Step: "check"})
	}
	out, err := s.SpawnChildren(ctx, parentID, fanActor, "", in)
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	var d models.ChildrenSpawned
	if err := out.DecodeData(&d); err != nil {
		t.Fatalf("spawn data: %v", err)
	}
	ids := make([]string, len(d.Children))
	for i, c := range d.Children {
		ids[i] = c.SessionID
	}
	return ids
}

// leaseOn leases the next delegation of queue.
func leaseOn(ctx context.Context, t testing.TB, s *models.Store, queue string) *models.Lease {
	t.Helper()
	l, err := s.Claim(ctx, queue, "w-"+queue, "test:worker", "")
	if err != nil || l == nil {
		t.Fatalf("claim %s: %v %v", queue, l, err)
	}
	return l
}

// resultFor is a valid result of the given type for a lease.
func resultFor(l *models.Lease, resultType, output string) models.ResultInput {
	in := models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step, ResultType: resultType,
		Evidence: []models.Evidence{{Claim: "checked " + l.SessionID, Source: "src:" + l.SessionID}},
	}
	if output != "" {
		in.Output = json.RawMessage(output)
	}
	if resultType == models.ResultFailed {
		in.Failure = &models.Failure{Class: models.FailurePermanent, Message: "source unreachable"}
	}
	return in
}

// finish leases queue's delegation and reports a result of resultType.
func finish(ctx context.Context, t testing.TB, s *models.Store, queue, resultType, output string) {
	t.Helper()
	l := leaseOn(ctx, t, s, queue)
	if _, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "", resultFor(l, resultType, output)); err != nil {
		t.Fatalf("result on %s: %v", queue, err)
	}
}

func loadState(ctx context.Context, t testing.TB, s *models.Store, id string) models.State {
	t.Helper()
	row, err := s.GetSession(ctx, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	st, err := row.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func eventsOf(ctx context.Context, t testing.TB, s *models.Store, id string, typ models.EventType) []models.Event {
	t.Helper()
	var evs []models.Event
	if err := s.DB.WithContext(ctx).Where("session_id = ? AND type = ?", id, typ).Order("seq").Find(&evs).Error; err != nil {
		t.Fatal(err)
	}
	return evs
}

func joinOf(ctx context.Context, t testing.TB, s *models.Store, parentID string) models.JoinPayload {
	t.Helper()
	evs := eventsOf(ctx, t, s, parentID, models.EventChildrenJoined)
	if len(evs) != 1 {
		t.Fatalf("%d children.joined events on %s, want exactly 1", len(evs), parentID)
	}
	var p models.JoinPayload
	if err := json.Unmarshal([]byte(evs[0].Payload), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func noJoin(ctx context.Context, t testing.TB, s *models.Store, parentID string) {
	t.Helper()
	if evs := eventsOf(ctx, t, s, parentID, models.EventChildrenJoined); len(evs) != 0 {
		t.Fatalf("unexpected join: %s", evs[0].Payload)
	}
	if st := loadState(ctx, t, s, parentID); st.Status != models.StatusWaitingChildren {
		t.Fatalf("parent is %s, want waiting_children", st.Status)
	}
}

func verifyAll(ctx context.Context, t testing.TB, s *models.Store) {
	t.Helper()
	rep, err := s.Verify(ctx, models.VerifyOpts{})
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep.Problems)
	}
}

func TestSpawnChildren(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clk := setFanClock(s)
		pid := fanParent(ctx, t, s)
		v := int64(1)
		in := models.SpawnInput{
			ExpectedVersion: &v,
			Join:            models.JoinInput{Policy: "all", ConflictKeys: []string{"eligible"}},
			Children: []models.ChildInput{
				{Goal: "Check payment", Queue: "payments", Step: "check-payment", Instructions: "Look up the payment.", Facts: map[string]any{"order": "1182"}},
				{Goal: "Check shipping", Queue: "shipping", Step: "check-shipping", LeaseSeconds: storetest.Ptr(60)},
			},
		}
		out, err := s.SpawnChildren(ctx, pid, fanActor, "fan-1", in)
		if err != nil {
			t.Fatalf("spawn: %v", err)
		}
		if out.Status != models.StatusWaitingChildren || out.StateVersion != 2 {
			t.Fatalf("outcome %+v", out)
		}
		var d models.ChildrenSpawned
		if err := out.DecodeData(&d); err != nil || len(d.Children) != 2 {
			t.Fatalf("data %s: %v", out.Data, err)
		}
		parent := loadState(ctx, t, s, pid)
		j := parent.Join
		if j == nil || j.Policy != "all" || j.TimeoutSeconds != models.DefaultJoinTimeoutSeconds || len(j.Children) != 2 ||
			j.Children[0] != d.Children[0].SessionID || j.ConflictKeys[0] != "eligible" {
			t.Fatalf("join %+v", j)
		}
		if due, _ := time.Parse(time.RFC3339Nano, j.DueAt); !due.Equal(clk.Now().Add(600 * time.Second)) {
			t.Fatalf("due at %s", j.DueAt)
		}
		for i, c := range d.Children {
			row, err := s.GetSession(ctx, c.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			st, _ := row.Decode()
			if row.ParentID == nil || *row.ParentID != pid || st.ParentID != pid || st.Goal != in.Children[i].Goal ||
				st.TicketRef != "T-1182" || st.Priority != 2 || st.Facts["parent_goal"] != parent.Goal ||
				st.Status != models.StatusQueued || st.Version != 2 || st.Delegation == nil || st.Delegation.ID != c.DelegationID {
				t.Fatalf("child %d: row %+v state %+v", i, row, st)
			}
			dl, err := s.GetDelegation(ctx, c.DelegationID)
			if err != nil || dl.Status != models.DelegationQueued || dl.Queue != in.Children[i].Queue || dl.SessionID != c.SessionID {
				t.Fatalf("delegation %+v %v", dl, err)
			}
		}
		if st := loadState(ctx, t, s, d.Children[0].SessionID); st.Facts["order"] != "1182" {
			t.Fatalf("child facts %v", st.Facts)
		}
		l := leaseOn(ctx, t, s, "payments")
		if l.SessionID != d.Children[0].SessionID || l.Packet.Instructions != "Look up the payment." || l.Packet.ConfirmedFacts["parent_goal"] != parent.Goal {
			t.Fatalf("lease %+v", l)
		}

		// A repeat with the same key is the same request (the generated ids
		// are not part of it) and answers the first outcome.
		again, err := s.SpawnChildren(ctx, pid, fanActor, "fan-1", in)
		if err != nil || !again.Replayed || string(again.Data) != string(out.Data) {
			t.Fatalf("repeat %+v %v", again, err)
		}
		in.Children[1].Goal = "Check carrier"
		if _, err := s.SpawnChildren(ctx, pid, fanActor, "fan-1", in); models.ErrorCode(err) != models.EIDEMPOTENCY {
			t.Fatalf("same key, other body: %v", err)
		}
		var n int64
		s.DB.Model(&models.Session{}).Where("parent_id = ?", pid).Count(&n)
		if n != 2 {
			t.Fatalf("%d children", n)
		}
		verifyAll(ctx, t, s)
	})
}

func TestSpawnChildrenRefusals(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		pid := fanParent(ctx, t, s)
		fields := func(err error) []string {
			var ve *models.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a validation error, got %v", err)
			}
			var out []string
			for _, f := range ve.Fields {
				out = append(out, f.Field)
			}
			return out
		}
		wantFields := func(in models.SpawnInput, want ...string) {
			t.Helper()
			_, err := s.SpawnChildren(ctx, pid, fanActor, "", in)
			if got := fields(err); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("fields %v, want %v", got, want)
			}
		}
		v := int64(1)
		wantFields(models.SpawnInput{
			Join: models.JoinInput{Policy: "most", Quorum: storetest.Ptr(2), TimeoutSeconds: storetest.Ptr(0), ConflictKeys: []string{"", "a", "a"}},
			Children: []models.ChildInput{
				{Goal: "", Queue: "bad queue", Step: " ", LeaseSeconds: storetest.Ptr(0)},
				{Goal: "ok", Queue: "q", Step: "s", MaxAttempts: storetest.Ptr(99), Facts: map[string]any{"": 1}},
			},
		}, "expected_version", "join.policy", "join.quorum", "join.timeout_seconds", "join.conflict_keys[0]", "join.conflict_keys[2]",
			"children[0].goal", "children[0].queue", "children[0].step", "children[0].lease_seconds",
			"children[1].max_attempts", "children[1].facts")
		one := []models.ChildInput{{Goal: "g", Queue: "q", Step: "s"}}
		wantFields(models.SpawnInput{ExpectedVersion: &v, Join: models.JoinInput{Policy: "quorum"}, Children: one}, "join.quorum")
		wantFields(models.SpawnInput{ExpectedVersion: &v, Join: models.JoinInput{Policy: "quorum", Quorum: storetest.Ptr(2)}, Children: one}, "join.quorum")
		wantFields(models.SpawnInput{ExpectedVersion: &v, Join: models.JoinInput{Policy: "all", TimeoutSeconds: storetest.Ptr(86401)}}, "join.timeout_seconds", "children")
		many := make([]models.ChildInput, 51)
		for i := range many {
			many[i] = one[0]
		}
		wantFields(models.SpawnInput{ExpectedVersion: &v, Join: models.JoinInput{Policy: "any"}, Children: many}, "children")

		ok := models.SpawnInput{ExpectedVersion: &v, Join: models.JoinInput{Policy: "all"}, Children: one}
		if _, err := s.SpawnChildren(ctx, "ses_nope", fanActor, "", ok); models.ErrorCode(err) != models.ENOTFOUND {
			t.Fatalf("unknown parent: %v", err)
		}
		stale := int64(5)
		if _, err := s.SpawnChildren(ctx, pid, fanActor, "", models.SpawnInput{ExpectedVersion: &stale, Join: ok.Join, Children: one}); models.ErrorCode(err) != models.ECONFLICT {
			t.Fatalf("stale: %v", err)
		}
		// Only an open parent may fan out.
		sid, _ := storetest.Delegated(ctx, t, s, "refunds")
		v2 := int64(2)
		if _, err := s.SpawnChildren(ctx, sid, fanActor, "", models.SpawnInput{ExpectedVersion: &v2, Join: ok.Join, Children: one}); models.ErrorCode(err) != models.EILLEGAL {
			t.Fatalf("queued parent: %v", err)
		}
		var n int64
		s.DB.Model(&models.Session{}).Count(&n)
		if n != 2 {
			t.Fatalf("%d sessions after refusals, want 2", n)
		}
	})
}

func TestJoinAll(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		setFanClock(s)
		pid := fanParent(ctx, t, s)
		kids := spawn(ctx, t, s, pid, 1, models.JoinInput{Policy: "all"}, "a", "b", "c")
		finish(ctx, t, s, "a", models.ResultCompleted, `{"eligible": true}`)
		finish(ctx, t, s, "b", models.ResultCompleted, `{"eligible": true, "amount": 10}`)
		noJoin(ctx, t, s, pid)
		finish(ctx, t, s, "c", models.ResultCompleted, `{"eligible": true}`)
		p := joinOf(ctx, t, s, pid)
		if p.Result != models.JoinMet || len(p.Children) != 3 {
			t.Fatalf("join %+v", p)
		}
		for i, c := range p.Children {
			if c.SessionID != kids[i] || c.Status != models.StatusCompleted || len(c.Evidence) != 1 || c.Evidence[0].Source != "src:"+kids[i] {
				t.Fatalf("child %d outcome %+v", i, c)
			}
		}
		if string(p.Children[1].Output) != `{"amount":10,"eligible":true}` {
			t.Fatalf("output %s", p.Children[1].Output)
		}
		st := loadState(ctx, t, s, pid)
		if st.Status != models.StatusOpen || st.Join.Result != models.JoinMet || len(st.Evidence) != 3 {
			t.Fatalf("parent %+v", st)
		}
		// Maintenance finds nothing more to do.
		if r, err := s.Maintain(ctx); err != nil || r.Joined != 0 {
			t.Fatalf("maintain %+v %v", r, err)
		}
		joinOf(ctx, t, s, pid)
		verifyAll(ctx, t, s)
	})
}

func TestJoinAnyAndQuorum(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		setFanClock(s)
		any := fanParent(ctx, t, s)
		spawn(ctx, t, s, any, 1, models.JoinInput{Policy: "any"}, "any-a", "any-b")
		finish(ctx, t, s, "any-a", models.ResultRejected, "")
		noJoin(ctx, t, s, any)
		finish(ctx, t, s, "any-b", models.ResultCompleted, `{"ok": 1}`)
		if p := joinOf(ctx, t, s, any); p.Result != models.JoinMet || p.Children[0].Status != models.StatusRejected {
			t.Fatalf("any join %+v", p)
		}

		first := fanParent(ctx, t, s)
		spawn(ctx, t, s, first, 1, models.JoinInput{Policy: "any"}, "first-a", "first-b")
		finish(ctx, t, s, "first-b", models.ResultCompleted, `{"ok": 2}`)
		p := joinOf(ctx, t, s, first)
		if p.Result != models.JoinMet || p.Children[0].Status != models.StatusQueued || p.Children[1].Status != models.StatusCompleted {
			t.Fatalf("first-completed join %+v", p)
		}
		// The child the any join no longer needs was cancelled with the join,
		// saying which child met it; its work left the queue.
		loser := loadState(ctx, t, s, loadState(ctx, t, s, first).Join.Children[0])
		winner := loadState(ctx, t, s, first).Join.Children[1]
		if want := "cancelled: join met by " + winner + " (policy any)"; loser.Status != models.StatusCancelled || loser.Outcome != want {
			t.Fatalf("losing child %s %q, want %q", loser.Status, loser.Outcome, want)
		}
		if l, err := s.Claim(ctx, "first-a", "w", "test:worker", ""); l != nil || err != nil {
			t.Fatalf("the cancelled child's work is still claimable: %+v %v", l, err)
		}
		joinOf(ctx, t, s, first)

		q := fanParent(ctx, t, s)
		spawn(ctx, t, s, q, 1, models.JoinInput{Policy: "quorum", Quorum: storetest.Ptr(2)}, "q-a", "q-b", "q-c")
		finish(ctx, t, s, "q-a", models.ResultCompleted, `{"ok": 1}`)
		finish(ctx, t, s, "q-b", models.ResultRejected, "")
		noJoin(ctx, t, s, q)
		finish(ctx, t, s, "q-c", models.ResultCompleted, `{"ok": 1}`)
		if p := joinOf(ctx, t, s, q); p.Result != models.JoinMet {
			t.Fatalf("quorum join %+v", p)
		}
		if st := loadState(ctx, t, s, q); st.Status != models.StatusOpen {
			t.Fatalf("quorum parent %s", st.Status)
		}

		// Every child finished and too few completed: unmet, escalated.
		u := fanParent(ctx, t, s)
		spawn(ctx, t, s, u, 1, models.JoinInput{Policy: "quorum", Quorum: storetest.Ptr(2)}, "u-a", "u-b")
		finish(ctx, t, s, "u-a", models.ResultCompleted, `{"ok": 1}`)
		finish(ctx, t, s, "u-b", models.ResultFailed, "")
		noJoin(ctx, t, s, u) // u-b escalated: a human may still complete it
		ub := loadState(ctx, t, s, loadState(ctx, t, s, u).Join.Children[1])
		if _, err := s.Transition(ctx, ub.SessionID, models.EventSessionCancelled, fanActor, "", models.TransitionInput{ExpectedVersion: &ub.Version}); err != nil {
			t.Fatal(err)
		}
		if p := joinOf(ctx, t, s, u); p.Result != models.JoinUnmet {
			t.Fatalf("unmet join %+v", p)
		}
		if st := loadState(ctx, t, s, u); st.Status != models.StatusEscalated || len(st.Escalation.Children) != 2 {
			t.Fatalf("unmet parent %+v", st)
		}
		verifyAll(ctx, t, s)
	})
}

func TestJoinConflicts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		setFanClock(s)
		// Completed children disagree on a declared key.
		k := fanParent(ctx, t, s)
		kids := spawn(ctx, t, s, k, 1, models.JoinInput{Policy: "all", ConflictKeys: []string{"eligible"}}, "k-a", "k-b", "k-c")
		finish(ctx, t, s, "k-a", models.ResultCompleted, `{"eligible": true, "note": "a"}`)
		finish(ctx, t, s, "k-b", models.ResultCompleted, `{"eligible": true, "note": "b"}`)
		finish(ctx, t, s, "k-c", models.ResultCompleted, `{"eligible": false}`)
		p := joinOf(ctx, t, s, k)
		if p.Result != models.JoinConflict {
			t.Fatalf("key conflict join %+v", p)
		}
		st := loadState(ctx, t, s, k)
		e := st.Escalation
		if st.Status != models.StatusEscalated || e == nil || len(e.Children) != 3 || e.Goal != "Decide refund for order 1182" {
			t.Fatalf("parent %+v", st)
		}
		for i, c := range e.Children {
			if c.SessionID != kids[i] || c.Status != models.StatusCompleted || len(c.Output) == 0 || c.Goal == "" {
				t.Fatalf("side by side %d: %+v", i, c)
			}
		}
		// The same outputs without declared keys agree.
		ok := fanParent(ctx, t, s)
		spawn(ctx, t, s, ok, 1, models.JoinInput{Policy: "all"}, "ok-a", "ok-b")
		finish(ctx, t, s, "ok-a", models.ResultCompleted, `{"eligible": true}`)
		finish(ctx, t, s, "ok-b", models.ResultCompleted, `{"eligible": false}`)
		if p := joinOf(ctx, t, s, ok); p.Result != models.JoinMet {
			t.Fatalf("no keys join %+v", p)
		}

		// Under all, completed and rejected children are a conflict.
		m := fanParent(ctx, t, s)
		spawn(ctx, t, s, m, 1, models.JoinInput{Policy: "all"}, "m-a", "m-b")
		finish(ctx, t, s, "m-a", models.ResultCompleted, `{"eligible": true}`)
		noJoin(ctx, t, s, m)
		finish(ctx, t, s, "m-b", models.ResultRejected, "")
		p = joinOf(ctx, t, s, m)
		if p.Result != models.JoinConflict || p.Children[0].Status != models.StatusCompleted || p.Children[1].Status != models.StatusRejected {
			t.Fatalf("mixed join %+v", p)
		}
		if st := loadState(ctx, t, s, m); st.Status != models.StatusEscalated || len(st.Escalation.Children) != 2 {
			t.Fatalf("mixed parent %+v", st)
		}
		verifyAll(ctx, t, s)
	})
}

func TestJoinTimeout(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clk := setFanClock(s)
		pid := fanParent(ctx, t, s)
		spawn(ctx, t, s, pid, 1, models.JoinInput{Policy: "all", TimeoutSeconds: storetest.Ptr(60)}, "t-a", "t-b")
		finish(ctx, t, s, "t-a", models.ResultCompleted, `{"ok": true}`)
		clk.Add(59 * time.Second)
		if r, err := s.Maintain(ctx); err != nil || r.Joined != 0 {
			t.Fatalf("maintain before the timeout: %+v %v", r, err)
		}
		noJoin(ctx, t, s, pid)
		clk.Add(time.Second)
		if r, err := s.Maintain(ctx); err != nil || r.Joined != 1 {
			t.Fatalf("maintain at the timeout: %+v %v", r, err)
		}
		p := joinOf(ctx, t, s, pid)
		if p.Result != models.JoinTimeout || p.Children[0].Status != models.StatusCompleted || p.Children[1].Status != models.StatusQueued {
			t.Fatalf("timeout join %+v", p)
		}
		st := loadState(ctx, t, s, pid)
		if st.Status != models.StatusEscalated || len(st.Escalation.Children) != 2 {
			t.Fatalf("parent %+v", st)
		}
		row, _ := s.GetSession(ctx, pid)
		if row.JoinDueAt.Valid {
			t.Fatalf("join timer still set: %+v", row.JoinDueAt)
		}
		// The late child changes nothing.
		finish(ctx, t, s, "t-b", models.ResultCompleted, `{"ok": true}`)
		if r, err := s.Maintain(ctx); err != nil || r.Joined != 0 {
			t.Fatalf("maintain after: %+v %v", r, err)
		}
		joinOf(ctx, t, s, pid)
		verifyAll(ctx, t, s)
	})
}

// cancelWithoutHook cancels a session inside a transaction of the test's
// own, as a process that crashed after commit would: the child-done hook
// never runs.
func cancelWithoutHook(ctx context.Context, t testing.TB, s *models.Store, id string) {
	t.Helper()
	err := s.Write(ctx, func(tx *models.Tx) error {
		_, _, err := s.ExecuteTx(tx, models.Command{SessionID: id, Type: models.EventSessionCancelled, Actor: fanActor, Payload: models.ReasonPayload{Reason: "test"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestJoinCatchUpAndResume(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		setFanClock(s)
		pid := fanParent(ctx, t, s)
		kids := spawn(ctx, t, s, pid, 1, models.JoinInput{Policy: "all"}, "c-a", "c-b")
		finish(ctx, t, s, "c-a", models.ResultCompleted, `{"ok": true}`)
		cancelWithoutHook(ctx, t, s, kids[1])
		noJoin(ctx, t, s, pid)
		if r, err := s.Maintain(ctx); err != nil || r.Joined != 1 {
			t.Fatalf("catch-up: %+v %v", r, err)
		}
		if p := joinOf(ctx, t, s, pid); p.Result != models.JoinUnmet {
			t.Fatalf("catch-up join %+v", p)
		}

		// A paused parent does not join; resuming it evaluates the join.
		r := fanParent(ctx, t, s)
		spawn(ctx, t, s, r, 1, models.JoinInput{Policy: "any"}, "r-a", "r-b")
		v := int64(2)
		if _, err := s.Transition(ctx, r, models.EventSessionPaused, fanActor, "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		finish(ctx, t, s, "r-a", models.ResultCompleted, `{"ok": true}`)
		if evs := eventsOf(ctx, t, s, r, models.EventChildrenJoined); len(evs) != 0 {
			t.Fatal("a paused parent joined")
		}
		v = 3
		if _, err := s.Transition(ctx, r, models.EventSessionResumed, fanActor, "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		if p := joinOf(ctx, t, s, r); p.Result != models.JoinMet {
			t.Fatalf("join after resume %+v", p)
		}
		verifyAll(ctx, t, s)
	})
}

// TestJoinConcurrentChildren finishes two children at the same instant, on
// each dialect, and checks the parent records exactly one join.
func TestJoinConcurrentChildren(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		setFanClock(s)
		for round := range 8 {
			pid := fanParent(ctx, t, s)
			policy := []string{"all", "any"}[round%2]
			qa, qb := fmt.Sprintf("r%d-a", round), fmt.Sprintf("r%d-b", round)
			spawn(ctx, t, s, pid, 1, models.JoinInput{Policy: policy}, qa, qb)
			la, lb := leaseOn(ctx, t, s, qa), leaseOn(ctx, t, s, qb)
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make([]error, 2)
			for i, l := range []*models.Lease{la, lb} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = s.SubmitResult(ctx, l.DelegationID, "test:worker", "", resultFor(l, models.ResultCompleted, `{"ok": true}`))
				}()
			}
			close(start)
			wg.Wait()
			if policy == "any" {
				// The join met by the first result cancels the other child;
				// its result, if it comes after, is fenced off.
				for i, err := range errs {
					if models.ErrorCode(err) == models.ECONFLICT && errs[1-i] == nil {
						errs[i] = nil
					}
				}
			}
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if p := joinOf(ctx, t, s, pid); p.Result != models.JoinMet {
				t.Fatalf("round %d: join %+v", round, p)
			}
			if r, err := s.Maintain(ctx); err != nil || r.Joined != 0 {
				t.Fatalf("round %d: maintain %+v %v", round, r, err)
			}
		}
		verifyAll(ctx, t, s)
	})
}

func TestCancelParentCancelsChildren(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		setFanClock(s)
		pid := fanParent(ctx, t, s)
		kids := spawn(ctx, t, s, pid, 1, models.JoinInput{Policy: "all"}, "x-a", "x-b", "x-c")
		la := leaseOn(ctx, t, s, "x-a")
		lb := leaseOn(ctx, t, s, "x-b")
		finish(ctx, t, s, "x-c", models.ResultCompleted, `{"ok": true}`)
		// Child b moves on to a step of its own and fans out in turn.
		if _, err := s.SubmitResult(ctx, lb.DelegationID, "test:worker", "", func() models.ResultInput {
			in := resultFor(lb, models.ResultCompleted, `{"ok": true}`)
			in.NextStep = "split"
			return in
		}()); err != nil {
			t.Fatal(err)
		}
		grand := spawn(ctx, t, s, kids[1], 4, models.JoinInput{Policy: "any"}, "x-g")
		lg := leaseOn(ctx, t, s, "x-g")

		v := int64(2)
		if _, err := s.Transition(ctx, pid, models.EventSessionCancelled, fanActor, "", models.TransitionInput{ExpectedVersion: &v, Reason: "customer withdrew"}); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{pid, kids[0], kids[1], grand[0]} {
			if st := loadState(ctx, t, s, id); st.Status != models.StatusCancelled {
				t.Fatalf("%s is %s, want cancelled", id, st.Status)
			}
		}
		if st := loadState(ctx, t, s, kids[2]); st.Status != models.StatusCompleted {
			t.Fatalf("finished child is %s", st.Status)
		}
		for _, l := range []*models.Lease{la, lg} {
			d, _ := s.GetDelegation(ctx, l.DelegationID)
			if d.Status != models.DelegationCancelled {
				t.Fatalf("delegation %s is %s", d.ID, d.Status)
			}
			if _, err := s.Heartbeat(ctx, l.DelegationID, l.LeaseToken); models.ErrorCode(err) != models.ECONFLICT {
				t.Fatalf("late heartbeat: %v", err)
			}
			if _, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "", resultFor(l, models.ResultCompleted, `{"ok": true}`)); models.ErrorCode(err) != models.ECONFLICT {
				t.Fatalf("late result: %v", err)
			}
		}
		if evs := eventsOf(ctx, t, s, pid, models.EventChildrenJoined); len(evs) != 0 {
			t.Fatal("a cancelled parent joined")
		}
		if r, err := s.Maintain(ctx); err != nil || r.Joined != 0 {
			t.Fatalf("maintain %+v %v", r, err)
		}
		verifyAll(ctx, t, s)
	})
}

func TestChildEscalationCarriesParentGoal(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		setFanClock(s)
		pid := fanParent(ctx, t, s)
		kids := spawn(ctx, t, s, pid, 1, models.JoinInput{Policy: "all"}, "e-a")
		finish(ctx, t, s, "e-a", models.ResultFailed, "")
		st := loadState(ctx, t, s, kids[0])
		if st.Status != models.StatusEscalated || st.Escalation == nil || st.Escalation.ParentGoal != "Decide refund for order 1182" {
			t.Fatalf("child escalation %+v", st.Escalation)
		}
		noJoin(ctx, t, s, pid)
		// A human finishing the child completes the join as well.
		for _, typ := range []models.EventType{models.EventHumanClaimed, models.EventHumanCompleted} {
			if _, err := s.Execute(ctx, models.Command{SessionID: kids[0], Type: typ, Actor: "user:usr_1",
				Payload: models.HumanPayload{User: "user:usr_1", Resolution: "refund approved by hand"}}); err != nil {
				t.Fatal(err)
			}
		}
		p := joinOf(ctx, t, s, pid)
		if p.Result != models.JoinMet || p.Children[0].Outcome != "refund approved by hand" {
			t.Fatalf("join %+v", p)
		}
	})
}
