package models_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// complete leases the next delegation of queue and completes it naming next.
func complete(ctx context.Context, t *testing.T, s *models.Store, queue, next string) (models.Outcome, *models.Lease) {
	t.Helper()
	l, err := s.Claim(ctx, queue, "w-1", "test:worker", "")
	if err != nil || l == nil {
		t.Fatalf("claim from %s = %v, %v", queue, l, err)
	}
	out, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "", models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step, ResultType: models.ResultCompleted,
		Output: json.RawMessage(`{"ok": true}`), NextStep: next, Evidence: []models.Evidence{{Claim: "checked"}},
	})
	if err != nil {
		t.Fatalf("complete %s: %v", l.Step, err)
	}
	return out, l
}

func putRoute(ctx context.Context, t *testing.T, s *models.Store, step, queue string) models.Route {
	t.Helper()
	r, err := s.PutRoute(ctx, "test:controller", "", step, models.RouteInput{Queue: queue, Instructions: "do " + step,
		LeaseSeconds: storetest.Ptr(45), MaxAttempts: storetest.Ptr(5)})
	if err != nil {
		t.Fatalf("put route %s: %v", step, err)
	}
	return r
}

// TestRouteCRUD: routes are created, replaced, listed, read and deleted;
// bad input names every field and writes nothing; every change is in the
// admin audit log.
func TestRouteCRUD(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		r := putRoute(ctx, t, s, "issue-refund", "refunds")
		if r.Step != "issue-refund" || r.Queue != "refunds" || r.LeaseSeconds != 45 || r.MaxAttempts != 5 || r.CreatedAt.IsZero() {
			t.Fatalf("put = %+v", r)
		}
		r2, err := s.PutRoute(ctx, "test:other", "", "issue-refund", models.RouteInput{Queue: "payments"})
		if err != nil {
			t.Fatal(err)
		}
		if r2.Queue != "payments" || r2.LeaseSeconds != models.DefaultLeaseSeconds || r2.MaxAttempts != models.DefaultMaxAttempts ||
			r2.CreatedBy != "test:controller" || r2.UpdatedBy != "test:other" || !r2.CreatedAt.Equal(r.CreatedAt.Time) {
			t.Fatalf("replace = %+v", r2)
		}
		putRoute(ctx, t, s, "check-eligibility", "triage")
		list, err := s.ListRoutes(ctx)
		if err != nil || len(list) != 2 || list[0].Step != "check-eligibility" || list[1].Queue != "payments" {
			t.Fatalf("list = %+v, %v", list, err)
		}

		err = func() error {
			_, err := s.PutRoute(ctx, "test:controller", "", " padded ", models.RouteInput{Queue: "bad queue!",
				Instructions: strings.Repeat("x", 16001), LeaseSeconds: storetest.Ptr(0), MaxAttempts: storetest.Ptr(21)})
			return err
		}()
		fields := map[string]bool{}
		if ve, ok := err.(*models.ValidationError); ok {
			for _, f := range ve.Fields {
				fields[f.Field] = true
			}
		}
		for _, f := range []string{"queue", "step", "instructions", "lease_seconds", "max_attempts"} {
			if !fields[f] {
				t.Errorf("bad route: %v does not name %s", err, f)
			}
		}
		if _, err := s.GetRoute(ctx, " padded "); models.ErrorCode(err) != models.ENOTFOUND {
			t.Fatalf("a refused route was written: %v", err)
		}

		del, err := s.DeleteRoute(ctx, "test:controller", "del-1", "issue-refund")
		if err != nil || del.Queue != "payments" {
			t.Fatalf("delete = %+v, %v", del, err)
		}
		// The same key replays; a new one finds nothing.
		if again, err := s.DeleteRoute(ctx, "test:controller", "del-1", "issue-refund"); err != nil || again.Step != "issue-refund" {
			t.Fatalf("replayed delete = %+v, %v", again, err)
		}
		if _, err := s.DeleteRoute(ctx, "test:controller", "", "issue-refund"); models.ErrorCode(err) != models.ENOTFOUND {
			t.Fatalf("delete of a deleted route = %v, want not found", err)
		}
		if _, err := s.GetRoute(ctx, "issue-refund"); models.ErrorCode(err) != models.ENOTFOUND {
			t.Fatalf("get deleted = %v", err)
		}

		var audit []models.AdminAudit
		if err := s.DB.Where("target_kind = ?", "route").Order("created_at, id").Find(&audit).Error; err != nil {
			t.Fatal(err)
		}
		var actions []string
		for _, a := range audit {
			actions = append(actions, a.Action+" "+a.TargetID)
		}
		want := "route.put issue-refund,route.put issue-refund,route.put check-eligibility,route.delete issue-refund"
		if strings.Join(actions, ",") != want {
			t.Fatalf("admin audit = %v, want %s", actions, want)
		}
		if audit[1].Before == nil || !strings.Contains(*audit[1].Before, `"refunds"`) || !strings.Contains(*audit[1].After, `"payments"`) {
			t.Fatalf("replace audit before %v after %v", audit[1].Before, audit[1].After)
		}
	})
}

