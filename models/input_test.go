package models_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// awaitingInput delegates a step, leases it and has the worker ask a
// question (needs_input): the session waits in awaiting_input at version 4.
func awaitingInput(ctx context.Context, t testing.TB, s *models.Store, question string) string {
	t.Helper()
	sid, did := storetest.Delegated(ctx, t, s, "refunds")
	l, err := s.Claim(ctx, "refunds", "w-1", "test:worker", "")
	if err != nil || l == nil {
		t.Fatalf("claim: %v %v", l, err)
	}
	out, err := s.SubmitResult(ctx, did, "test:worker", "", models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: sid, Step: "check-eligibility", ResultType: models.ResultNeedsInput,
		Question: question,
	})
	if err != nil || out.Status != models.StatusAwaitingInput || out.StateVersion != 4 {
		t.Fatalf("needs_input = %+v, %v", out, err)
	}
	return sid
}

func sessionEvents(t testing.TB, s *models.Store, sid string) []models.Event {
	t.Helper()
	var evs []models.Event
	if err := s.DB.Where("session_id = ?", sid).Order("seq").Find(&evs).Error; err != nil {
		t.Fatal(err)
	}
	return evs
}

func verifyClean(t testing.TB, s *models.Store, sid string) {
	t.Helper()
	rep, err := s.Verify(context.Background(), models.VerifyOpts{SessionIDs: []string{sid}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 0 {
		t.Fatalf("verify: %v", rep.Problems)
	}
}

// TestProvideInputDelegatesInOneTransaction answers a question and
// delegates the next step: two events in one transaction (input.provided
// carrying the answer, the question and the facts, then delegation.created),
// the delegation row, status queued; a repeat with the same key replays; a
// second answer is illegal and writes nothing.
func TestProvideInputDelegatesInOneTransaction(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid := awaitingInput(ctx, t, s, "Which card was charged?")
		in := models.InputInput{
			ExpectedVersion: v64(4), Answer: "Visa ending 4242", Facts: map[string]any{"card": "visa"},
			Delegate: &models.InputDelegate{Queue: "payments", Step: "issue-refund", Instructions: "Refund to the card.",
				MaxAttempts: storetest.Ptr(5), LeaseSeconds: storetest.Ptr(120)},
		}
		out, err := s.ProvideInput(ctx, sid, "test:controller", "answer-1", in)
		if err != nil {
			t.Fatalf("provide input with delegate: %v", err)
		}
		if out.Status != models.StatusQueued || out.StateVersion != 6 {
			t.Fatalf("outcome = %s v%d, want queued v6", out.Status, out.StateVersion)
		}
		evs := sessionEvents(t, s, sid)
		if len(evs) != 6 || evs[4].Type != models.EventInputProvided || evs[5].Type != models.EventDelegationCreated {
			t.Fatalf("events = %d, last two %s %s", len(evs), evs[len(evs)-2].Type, evs[len(evs)-1].Type)
		}
		if evs[5].Actor != "test:controller" || evs[5].PrevHash != evs[4].Hash {
			t.Fatalf("delegation event actor %q prev_hash %q", evs[5].Actor, evs[5].PrevHash)
		}
		var p models.InputPayload
		if err := json.Unmarshal([]byte(evs[4].Payload), &p); err != nil {
			t.Fatal(err)
		}
		if p.Answer != "Visa ending 4242" || p.Question != "Which card was charged?" || p.Facts["card"] != "visa" {
			t.Fatalf("input.provided payload = %s", evs[4].Payload)
		}
		var dp models.DelegationPayload
		if err := json.Unmarshal([]byte(evs[5].Payload), &dp); err != nil {
			t.Fatal(err)
		}
		var rows []models.Delegation
		if err := s.DB.Where("session_id = ? AND status = ?", sid, models.DelegationQueued).Find(&rows).Error; err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].ID != dp.DelegationID || rows[0].Queue != "payments" || rows[0].Step != "issue-refund" ||
			rows[0].MaxAttempts != 5 || rows[0].LeaseSeconds != 120 || rows[0].Instructions != "Refund to the card." {
			t.Fatalf("queued delegations = %+v, want the one of %s", rows, dp.DelegationID)
		}
		st := mustState(t, s, sid)
		if len(st.OpenQuestions) != 0 || st.Facts["card"] != "visa" || st.Facts[models.FactInputAnswer] != "Visa ending 4242" ||
			st.Delegation == nil || st.Delegation.ID != dp.DelegationID || st.CurrentStep != "issue-refund" {
			t.Fatalf("state after answer+delegate: %+v", st)
		}
		verifyClean(t, s, sid)

		// The same key and body: the first outcome, nothing new written.
		before := snapshot(t, s, sid)
		again, err := s.ProvideInput(ctx, sid, "test:controller", "answer-1", in)
		if err != nil || !again.Replayed || again.StateVersion != 6 || again.Status != models.StatusQueued {
			t.Fatalf("repeat = %+v, %v", again, err)
		}
		assertUnchanged(t, s, sid, before)

		// A second answer: the session is no longer awaiting input.
		_, err = s.ProvideInput(ctx, sid, "test:controller", "", models.InputInput{ExpectedVersion: v64(6), Answer: "again"})
		wantIllegal(t, err, 6)
		assertUnchanged(t, s, sid, before)

		// The delegated step is work a worker can lease.
		l, err := s.Claim(ctx, "payments", "w-2", "test:worker", "")
		if err != nil || l == nil || l.SessionID != sid || l.Step != "issue-refund" {
			t.Fatalf("claim of the delegated step = %+v, %v", l, err)
		}
	})
}

