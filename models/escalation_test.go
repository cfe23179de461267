package models_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/migrations"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestApplyEscalationKinds replays, event by event, hand-written histories
// of every kind of escalation. The payloads are the ones written before
// reason codes existed (no code anywhere in them), so this is also the proof
// that old events replay to a coded package: Apply derives the code from the
// event type and payload.
func TestApplyEscalationKinds(t *testing.T) {
	t.Parallel()
	dlg := func(max int) models.DelegationPayload {
		return models.DelegationPayload{DelegationID: "d1", Queue: "refunds", Step: "check", MaxAttempts: max, LeaseSeconds: 30}
	}
	start := func(h *history, max int) {
		h.add(models.EventSessionCreated, "ctl", models.SessionCreatedPayload{Goal: "Refund 1182", Priority: 2})
		h.add(models.EventDelegationCreated, "ctl", dlg(max))
		h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: "d1", Attempt: 1, Worker: "w-1"})
	}
	failed := func(attempt int, class, msg string, retry bool) models.ResultPayload {
		p := models.ResultPayload{DelegationID: "d1", Attempt: attempt, Step: "check", ResultType: "failed",
			Failure: &models.Failure{Class: class, Message: msg}}
		if retry {
			p.Retry, p.NextAttempt = true, attempt+1
		}
		return p
	}
	cases := []struct {
		name     string
		build    func(h *history)
		code     models.ReasonCode
		question []string // the question must name these
		evidence []string // the package's evidence must hold these
		attempts int
	}{
		{name: "retries exhausted", code: models.ReasonRetriesExhausted, attempts: 2,
			build: func(h *history) {
				start(h, 2)
				h.add(models.EventResultFailed, "w", failed(1, models.FailureTransient, "bank API timed out", true))
				h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: "d1", Attempt: 2, Worker: "w-2"})
				h.add(models.EventResultFailed, "w", failed(2, models.FailureTransient, "bank API returned 503", false))
			},
			question: []string{`"check"`, "all 2 attempts", "bank API returned 503", "Retry"},
			evidence: []string{"Attempt 1 of step \"check\" failed (transient): bank API timed out", "Attempt 2 of step \"check\" failed (transient): bank API returned 503"}},
		{name: "leases exhausted", code: models.ReasonLeasesExhausted, attempts: 2,
			build: func(h *history) {
				start(h, 2)
				h.add(models.EventDelegationExpired, "sys", models.ExpiredPayload{DelegationID: "d1", Attempt: 1, Worker: "w-1", NextAttempt: 2})
				h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: "d1", Attempt: 2, Worker: "w-2"})
				h.add(models.EventDelegationExpired, "sys", models.ExpiredPayload{DelegationID: "d1", Attempt: 2, Worker: "w-2", NextAttempt: 3, Exhausted: true})
			},
			question: []string{"stopped responding", "all 2 attempts", "reassign"},
			evidence: []string{"(lease_expired): the lease of w-1 ran out", "(lease_expired): the lease of w-2 ran out"}},
		{name: "permanent failure", code: models.ReasonPermanentFailure, attempts: 1,
			build: func(h *history) {
				start(h, 3)
				h.add(models.EventResultFailed, "w", failed(1, models.FailurePermanent, "order 1182 does not exist", false))
			},
			question: []string{"failed permanently", "order 1182 does not exist"},
			evidence: []string{"(permanent): order 1182 does not exist"}},
		{name: "worker without a question", code: models.ReasonWorker, attempts: 1,
			build: func(h *history) {
				start(h, 3)
				h.add(models.EventResultEscalated, "w", models.ResultPayload{DelegationID: "d1", Attempt: 1, Step: "check",
					ResultType: "escalated", NextStep: "manual-review"})
			},
			question: []string{`"check"`, `"manual-review"`}},
		{name: "worker with a question", code: models.ReasonWorker, attempts: 1,
			build: func(h *history) {
				start(h, 3)
				h.add(models.EventResultEscalated, "w", models.ResultPayload{DelegationID: "d1", Attempt: 1, Step: "check",
					ResultType: "escalated", Question: "Refund above the 200 EUR limit?"})
			},
			question: []string{"Refund above the 200 EUR limit?"}},
		{name: "controller without a question", code: models.ReasonController,
			build: func(h *history) {
				h.add(models.EventSessionCreated, "ctl", models.SessionCreatedPayload{Goal: "Refund 1182", Priority: 2})
				h.add(models.EventSessionEscalated, "ctl", models.EscalatePayload{Reason: "VIP customer"})
			},
			question: []string{"controller escalated", "VIP customer", "Resume automation"}},
		{name: "join conflict", code: models.ReasonJoinConflict,
			build: func(h *history) {
				h.add(models.EventSessionCreated, "ctl", models.SessionCreatedPayload{Goal: "Refund 1182", Priority: 2})
				h.add(models.EventChildrenSpawned, "ctl", models.ChildrenPayload{Join: models.Join{Policy: "all", Children: []string{"c1", "c2"}}})
				h.add(models.EventChildrenJoined, "sys", models.JoinPayload{Result: "conflict", Reason: "children disagree on eligible",
					Children: []models.ChildOutcome{{SessionID: "c1", Status: models.StatusCompleted}, {SessionID: "c2", Status: models.StatusCompleted}}})
			},
			question: []string{"disagree on eligible", "Which child's result stands"}},
		{name: "join timeout", code: models.ReasonJoinTimeout,
			build: func(h *history) {
				h.add(models.EventSessionCreated, "ctl", models.SessionCreatedPayload{Goal: "Refund 1182", Priority: 2})
				h.add(models.EventChildrenSpawned, "ctl", models.ChildrenPayload{Join: models.Join{Policy: "all", Children: []string{"c1", "c2"}}})
				h.add(models.EventChildrenJoined, "sys", models.JoinPayload{Result: "timeout", Reason: "due at 09:01",
					Children: []models.ChildOutcome{{SessionID: "c1", Status: models.StatusCompleted}, {SessionID: "c2", Status: models.StatusQueued}}})
			},
			question: []string{"Only 1 of 2 child sessions finished", "due at 09:01"}},
		{name: "join unmet", code: models.ReasonJoinTimeout,
			build: func(h *history) {
				h.add(models.EventSessionCreated, "ctl", models.SessionCreatedPayload{Goal: "Refund 1182", Priority: 2})
				h.add(models.EventChildrenSpawned, "ctl", models.ChildrenPayload{Join: models.Join{Policy: "any", Children: []string{"c1"}}})
				h.add(models.EventChildrenJoined, "sys", models.JoinPayload{Result: "unmet", Reason: "every child failed",
					Children: []models.ChildOutcome{{SessionID: "c1", Status: models.StatusRejected}}})
			},
			question: []string{"Only 1 of 1", "every child failed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &history{t: t}
			tc.build(h)
			var st models.State
			for _, e := range h.evs {
				var err error
				if st, err = models.Apply(st, e); err != nil {
					t.Fatalf("apply %s: %v", e.Type, err)
				}
			}
			r, err := models.Replay(h.evs)
			if err != nil || canon(t, r) != canon(t, st) {
				t.Fatalf("replay differs: %v", err)
			}
			e := st.Escalation
			if st.Status != models.StatusEscalated || e == nil {
				t.Fatalf("status %s escalation %+v", st.Status, e)
			}
			if e.ReasonCode != tc.code || !e.ReasonCode.Valid() {
				t.Errorf("reason code %q, want %q", e.ReasonCode, tc.code)
			}
			for _, w := range tc.question {
				if !strings.Contains(e.Question, w) {
					t.Errorf("question %q does not name %q", e.Question, w)
				}
			}
			if e.RecommendedAction == "" {
				t.Errorf("no recommended action")
			}
			if e.Attempts != tc.attempts {
				t.Errorf("attempts %d, want %d", e.Attempts, tc.attempts)
			}
			for _, w := range tc.evidence {
				found := false
				for _, ev := range e.Evidence {
					found = found || strings.Contains(ev.Claim, w)
				}
				if !found {
					t.Errorf("evidence %+v lacks %q", e.Evidence, w)
				}
			}
			if len(tc.evidence) != len(e.Failures) {
				t.Errorf("failures %+v, want %d", e.Failures, len(tc.evidence))
			}
		})
	}
}

