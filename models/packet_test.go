package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// packetWorld drives one session through the real write path.
type packetWorld struct {
	ctx context.Context
	t   *testing.T
	s   *models.Store
	clk *fanClock
	sid string
}

func newPacketWorld(t *testing.T, s *models.Store) *packetWorld {
	w := &packetWorld{ctx: context.Background(), t: t, s: s, clk: setFanClock(s)}
	w.sid = storetest.Session(w.ctx, t, s, &storetest.SessionOpts{Goal: "Refund order 1182 if eligible", Facts: map[string]any{"order": "1182"}})
	return w
}

func (w *packetWorld) version() int64 { return loadState(w.ctx, w.t, w.s, w.sid).Version }

func (w *packetWorld) delegate(queue, step string, edit func(*models.DelegateInput)) {
	w.t.Helper()
	v := w.version()
	in := models.DelegateInput{Queue: queue, Step: step, ExpectedVersion: &v, MaxAttempts: storetest.Ptr(3), LeaseSeconds: storetest.Ptr(30)}
	if edit != nil {
		edit(&in)
	}
	if _, err := w.s.Delegate(w.ctx, w.sid, fanActor, "", in); err != nil {
		w.t.Fatalf("delegate %s: %v", step, err)
	}
}

func (w *packetWorld) submit(l *models.Lease, in models.ResultInput) {
	w.t.Helper()
	in.LeaseToken, in.SessionID, in.Step = l.LeaseToken, l.SessionID, l.Step
	if _, err := w.s.SubmitResult(w.ctx, l.DelegationID, "test:worker", "", in); err != nil {
		w.t.Fatalf("result %s on %s: %v", in.ResultType, l.Step, err)
	}
}

// wantReason checks the lease's packet and the packet built from the stored
// state (what GET …/packet serves) give the same run reason.
func wantReason(t *testing.T, w *packetWorld, l *models.Lease, kind string, attempt int, detail string) models.Packet {
	t.Helper()
	r := l.Packet.RunReason
	if r.Kind != kind || r.Attempt != attempt || !strings.Contains(r.Detail, detail) {
		t.Fatalf("run reason %+v, want %s attempt %d with %q", r, kind, attempt, detail)
	}
	if got := models.BuildPacket(loadState(w.ctx, t, w.s, w.sid), "").RunReason; got != r {
		t.Fatalf("stored packet's run reason %+v, lease's %+v", got, r)
	}
	return l.Packet
}