// TestProvideInputWithoutDelegate opens the session: one event, the
// question it answered in the payload, no new delegation.
func TestProvideInputWithoutDelegate(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid := awaitingInput(ctx, t, s, "Which order?")
		out, err := s.ProvideInput(ctx, sid, "test:controller", "", models.InputInput{ExpectedVersion: v64(4), Facts: map[string]any{"order_id": "1182"}})
		if err != nil || out.Status != models.StatusOpen || out.StateVersion != 5 {
			t.Fatalf("provide input = %+v, %v", out, err)
		}
		evs := sessionEvents(t, s, sid)
		var p models.InputPayload
		if err := json.Unmarshal([]byte(evs[4].Payload), &p); err != nil {
			t.Fatal(err)
		}
		if len(evs) != 5 || p.Question != "Which order?" || p.Facts["order_id"] != "1182" || p.Answer != "" {
			t.Fatalf("events %d, payload %s", len(evs), evs[len(evs)-1].Payload)
		}
		var open int64
		s.DB.Model(&models.Delegation{}).Where("session_id = ? AND status IN ?", sid, []string{"queued", "leased"}).Count(&open)
		if st := mustState(t, s, sid); open != 0 || st.Delegation != nil || len(st.OpenQuestions) != 0 {
			t.Fatalf("after an answer without delegate: %d open delegations, state %+v", open, st)
		}
		verifyClean(t, s, sid)
	})
}