// TestRoutedCompletion: a completed result whose next_step has a route is
// delegated in the same transaction by system:router: two events, a
// delegation row with the route's settings, status queued, and the new
// delegation can be leased at once. Replay still equals the stored state.
func TestRoutedCompletion(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		putRoute(ctx, t, s, "issue-refund", "payments")
		id, _ := storetest.Delegated(ctx, t, s, "refunds")
		out, _ := complete(ctx, t, s, "refunds", "issue-refund")
		if out.Status != models.StatusQueued || out.StateVersion != 5 {
			t.Fatalf("routed result = %s v%d, want queued v5", out.Status, out.StateVersion)
		}
		evs, err := s.ListEvents(ctx, id, 3, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 || evs[0].Type != models.EventResultCompleted || evs[1].Type != models.EventDelegationCreated ||
			evs[1].Actor != models.RouterActor || evs[1].PrevHash != evs[0].Hash {
			t.Fatalf("events after the result = %+v", evs)
		}
		var dels []models.Delegation
		if err := s.DB.Where("session_id = ? AND queue = ?", id, "payments").Find(&dels).Error; err != nil {
			t.Fatal(err)
		}
		if len(dels) != 1 || dels[0].Step != "issue-refund" || dels[0].Status != models.DelegationQueued ||
			dels[0].LeaseSeconds != 45 || dels[0].MaxAttempts != 5 || dels[0].Instructions != "do issue-refund" {
			t.Fatalf("routed delegation = %+v", dels)
		}
		row, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if row.Status != models.StatusQueued || row.Queue != "payments" || row.CurrentStep != "issue-refund" {
			t.Fatalf("session = %s %s %s", row.Status, row.Queue, row.CurrentStep)
		}
		_, l := complete(ctx, t, s, "payments", "")
		if l.Packet.Instructions != "do issue-refund" {
			t.Fatalf("routed packet instructions = %q", l.Packet.Instructions)
		}
		if rep, err := s.Verify(ctx, models.VerifyOpts{SessionIDs: []string{id}}); err != nil || len(rep.Problems) != 0 {
			t.Fatalf("verify = %v, %v", rep.Problems, err)
		}
		if row, _ := s.GetSession(ctx, id); row.Status != models.StatusCompleted {
			t.Fatalf("after the last step: %s", row.Status)
		}
	})
}

