package models_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// Benchmarks of the hot paths, on each dialect:
//
//	go test -run '^$' -bench . -benchtime 2s ./models
//
// PostgreSQL numbers are the ones that matter for production; SQLite's show
// the single-writer embedded default.

func eachDialect(b *testing.B, fn func(b *testing.B, s *models.Store)) {
	for _, d := range storetest.Dialects {
		b.Run(string(d), func(b *testing.B) { fn(b, storetest.New(b, d)) })
	}
}

// BenchmarkClaim measures one lease claim (the SKIP LOCKED statement plus
// the delegation.leased event) from a queue with work waiting.
func BenchmarkClaim(b *testing.B) {
	eachDialect(b, func(b *testing.B, s *models.Store) {
		ctx := context.Background()
		round := 0
		b.ResetTimer()
		for b.Loop() {
			// Refill a fresh queue with the timer stopped; each claim then
			// finds work at once.
			b.StopTimer()
			round++
			queue := fmt.Sprintf("bench-claim-%d", round)
			const batch = 50
			for range batch {
				storetest.Delegated(ctx, b, s, queue)
			}
			b.StartTimer()
			for range batch {
				l, err := s.Claim(ctx, queue, "w-bench", "bench:worker", "")
				if err != nil || l == nil {
					b.Fatalf("claim: %v, %v", l, err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*50), "ns/claim")
	})
}

// BenchmarkExecute measures appending one event through the single write
// path (lock, version check, Apply, event, projection, effect), alternating
// pause and resume on one session.
func BenchmarkExecute(b *testing.B) {
	eachDialect(b, func(b *testing.B, s *models.Store) {
		ctx := context.Background()
		id := storetest.Session(ctx, b, s, &storetest.SessionOpts{Facts: map[string]any{"order_total": "240 EUR"}})
		v := int64(1)
		i := 0
		for b.Loop() {
			t := models.EventSessionPaused
			if i%2 == 1 {
				t = models.EventSessionResumed
			}
			i++
			out, err := s.Transition(ctx, id, t, "bench:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "bench"})
			if err != nil {
				b.Fatalf("%s at version %d: %v", t, v, err)
			}
			v = out.StateVersion
		}
	})
}

// BenchmarkExecuteIdempotent is BenchmarkExecute with an idempotency key on
// every command, as the SDK sends them.
func BenchmarkExecuteIdempotent(b *testing.B) {
	eachDialect(b, func(b *testing.B, s *models.Store) {
		ctx := context.Background()
		id := storetest.Session(ctx, b, s, nil)
		v := int64(1)
		i := 0
		for b.Loop() {
			t := models.EventSessionPaused
			if i%2 == 1 {
				t = models.EventSessionResumed
			}
			i++
			out, err := s.Transition(ctx, id, t, "bench:controller", fmt.Sprintf("k-%d", i), models.TransitionInput{ExpectedVersion: &v})
			if err != nil {
				b.Fatalf("%s at version %d: %v", t, v, err)
			}
			v = out.StateVersion
		}
	})
}

// BenchmarkLifecycle measures create → delegate → claim → completed result,
// one after another on one connection's worth of work.
func BenchmarkLifecycle(b *testing.B) {
	eachDialect(b, func(b *testing.B, s *models.Store) {
		ctx := context.Background()
		in := models.ResultInput{
			ResultType: models.ResultCompleted, Output: json.RawMessage(`{"eligible":true}`),
			Evidence: []models.Evidence{{Claim: "order paid", Source: "orders-db:1182"}},
		}
		for b.Loop() {
			sid, did := storetest.Delegated(ctx, b, s, "bench-lifecycle")
			l, err := s.Claim(ctx, "bench-lifecycle", "w-bench", "bench:worker", "")
			if err != nil || l == nil || l.DelegationID != did {
				b.Fatalf("claim: %+v, %v", l, err)
			}
			in.LeaseToken, in.SessionID, in.Step = l.LeaseToken, sid, l.Step
			if _, err := s.SubmitResult(ctx, did, "bench:worker", "", in); err != nil {
				b.Fatalf("result: %v", err)
			}
		}
	})
}

// benchState is a session well into its life: many facts, steps and risks,
// so that the packet's bounds matter.
func benchState() models.State {
	st := models.State{
		SessionID: "ses_bench", Goal: "Refund order 1182 if eligible", Priority: 2, Status: models.StatusRunning, Version: 120,
		Constraints:  []string{"refunds over 200 EUR need a human", "never refund twice"},
		Resources:    []models.Resource{{Name: "orders-db", URI: "db://orders"}, {Name: "payments", URI: "https://payments.internal"}},
		DoneCriteria: []string{"refund issued or denial explained"},
		Facts:        map[string]any{},
		CurrentStep:  "issue-refund",
		Delegation:   &models.ActiveDelegation{ID: "dlg_bench", Queue: "refunds", Step: "issue-refund", Instructions: "Issue the refund.", Attempt: 1, MaxAttempts: 3, LeaseSeconds: 30},
	}
	for i := range 150 {
		st.Facts[fmt.Sprintf("fact_%03d", i)] = fmt.Sprintf("value %d", i)
	}
	for i := range 40 {
		st.CompletedSteps = append(st.CompletedSteps, models.StepRecord{Step: fmt.Sprintf("step-%d", i), ResultType: "completed", By: "token:w", AtVersion: int64(i * 3)})
		st.Risks = append(st.Risks, fmt.Sprintf("risk %d", i))
		st.OpenQuestions = append(st.OpenQuestions, fmt.Sprintf("question %d?", i))
	}
	return st
}

// BenchmarkBuildPacket measures building a context packet from a large
// state (pure: no database).
func BenchmarkBuildPacket(b *testing.B) {
	st := benchState()
	for b.Loop() {
		p := models.BuildPacket(st, "")
		if p.PrefixHash == "" {
			b.Fatal("no prefix hash")
		}
	}
}

// BenchmarkPacketFromStore measures what GET …/packet costs the store: read
// the projection row, decode the state, build the packet.
func BenchmarkPacketFromStore(b *testing.B) {
	eachDialect(b, func(b *testing.B, s *models.Store) {
		ctx := context.Background()
		sid, _ := storetest.Delegated(ctx, b, s, "bench-packet")
		for b.Loop() {
			row, err := s.GetSession(ctx, sid)
			if err != nil {
				b.Fatal(err)
			}
			st, err := row.Decode()
			if err != nil {
				b.Fatal(err)
			}
			if p := models.BuildPacket(st, ""); p.SessionID != sid {
				b.Fatalf("packet of %s", p.SessionID)
			}
		}
	})
}
