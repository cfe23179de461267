package models_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// metricsWorld drives a store through the real write path on a moved clock.
type metricsWorld struct {
	t   *testing.T
	s   *models.Store
	ctx context.Context
	t0  time.Time
	now time.Time
}

func newMetricsWorld(t *testing.T, s *models.Store) *metricsWorld {
	w := &metricsWorld{t: t, s: s, ctx: context.Background(), t0: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)}
	w.now = w.t0
	s.Now = func() time.Time { return w.now }
	return w
}

// at sets the clock to t0+d.
func (w *metricsWorld) at(d time.Duration) { w.now = w.t0.Add(d) }

func (w *metricsWorld) version(sid string) *int64 {
	w.t.Helper()
	row, err := w.s.GetSession(w.ctx, sid)
	if err != nil {
		w.t.Fatalf("get session: %v", err)
	}
	v := row.StateVersion
	return &v
}

func (w *metricsWorld) session() string {
	w.t.Helper()
	return storetest.Session(w.ctx, w.t, w.s, nil)
}

func (w *metricsWorld) delegate(sid, queue string, leaseSeconds, maxAttempts int) string {
	w.t.Helper()
	out, err := w.s.Delegate(w.ctx, sid, "test:controller", "", models.DelegateInput{
		Queue: queue, Step: "check", ExpectedVersion: w.version(sid), LeaseSeconds: &leaseSeconds, MaxAttempts: &maxAttempts,
	})
	if err != nil {
		w.t.Fatalf("delegate: %v", err)
	}
	var d models.DelegationCreated
	if err := out.DecodeData(&d); err != nil {
		w.t.Fatalf("decode delegation: %v", err)
	}
	return d.DelegationID
}

func (w *metricsWorld) claim(queue, wantSession string, wantAttempt int) *models.Lease {
	w.t.Helper()
	l, err := w.s.Claim(w.ctx, queue, "w-1", "test:worker", "")
	if err != nil || l == nil {
		w.t.Fatalf("claim %s: %v, %v", queue, l, err)
	}
	if l.SessionID != wantSession || l.Attempt != wantAttempt {
		w.t.Fatalf("claim %s = session %s attempt %d, want %s attempt %d", queue, l.SessionID, l.Attempt, wantSession, wantAttempt)
	}
	return l
}

func (w *metricsWorld) result(l *models.Lease, resultType string, in models.ResultInput) {
	w.t.Helper()
	in.LeaseToken, in.SessionID, in.Step, in.ResultType = l.LeaseToken, l.SessionID, l.Step, resultType
	if resultType == models.ResultCompleted && in.Evidence == nil {
		in.Evidence = []models.Evidence{{Claim: "done", Source: "test"}}
	}
	if _, err := w.s.SubmitResult(w.ctx, l.DelegationID, "test:worker", "", in); err != nil {
		w.t.Fatalf("result %s: %v", resultType, err)
	}
}

func (w *metricsWorld) complete(l *models.Lease) {
	w.result(l, models.ResultCompleted, models.ResultInput{})
}

func (w *metricsWorld) transition(sid string, t models.EventType) {
	w.t.Helper()
	if _, err := w.s.Transition(w.ctx, sid, t, "test:controller", "", models.TransitionInput{ExpectedVersion: w.version(sid), Reason: "test"}); err != nil {
		w.t.Fatalf("%s: %v", t, err)
	}
}

func (w *metricsWorld) exec(sid string, t models.EventType, payload any) {
	w.t.Helper()
	if _, err := w.s.Execute(w.ctx, models.Command{
		SessionID: sid, Type: t, Actor: "user:agent-1", ExpectedVersion: w.version(sid), Payload: payload,
	}); err != nil {
		w.t.Fatalf("%s: %v", t, err)
	}
}

func (w *metricsWorld) rescue(want int) {
	w.t.Helper()
	n, err := w.s.RescueExpired(w.ctx, 10)
	if err != nil || n != want {
		w.t.Fatalf("rescue = %d, %v; want %d", n, err, want)
	}
}