// TestRoutedCompletionIsAtomic: when the routed delegation cannot be
// written (a trigger refuses its insert), the result fails as a whole: the
// session, its events and its delegation are as they were before.
func TestRoutedCompletionIsAtomic(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		trigger := `CREATE TRIGGER refuse_broken BEFORE INSERT ON delegations
			WHEN NEW.queue = 'broken' BEGIN SELECT RAISE(ABORT, 'queue broken refused'); END`
		if s.Dialect == models.Postgres {
			if err := s.DB.Exec(`CREATE FUNCTION refuse_broken() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF NEW.queue = 'broken' THEN RAISE EXCEPTION 'queue broken refused'; END IF; RETURN NEW; END $$`).Error; err != nil {
				t.Fatal(err)
			}
			trigger = `CREATE TRIGGER refuse_broken BEFORE INSERT ON delegations FOR EACH ROW EXECUTE FUNCTION refuse_broken()`
		}
		if err := s.DB.Exec(trigger).Error; err != nil {
			t.Fatal(err)
		}
		putRoute(ctx, t, s, "issue-refund", "broken")
		id, did := storetest.Delegated(ctx, t, s, "refunds")
		l, err := s.Claim(ctx, "refunds", "w-1", "test:worker", "")
		if err != nil || l == nil {
			t.Fatal(l, err)
		}
		_, err = s.SubmitResult(ctx, did, "test:worker", "res-1", models.ResultInput{
			LeaseToken: l.LeaseToken, SessionID: id, Step: l.Step, ResultType: models.ResultCompleted,
			Output: json.RawMessage(`{}`), NextStep: "issue-refund", Evidence: []models.Evidence{{Claim: "checked"}},
		})
		if err == nil || !strings.Contains(err.Error(), "broken refused") {
			t.Fatalf("result with a refused follow-up = %v", err)
		}
		row, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var n, dn, keys int64
		s.DB.Model(&models.Event{}).Where("session_id = ?", id).Count(&n)
		s.DB.Model(&models.Delegation{}).Where("session_id = ?", id).Count(&dn)
		s.DB.Table("idempotency_keys").Where("key = ?", "res-1").Count(&keys)
		d, _ := s.GetDelegation(ctx, did)
		if row.Status != models.StatusRunning || row.StateVersion != 3 || n != 3 || dn != 1 || keys != 0 || d.Status != models.DelegationLeased {
			t.Fatalf("after a failed follow-up: %s v%d, %d events, %d delegations (%s), %d keys", row.Status, row.StateVersion, n, dn, d.Status, keys)
		}
	})
}

// TestStalledSessions: a completed result naming a step without a route
// leaves the session open and stalled: listed, counted by step and queue,
// and in the queue gauges; a route for the step makes it not stalled (and
// does not delegate it), deleting the route makes it stalled again. Other
// open sessions (no next_step) and routed ones are never stalled.
func TestStalledSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		putRoute(ctx, t, s, "issue-refund", "payments")
		stalled, _ := storetest.Delegated(ctx, t, s, "refunds")
		if out, _ := complete(ctx, t, s, "refunds", "notify-customer"); out.Status != models.StatusOpen {
			t.Fatalf("unrouted result = %s, want open", out.Status)
		}
		routed, _ := storetest.Delegated(ctx, t, s, "refunds")
		complete(ctx, t, s, "refunds", "issue-refund")
		done, _ := storetest.Delegated(ctx, t, s, "refunds")
		complete(ctx, t, s, "refunds", "")
		_ = storetest.Session(ctx, t, s, nil)

		list := func() []string {
			page, err := s.ListSessions(ctx, models.SessionQuery{Stalled: true})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range page.Sessions {
				ids = append(ids, r.ID)
			}
			return ids
		}
		if got := list(); len(got) != 1 || got[0] != stalled {
			t.Fatalf("stalled = %v, want [%s] (routed %s, done %s)", got, stalled, routed, done)
		}
		st, err := s.StalledStats(ctx)
		if err != nil || st.Sessions != 1 || st.ByStep["notify-customer"] != 1 {
			t.Fatalf("stalled stats = %+v, %v", st, err)
		}
		row, _ := s.GetSession(ctx, stalled)
		if step, err := s.StalledStep(ctx, row); err != nil || step != "notify-customer" {
			t.Fatalf("stalled step = %q, %v", step, err)
		}
		gauges, err := s.QueueGauges(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]models.QueueGauge{}
		for _, g := range gauges {
			got[g.Queue] = g
		}
		if g := got["refunds"]; g.Stalled != 1 || g.Ready != 0 || g.InFlight != 0 {
			t.Fatalf("refunds gauge = %+v", g)
		}
		if g := got["payments"]; g.Ready != 1 || g.InFlight != 0 || g.OldestReady.IsZero() || g.Stalled != 0 {
			t.Fatalf("payments gauge = %+v", g)
		}

		// A route stops the stall without delegating; deleting it restores it.
		putRoute(ctx, t, s, "notify-customer", "mail")
		if got := list(); len(got) != 0 {
			t.Fatalf("stalled after routing the step = %v", got)
		}
		if row, _ := s.GetSession(ctx, stalled); row.Status != models.StatusOpen {
			t.Fatalf("a new route changed a session: %s", row.Status)
		}
		if _, err := s.DeleteRoute(ctx, "test:controller", "", "notify-customer"); err != nil {
			t.Fatal(err)
		}
		if got := list(); len(got) != 1 {
			t.Fatalf("stalled after deleting the route = %v", got)
		}
	})
}