// TestProvideInputRefusals: invalid input names every field, a stale
// version is a conflict with the current version, an unknown session is
// not found, and none of them writes anything.
func TestProvideInputRefusals(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid := awaitingInput(ctx, t, s, "Which order?")
		before := snapshot(t, s, sid)

		_, err := s.ProvideInput(ctx, sid, "test:controller", "", models.InputInput{
			ExpectedVersion: v64(4),
			Delegate:        &models.InputDelegate{Queue: "bad queue!", LeaseSeconds: storetest.Ptr(0), MaxAttempts: storetest.Ptr(99)},
		})
		wantFields(t, err, "answer", "delegate.queue", "delegate.step", "delegate.lease_seconds", "delegate.max_attempts")
		_, err = s.ProvideInput(ctx, sid, "test:controller", "", models.InputInput{
			ExpectedVersion: v64(4), Answer: "1182",
			Delegate: &models.InputDelegate{Queue: "refunds", Step: "x", AvailableAt: "tomorrow", DelaySeconds: storetest.Ptr(5)},
		})
		wantFields(t, err, "delegate.available_at", "delegate.delay_seconds")
		// Beyond how far ahead a step may be scheduled: checked against the clock.
		_, err = s.ProvideInput(ctx, sid, "test:controller", "", models.InputInput{
			ExpectedVersion: v64(4), Answer: "1182",
			Delegate: &models.InputDelegate{Queue: "refunds", Step: "x", AvailableAt: time.Now().AddDate(5, 0, 0).UTC().Format(time.RFC3339)},
		})
		wantFields(t, err, "delegate.available_at")
		_, err = s.ProvideInput(ctx, sid, "test:controller", "k-stale", models.InputInput{
			ExpectedVersion: v64(3), Answer: "1182", Delegate: &models.InputDelegate{Queue: "refunds", Step: "issue-refund"},
		})
		wantConflict(t, err, 4)
		assertUnchanged(t, s, sid, before)

		_, err = s.ProvideInput(ctx, "ses_missing", "test:controller", "", models.InputInput{ExpectedVersion: v64(1), Answer: "x"})
		if models.ErrorCode(err) != models.ENOTFOUND {
			t.Fatalf("unknown session: %v", err)
		}

		// Only agents and admins answer from the console.
		p := staff(t, s)
		_, err = s.ProvideInputAs(ctx, sid, p.reviewer, "", models.InputInput{ExpectedVersion: v64(4), Answer: "1182"})
		wantForbidden(t, err)
		assertUnchanged(t, s, sid, before)
		out, err := s.ProvideInputAs(ctx, sid, p.a, "", models.InputInput{ExpectedVersion: v64(4), Answer: "1182"})
		if err != nil || out.Status != models.StatusOpen {
			t.Fatalf("agent answer = %+v, %v", out, err)
		}
		if evs := sessionEvents(t, s, sid); evs[len(evs)-1].Actor != p.a.Actor() {
			t.Fatalf("answer recorded as %q, want %q", evs[len(evs)-1].Actor, p.a.Actor())
		}
	})
}

// TestWaitingOnInput lists the sessions in awaiting_input, the longest
// waiting first, with when each began to wait (the question, not a later
// pause and resume), paged by cursor.
func TestWaitingOnInput(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clock := newTestClock(s)
		start := clock.Now()
		newer := awaitingInput(ctx, t, s, "first asked, answered later")
		clock.advance(time.Minute)
		oldest := awaitingInput(ctx, t, s, "asked at +1m")
		clock.advance(time.Minute)
		middle := awaitingInput(ctx, t, s, "asked at +2m")
		// newer is answered and asks again at +3m: it waits since then.
		clock.advance(time.Minute)
		if _, err := s.ProvideInput(ctx, newer, "test:controller", "", models.InputInput{ExpectedVersion: v64(4), Answer: "x",
			Delegate: &models.InputDelegate{Queue: "again", Step: "check"}}); err != nil {
			t.Fatal(err)
		}
		l, err := s.Claim(ctx, "again", "w-3", "test:worker", "")
		if err != nil || l == nil {
			t.Fatalf("claim: %v", err)
		}
		if _, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "", models.ResultInput{LeaseToken: l.LeaseToken,
			SessionID: newer, Step: "check", ResultType: models.ResultNeedsInput, Question: "asked at +3m"}); err != nil {
			t.Fatal(err)
		}
		// middle is paused and resumed at +4m: it still waits since +2m.
		clock.advance(time.Minute)
		if _, err := s.Transition(ctx, middle, models.EventSessionPaused, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(4)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Transition(ctx, middle, models.EventSessionResumed, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(5)}); err != nil {
			t.Fatal(err)
		}
		// Sessions in other statuses are not listed.
		storetest.Session(ctx, t, s, nil)
		controllerEscalated(ctx, t, s)

		clock.advance(time.Minute)
		page, err := s.WaitingOnInput(ctx, "", 2)
		if err != nil {
			t.Fatal(err)
		}
		if page.Total != 3 || len(page.Rows) != 2 || page.Rows[0].ID != oldest || page.Rows[1].ID != middle || page.Next == "" {
			t.Fatalf("first page = %+v", page)
		}
		if got := page.Rows[0].Waited(clock.Now()); got != 4*time.Minute {
			t.Fatalf("oldest waited %s, want 4m", got)
		}
		if !page.Rows[1].WaitingSince.Equal(start.Add(2 * time.Minute)) {
			t.Fatalf("middle waits since %s, want %s (the question, not the resume)", page.Rows[1].WaitingSince, start.Add(2*time.Minute))
		}
		next, err := s.WaitingOnInput(ctx, page.Next, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(next.Rows) != 1 || next.Rows[0].ID != newer || next.Next != "" || !next.Rows[0].WaitingSince.Equal(start.Add(3*time.Minute)) {
			t.Fatalf("second page = %+v", next)
		}
		if _, err := s.WaitingOnInput(ctx, "not-a-cursor", 2); models.ErrorCode(err) != models.EINVALID {
			t.Fatalf("bad cursor: %v", err)
		}
	})
}

