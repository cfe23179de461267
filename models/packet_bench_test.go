package models_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/taskpilots/handoff/models"
)

// historyState folds a session through n events of realistic work (pure
// Apply, no database): steps delegated, leased and completed with output
// and evidence, transient failures retried, leases expiring, questions
// answered, facts updated. It returns the state a worker's packet is built
// from, leased on its latest delegation.
func historyState(tb testing.TB, n int) models.State {
	h := &history{t: tb}
	h.add(models.EventSessionCreated, "ctl", models.SessionCreatedPayload{Goal: "Refund order 1182 if eligible", TicketRef: "T-1182",
		Priority: 2, Constraints: []string{"refunds over 200 EUR need a human", "never refund twice"},
		Resources:    []models.Resource{{Name: "orders-db", URI: "db://orders"}},
		DoneCriteria: []string{"refund issued or denial explained"}, Facts: map[string]any{"order": "1182"}})
	out, _ := json.Marshal(map[string]any{"eligible": true, "detail": fmt.Sprintf("%0500d", 0)})
	for c := 0; len(h.evs) < n; c++ {
		id := fmt.Sprintf("dlg_%d", c)
		step := fmt.Sprintf("step-%d", c%25)
		h.add(models.EventDelegationCreated, "ctl", models.DelegationPayload{DelegationID: id, Queue: "refunds", Step: step,
			MaxAttempts: 3, LeaseSeconds: 30, Facts: map[string]any{fmt.Sprintf("fact_%02d", c%40): fmt.Sprintf("value of cycle %d", c)}})
		h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: id, Attempt: 1, Worker: "w-1"})
		switch c % 4 {
		case 1:
			h.add(models.EventResultFailed, "w", models.ResultPayload{DelegationID: id, Attempt: 1, Step: step, ResultType: "failed",
				Failure: &models.Failure{Class: models.FailureTransient, Message: "orders-db answered 503"}, Retry: true, NextAttempt: 2})
			h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: id, Attempt: 2, Worker: "w-2"})
		case 2:
			h.add(models.EventDelegationExpired, "sys", models.ExpiredPayload{DelegationID: id, Attempt: 1, Worker: "w-1", NextAttempt: 2})
			h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: id, Attempt: 2, Worker: "w-2"})
		case 3:
			h.add(models.EventResultNeedsInput, "w", models.ResultPayload{DelegationID: id, Attempt: 1, Step: step, ResultType: "needs_input",
				Question: "Is the customer a VIP?"})
			h.add(models.EventInputProvided, "ctl", models.InputPayload{Answer: "yes", Facts: map[string]any{models.FactInputAnswer: "yes"}})
			continue
		}
		h.add(models.EventResultCompleted, "w", models.ResultPayload{DelegationID: id, Attempt: 1, Step: step, ResultType: "completed",
			Output: out, Evidence: []models.Evidence{{Claim: "order paid", Source: "orders-db"}}, NextStep: "next"})
	}
	h.add(models.EventDelegationCreated, "ctl", models.DelegationPayload{DelegationID: "dlg_last", Queue: "refunds", Step: "decide", MaxAttempts: 3, LeaseSeconds: 30})
	h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: "dlg_last", Attempt: 1, Worker: "w-1"})
	var st models.State
	for _, e := range h.evs {
		var err error
		if st, err = models.Apply(st, e); err != nil {
			tb.Fatal(err)
		}
	}
	return st
}

// BenchmarkBuildPacketV2 builds packet v2 from a state that went through 10,
// 1,000 and 10,000 events. The packet is built from the bounded state, never
// from the history: the cost grows with the state until its lists are full
// (a few hundred events) and not after.
func BenchmarkBuildPacketV2(b *testing.B) {
	for _, n := range []int{10, 1_000, 10_000} {
		st := historyState(b, n)
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if p := models.BuildPacket(st, ""); p.Budget.Bytes == 0 {
					b.Fatal("no budget")
				}
			}
		})
	}
}

// TestHistoryStateIsBounded backs the benchmark: after 10,000 events the
// state, and the packet, are no larger than after a few hundred.
func TestHistoryStateIsBounded(t *testing.T) {
	t.Parallel()
	small, large := historyState(t, 400), historyState(t, 10_000)
	if large.Version < 10_000 {
		t.Fatalf("history of %d events", large.Version)
	}
	ls, _ := json.Marshal(large)
	ss, _ := json.Marshal(small)
	if len(ls) > len(ss)+len(ss)/10 {
		t.Fatalf("state grew with history: %d bytes after 400 events, %d after 10,000", len(ss), len(ls))
	}
	if p := models.BuildPacket(large, ""); p.RunReason.Kind == "" || len(p.PreviousOutputs) == 0 || p.Budget.Bytes > models.DefaultPacketMaxBytes {
		t.Fatalf("packet after 10,000 events: %+v", p.Budget)
	}
}