// TestQueueGaugesInFlightAndAge: leased delegations count as in flight,
// scheduled ones are not ready yet, and the oldest ready age is the
// available_at of the longest waiting one.
func TestQueueGaugesInFlightAndAge(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		now := start
		s.Now = func() time.Time { return now }
		storetest.Delegated(ctx, t, s, "q1")
		now = start.Add(10 * time.Second)
		storetest.Delegated(ctx, t, s, "q1")
		storetest.Delegated(ctx, t, s, "q1")
		id := storetest.Session(ctx, t, s, nil)
		if _, err := s.Delegate(ctx, id, "test:controller", "", models.DelegateInput{Queue: "q1", Step: "later",
			ExpectedVersion: storetest.Ptr(int64(1)), DelaySeconds: storetest.Ptr(3600)}); err != nil {
			t.Fatal(err)
		}
		if l, err := s.Claim(ctx, "q1", "w", "test:worker", ""); err != nil || l == nil {
			t.Fatal(l, err)
		}
		now = start.Add(time.Minute)
		gauges, err := s.QueueGauges(ctx)
		if err != nil || len(gauges) != 1 {
			t.Fatalf("gauges = %+v, %v", gauges, err)
		}
		g := gauges[0]
		if g.Queue != "q1" || g.Ready != 2 || g.InFlight != 1 || !g.OldestReady.Equal(start.Add(10*time.Second)) {
			t.Fatalf("q1 gauge = %+v", g)
		}
	})
}

