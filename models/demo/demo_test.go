package demo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/demo"
	"github.com/taskpilots/handoff/models/storetest"
)

func TestSeed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		fixed := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
		s.Now = func() time.Time { return fixed }

		res, err := demo.Seed(ctx, s)
		if err != nil {
			t.Fatalf("seed: %v", err)
		}
		n := res.Sessions
		if n < 24 {
			t.Fatalf("seeded %d sessions, want at least 24", n)
		}
		if got := s.Now(); !got.Equal(fixed) {
			t.Fatalf("seed left the clock at %v", got)
		}
		counts, err := s.CountByStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, st := range models.AllStatuses {
			if counts[st] == 0 {
				t.Errorf("no demo session is %s (counts %v)", st, counts)
			}
			total += counts[st]
		}
		if total != int64(n) {
			t.Fatalf("%d sessions in the database, Seed reported %d", total, n)
		}
		rep, err := s.Verify(ctx, models.VerifyOpts{})
		if err != nil || !rep.OK() {
			t.Fatalf("verify = %+v, %v", rep.Problems, err)
		}

		// The history is spread over the past days, never in the future.
		var first, last models.UTCTime
		if err := s.DB.Raw(`SELECT min(created_at) FROM events`).Scan(&first).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB.Raw(`SELECT max(created_at) FROM events`).Scan(&last).Error; err != nil {
			t.Fatal(err)
		}
		if last.After(fixed) || fixed.Sub(first.Time) < 5*24*time.Hour {
			t.Fatalf("events run from %v to %v, seeded at %v", first, last, fixed)
		}

		checkStories(ctx, t, s)
		checkSLAMix(ctx, t, s)
		checkReviews(ctx, t, s, fixed)

		// The demo users were created with random passwords, returned once,
		// which log them in; no two databases share them.
		checkAccounts(ctx, t, s, res.Accounts)

		// A second seed finds sessions and creates nothing.
		before, _ := s.CountByStatus(ctx)
		if again, err := demo.Seed(ctx, s); err != nil || again.Sessions != 0 || len(again.Accounts) != 0 {
			t.Fatalf("second seed = %+v, %v", again, err)
		}
		after, _ := s.CountByStatus(ctx)
		if len(after) != len(before) {
			t.Fatalf("second seed changed counts: %v → %v", before, after)
		}
		for st, c := range before {
			if after[st] != c {
				t.Fatalf("second seed changed counts: %v → %v", before, after)
			}
		}
	})
}

// checkAccounts: the demo users are returned with distinct random passwords
// that log them in with their roles.
func checkAccounts(ctx context.Context, t *testing.T, s *models.Store, accounts []demo.Account) {
	t.Helper()
	if len(accounts) != 2 || accounts[0].Email != demo.AgentEmail || accounts[1].Email != demo.ReviewerEmail {
		t.Fatalf("demo accounts = %+v", accounts)
	}
	if accounts[0].Password == accounts[1].Password {
		t.Fatalf("the demo users share a password")
	}
	for _, a := range accounts {
		if len(a.Password) < 20 {
			t.Errorf("%s has a short password %q", a.Email, a.Password)
		}
		u, err := s.Authenticate(ctx, a.Email, a.Password)
		if err != nil || u.Role != a.Role {
			t.Fatalf("log in as %s: %+v, %v", a.Email, u, err)
		}
	}
}

// TestSeedPasswordsDiffer: two demo databases never share a demo password.
func TestSeedPasswordsDiffer(t *testing.T) {
	var seen []demo.Account
	for i := 0; i < 2; i++ {
		s := storetest.New(t, models.SQLite)
		res, err := demo.Seed(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, res.Accounts...)
	}
	if len(seen) != 4 {
		t.Fatalf("accounts %+v", seen)
	}
	pw := map[string]bool{}
	for _, a := range seen {
		if pw[a.Password] {
			t.Fatalf("password %q given twice", a.Password)
		}
		pw[a.Password] = true
	}
}