func (w *metricsWorld) reject(reason string, n int) {
	w.t.Helper()
	for range n {
		if err := w.s.RecordRejection(w.ctx, reason, ""); err != nil {
			w.t.Fatalf("record rejection: %v", err)
		}
	}
}

const (
	//lint:ignore ST1011 xSec is the unit (one second) that the times below are written in, not a count of seconds
	xSec = time.Second
	xMin = time.Minute
)

// buildMetricsHistory writes a known history around the window
// [t0, t0+1h). Every number the tests expect is derived in the comments.
func buildMetricsHistory(w *metricsWorld) {
	human := models.HumanPayload{User: "user:agent-1"}

	// s0: entirely before the window; counts nowhere.
	w.at(-30 * xMin)
	s0 := w.session()
	w.delegate(s0, "refunds", 30, 3)
	w.complete(w.claim("refunds", s0, 1))

	// s7 (refunds): leased before the window, completed in it: success.
	w.at(-10 * xMin)
	s7 := w.session()
	w.delegate(s7, "refunds", 3600, 3)
	l7 := w.claim("refunds", s7, 1)

	// s12 (billing): paused before the window, resumed in it (recovery 90s),
	// then leased once and completed: success.
	w.at(-5 * xMin)
	s12 := w.session()
	w.delegate(s12, "billing", 30, 3)
	w.at(-1 * xMin)
	w.transition(s12, models.EventSessionPaused)
	w.reject(models.RejectFenced, 3) // before the window

	w.at(30 * xSec)
	w.transition(s12, models.EventSessionResumed)
	w.at(40 * xSec)
	l12 := w.claim("billing", s12, 1)
	w.at(50 * xSec)
	w.complete(l12)

	w.at(1 * xMin)
	w.complete(l7)

	// s1 (refunds): the happy path: success.
	w.at(2 * xMin)
	s1 := w.session()
	w.delegate(s1, "refunds", 30, 3)
	l1 := w.claim("refunds", s1, 1)
	w.at(2*xMin + 10*xSec)
	w.complete(l1)

	// s2 (refunds): the lease expires (an infrastructure retry, not
	// rework) and is leased again at 4m: recovery 60s from the lease start
	// at 3m (no heartbeat), not 20s from the expiry's detection; completed
	// on attempt 2: not a success.
	w.at(3 * xMin)
	s2 := w.session()
	w.delegate(s2, "refunds", 30, 3)
	w.claim("refunds", s2, 1)
	w.at(3*xMin + 40*xSec)
	w.rescue(1)
	w.at(4 * xMin)
	l2 := w.claim("refunds", s2, 2)
	w.at(4*xMin + 5*xSec)
	w.complete(l2)

	// s3 (billing): a transient failure is retried (an infrastructure
	// retry), attempt 2 escalates; a human claims 60s later and completes
	// 120s after the claim (decision 120s, human wait 180s). Two reviews
	// score the package.
	w.at(5 * xMin)
	s3 := w.session()
	w.delegate(s3, "billing", 30, 3)
	l3 := w.claim("billing", s3, 1)
	w.at(5*xMin + 10*xSec)
	w.result(l3, models.ResultFailed, models.ResultInput{Failure: &models.Failure{Class: models.FailureTransient, Message: "timeout"}})
	w.at(5*xMin + 20*xSec)
	l3 = w.claim("billing", s3, 2)
	w.at(5*xMin + 30*xSec)
	w.result(l3, models.ResultEscalated, models.ResultInput{Question: "Approve the refund?"})
	w.at(6*xMin + 30*xSec)
	w.exec(s3, models.EventHumanClaimed, human)
	w.at(8*xMin + 30*xSec)
	w.exec(s3, models.EventHumanCompleted, models.HumanPayload{User: "user:agent-1", Resolution: "refunded by hand"})
	w.at(9 * xMin)
	w.exec(s3, models.EventReviewScored, models.ReviewPayload{Reviewer: "user:rev", AtVersion: 7, Scores: map[string]int{"clarity": 4, "evidence": 2}})
	w.at(9*xMin + 30*xSec)
	w.exec(s3, models.EventReviewScored, models.ReviewPayload{Reviewer: "user:rev2", AtVersion: 7, Scores: map[string]int{"clarity": 5}})

	// s4 (refunds): needs_input, then the same step is delegated again
	// (rework) and completed on its first lease: one failure, one success.
	w.at(10 * xMin)
	s4 := w.session()
	w.delegate(s4, "refunds", 30, 3)
	l4 := w.claim("refunds", s4, 1)
	w.at(10*xMin + 10*xSec)
	w.result(l4, models.ResultNeedsInput, models.ResultInput{Question: "Which order?"})
	w.at(11 * xMin)
	w.delegate(s4, "refunds", 30, 3)
	l4 = w.claim("refunds", s4, 1)
	w.at(11*xMin + 5*xSec)
	w.complete(l4)

	// s5 (billing): paused while queued, resumed 30s later (recovery 30s),
	// leased once and completed: success.
	w.at(12 * xMin)
	s5 := w.session()
	w.delegate(s5, "billing", 30, 3)
	w.transition(s5, models.EventSessionPaused)
	w.at(12*xMin + 30*xSec)
	w.transition(s5, models.EventSessionResumed)
	w.at(12*xMin + 40*xSec)
	l5 := w.claim("billing", s5, 1)
	w.at(12*xMin + 50*xSec)
	w.complete(l5)

	// s6 (refunds): paused while running (the lease is revoked), resumed 10s
	// later (recovery 10s), leased a second time and completed on attempt 1:
	// not a success (second lease), not rework.
	w.at(13 * xMin)
	s6 := w.session()
	w.delegate(s6, "refunds", 30, 3)
	w.claim("refunds", s6, 1)
	w.at(13*xMin + 10*xSec)
	w.transition(s6, models.EventSessionPaused)
	w.at(13*xMin + 20*xSec)
	w.transition(s6, models.EventSessionResumed)
	w.at(13*xMin + 30*xSec)
	l6 := w.claim("refunds", s6, 1)
	w.at(13*xMin + 40*xSec)
	w.complete(l6)

	// s9 (billing): a controller escalates the queued delegation (ended, not
	// a success); a human claims 30s later and resumes automation 15s after
	// that (decision 15s, human wait 45s, rework). The new delegation stays
	// open.
	w.at(14 * xMin)
	s9 := w.session()
	w.delegate(s9, "billing", 30, 3)
	w.at(14*xMin + 10*xSec)
	w.transition(s9, models.EventSessionEscalated)
	w.at(14*xMin + 40*xSec)
	w.exec(s9, models.EventHumanClaimed, human)
	w.at(14*xMin + 55*xSec)
	w.exec(s9, models.EventHumanResumed, models.HumanDelegationPayload{User: "user:agent-1", DelegationPayload: models.DelegationPayload{
		DelegationID: models.NewID("dlg"), Queue: "billing", Step: "check", MaxAttempts: 3, LeaseSeconds: 30,
	}})

	// s10 (refunds): cancelled while queued: ended, not a success.
	w.at(15 * xMin)
	s10 := w.session()
	w.delegate(s10, "refunds", 30, 3)
	w.at(15*xMin + 10*xSec)
	w.transition(s10, models.EventSessionCancelled)

	// s11 (refunds): one attempt only; its lease expires and exhausts it:
	// ended, not a success, an escalation nobody recovers in the window.
	w.at(16 * xMin)
	s11 := w.session()
	w.delegate(s11, "refunds", 30, 1)
	w.claim("refunds", s11, 1)
	w.at(16*xMin + 40*xSec)
	w.rescue(1)

	// Rejections: 4 in the window, 3 of them conflicts, and a replay, which
	// is neither; and one counted under the old name of replays.
	w.at(20 * xMin)
	w.reject(models.RejectStale, 2)
	w.reject(models.RejectFenced, 1)
	w.reject(models.RejectReplay, 1)
	w.reject("duplicate", 1)
	w.reject(models.RejectInvalid, 1)

	// s8: entirely after the window; and s11 cancelled after it.
	w.at(2 * time.Hour)
	s8 := w.session()
	w.delegate(s8, "refunds", 30, 3)
	w.complete(w.claim("refunds", s8, 1))
	w.transition(s11, models.EventSessionCancelled)
	w.reject(models.RejectStale, 5)
}