// TestStalledAndGaugesScaleOnPostgres: with 100,000 sessions and as many
// finished delegations, listing and counting stalled sessions and the queue
// gauges read partial indexes only: every plan reads sessions_stalled_idx,
// none scans sessions or delegations sequentially, and the answers are
// exact.
func TestStalledAndGaugesScaleOnPostgres(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	const n = 100_000
	// Every 1,000th session is open waiting on a step: even ones on
	// "routed-step", odd ones on "lost-step" (stalled). The rest completed.
	err := s.DB.Exec(`INSERT INTO sessions (id, ticket_ref, goal, status, priority, state_version, queue, last_hash,
	created_at, updated_at, next_step)
SELECT 'ses_' || lpad(i::text, 6, '0'), 'T-' || i, 'Goal ' || i,
       CASE WHEN i % 1000 = 0 THEN 'open' ELSE 'completed' END, 3, 3,
       CASE WHEN i % 3 = 0 THEN 'billing' ELSE 'refunds' END, '',
       timestamptz '2026-11-01 00:00:00+00', timestamptz '2026-11-01 00:00:00+00' + make_interval(secs => i),
       CASE WHEN i % 2000 = 0 THEN 'routed-step' WHEN i % 1000 = 0 THEN 'lost-step' ELSE 'done-step' END
FROM generate_series(1, ?) AS i`, n).Error
	if err != nil {
		t.Fatal(err)
	}
	// One delegation per session: every 100th queued (ready), every 250th
	// leased, the rest done.
	err = s.DB.Exec(`INSERT INTO delegations (id, session_id, queue, step, status, priority, attempt, max_attempts,
	lease_seconds, available_at, created_at, updated_at)
SELECT 'dlg_' || lpad(i::text, 6, '0'), 'ses_' || lpad(i::text, 6, '0'), CASE WHEN i % 3 = 0 THEN 'billing' ELSE 'refunds' END,
       'check', CASE WHEN i % 100 = 0 THEN 'queued' WHEN i % 250 = 0 THEN 'leased' ELSE 'done' END, 3, 1, 3, 30,
       timestamptz '2026-11-01 00:00:00+00' + make_interval(secs => i),
       timestamptz '2026-11-01 00:00:00+00', timestamptz '2026-11-01 00:00:00+00'
FROM generate_series(1, ?) AS i`, n).Error
	if err != nil {
		t.Fatal(err)
	}
	putRoute(ctx, t, s, "routed-step", "mail")
	if err := s.DB.Exec(`ANALYZE sessions; ANALYZE delegations; ANALYZE routes`).Error; err != nil {
		t.Fatal(err)
	}
	s.Now = func() time.Time { return time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) }
	captured := captureSQL(t, s)

	explain := func(what string, index string) {
		t.Helper()
		if len(*captured) != 1 {
			t.Fatalf("%s ran %d queries, want 1: %v", what, len(*captured), *captured)
		}
		var plan []string
		if err := s.DB.Raw("EXPLAIN " + (*captured)[0]).Scan(&plan).Error; err != nil {
			t.Fatalf("explain %s: %v", what, err)
		}
		text := strings.Join(plan, "\n")
		usesIndex := false
		for _, ix := range strings.Split(index, "|") {
			usesIndex = usesIndex || strings.Contains(text, ix)
		}
		if strings.Contains(text, "Seq Scan on sessions") || strings.Contains(text, "Seq Scan on delegations") || !usesIndex {
			t.Fatalf("%s scans a table or not the stalled index:\n%s\n%s", what, (*captured)[0], text)
		}
		*captured = (*captured)[:0]
	}

	*captured = (*captured)[:0]
	st, err := s.StalledStats(ctx)
	if err != nil || st.Sessions != n/2000 || st.ByStep["lost-step"] != n/2000 || len(st.ByStep) != 1 {
		t.Fatalf("stalled stats = %+v, %v", st, err)
	}
	// Either partial-enough index bounds the read to the open sessions.
	explain("stalled count", "sessions_stalled_idx|sessions_status_updated_idx|sessions_waiting_step_updated_idx")

	page, err := s.ListSessions(ctx, models.SessionQuery{Stalled: true, Limit: 20})
	rows := page.Sessions
	if err != nil || len(rows) != 20 || rows[0].ID != "ses_099000" || rows[0].NextStep != "lost-step" {
		t.Fatalf("stalled list = %d rows, first %+v, %v", len(rows), rows, err)
	}
	// The list is ordered by updated_at like every listing: the planner may
	// walk the open sessions newest first instead, which reads as few rows.
	explain("stalled list", "Index Scan")

	gauges, err := s.QueueGauges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]models.QueueGauge{}
	for _, g := range gauges {
		got[g.Queue] = g
	}
	// Ready: queued (i%100==0) and available by now (i <= 86,400) → 864,
	// of which billing (i%3==0) 288. Leased: i%250==0 but not i%500==0 →
	// 200, billing (i%750==0 but not i%1500==0) 67. Stalled: i%1000==0 but
	// not i%2000==0 → 50, billing 17.
	if g := got["billing"]; g.Ready != 288 || g.InFlight != 67 || g.Stalled != 17 {
		t.Errorf("billing gauge = %+v", g)
	}
	if g := got["refunds"]; g.Ready != 576 || g.InFlight != 133 || g.Stalled != 33 ||
		!g.OldestReady.Equal(time.Date(2026, 11, 1, 0, 1, 40, 0, time.UTC)) {
		t.Errorf("refunds gauge = %+v", g)
	}
	explain("queue gauges", "sessions_stalled_idx|sessions_status_updated_idx|sessions_waiting_step_updated_idx")
}