// BenchmarkWaitingOnInput measures the first page of the "Waiting on input"
// view on PostgreSQL, with half of the sessions waiting, as fixture rows
// inserted in bulk. The page is a keyset read of the partial index on
// input_requested_at plus a count: its cost should not grow with the
// histories (events=10 against 100) and only the count grows with the
// number of sessions waiting.
//
//	go test -run '^$' -bench WaitingOnInput ./models
func BenchmarkWaitingOnInput(b *testing.B) {
	for _, c := range []struct{ sessions, events int }{{2000, 10}, {2000, 100}, {10000, 10}} {
		b.Run(fmt.Sprintf("sessions=%d/events=%d", c.sessions, c.events), func(b *testing.B) {
			benchWaiting(b, c.sessions, c.events)
		})
	}
}

func benchWaiting(b *testing.B, sessions, events int) {
	s := storetest.New(b, models.Postgres)
	ctx := context.Background()
	err := s.DB.WithContext(ctx).Exec(`
INSERT INTO sessions (id, goal, status, priority, state_version, last_hash, created_at, updated_at, input_requested_at)
SELECT 'ses_b' || lpad(i::text, 6, '0'), 'goal ' || i, CASE WHEN i % 2 = 0 THEN 'awaiting_input' ELSE 'open' END,
	1 + i % 5, ?, '', now(), now(), CASE WHEN i % 2 = 0 THEN now() - make_interval(secs => i) END
FROM generate_series(1, ?) AS i`, events, sessions).Error
	if err != nil {
		b.Fatal(err)
	}
	err = s.DB.WithContext(ctx).Exec(`
INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, prev_hash, hash, created_at)
SELECT 'evt_b' || i || '_' || n, 'ses_b' || lpad(i::text, 6, '0'), n,
	CASE WHEN n = ? THEN 'result.needs_input' WHEN n % 2 = 0 THEN 'delegation.created' ELSE 'result.completed' END,
	'bench', n - 1, n, '{}', '', '', now() - make_interval(secs => i)
FROM generate_series(1, ?) AS i, generate_series(1, ?) AS n`, events, sessions, events).Error
	if err != nil {
		b.Fatal(err)
	}
	if err := s.DB.WithContext(ctx).Exec(`ANALYZE sessions; ANALYZE events`).Error; err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		page, err := s.WaitingOnInput(ctx, "", models.DefaultInboxLimit)
		if err != nil || len(page.Rows) != models.DefaultInboxLimit || page.Total != int64(sessions/2) {
			b.Fatalf("page: %d rows, total %d, %v", len(page.Rows), page.Total, err)
		}
	}
}