func wantRate(t *testing.T, name string, got *float64, n, d float64) {
	t.Helper()
	if got == nil || *got != n/d {
		t.Errorf("%s = %v, want %v/%v = %v", name, fmtPtr(got), n, d, n/d)
	}
}

func wantRecovery(t *testing.T, name string, got models.RecoveryTimes, n int64, sum, maxSeconds float64) {
	t.Helper()
	if got.Recoveries != n {
		t.Errorf("%s recoveries = %d, want %d", name, got.Recoveries, n)
	}
	if n == 0 {
		wantNull(t, name+" mean", got.MeanSeconds)
		wantNull(t, name+" max", got.MaxSeconds)
		return
	}
	wantRate(t, name+" mean", got.MeanSeconds, sum, float64(n))
	wantRate(t, name+" max", got.MaxSeconds, maxSeconds, 1)
}

func wantNull(t *testing.T, name string, got *float64) {
	t.Helper()
	if got != nil {
		t.Errorf("%s = %v, want null", name, *got)
	}
}

func fmtPtr(p *float64) any {
	if p == nil {
		return "null"
	}
	return *p
}

// TestProductMetrics checks every metric, overall and per queue, against a
// history whose answers are worked out by hand in buildMetricsHistory.
func TestProductMetrics(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		w := newMetricsWorld(t, s)
		buildMetricsHistory(w)
		pm, err := s.ProductMetrics(w.ctx, models.MetricsOpts{From: w.t0, To: w.t0.Add(time.Hour)})
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		if !pm.From.Equal(w.t0) || !pm.To.Equal(w.t0.Add(time.Hour)) {
			t.Errorf("window = %v..%v", pm.From, pm.To)
		}
		if len(pm.Queues) != 2 {
			t.Errorf("queues = %v, want billing and refunds", pm.Queues)
		}
		all, refunds, billing := pm.Overall, pm.Queues["refunds"], pm.Queues["billing"]

		// Handoff success: ended s7 s1 s2 s3 s4×2 s5 s6 s9 s10 s11 s12 = 12;
		// succeeded s7 s1 s4(second) s5 s12 = 5.
		if h := all.HandoffSuccess; h.Ended != 12 || h.Succeeded != 5 {
			t.Errorf("overall handoff = %+v, want 5 of 12", h)
		}
		wantRate(t, "overall handoff rate", all.HandoffSuccess.Rate, 5, 12)
		if h := refunds.HandoffSuccess; h.Ended != 8 || h.Succeeded != 3 {
			t.Errorf("refunds handoff = %+v, want 3 of 8", h)
		}
		wantRate(t, "refunds handoff rate", refunds.HandoffSuccess.Rate, 3, 8)
		if h := billing.HandoffSuccess; h.Ended != 4 || h.Succeeded != 2 {
			t.Errorf("billing handoff = %+v, want 2 of 4", h)
		}
		wantRate(t, "billing handoff rate", billing.HandoffSuccess.Rate, 2, 4)

		// Rework: sessions with delegation events in the window s1 s2 s3 s4 s5
		// s6 s7 s9 s10 s11 s12 = 11; reworked s4 (needs_input loop) and s9
		// (human resume) = 2. s2's expiry and s3's transient retry are
		// infrastructure retries.
		if r := all.Rework; r.Sessions != 11 || r.Reworked != 2 || r.Redelegations != 2 {
			t.Errorf("overall rework = %+v, want 2 of 11 sessions, 2 re-delegations", r)
		}
		wantRate(t, "overall rework rate", all.Rework.Rate, 2, 11)
		if r := refunds.Rework; r.Sessions != 7 || r.Reworked != 1 || r.Redelegations != 1 {
			t.Errorf("refunds rework = %+v, want 1 of 7", r)
		}
		wantRate(t, "refunds rework rate", refunds.Rework.Rate, 1, 7)
		if r := billing.Rework; r.Sessions != 4 || r.Reworked != 1 || r.Redelegations != 1 {
			t.Errorf("billing rework = %+v, want 1 of 4", r)
		}
		wantRate(t, "billing rework rate", billing.Rework.Rate, 1, 4)
		if ir := all.InfraRetries; ir.Sessions != 11 || ir.Affected != 2 || ir.Retries != 2 || ir.LeaseExpiries != 1 || ir.TransientFailures != 1 {
			t.Errorf("overall infra retries = %+v, want s2 expiry and s3 transient", ir)
		}
		wantRate(t, "overall infra rate", all.InfraRetries.Rate, 2, 11)
		if ir := refunds.InfraRetries; ir.Affected != 1 || ir.LeaseExpiries != 1 || ir.TransientFailures != 0 {
			t.Errorf("refunds infra retries = %+v, want s2's expiry", ir)
		}
		if ir := billing.InfraRetries; ir.Affected != 1 || ir.LeaseExpiries != 0 || ir.TransientFailures != 1 {
			t.Errorf("billing infra retries = %+v, want s3's transient failure", ir)
		}

		// Recovery: machine s12 90s, s2 60s, s5 30s, s6 10s; human s3 180s,
		// s9 45s.
		wantRecovery(t, "overall", all.Recovery.Machine, 4, 190, 90)
		wantRecovery(t, "overall", all.Recovery.Human, 2, 225, 180)
		if r := all.Recovery; r.Recoveries != 6 {
			t.Errorf("overall recoveries = %d, want 6", r.Recoveries)
		}
		wantRate(t, "overall mean recovery", all.Recovery.MeanSeconds, 415, 6)
		wantRate(t, "overall max recovery", all.Recovery.MaxSeconds, 180, 1)
		wantRecovery(t, "refunds", refunds.Recovery.Machine, 2, 70, 60)
		wantRecovery(t, "refunds", refunds.Recovery.Human, 0, 0, 0)
		wantRecovery(t, "billing", billing.Recovery.Machine, 2, 120, 90)
		wantRecovery(t, "billing", billing.Recovery.Human, 2, 225, 180)

		// Conflicts: events in the window s7 1, s12 3, s1 4, s2 6, s3 10, s4 7,
		// s5 6, s6 7, s9 5, s10 3, s11 4 = 56; rejections 4 (the replays are
		// not attempts), conflicts 3.
		c := all.StateConflicts
		if c == nil {
			t.Fatalf("overall has no state conflicts")
		}
		if c.Committed != 56 || c.Rejected != 4 || c.Replays != 2 || c.WriteAttempts != 60 || c.Conflicts != 3 || c.AppliedConflicts != 0 {
			t.Errorf("conflicts = %+v, want 56 committed, 4 rejected, 2 replays, 60 attempts, 3 conflicts, 0 applied", *c)
		}
		want := map[string]int64{"stale": 2, "fenced": 1, "invalid": 1}
		if len(c.ByReason) != len(want) {
			t.Errorf("by reason = %v, want %v", c.ByReason, want)
		}
		for k, v := range want {
			if c.ByReason[k] != v {
				t.Errorf("by reason %s = %d, want %d", k, c.ByReason[k], v)
			}
		}
		wantRate(t, "conflicts per thousand", c.PerThousand, 3000, 60)
		// Per queue: the events after each session's first delegation (the
		// rejections above name no queue). refunds s7 1, s1 3, s2 5, s4 6,
		// s6 6, s10 2, s11 3 = 26; billing s12 3, s3 9, s5 5, s9 4 = 21.
		if rc := refunds.StateConflicts; rc == nil || rc.Committed != 26 || rc.WriteAttempts != 26 || rc.Conflicts != 0 || rc.AppliedConflicts != 0 {
			t.Errorf("refunds conflicts = %+v, want 26 committed, no rejections", rc)
		}
		if bc := billing.StateConflicts; bc == nil || bc.Committed != 21 || bc.WriteAttempts != 21 {
			t.Errorf("billing conflicts = %+v, want 21 committed", bc)
		}

		// Clarity: escalations s3 s9 (billing) s11 (refunds); decisions s3
		// 120s, s9 15s; reviews of s3: clarity 4 and 5, evidence 2.
		cl := all.EscalationClarity
		if cl.Escalations != 3 || cl.Decisions != 2 || cl.Reviews != 2 {
			t.Errorf("overall clarity = %+v, want 3 escalations, 2 decisions, 2 reviews", cl)
		}
		wantRate(t, "claim to decision", cl.MeanClaimToDecisionSeconds, 135, 2)
		wantRate(t, "mean score", cl.MeanScore, 11, 3)
		if got := cl.Criteria["clarity"]; got != (models.CriterionScore{Count: 2, Mean: 4.5}) {
			t.Errorf("clarity criterion = %+v", got)
		}
		if got := cl.Criteria["evidence"]; got != (models.CriterionScore{Count: 1, Mean: 2}) {
			t.Errorf("evidence criterion = %+v", got)
		}
		if bc := billing.EscalationClarity; bc.Escalations != 2 || bc.Decisions != 2 || bc.Reviews != 2 || len(bc.Criteria) != 2 {
			t.Errorf("billing clarity = %+v", bc)
		}
		rc := refunds.EscalationClarity
		if rc.Escalations != 1 || rc.Decisions != 0 || rc.Reviews != 0 || len(rc.Criteria) != 0 {
			t.Errorf("refunds clarity = %+v", rc)
		}
		wantNull(t, "refunds claim to decision", rc.MeanClaimToDecisionSeconds)
		wantNull(t, "refunds mean score", rc.MeanScore)

		// The queue filter keeps overall and narrows the breakdown.
		pq, err := s.ProductMetrics(w.ctx, models.MetricsOpts{From: w.t0, To: w.t0.Add(time.Hour), Queue: "billing"})
		if err != nil {
			t.Fatalf("metrics for billing: %v", err)
		}
		if pb := pq.Queues["billing"]; len(pq.Queues) != 1 || pb.HandoffSuccess.Ended != 4 || pb.HandoffSuccess.Succeeded != 2 || pq.Overall.Rework.Sessions != 11 {
			t.Errorf("billing filter = %+v", pq)
		}
		pn, err := s.ProductMetrics(w.ctx, models.MetricsOpts{From: w.t0, To: w.t0.Add(time.Hour), Queue: "nothing-here"})
		if err != nil {
			t.Fatalf("metrics for an empty queue: %v", err)
		}
		if e, ok := pn.Queues["nothing-here"]; !ok || e.HandoffSuccess.Ended != 0 || e.HandoffSuccess.Rate != nil {
			t.Errorf("empty queue = %+v", pn.Queues)
		}

		// A later window sees only s8 and s11's cancellation.
		late, err := s.ProductMetrics(w.ctx, models.MetricsOpts{From: w.t0.Add(time.Hour), To: w.t0.Add(3 * time.Hour)})
		if err != nil {
			t.Fatalf("late metrics: %v", err)
		}
		if h := late.Overall.HandoffSuccess; h.Ended != 1 || h.Succeeded != 1 {
			t.Errorf("late handoff = %+v, want 1 of 1", h)
		}
		if r := late.Overall.Rework; r.Sessions != 1 || r.Reworked != 0 {
			t.Errorf("late rework = %+v, want 0 of 1", r)
		}
		if lc := late.Overall.StateConflicts; lc.Committed != 5 || lc.Rejected != 5 || lc.Conflicts != 5 {
			t.Errorf("late conflicts = %+v, want 5 committed (s8 4, s11 1), 5 stale", *lc)
		}
		if late.Overall.Recovery.Recoveries != 0 || late.Overall.Recovery.MeanSeconds != nil {
			t.Errorf("late recovery = %+v", late.Overall.Recovery)
		}

		// The JSON names the API serves.
		b, err := json.Marshal(pm.Overall)
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"handoff_success", "rework", "infra_retries", "recovery", "state_conflicts", "escalation_clarity"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("overall JSON lacks %q: %s", k, b)
			}
		}
	})
}