// TestDrainRoute: the explicit action delegates open sessions waiting on a
// step by its route, oldest first, up to limit, each its own command; other
// sessions are left alone, a repeat with the same key answers the first
// result, and a step without a route is a 404.
func TestDrainRoute(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		stall := func(next string) string {
			id, _ := storetest.Delegated(ctx, t, s, "refunds")
			complete(ctx, t, s, "refunds", next)
			return id
		}
		a, b := stall("notify-customer"), stall("notify-customer")
		other := stall("file-claim")
		if _, err := s.DrainRoute(ctx, "test:controller", "", "notify-customer", models.DrainInput{Limit: storetest.Ptr(10)}); models.ErrorCode(err) != models.ENOTFOUND {
			t.Fatalf("drain without a route = %v", err)
		}
		if _, err := s.DrainRoute(ctx, "test:controller", "", "notify-customer", models.DrainInput{Limit: storetest.Ptr(0)}); models.ErrorCode(err) != models.EINVALID {
			t.Fatalf("drain limit 0 = %v", err)
		}
		putRoute(ctx, t, s, "notify-customer", "mail")

		first, err := s.DrainRoute(ctx, "test:controller", "drain-1", "notify-customer", models.DrainInput{Limit: storetest.Ptr(1)})
		if err != nil || len(first.Delegated) != 1 || first.Delegated[0].SessionID != a || !first.More {
			t.Fatalf("first drain = %+v, %v", first, err)
		}
		again, err := s.DrainRoute(ctx, "test:controller", "drain-1", "notify-customer", models.DrainInput{Limit: storetest.Ptr(1)})
		if err != nil || len(again.Delegated) != 1 || again.Delegated[0] != first.Delegated[0] {
			t.Fatalf("repeated drain = %+v, %v; first %+v", again, err, first)
		}
		second, err := s.DrainRoute(ctx, "test:controller", "", "notify-customer", models.DrainInput{Limit: storetest.Ptr(10)})
		if err != nil || len(second.Delegated) != 1 || second.Delegated[0].SessionID != b || second.More {
			t.Fatalf("second drain = %+v, %v", second, err)
		}
		for _, id := range []string{a, b} {
			row, _ := s.GetSession(ctx, id)
			evs, _ := s.ListEvents(ctx, id, row.StateVersion-1, 1)
			if row.Status != models.StatusQueued || row.Queue != "mail" || len(evs) != 1 || evs[0].Actor != "test:controller" {
				t.Fatalf("drained %s = %s on %s, last event %+v", id, row.Status, row.Queue, evs)
			}
		}
		if row, _ := s.GetSession(ctx, other); row.Status != models.StatusOpen {
			t.Fatalf("a session on another step was drained: %s", row.Status)
		}
		if l, err := s.Claim(ctx, "mail", "w", "test:worker", ""); err != nil || l == nil || l.SessionID != a {
			t.Fatalf("claim of a drained delegation = %+v, %v", l, err)
		}
	})
}

// TestAnsweredSessionStallsUnlessDelegated: an answer that leaves the
// session open with the worker's next_step does not route (only a
// completed result does): without a route the session is stalled, with one
// it waits for DrainRoute.
func TestAnsweredSessionStallsUnlessDelegated(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		id, did := storetest.Delegated(ctx, t, s, "accounts")
		l, err := s.Claim(ctx, "accounts", "w", "test:worker", "")
		if err != nil || l == nil || l.DelegationID != did {
			t.Fatal(l, err)
		}
		out, err := s.SubmitResult(ctx, did, "test:worker", "", models.ResultInput{LeaseToken: l.LeaseToken, SessionID: id, Step: l.Step,
			ResultType: models.ResultNeedsInput, NextStep: "verify-identity", Question: "Which e-mail did the customer sign up with?"})
		if err != nil || out.Status != models.StatusAwaitingInput {
			t.Fatalf("needs_input = %+v, %v", out, err)
		}
		v := out.StateVersion
		if out, err = s.ProvideInput(ctx, id, "test:controller", "", models.InputInput{ExpectedVersion: &v, Answer: "k.meyer@example.com"}); err != nil || out.Status != models.StatusOpen {
			t.Fatalf("answer = %+v, %v", out, err)
		}
		row, _ := s.GetSession(ctx, id)
		if step, err := s.StalledStep(ctx, row); err != nil || step != "verify-identity" {
			t.Fatalf("answered session stalled on %q, %v", step, err)
		}
		putRoute(ctx, t, s, "verify-identity", "accounts")
		if row, _ := s.GetSession(ctx, id); row.Status != models.StatusOpen {
			t.Fatalf("a route delegated an answered session on its own: %s", row.Status)
		}
		res, err := s.DrainRoute(ctx, "test:controller", "", "verify-identity", models.DrainInput{})
		if err != nil || len(res.Delegated) != 1 {
			t.Fatalf("drain = %+v, %v", res, err)
		}
	})
}