// TestPacketRunReasons drives a session through every kind of run on each
// dialect and checks what its next worker is told.
func TestPacketRunReasons(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		w := newPacketWorld(t, s)
		ctx := w.ctx

		w.delegate("pk", "check", nil)
		l := leaseOn(ctx, t, s, "pk")
		wantReason(t, w, l, models.RunFirst, 1, "")

		// A transient failure is retried: the next worker reads why.
		w.submit(l, models.ResultInput{ResultType: models.ResultFailed,
			Failure: &models.Failure{Class: models.FailureTransient, Message: "orders-db answered 503"},
			Usage:   &models.Usage{InputTokens: storetest.Ptr(int64(1000)), CachedInputTokens: storetest.Ptr(int64(0))}})
		w.clk.Add(10 * time.Minute) // past the backoff
		l = leaseOn(ctx, t, s, "pk")
		wantReason(t, w, l, models.RunRetry, 2, "orders-db answered 503")

		// The worker goes silent; the rescuer frees the lease.
		w.clk.Add(31 * time.Second)
		if n, err := s.RescueExpired(ctx, 10); err != nil || n != 1 {
			t.Fatalf("rescue: %d %v", n, err)
		}
		l = leaseOn(ctx, t, s, "pk")
		wantReason(t, w, l, models.RunLeaseExpired, 3, "w-pk")

		// A completed step: the next step is a first run that sees the output
		// and evidence of the step before.
		w.submit(l, models.ResultInput{ResultType: models.ResultCompleted, Output: json.RawMessage(`{"eligible":true}`),
			Evidence: []models.Evidence{{Claim: "order paid 240 EUR", Source: "orders-db"}}, NextStep: "decide"})
		w.delegate("pk", "decide", nil)
		l = leaseOn(ctx, t, s, "pk")
		p := wantReason(t, w, l, models.RunFirst, 1, "")
		if len(p.PreviousOutputs) != 1 || p.PreviousOutputs[0].Step != "check" || string(p.PreviousOutputs[0].Output) != `{"eligible":true}` ||
			len(p.PreviousOutputs[0].Evidence) != 1 || p.PreviousOutputs[0].Evidence[0].Source != "orders-db" {
			t.Fatalf("previous outputs %+v", p.PreviousOutputs)
		}

		// The worker needs input; the answer reaches the next worker with
		// the question it answered.
		w.submit(l, models.ResultInput{ResultType: models.ResultNeedsInput, Question: "Is the customer a VIP?"})
		v := w.version()
		if _, err := s.ProvideInput(ctx, w.sid, fanActor, "", models.InputInput{ExpectedVersion: &v, Answer: "Yes, gold tier since 2019"}); err != nil {
			t.Fatal(err)
		}
		w.delegate("pk", "decide", nil)
		l = leaseOn(ctx, t, s, "pk")
		p = wantReason(t, w, l, models.RunAfterInput, 1, "Yes, gold tier since 2019")
		if p.RunReason.Question != "Is the customer a VIP?" || p.ConfirmedFacts[models.FactInputAnswer] != "Yes, gold tier since 2019" {
			t.Fatalf("after input: %+v facts %v", p.RunReason, p.ConfirmedFacts)
		}

		// The worker escalates; a human resumes automation with a note.
		w.submit(l, models.ResultInput{ResultType: models.ResultEscalated, Question: "Refund 240 EUR to a VIP?"})
		agent := mustUser(t, s, "ana@example.com", models.RoleAgent)
		v = w.version()
		if _, err := s.ClaimEscalation(ctx, w.sid, agent, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		v = w.version()
		if _, err := s.ResumeAutomation(ctx, w.sid, agent, "", models.ResumeInput{ExpectedVersion: &v, Queue: "pk", Step: "refund",
			Note: "Approved by phone; refund the full 240 EUR"}); err != nil {
			t.Fatal(err)
		}
		l = leaseOn(ctx, t, s, "pk")
		p = wantReason(t, w, l, models.RunAfterHuman, 1, "Approved by phone; refund the full 240 EUR")
		if !strings.Contains(p.RunReason.Detail, "resumed automation") || p.RunReason.By != agent.Actor() {
			t.Fatalf("after human: %+v", p.RunReason)
		}
		if n := len(p.Notes); n == 0 || p.Notes[n-1].Text != "Approved by phone; refund the full 240 EUR" || p.Notes[n-1].By != agent.Actor() {
			t.Fatalf("notes in the packet: %+v", p.Notes)
		}

		// Escalated again, the step is handed back with a note.
		w.submit(l, models.ResultInput{ResultType: models.ResultEscalated, Question: "The card was closed; what now?"})
		v = w.version()
		if _, err := s.ClaimEscalation(ctx, w.sid, agent, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		v = w.version()
		if _, err := s.HandBack(ctx, w.sid, agent, "", models.HandBackInput{ExpectedVersion: &v, Note: "Refund to the new card ending 4242"}); err != nil {
			t.Fatal(err)
		}
		l = leaseOn(ctx, t, s, "pk")
		p = wantReason(t, w, l, models.RunAfterHuman, 1, "handed the step back at step refund: Refund to the new card ending 4242")
		if n := len(p.Notes); n < 2 || p.Notes[n-1].Text != "Refund to the new card ending 4242" || p.Notes[n-2].Text != "Approved by phone; refund the full 240 EUR" {
			t.Fatalf("notes in the packet: %+v", p.Notes)
		}

		// The result reports usage: it is in the event payload.
		w.submit(l, models.ResultInput{ResultType: models.ResultCompleted, Evidence: []models.Evidence{{Claim: "refunded"}},
			Usage: &models.Usage{InputTokens: storetest.Ptr(int64(1200)), CachedInputTokens: storetest.Ptr(int64(900))}})
		evs := eventsOf(ctx, t, s, w.sid, models.EventResultCompleted)
		var rp models.ResultPayload
		if err := json.Unmarshal([]byte(evs[len(evs)-1].Payload), &rp); err != nil || rp.Usage == nil || *rp.Usage.CachedInputTokens != 900 {
			t.Fatalf("usage in the payload: %+v %v", rp.Usage, err)
		}
		verifyAll(ctx, t, s)
	})
}