// TestSLABreachHasNoReasonCode: an SLA breach marks an escalation that is
// already open; it neither escalates again nor changes the package's code.
func TestSLABreachHasNoReasonCode(t *testing.T) {
	t.Parallel()
	h := &history{t: t}
	h.add(models.EventSessionCreated, "ctl", models.SessionCreatedPayload{Goal: "Refund 1182", Priority: 2})
	h.add(models.EventSessionEscalated, "ctl", models.EscalatePayload{Reason: "VIP", Question: "Call them?"})
	h.add(models.EventEscalationSLABreached, "sys", struct{}{})
	st, err := models.Replay(h.evs)
	if err != nil {
		t.Fatal(err)
	}
	if st.Escalation.ReasonCode != models.ReasonController || st.Escalation.Question != "Call them?" || st.Escalation.AtVersion != 2 {
		t.Fatalf("escalation after the SLA breach: %+v", st.Escalation)
	}
}

// escWorld drives one store through the real write path on a moved clock.
type escWorld struct {
	t   *testing.T
	s   *models.Store
	ctx context.Context
	clk *fanClock
}

func (w *escWorld) delegate(sid, queue string, maxAttempts int) {
	w.t.Helper()
	st := loadState(w.ctx, w.t, w.s, sid)
	if _, err := w.s.Delegate(w.ctx, sid, "test:controller", "", models.DelegateInput{Queue: queue, Step: "check",
		ExpectedVersion: v64(st.Version), MaxAttempts: &maxAttempts, LeaseSeconds: storetest.Ptr(30)}); err != nil {
		w.t.Fatalf("delegate: %v", err)
	}
}