// TestRecordRejections checks that rejections add up per minute, reason and
// queue, and that only minutes starting in the window count.
func TestRecordRejections(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
		err := s.RecordRejections(ctx, []models.Rejection{
			{At: t0.Add(5 * xSec), Reason: models.RejectStale, Count: 2},
			{At: t0.Add(59 * xSec), Reason: models.RejectStale, Count: 1},
			{At: t0.Add(61 * xSec), Reason: models.RejectStale, Count: 4},
			{At: t0.Add(10 * xSec), Reason: models.RejectFenced, Queue: "refunds", Count: 1},
			{At: t0.Add(10 * xSec), Reason: models.RejectIllegal, Count: 0},
		})
		if err != nil {
			t.Fatalf("record: %v", err)
		}
		s.Now = func() time.Time { return t0.Add(30 * xSec) }
		if err := s.RecordRejection(ctx, models.RejectStale, ""); err != nil {
			t.Fatalf("record one: %v", err)
		}
		var rows []struct {
			Reason string
			Queue  string
			Count  int64
		}
		if err := s.DB.Raw(`SELECT reason, queue, count FROM write_rejections ORDER BY bucket, reason, queue`).Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		want := []struct {
			Reason string
			Queue  string
			Count  int64
		}{{"fenced", "refunds", 1}, {"stale", "", 4}, {"stale", "", 4}}
		if len(rows) != len(want) {
			t.Fatalf("rows = %+v, want %+v", rows, want)
		}
		for i := range want {
			if rows[i] != want[i] {
				t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
			}
		}
		pm, err := s.ProductMetrics(ctx, models.MetricsOpts{From: t0, To: t0.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		c := pm.Overall.StateConflicts
		if c.Rejected != 5 || c.Conflicts != 5 || c.Committed != 0 || c.WriteAttempts != 5 {
			t.Errorf("first minute = %+v, want 5 rejections, all conflicts", *c)
		}
		wantRate(t, "per thousand", c.PerThousand, 5000, 5)
		if _, err := s.ProductMetrics(ctx, models.MetricsOpts{From: t0, To: t0}); models.ErrorCode(err) != models.EINVALID {
			t.Errorf("empty window: err = %v, want invalid", err)
		}
	})
}