// TestPacketAfterJoin checks a parent's next worker gets the children's
// results, and that the losers of any and quorum joins are cancelled.
func TestPacketAfterJoin(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		setFanClock(s)
		pid := fanParent(ctx, t, s)
		kids := spawn(ctx, t, s, pid, 1, models.JoinInput{Policy: "any"}, "ja", "jb")
		finish(ctx, t, s, "jb", models.ResultCompleted, `{"price_eur":240}`)
		st := loadState(ctx, t, s, pid)
		if st.Status != models.StatusOpen {
			t.Fatalf("parent %s", st.Status)
		}
		loser := loadState(ctx, t, s, kids[0])
		if loser.Status != models.StatusCancelled || loser.Outcome != "cancelled: join met by "+kids[1]+" (policy any)" {
			t.Fatalf("loser %s %q", loser.Status, loser.Outcome)
		}
		if evs := eventsOf(ctx, t, s, kids[0], models.EventSessionCancelled); len(evs) != 1 || evs[0].Actor != models.JoinActor ||
			!strings.Contains(evs[0].Payload, "join met by "+kids[1]) {
			t.Fatalf("loser's cancel event %+v", evs)
		}
		if d, err := s.GetDelegation(ctx, mustDelegationOf(ctx, t, s, kids[0])); err != nil || d.Status != models.DelegationCancelled {
			t.Fatalf("loser's delegation %+v %v", d, err)
		}

		v := st.Version
		if _, err := s.Delegate(ctx, pid, fanActor, "", models.DelegateInput{Queue: "jp", Step: "decide", ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		l := leaseOn(ctx, t, s, "jp")
		p := l.Packet
		if p.RunReason.Kind != models.RunAfterJoin || !strings.Contains(p.RunReason.Detail, "join met") {
			t.Fatalf("run reason %+v", p.RunReason)
		}
		byChild := map[string]models.PreviousOutput{}
		for _, o := range p.PreviousOutputs {
			byChild[o.SessionID] = o
		}
		won, lost := byChild[kids[1]], byChild[kids[0]]
		if won.Status != models.StatusCompleted || string(won.Output) != `{"price_eur":240}` || len(won.Evidence) != 1 ||
			lost.Status != models.StatusQueued {
			t.Fatalf("children's outputs in the packet: %+v", p.PreviousOutputs)
		}

		// Quorum 2 of 3: the third child is cancelled when two completed.
		q := fanParent(ctx, t, s)
		qk := spawn(ctx, t, s, q, 1, models.JoinInput{Policy: "quorum", Quorum: storetest.Ptr(2)}, "qa", "qb", "qc")
		finish(ctx, t, s, "qa", models.ResultCompleted, `{"ok":1}`)
		if st := loadState(ctx, t, s, qk[2]); st.Status != models.StatusQueued {
			t.Fatalf("third child cancelled before the quorum: %s", st.Status)
		}
		finish(ctx, t, s, "qc", models.ResultCompleted, `{"ok":2}`)
		want := fmt.Sprintf("cancelled: join met by %s, %s (policy quorum 2)", qk[0], qk[2])
		if st := loadState(ctx, t, s, qk[1]); st.Status != models.StatusCancelled || st.Outcome != want {
			t.Fatalf("quorum loser %s %q, want %q", st.Status, st.Outcome, want)
		}
		verifyAll(ctx, t, s)
	})
}

func mustDelegationOf(ctx context.Context, t *testing.T, s *models.Store, sid string) string {
	t.Helper()
	var ids []string
	if err := s.DB.WithContext(ctx).Model(&models.Delegation{}).Where("session_id = ?", sid).Pluck("id", &ids).Error; err != nil || len(ids) != 1 {
		t.Fatalf("delegations of %s: %v %v", sid, ids, err)
	}
	return ids[0]
}

// TestPacketBudget builds packets for a session with huge facts and a long
// history, through the real write path, at the default and the smallest
// budget.
func TestPacketBudget(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		w := newPacketWorld(t, s)
		ctx := w.ctx
		big := strings.Repeat("x", 2000)
		for i := range 40 {
			w.delegate("pb", fmt.Sprintf("step-%d", i), func(in *models.DelegateInput) {
				in.Facts = map[string]any{fmt.Sprintf("cycle_%02d", i): big}
			})
			l := leaseOn(ctx, t, s, "pb")
			w.submit(l, models.ResultInput{ResultType: models.ResultCompleted, NextStep: "more",
				Output:   json.RawMessage(fmt.Sprintf(`{"cycle":%d,"notes":%q}`, i, strings.Repeat("o", 6000))),
				Evidence: []models.Evidence{{Claim: fmt.Sprintf("cycle %d done", i), Source: "test"}}})
		}
		huge := strings.Repeat("<report>", 900_000/8) // 900 KB, and HTML-escaped to six times that
		for _, max := range []*int{nil, storetest.Ptr(4096)} {
			w.delegate("pb", "final", func(in *models.DelegateInput) {
				in.Facts = map[string]any{"report": huge}
				in.PacketMaxBytes = max
			})
			l := leaseOn(ctx, t, s, "pb")
			p := l.Packet
			b, _ := json.Marshal(p)
			limit := models.DefaultPacketMaxBytes
			if max != nil {
				limit = *max
			}
			if len(b) > limit || p.Budget.Bytes != len(b) || p.Budget.MaxBytes != limit {
				t.Fatalf("packet is %d bytes, budget %+v", len(b), p.Budget)
			}
			report, _ := p.ConfirmedFacts["report"].(string)
			if !strings.HasPrefix(report, "<report>") || !strings.HasSuffix(report, "bytes cut]") {
				t.Fatalf("the newest fact was not kept (truncated): %.100q", report)
			}
			if p.ConfirmedFacts["order"] != nil && limit == 4096 {
				t.Fatalf("the oldest fact survived a 4 KiB budget")
			}
			newest := "step-39"
			if max != nil {
				newest = "final" // completed in the first round
			}
			if n := len(p.PreviousOutputs); n == 0 || p.PreviousOutputs[n-1].Step != newest {
				t.Fatalf("the newest previous output (%s) was dropped: %d kept", newest, n)
			}
			if max == nil && len(p.PreviousOutputs) < 3 {
				t.Fatalf("only %d previous outputs fit 32 KiB", len(p.PreviousOutputs))
			}
			trimmed := strings.Join(p.Budget.Trimmed, ",")
			if !strings.Contains(trimmed, "confirmed_facts") || !strings.Contains(trimmed, "previous_outputs") {
				t.Fatalf("trimmed %v", p.Budget.Trimmed)
			}
			w.submit(l, models.ResultInput{ResultType: models.ResultCompleted, NextStep: "again", Evidence: []models.Evidence{{Claim: "ok"}}})
		}

		// packet_max_bytes outside 4096–1048576 is refused, naming the field;
		// nothing is written.
		before := w.version()
		for _, n := range []int{4095, 1048577} {
			v := before
			_, err := s.Delegate(ctx, w.sid, fanActor, "", models.DelegateInput{Queue: "pb", Step: "x", ExpectedVersion: &v, PacketMaxBytes: &n})
			var ve *models.ValidationError
			if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "packet_max_bytes" {
				t.Fatalf("packet_max_bytes %d: %v", n, err)
			}
		}
		if w.version() != before {
			t.Fatal("a refused delegation wrote")
		}
		verifyAll(ctx, t, s)
	})
}