func (w *escWorld) fail(queue, class, msg string) {
	w.t.Helper()
	l := leaseOn(w.ctx, w.t, w.s, queue)
	in := resultFor(l, models.ResultFailed, "")
	in.Failure = &models.Failure{Class: class, Message: msg}
	if _, err := w.s.SubmitResult(w.ctx, l.DelegationID, "test:worker", "", in); err != nil {
		w.t.Fatalf("failed result: %v", err)
	}
	w.clk.Add(10 * time.Minute) // past any retry backoff
}

func (w *escWorld) reasonColumn(sid string) models.ReasonCode {
	w.t.Helper()
	row, err := w.s.GetSession(w.ctx, sid)
	if err != nil {
		w.t.Fatal(err)
	}
	return row.ReasonCode
}

// TestEscalationPackagesLive escalates sessions in every way the product
// can, through the real write path, and checks the package, the projection
// column, the inbox filter and the metrics per reason code.
func TestEscalationPackagesLive(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		w := &escWorld{t: t, s: s, ctx: ctx, clk: setFanClock(s)}
		from := w.clk.Now()
		want := map[models.ReasonCode]string{}

		// Retries exhausted: two transient failures on a two-attempt step.
		sid := storetest.Session(ctx, t, s, nil)
		w.delegate(sid, "esc-retry", 2)
		w.fail("esc-retry", models.FailureTransient, "bank API timed out")
		w.fail("esc-retry", models.FailureTransient, "bank API returned 503")
		want[models.ReasonRetriesExhausted] = sid
		e := loadState(ctx, t, s, sid).Escalation
		if e == nil || e.ReasonCode != models.ReasonRetriesExhausted || e.Attempts != 2 || e.MaxAttempts != 2 || len(e.Failures) != 2 ||
			e.Failures[0].Message != "bank API timed out" || e.Failures[1].Message != "bank API returned 503" ||
			!strings.Contains(e.Question, "all 2 attempts") || e.RecommendedAction == "" {
			t.Fatalf("retries exhausted package: %+v", e)
		}

		// Leases exhausted: a one-attempt lease that runs out.
		sid = storetest.Session(ctx, t, s, nil)
		w.delegate(sid, "esc-lease", 1)
		leaseOn(ctx, t, s, "esc-lease")
		w.clk.Add(31 * time.Second)
		if n, err := s.RescueExpired(ctx, 10); err != nil || n != 1 {
			t.Fatalf("rescue: %d %v", n, err)
		}
		want[models.ReasonLeasesExhausted] = sid
		e = loadState(ctx, t, s, sid).Escalation
		if e == nil || e.ReasonCode != models.ReasonLeasesExhausted || e.Attempts != 1 || len(e.Failures) != 1 ||
			e.Failures[0].Class != models.FailureLeaseExpired || e.Failures[0].Worker != "w-esc-lease" {
			t.Fatalf("leases exhausted package: %+v", e)
		}

		// Permanent failure.
		sid = storetest.Session(ctx, t, s, nil)
		w.delegate(sid, "esc-perm", 3)
		w.fail("esc-perm", models.FailurePermanent, "order does not exist")
		want[models.ReasonPermanentFailure] = sid

		// A worker's escalation.
		sid = storetest.Session(ctx, t, s, nil)
		w.delegate(sid, "esc-worker", 3)
		l := leaseOn(ctx, t, s, "esc-worker")
		in := resultFor(l, models.ResultEscalated, "")
		in.NextStep = "manual-review"
		if _, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "", in); err != nil {
			t.Fatal(err)
		}
		want[models.ReasonWorker] = sid

		// A controller's escalation without a question.
		sid = controllerEscalatedNoQuestion(ctx, t, s)
		want[models.ReasonController] = sid
		if e := loadState(ctx, t, s, sid).Escalation; !strings.Contains(e.Question, "VIP customer") {
			t.Fatalf("controller question %q", e.Question)
		}

		// Join conflict and join timeout.
		k := fanParent(ctx, t, s)
		spawn(ctx, t, s, k, 1, models.JoinInput{Policy: "all", ConflictKeys: []string{"eligible"}}, "esc-k-a", "esc-k-b")
		finish(ctx, t, s, "esc-k-a", models.ResultCompleted, `{"eligible": true}`)
		finish(ctx, t, s, "esc-k-b", models.ResultCompleted, `{"eligible": false}`)
		want[models.ReasonJoinConflict] = k
		tp := fanParent(ctx, t, s)
		spawn(ctx, t, s, tp, 1, models.JoinInput{Policy: "all", TimeoutSeconds: storetest.Ptr(60)}, "esc-t-a")
		w.clk.Add(61 * time.Second)
		if _, err := s.Maintain(ctx); err != nil {
			t.Fatal(err)
		}
		want[models.ReasonJoinTimeout] = tp

		for code, id := range want {
			st := loadState(ctx, t, s, id)
			if st.Escalation == nil || st.Escalation.ReasonCode != code || st.Escalation.Question == "" || st.Escalation.RecommendedAction == "" {
				t.Errorf("%s: package %+v", code, st.Escalation)
			}
			if got := w.reasonColumn(id); got != code {
				t.Errorf("%s: reason_code column %q", code, got)
			}
			// The inbox filter finds exactly that session.
			page, err := s.Inbox(ctx, models.InboxOpts{InboxFilter: models.InboxFilter{Reason: code}})
			if err != nil || len(page.Rows) != 1 || page.Rows[0].ID != id || page.Rows[0].ReasonCode != code ||
				page.Counts.Reason[code] != 1 || page.Counts.Total != 1 || page.Counts.AnyReason != int64(len(want)) {
				t.Errorf("%s: inbox %+v counts %+v, %v", code, page.Rows, page.Counts, err)
			}
		}
		if _, err := s.Inbox(ctx, models.InboxOpts{InboxFilter: models.InboxFilter{Reason: "bored"}}); err == nil {
			t.Fatal("unknown reason accepted")
		} else {
			wantFields(t, err, "reason")
		}

		// The metrics count one escalation per code.
		pm, err := s.ProductMetrics(ctx, models.MetricsOpts{From: from, To: w.clk.Now().Add(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		by := pm.Overall.EscalationClarity.EscalationsByReason
		for _, c := range models.AllReasonCodes {
			if by[c] != 1 {
				t.Errorf("metrics: %d escalations with code %s, want 1 (%v)", by[c], c, by)
			}
		}
		if pm.Queues["esc-retry"].EscalationClarity.EscalationsByReason[models.ReasonRetriesExhausted] != 1 {
			t.Errorf("per-queue count: %+v", pm.Queues["esc-retry"].EscalationClarity)
		}

		// Migration 00008 derives the column for sessions escalated before
		// codes existed: wipe it and run the migration's backfill.
		backfill(t, s)
		for code, id := range want {
			if got := w.reasonColumn(id); got != code {
				t.Errorf("%s: reason_code column after the backfill %q", code, got)
			}
		}

		// Leaving human hands clears the column; the code stays in the
		// history of a closed session's package.
		p := staff(t, s)
		sid = want[models.ReasonPermanentFailure]
		v := loadState(ctx, t, s, sid).Version
		if _, err := s.ClaimEscalation(ctx, sid, p.a, "", models.ClaimInput{ExpectedVersion: v64(v)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ResumeAutomation(ctx, sid, p.a, "", models.ResumeInput{ExpectedVersion: v64(v + 1), Queue: "esc-perm", Step: "check"}); err != nil {
			t.Fatal(err)
		}
		if got := w.reasonColumn(sid); got != "" {
			t.Fatalf("reason_code column after resume = %q", got)
		}
		verifyAll(ctx, t, s)
	})
}

// backfill empties sessions.reason_code and runs the UPDATE of migration
// 00008 that fills it from the events.
func backfill(t *testing.T, s *models.Store) {
	t.Helper()
	fsys, err := migrations.FS(string(s.Dialect))
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(fsys, "00008_escalation_reason.sql")
	if err != nil {
		t.Fatal(err)
	}
	sql := string(b)
	start := strings.Index(sql, "UPDATE sessions SET reason_code")
	end := strings.Index(sql[start:], ";\n")
	if start < 0 || end < 0 {
		t.Fatal("no backfill statement in migration 00008")
	}
	// The backfill reads the state from sessions, where it was kept until
	// migration 00020: put it back there for the statement's while.
	for _, q := range []string{
		`UPDATE sessions SET reason_code = ''`,
		`ALTER TABLE sessions ADD COLUMN state text NOT NULL DEFAULT ''`,
		`UPDATE sessions SET state = (SELECT st.state FROM session_states st WHERE st.session_id = sessions.id)`,
		sql[start : start+end],
		`ALTER TABLE sessions DROP COLUMN state`,
	} {
		if err := s.DB.Exec(q).Error; err != nil {
			t.Fatalf("backfill: %s: %v", q, err)
		}
	}
}

func controllerEscalatedNoQuestion(ctx context.Context, t testing.TB, s *models.Store) string {
	t.Helper()
	sid := storetest.Session(ctx, t, s, nil)
	if _, err := s.Transition(ctx, sid, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{
		ExpectedVersion: v64(1), Reason: "VIP customer",
	}); err != nil {
		t.Fatalf("escalate: %v", err)
	}
	return sid
}

// TestRiskResolution: a worker's result and a human resolve open risks; a
// risk that is not open is refused with a 422 naming it, and nothing is
// written; the resolved risks are kept apart, and everything replays.
func TestRiskResolution(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		setFanClock(s)
		p := staff(t, s)
		sid := storetest.Session(ctx, t, s, nil)
		w := &escWorld{t: t, s: s, ctx: ctx}
		w.delegate(sid, "risk-q", 3)
		l := leaseOn(ctx, t, s, "risk-q")
		in := resultFor(l, models.ResultCompleted, `{"eligible": true}`)
		in.Risks, in.NextStep = []string{"possible fraud", "chargeback pending", "address changed"}, "refund"
		if _, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "", in); err != nil {
			t.Fatal(err)
		}
		w.delegate(sid, "risk-q", 3)
		l = leaseOn(ctx, t, s, "risk-q")
		in = resultFor(l, models.ResultCompleted, `{"refunded": true}`)
		in.NextStep = "notify"
		in.ResolvedRisks = []string{"possible fraud", "not a risk of this session"}
		before := snapshot(t, s, sid)
		_, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "", in)
		wantFields(t, err, "resolved_risks[1]")
		assertUnchanged(t, s, sid, before)
		in.ResolvedRisks = []string{""}
		_, err = s.SubmitResult(ctx, l.DelegationID, "test:worker", "", in)
		wantFields(t, err, "resolved_risks[0]")

		// The lease survived the refusals.
		in.ResolvedRisks = []string{"possible fraud"}
		if _, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "", in); err != nil {
			t.Fatalf("result resolving a risk: %v", err)
		}
		st := loadState(ctx, t, s, sid)
		if strings.Join(st.Risks, "|") != "chargeback pending|address changed" || len(st.ResolvedRisks) != 1 ||
			st.ResolvedRisks[0].Risk != "possible fraud" || st.ResolvedRisks[0].By != "test:worker" {
			t.Fatalf("after the result: risks %v resolved %+v", st.Risks, st.ResolvedRisks)
		}

		// A human resolves one while someone else holds the session.
		if _, err := s.Transition(ctx, sid, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(st.Version), Reason: "check"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ClaimEscalation(ctx, sid, p.a, "", models.ClaimInput{ExpectedVersion: v64(st.Version + 1)}); err != nil {
			t.Fatal(err)
		}
		if !models.CanResolveRisks(loadState(ctx, t, s, sid), p.b) || models.CanResolveRisks(loadState(ctx, t, s, sid), p.reviewer) {
			t.Fatal("CanResolveRisks disagrees with ResolveRisk")
		}
		out, err := s.ResolveRisk(ctx, sid, p.b, "", models.ResolveRiskInput{Risk: "chargeback pending", Note: "bank closed the dispute"})
		if err != nil || out.Status != models.StatusHumanActive {
			t.Fatalf("resolve = %+v, %v", out, err)
		}
		before = snapshot(t, s, sid)
		_, err = s.ResolveRisk(ctx, sid, p.b, "", models.ResolveRiskInput{Risk: "chargeback pending"})
		wantFields(t, err, "risk")
		_, err = s.ResolveRisk(ctx, sid, p.reviewer, "", models.ResolveRiskInput{Risk: "address changed"})
		wantForbidden(t, err)
		_, err = s.ResolveRisk(ctx, sid, p.a, "", models.ResolveRiskInput{})
		wantFields(t, err, "risk")
		assertUnchanged(t, s, sid, before)

		st = loadState(ctx, t, s, sid)
		if strings.Join(st.Risks, "|") != "address changed" || len(st.ResolvedRisks) != 2 ||
			st.ResolvedRisks[1] != (models.ResolvedRisk{Risk: "chargeback pending", By: p.b.Actor(), Note: "bank closed the dispute", AtVersion: st.Version}) {
			t.Fatalf("after the human: risks %v resolved %+v", st.Risks, st.ResolvedRisks)
		}
		evs := eventsOf(ctx, t, s, sid, models.EventRiskResolved)
		var rp models.RiskResolvedPayload
		if len(evs) != 1 || json.Unmarshal([]byte(evs[0].Payload), &rp) != nil || rp.Risks[0] != "chargeback pending" {
			t.Fatalf("risk.resolved events %+v", evs)
		}
		verifyAll(ctx, t, s)
	})
}