// checkStories looks at the stories the product's demo must tell.
func checkStories(ctx context.Context, t *testing.T, s *models.Store) {
	t.Helper()
	byRef := map[string]models.State{}
	page, err := s.ListSessions(ctx, models.SessionQuery{Limit: models.MaxSessionsLimit})
	if err != nil {
		t.Fatal(err)
	}
	rows := page.Sessions
	refs := map[string]bool{}
	for _, r := range rows {
		full, err := s.GetSession(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		st, err := full.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if st.ParentID == "" {
			byRef[st.TicketRef] = st
		}
		refs[st.TicketRef] = true
		if st.Priority < 1 || st.Priority > 5 {
			t.Errorf("%s has priority %d", st.TicketRef, st.Priority)
		}
	}
	if len(refs) < 20 {
		t.Errorf("only %d distinct tickets", len(refs))
	}

	// The escalated refund above the limit carries a full package.
	esc := byRef["T-1182"]
	if e := esc.Escalation; esc.Status != models.StatusEscalated || e == nil || len(e.Evidence) < 2 || e.Evidence[0].Source == "" ||
		len(e.Risks) == 0 || e.RecommendedNext == "" || e.Uncertainty == nil || e.Question == "" {
		t.Errorf("T-1182 escalation package = %+v (status %s)", esc.Escalation, esc.Status)
	}

	// The crashed worker's delegation was rescued and completed on attempt 2.
	crash := byRef["T-1190"]
	if crash.Status != models.StatusCompleted || len(crash.CompletedSteps) != 1 || crash.CompletedSteps[0].Attempt != 2 {
		t.Errorf("T-1190 = %s %+v", crash.Status, crash.CompletedSteps)
	}
	evs, err := s.ListEvents(ctx, crash.SessionID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	expired := false
	for _, e := range evs {
		expired = expired || (e.Type == models.EventDelegationExpired && e.Actor == models.RescuerActor)
	}
	if !expired {
		t.Errorf("T-1190 has no lease_expired event by the rescuer")
	}

	// A human holds one, the demo agent.
	agent := byRef["T-1224"]
	if agent.Status != models.StatusHumanActive || agent.Assignee == "" {
		t.Errorf("T-1224 = %s, assignee %q", agent.Status, agent.Assignee)
	}

	// The fan-out parent waits for children that name it.
	parent := byRef["T-1250"]
	if parent.Status != models.StatusWaitingChildren || parent.Join == nil || len(parent.Join.Children) != 3 {
		t.Fatalf("T-1250 = %s %+v", parent.Status, parent.Join)
	}
	for _, id := range parent.Join.Children {
		c, err := s.GetSession(ctx, id)
		if err != nil || c.ParentID == nil || *c.ParentID != parent.SessionID {
			t.Errorf("child %s = %+v, %v", id, c, err)
		}
	}

	// T-1175 flowed through routes: the controller delegated the first
	// step, system:router the next two, and it completed.
	flow := byRef["T-1175"]
	var steps []string
	for _, c := range flow.CompletedSteps {
		steps = append(steps, c.Step)
	}
	if flow.Status != models.StatusCompleted || strings.Join(steps, ",") != "check-eligibility,issue-refund,notify-customer" {
		t.Errorf("T-1175 = %s after %v", flow.Status, steps)
	}
	fevs, err := s.ListEvents(ctx, flow.SessionID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	routedBy := 0
	for _, e := range fevs {
		if e.Type == models.EventDelegationCreated && e.Actor == models.RouterActor {
			routedBy++
		}
	}
	if routedBy != 2 {
		t.Errorf("T-1175 has %d delegations by %s, want 2", routedBy, models.RouterActor)
	}
	for st := range demo.Routes {
		if _, err := s.GetRoute(ctx, st); err != nil {
			t.Errorf("demo route %s: %v", st, err)
		}
	}

	// The deliberately unrouted step leaves T-1247 stalled.
	stalled, err := s.ListSessions(ctx, models.SessionQuery{Stalled: true})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range stalled.Sessions {
		found = found || r.TicketRef == "T-1247"
	}
	if lost := byRef["T-1247"]; !found || lost.Status != models.StatusOpen || lost.NextStep != demo.UnroutedStep {
		t.Errorf("T-1247 = %s next %q, in the stalled list: %v", lost.Status, lost.NextStep, found)
	}

	// The running delegation's lease outlives the seed for a while.
	running := byRef["T-1236"]
	if running.Status != models.StatusRunning || running.Delegation == nil {
		t.Fatalf("T-1236 = %s", running.Status)
	}
	d, err := s.GetDelegation(ctx, running.Delegation.ID)
	if err != nil || !d.LeaseExpiresAt.Valid || !d.LeaseExpiresAt.Time.After(s.Now()) {
		t.Errorf("T-1236 delegation = %+v, %v", d, err)
	}
}

// checkSLAMix: the open escalations stand against their SLA as a real team's
// would at the time of the seed: most within it, a couple near breach, one
// breached.
func checkSLAMix(ctx context.Context, t *testing.T, s *models.Store) {
	t.Helper()
	st, err := s.SLAStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Breached != 1 || st.NearBreach != 2 || st.OK != 6 || st.Open != 9 {
		t.Errorf("SLA mix = %+v, want 6 within, 2 near breach, 1 breached", st)
	}
	// The inbox agrees, row by row.
	page, err := s.Inbox(ctx, models.InboxOpts{})
	if err != nil {
		t.Fatal(err)
	}
	byState := map[models.SLAState][]string{}
	for _, r := range page.Rows {
		byState[r.SLA.State] = append(byState[r.SLA.State], r.TicketRef)
	}
	if got := byState[models.SLABreached]; len(got) != 1 || got[0] != "T-1220" {
		t.Errorf("breached in the inbox: %v", got)
	}
	if got := byState[models.SLANearBreach]; len(got) != 2 {
		t.Errorf("near breach in the inbox: %v", got)
	}
}

// checkReviews: the demo reviewer's scores make the review statistics
// non-empty, and decided escalations are left in the queue to review.
func checkReviews(ctx context.Context, t *testing.T, s *models.Store, now time.Time) {
	t.Helper()
	st, err := s.ReviewStatsFor(ctx, models.ReviewStatsOpts{From: now.Add(-30 * 24 * time.Hour), To: now.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if st.Overall.Scores < 3 || len(st.Overall.Means) != len(models.Rubric) || len(st.ByQueue) == 0 || len(st.ByWeek) == 0 {
		t.Errorf("review statistics = %+v", st)
	}
	var open int64
	if err := s.DB.Raw(`SELECT count(*) FROM review_items WHERE scored < needed`).Scan(&open).Error; err != nil {
		t.Fatal(err)
	}
	if open < 2 {
		t.Errorf("%d review items left to score, want the later decisions", open)
	}
}