// TestResultUsageValidation lists every usage problem by field.
func TestResultUsageValidation(t *testing.T) {
	t.Parallel()
	base := models.ResultInput{LeaseToken: "lt", SessionID: "ses_1", Step: "s", ResultType: models.ResultCompleted,
		Evidence: []models.Evidence{{Claim: "c"}}}
	for _, tc := range []struct {
		usage *models.Usage
		want  string
	}{
		{&models.Usage{InputTokens: storetest.Ptr(int64(-1)), CachedInputTokens: storetest.Ptr(int64(-2))}, "usage.input_tokens,usage.cached_input_tokens"},
		{&models.Usage{InputTokens: storetest.Ptr(int64(10)), CachedInputTokens: storetest.Ptr(int64(11))}, "usage.cached_input_tokens"},
		{&models.Usage{CachedInputTokens: storetest.Ptr(int64(1))}, "usage.input_tokens"},
		{&models.Usage{InputTokens: storetest.Ptr(int64(10))}, ""},
		{&models.Usage{InputTokens: storetest.Ptr(int64(10)), CachedInputTokens: storetest.Ptr(int64(10))}, ""},
	} {
		in := base
		in.Usage = tc.usage
		var fields []string
		var ve *models.ValidationError
		if err := in.Validate(); errors.As(err, &ve) {
			for _, f := range ve.Fields {
				fields = append(fields, f.Field)
			}
		}
		if got := strings.Join(fields, ","); got != tc.want {
			t.Errorf("usage %+v: fields %q, want %q", tc.usage, got, tc.want)
		}
	}
}

// TestChildPacketMaxBytes: a child's delegation carries its own packet
// budget, and a bad one is refused naming the child's field.
func TestChildPacketMaxBytes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		pid := fanParent(ctx, t, s)
		v := int64(1)
		in := models.SpawnInput{ExpectedVersion: &v, Join: models.JoinInput{Policy: "all"}, Children: []models.ChildInput{
			{Goal: "Check the carrier", Queue: "cpk", Step: "check", PacketMaxBytes: storetest.Ptr(5000)},
			{Goal: "Check the bank", Queue: "cpk2", Step: "check", PacketMaxBytes: storetest.Ptr(100)},
		}}
		_, err := s.SpawnChildren(ctx, pid, fanActor, "", in)
		var ve *models.ValidationError
		if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "children[1].packet_max_bytes" {
			t.Fatalf("spawn with a bad budget: %v", err)
		}
		in.Children[1].PacketMaxBytes = nil
		if _, err := s.SpawnChildren(ctx, pid, fanActor, "", in); err != nil {
			t.Fatal(err)
		}
		if l := leaseOn(ctx, t, s, "cpk"); l.Packet.Budget.MaxBytes != 5000 {
			t.Fatalf("child packet budget %+v", l.Packet.Budget)
		}
		if l := leaseOn(ctx, t, s, "cpk2"); l.Packet.Budget.MaxBytes != models.DefaultPacketMaxBytes {
			t.Fatalf("default child packet budget %+v", l.Packet.Budget)
		}
	})
}