func TestRejectionReason(t *testing.T) {
	cases := []struct {
		t    models.EventType
		code models.Code
		want string
	}{
		{models.EventDelegationCreated, models.ECONFLICT, models.RejectStale},
		{models.EventSessionPaused, models.ECONFLICT, models.RejectStale},
		{models.EventResultCompleted, models.ECONFLICT, models.RejectFenced},
		{models.EventDelegationLeased, models.ECONFLICT, models.RejectFenced},
		{models.EventResultFailed, models.EIDEMPOTENCY, models.RejectKeyReused},
		{models.EventHumanClaimed, models.EILLEGAL, models.RejectIllegal},
		{models.EventDelegationCreated, models.EINVALID, models.RejectInvalid},
		{models.EventSessionResumed, models.ENOTFOUND, models.RejectNotFound},
		{models.EventHumanCompleted, models.EFORBIDDEN, models.RejectError},
	}
	for _, c := range cases {
		if got := models.RejectionReason(c.t, c.code); got != c.want {
			t.Errorf("RejectionReason(%s, %s) = %s, want %s", c.t, c.code, got, c.want)
		}
	}
}

// TestProductMetricsSLA checks that the product metrics carry the SLA
// standing of escalations in human hands.
func TestProductMetricsSLA(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		base := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
		now := base
		s.Now = func() time.Time { return now }
		id := storetest.Session(ctx, t, s, &storetest.SessionOpts{Priority: 1})
		v := int64(1)
		if _, err := s.Transition(ctx, id, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "stuck"}); err != nil {
			t.Fatal(err)
		}
		now = base.Add(2 * time.Hour) // past the 15-minute P1 budget
		pm, err := s.ProductMetrics(ctx, models.MetricsOpts{From: base.Add(-time.Hour), To: now})
		if err != nil {
			t.Fatal(err)
		}
		if pm.SLA.Open != 1 || pm.SLA.Breached != 1 || pm.SLA.NearBreach != 0 {
			t.Fatalf("SLA = %+v, want one open escalation, breached", pm.SLA)
		}
	})
}
