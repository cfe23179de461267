package models_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// tick gives the store a clock that advances one minute per call, so that
// escalation times are distinct and ordered without sleeping.
func tick(s *models.Store) {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	n := 0
	s.Now = func() time.Time { n++; return t0.Add(time.Duration(n) * time.Minute) }
}

// escalated creates a session with the given priority and ticket, delegated to
// queue when queue is set, and escalates it; it returns the session id.
func escalated(ctx context.Context, t testing.TB, s *models.Store, prio int, ticket, queue string) string {
	t.Helper()
	id := storetest.Session(ctx, t, s, &storetest.SessionOpts{Priority: prio, TicketRef: ticket})
	v := int64(1)
	if queue != "" {
		if _, err := s.Delegate(ctx, id, "test:controller", "", models.DelegateInput{Queue: queue, Step: "triage", ExpectedVersion: &v}); err != nil {
			t.Fatalf("delegate: %v", err)
		}
		v = 2
	}
	if _, err := s.Transition(ctx, id, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "needs a human"}); err != nil {
		t.Fatalf("escalate: %v", err)
	}
	return id
}

// claim puts a session in human hands through the write path.
func claim(ctx context.Context, t testing.TB, s *models.Store, id, assignee string) {
	t.Helper()
	row, err := s.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	v := row.StateVersion
	_, err = s.Execute(ctx, models.Command{SessionID: id, Type: models.EventHumanClaimed, Actor: assignee,
		ExpectedVersion: &v, Payload: models.HumanPayload{User: assignee}})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
}

func ids(rows []models.InboxRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// inboxRowsMatchSessions checks every column of the inbox rows against the
// sessions they show: the page statement's columns are converted one by one
// (scanInbox), where a column read into the wrong field would pass any test
// that looks at ids and order only.
func inboxRowsMatchSessions(ctx context.Context, t *testing.T, s *models.Store, rows []models.InboxRow) {
	t.Helper()
	for _, r := range rows {
		ses, err := s.GetSession(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := models.InboxRow{ID: ses.ID, TicketRef: ses.TicketRef, Goal: ses.Goal, Status: ses.Status, Priority: ses.Priority,
			StateVersion: ses.StateVersion, CurrentStep: ses.CurrentStep, Queue: ses.Queue, Assignee: ses.Assignee,
			EscalatedAt: ses.EscalatedAt.Time, UpdatedAt: ses.UpdatedAt, ReasonCode: ses.ReasonCode, SLA: r.SLA}
		if !r.EscalatedAt.Equal(want.EscalatedAt.Time) || !r.UpdatedAt.Equal(want.UpdatedAt.Time) {
			t.Errorf("inbox row %s: escalated_at %v, updated_at %v; the session has %v and %v", r.ID, r.EscalatedAt, r.UpdatedAt, want.EscalatedAt, want.UpdatedAt)
		}
		r.EscalatedAt, r.UpdatedAt = want.EscalatedAt, want.UpdatedAt
		if r != want {
			t.Errorf("inbox row %+v; the session has %+v", r, want)
		}
	}
}

func TestInboxOrderFiltersCounts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		tick(s)
		// Escalated in this order; the inbox wants priority first, then the
		// longest waiting.
		p3old := escalated(ctx, t, s, 3, "T-1", "refunds")
		p1old := escalated(ctx, t, s, 1, "T-2", "billing")
		p3new := escalated(ctx, t, s, 3, "T-3", "refunds")
		p1newer := escalated(ctx, t, s, 1, "T-4", "refunds")
		mine := escalated(ctx, t, s, 2, "T-5", "billing")
		theirs := escalated(ctx, t, s, 5, "T-6", "refunds")
		storetest.Session(ctx, t, s, &storetest.SessionOpts{Priority: 1}) // open: not in the inbox
		claim(ctx, t, s, mine, "user:usr_me")
		claim(ctx, t, s, theirs, "user:usr_other")

		page, err := s.Inbox(ctx, models.InboxOpts{Me: "user:usr_me"})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{p1old, p1newer, mine, p3old, p3new, theirs}
		if got := ids(page.Rows); !slices.Equal(got, want) {
			t.Fatalf("order = %v, want %v", got, want)
		}
		if page.Next != "" {
			t.Fatalf("next = %q on the only page", page.Next)
		}
		inboxRowsMatchSessions(ctx, t, s, page.Rows)
		c := page.Counts
		if c.All != 6 || c.Total != 6 || c.Status[models.StatusEscalated] != 4 || c.Status[models.StatusHumanActive] != 2 ||
			c.Queue["refunds"] != 4 || c.Queue["billing"] != 2 || c.Priority[1] != 2 || c.Priority[3] != 2 ||
			c.Assignment[models.AssignedToMe] != 1 || c.Assignment[models.Unassigned] != 4 {
			t.Fatalf("counts = %+v", c)
		}

		cases := []struct {
			name string
			f    models.InboxFilter
			want []string
		}{
			{"queue", models.InboxFilter{Queue: "billing"}, []string{p1old, mine}},
			{"status", models.InboxFilter{Status: models.StatusHumanActive}, []string{mine, theirs}},
			{"priority", models.InboxFilter{Priority: 3}, []string{p3old, p3new}},
			{"mine", models.InboxFilter{Assignment: models.AssignedToMe}, []string{mine}},
			{"unassigned", models.InboxFilter{Assignment: models.Unassigned}, []string{p1old, p1newer, p3old, p3new}},
			{"search ticket", models.InboxFilter{Search: " T-3 "}, []string{p3new}},
			{"search id", models.InboxFilter{Search: theirs}, []string{theirs}},
			{"combined", models.InboxFilter{Queue: "refunds", Assignment: models.Unassigned}, []string{p1newer, p3old, p3new}},
		}
		for _, tc := range cases {
			page, err := s.Inbox(ctx, models.InboxOpts{InboxFilter: tc.f, Me: "user:usr_me"})
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got := ids(page.Rows); !slices.Equal(got, tc.want) {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		}

		// Faceted counts: with queue=refunds, each status count is within refunds.
		page, err = s.Inbox(ctx, models.InboxOpts{InboxFilter: models.InboxFilter{Queue: "refunds"}, Me: "user:usr_me"})
		if err != nil {
			t.Fatal(err)
		}
		c = page.Counts
		if c.Total != 4 || c.Status[models.StatusEscalated] != 3 || c.Status[models.StatusHumanActive] != 1 ||
			c.Queue["billing"] != 2 || c.AnyQueue != 6 || c.Assignment[models.AssignedToMe] != 0 {
			t.Fatalf("faceted counts = %+v", c)
		}

		// Keyset pages of two walk the same order without gaps or repeats.
		var walked []string
		after := ""
		for range 10 {
			page, err := s.Inbox(ctx, models.InboxOpts{After: after, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			walked = append(walked, ids(page.Rows)...)
			if after = page.Next; after == "" {
				break
			}
		}
		if !slices.Equal(walked, want) {
			t.Fatalf("paged = %v, want %v", walked, want)
		}

		for _, bad := range []models.InboxOpts{
			{After: "not-a-cursor"},
			{InboxFilter: models.InboxFilter{Status: models.StatusOpen}},
			{InboxFilter: models.InboxFilter{Priority: 9}},
			{InboxFilter: models.InboxFilter{Assignment: "someone"}},
		} {
			if _, err := s.Inbox(ctx, bad); models.ErrorCode(err) != models.EINVALID {
				t.Errorf("Inbox(%+v) = %v, want invalid", bad, err)
			}
		}
	})
}

// TestInboxCountsAgreeWithRows: under every combination of a search and a
// filter, the matching count is the number of rows the inbox lists, and each
// chip's count is the number of rows that clicking it lists (the option
// applied on top of the same filters and search).
func TestInboxCountsAgreeWithRows(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		tick(s)
		a := escalated(ctx, t, s, 1, "T-100", "refunds")
		b := escalated(ctx, t, s, 3, "T-101", "billing")
		c := escalated(ctx, t, s, 3, "T-102", "refunds")
		d := escalated(ctx, t, s, 2, "T-103", "")
		escalated(ctx, t, s, 5, "T-104", "shipping")
		claim(ctx, t, s, b, "user:usr_me")
		claim(ctx, t, s, c, "user:usr_other")
		// A note makes one session findable by a word nobody else has.
		for _, id := range []string{a, d} {
			row, err := s.GetSession(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			agent := models.User{ID: "usr_me", Name: "Me", Role: models.RoleAgent}
			if _, err := s.AddNote(ctx, id, agent, "", models.NoteInput{ExpectedVersion: &row.StateVersion, Text: "customer sent a chargeback"}); err != nil {
				t.Fatal(err)
			}
		}
		rows := func(f models.InboxFilter) int64 {
			t.Helper()
			p, err := s.Inbox(ctx, models.InboxOpts{InboxFilter: f, Me: "user:usr_me", Limit: models.MaxInboxLimit})
			if err != nil {
				t.Fatalf("%+v: %v", f, err)
			}
			return int64(len(p.Rows))
		}
		// Cut 0 counts in one pass (a five-session inbox); cut 2 makes
		// every filter matching more than two sessions fall back to one
		// bounded count per option: both paths must agree with the rows.
		for _, cut := range []int{0, 2} {
			s.SetInboxFacetRows(cut)
			for _, f := range []models.InboxFilter{
				{},
				{Search: "chargeback"},
				{Search: "refund"}, // storetest's default goal: every session
				{Search: "T-101"},
				{Search: "nothing-matches"},
				{Search: "refund", Queue: "refunds"},
				{Search: "chargeback", Priority: 2},
				{Search: "refund", Status: models.StatusHumanActive},
				{Search: "refund", Assignment: models.AssignedToMe},
				{Queue: "billing", Assignment: models.Unassigned},
				{Search: "refund", Reason: models.ReasonController, Priority: 3},
				// Without a search the options are counted by the
				// server (inboxPrecountedSQL): each filter alone, and
				// all of them at once.
				{Status: models.StatusHumanActive},
				{Queue: "refunds"},
				{Priority: 3},
				{Assignment: models.AssignedToMe},
				{Reason: models.ReasonController, Priority: 3},
				{Status: models.StatusEscalated, Queue: "refunds", Priority: 1, Assignment: models.Unassigned, Reason: models.ReasonController},
			} {
				page, err := s.Inbox(ctx, models.InboxOpts{InboxFilter: f, Me: "user:usr_me"})
				if err != nil {
					t.Fatal(err)
				}
				cn := page.Counts
				if cn.Total != int64(len(page.Rows)) {
					t.Errorf("%+v: matching count %d, %d rows", f, cn.Total, len(page.Rows))
				}
				if cn.All != 5 {
					t.Errorf("%+v: inbox count %d, want 5", f, cn.All)
				}
				check := func(name string, got int64, g models.InboxFilter) {
					t.Helper()
					if want := rows(g); got != want {
						t.Errorf("%+v: chip %s = %d, clicking it lists %d", f, name, got, want)
					}
				}
				g := f
				g.Status = ""
				check("any status", cn.AnyStatus, g)
				for _, st := range []models.Status{models.StatusEscalated, models.StatusHumanActive} {
					g.Status = st
					check(string(st), cn.Status[st], g)
				}
				g = f
				g.Assignment = ""
				check("anyone", cn.AnyAssignment, g)
				for _, as := range []string{models.AssignedToMe, models.Unassigned} {
					g.Assignment = as
					check(as, cn.Assignment[as], g)
				}
				g = f
				g.Queue = ""
				check("any queue", cn.AnyQueue, g)
				if qs := cn.Queues(); !slices.Equal(qs, []string{"billing", "refunds", "shipping"}) {
					t.Errorf("%+v: queues %v", f, qs)
				}
				for _, q := range cn.Queues() {
					g.Queue = q
					check("queue "+q, cn.Queue[q], g)
				}
				g = f
				g.Priority = 0
				check("any priority", cn.AnyPriority, g)
				for p := 1; p <= 5; p++ {
					g.Priority = p
					check(fmt.Sprintf("P%d", p), cn.Priority[p], g)
				}
				g = f
				g.Reason = ""
				check("any reason", cn.AnyReason, g)
				for _, r := range models.AllReasonCodes {
					g.Reason = r
					check(string(r), cn.Reason[r], g)
				}
			}
		}
	})
}

// TestInboxOrdersBySLADue: an old P3 escalation due sooner than a fresh P1
// comes first; the SLA clock of each row is reported.
func TestInboxOrdersBySLADue(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
		s.Now = func() time.Time { return now }
		old := escalated(ctx, t, s, 3, "T-old", "")
		now = now.Add(3*time.Hour + 50*time.Minute)     // P3 is due in 10 minutes
		fresh := escalated(ctx, t, s, 1, "T-fresh", "") // P1: due in 15
		page, err := s.Inbox(ctx, models.InboxOpts{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(page.Rows); !slices.Equal(got, []string{old, fresh}) {
			t.Fatalf("order = %v, want the P3 due first", got)
		}
		r := page.Rows[0]
		if !r.SLA.DueAt.Equal(now.Add(10*time.Minute)) || r.SLA.State != models.SLANearBreach {
			t.Errorf("P3 clock = %+v", r.SLA)
		}
		// The second page starts right after the first row, across priorities.
		page, err = s.Inbox(ctx, models.InboxOpts{Limit: 1})
		if err != nil || page.Next == "" {
			t.Fatalf("page 1: %v %q", err, page.Next)
		}
		page, err = s.Inbox(ctx, models.InboxOpts{Limit: 1, After: page.Next})
		if err != nil || !slices.Equal(ids(page.Rows), []string{fresh}) || page.Next != "" {
			t.Fatalf("page 2 = %v %q %v", ids(page.Rows), page.Next, err)
		}
	})
}

func TestDisplayNamesAndChildren(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		u, err := s.CreateUser(ctx, models.CreateUserInput{Email: "ana@example.com", Name: "Ana Agent", Role: models.RoleAgent, Password: "long-enough-pw"})
		if err != nil {
			t.Fatal(err)
		}
		names, err := s.DisplayNames(ctx, u.Actor(), "token:ctl", "", "user:usr_gone")
		if err != nil {
			t.Fatal(err)
		}
		if names[u.Actor()] != "Ana Agent" || names["token:ctl"] != "token:ctl" || names["user:usr_gone"] != "user:usr_gone" {
			t.Fatalf("names = %v", names)
		}
		if models.AssigneeOf(u) != u.Actor() {
			t.Fatalf("assignee of %v = %q", u, models.AssigneeOf(u))
		}
		id := storetest.Session(ctx, t, s, nil)
		kids, err := s.Children(ctx, id)
		if err != nil || len(kids) != 0 {
			t.Fatalf("children = %v, %v", kids, err)
		}
	})
}

func TestTimelineAndDiff(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		id := storetest.Session(ctx, t, s, &storetest.SessionOpts{Facts: map[string]any{"order": "1182", "total": "240 EUR"}})
		v := int64(1)
		if _, err := s.Delegate(ctx, id, "test:controller", "", models.DelegateInput{Queue: "refunds", Step: "check", ExpectedVersion: &v,
			Facts: map[string]any{"total": "250 EUR", "currency": "EUR"}}); err != nil {
			t.Fatal(err)
		}
		all, err := s.Timeline(ctx, id)
		if err != nil || len(all) != 2 || all[0].Seq != 1 || all[1].Seq != 2 {
			t.Fatalf("timeline = %v, %v", all, err)
		}
		only, err := s.Timeline(ctx, id, models.EventDelegationCreated)
		if err != nil || len(only) != 1 || only[0].Type != models.EventDelegationCreated {
			t.Fatalf("filtered timeline = %v, %v", only, err)
		}
		a, err := s.StateAt(ctx, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.StateAt(ctx, id, 2)
		if err != nil {
			t.Fatal(err)
		}
		diff, err := models.DiffStates(a, b)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]models.FieldChange{}
		for _, c := range diff {
			got[c.Path] = c
		}
		if c := got["facts.total"]; c.Kind != models.ChangeChanged || c.From != `"240 EUR"` || c.To != `"250 EUR"` {
			t.Errorf("facts.total = %+v", c)
		}
		if c := got["facts.currency"]; c.Kind != models.ChangeAdded || c.To != `"EUR"` {
			t.Errorf("facts.currency = %+v", c)
		}
		if c := got["status"]; c.Kind != models.ChangeChanged || c.From != `"open"` || c.To != `"queued"` {
			t.Errorf("status = %+v", c)
		}
		if c := got["delegation.queue"]; c.Kind != models.ChangeAdded {
			t.Errorf("delegation.queue = %+v", c)
		}
		if _, ok := got["facts.order"]; ok {
			t.Errorf("unchanged field in diff: %v", diff)
		}
		back, err := models.DiffStates(b, a)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range back {
			if c.Path == "facts.currency" && c.Kind != models.ChangeRemoved {
				t.Errorf("reverse facts.currency = %+v", c)
			}
		}
		if same, _ := models.DiffStates(b, b); len(same) != 0 {
			t.Errorf("diff of a state with itself = %v", same)
		}
	})
}

// captureSQL records the SQL of every query the store runs, with its
// arguments interpolated, so that a test can EXPLAIN exactly what the code ran.
func captureSQL(t *testing.T, s *models.Store) *[]string {
	t.Helper()
	var got []string
	name := "test:capture_" + strings.ReplaceAll(t.Name(), "/", "_")
	capture := func(db *gorm.DB) {
		got = append(got, db.Dialector.Explain(db.Statement.SQL.String(), db.Statement.Vars...))
	}
	// Find runs the query callbacks; Raw(…).Scan runs the row callbacks.
	if err := s.DB.Callback().Query().After("gorm:query").Register(name, capture); err != nil {
		t.Fatal(err)
	}
	if err := s.DB.Callback().Row().After("gorm:row").Register(name, capture); err != nil {
		t.Fatal(err)
	}
	return &got
}

// inboxMergeSort is the sort key of the merge of the inbox's priority
// branches (Inbox, inboxDueSQL).
var inboxMergeSort = regexp.MustCompile(`Sort Key: \(\(\w+\.escalated_at \+ CASE \w+\.priority`)

// TestInboxScalesOnPostgres inserts 100,000 sessions with raw multi-row SQL
// (the write path would take minutes and is tested elsewhere) and checks that
// every inbox page query is an index scan, never a sequential scan of
// sessions, and that keyset pages return exactly the expected rows. It
// asserts on plans and results, not on time.
func TestInboxScalesOnPostgres(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	const n = 100_000
	// Every other session is in the inbox; every fifth of those is claimed.
	// Priorities, queues and escalation times are spread deterministically so
	// that the expected order can be computed here.
	err := s.DB.Exec(`INSERT INTO sessions (id, ticket_ref, goal, status, priority, state_version, queue, assignee, last_hash, escalated_at, created_at, updated_at, reason_code)
SELECT 'ses_' || lpad(i::text, 6, '0'),
       'T-' || i,
       'Goal ' || i,
       CASE WHEN i % 2 = 1 THEN 'completed' WHEN i % 10 = 0 THEN 'human_active' ELSE 'escalated' END,
       1 + (i / 2) % 5,
       3,
       CASE WHEN i % 3 = 0 THEN 'billing' ELSE 'refunds' END,
       CASE WHEN i % 10 = 0 THEN 'user:usr_' || (i % 7) ELSE '' END,
       '',
       CASE WHEN i % 2 = 1 THEN NULL ELSE timestamptz '2026-11-01 00:00:00+00' + make_interval(secs => (i * 7919) % 86400) END,
       timestamptz '2026-11-01 00:00:00+00', timestamptz '2026-11-01 00:00:00+00',
       CASE WHEN i % 2 = 1 THEN '' WHEN i % 16 = 2 THEN 'leases_exhausted' ELSE 'worker' END
FROM generate_series(1, ?) AS i`, n).Error
	if err == nil {
		err = s.DB.Exec(`INSERT INTO session_states (session_id, state) SELECT id, '{}' FROM sessions ON CONFLICT DO NOTHING`).Error
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DB.Exec(`ANALYZE sessions, inbox_rows`).Error; err != nil {
		t.Fatal(err)
	}

	// The inbox order: SLA due (escalated_at + the priority's SLA), then
	// priority, escalated_at and id.
	policy := models.DefaultSLAPolicy()
	type key struct {
		due  time.Duration
		prio int
		esc  int
		id   string
		i    int
	}
	var all []key
	for i := 1; i <= n; i++ {
		if i%2 == 1 {
			continue
		}
		prio, esc := 1+(i/2)%5, (i*7919)%86400
		all = append(all, key{due: time.Duration(esc)*time.Second + policy.For(prio), prio: prio, esc: esc, id: fmt.Sprintf("ses_%06d", i), i: i})
	}
	slices.SortFunc(all, func(a, b key) int {
		switch {
		case a.due != b.due:
			return int(a.due - b.due)
		case a.prio != b.prio:
			return a.prio - b.prio
		case a.esc != b.esc:
			return a.esc - b.esc
		}
		return strings.Compare(a.id, b.id)
	})
	expect := func(keep func(k key) bool, from, limit int) []string {
		var out []string
		for _, k := range all {
			if keep(k) {
				out = append(out, k.id)
			}
		}
		return out[from:min(from+limit, len(out))]
	}

	captured := captureSQL(t, s)
	cases := []struct {
		name string
		f    models.InboxFilter
		keep func(k key) bool
	}{
		{"all", models.InboxFilter{}, func(key) bool { return true }},
		{"queue", models.InboxFilter{Queue: "billing"}, func(k key) bool { return k.i%3 == 0 }},
		{"mine", models.InboxFilter{Assignment: models.AssignedToMe}, func(k key) bool { return k.i%10 == 0 && k.i%7 == 3 }},
		{"claimed", models.InboxFilter{Status: models.StatusHumanActive}, func(k key) bool { return k.i%10 == 0 }},
		{"priority", models.InboxFilter{Priority: 4, Assignment: models.Unassigned}, func(k key) bool { return k.prio == 4 && k.i%10 != 0 }},
		{"reason", models.InboxFilter{Reason: models.ReasonLeasesExhausted}, func(k key) bool { return k.i%16 == 2 }},
	}
	for _, tc := range cases {
		after := ""
		for p := range 3 {
			*captured = (*captured)[:0]
			page, err := s.Inbox(ctx, models.InboxOpts{InboxFilter: tc.f, Me: "user:usr_3", After: after, Limit: 50})
			if err != nil {
				t.Fatalf("%s page %d: %v", tc.name, p, err)
			}
			if want := expect(tc.keep, p*50, 50); !slices.Equal(ids(page.Rows), want) {
				t.Fatalf("%s page %d = %v\nwant %v", tc.name, p, ids(page.Rows), want)
			}
			// n/2 sessions are in the inbox: the count stops past CountCap.
			if page.Counts.All != models.CountCap+1 || !models.CountMore(page.Counts.All) {
				t.Fatalf("%s: inbox count = %d, want the bound %d", tc.name, page.Counts.All, models.CountCap+1)
			}
			pageSQL := ""
			for _, q := range *captured {
				if strings.Contains(q, "ORDER BY escalated_at, id") { // not the counts
					pageSQL = q
				}
			}
			if pageSQL == "" {
				t.Fatalf("%s: page query not captured in %v", tc.name, *captured)
			}
			var plan []string
			if err := s.DB.Raw("EXPLAIN " + pageSQL).Scan(&plan).Error; err != nil {
				t.Fatalf("explain: %v", err)
			}
			text := strings.Join(plan, "\n")
			// The page reads the dense copy of the inbox sessions
			// (migration 00035), through the index led by its filter.
			if strings.Contains(text, "Seq Scan on inbox_rows") || strings.Contains(text, " on sessions") || !strings.Contains(text, "inbox_rows_") {
				t.Fatalf("%s page %d does not use an index of inbox_rows:\n%s\n%s", tc.name, p, pageSQL, text)
			}
			if idx := map[string]string{"queue": "inbox_rows_queue_idx", "mine": "inbox_rows_assignee_idx", "claimed": "inbox_rows_status_idx",
				"reason": "inbox_rows_reason_idx", "all": "inbox_rows_order_idx"}[tc.name]; idx != "" && !strings.Contains(text, idx) {
				t.Fatalf("%s page %d does not use %s:\n%s", tc.name, p, idx, text)
			}
			// Each priority's branch reads its index in order and stops at
			// the page size: no sort, no scan past the page. The one sort
			// allowed is the merge of the branches' pages in SLA due order
			// (at most five pages of rows).
			// The facet counts follow the page in the plan (from "CTE fc"
			// on): they group the counted options of inbox_counts, a table
			// bounded by the options, and may sort them.
			pagePlan := text
			if i := strings.Index(text, "CTE fc"); i >= 0 {
				pagePlan = text[:i]
			}
			sorts := strings.Count(pagePlan, "Sort  (cost=")
			merges := len(inboxMergeSort.FindAllString(pagePlan, -1))
			if sorts != merges || merges > 1 || !strings.Contains(text, "Limit") {
				t.Fatalf("%s page %d does not read the index in order:\n%s", tc.name, p, text)
			}
			if after = page.Next; after == "" {
				t.Fatalf("%s: no next page after page %d", tc.name, p)
			}
		}
	}

	// A search reads the dense copy of the inbox sessions (migration 00034)
	// through its word index: the sessions table not at all.
	*captured = (*captured)[:0]
	page, err := s.Inbox(ctx, models.InboxOpts{InboxFilter: models.InboxFilter{Search: "4242"}, Me: "user:usr_3", Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(page.Rows); !slices.Equal(got, []string{"ses_004242"}) || page.Counts.Total != 1 {
		t.Fatalf("search 4242 = %v (total %d), want [ses_004242]", got, page.Counts.Total)
	}
	var plan []string
	if err := s.DB.Raw("EXPLAIN " + (*captured)[0]).Scan(&plan).Error; err != nil {
		t.Fatal(err)
	}
	if text := strings.Join(plan, "\n"); strings.Contains(text, " on sessions") || !strings.Contains(text, "inbox_rows_search_idx") {
		t.Fatalf("the inbox search does not read inbox_rows through its index:\n%s", text)
	}

	// The page statement keeps its plan: PostgreSQL plans a prepared
	// statement for its first five executions and then, when the generic
	// plan's estimate is no worse, never again on that connection. With the
	// priority and the LIMIT as parameters the generic estimate stayed
	// above the custom plans' at this size, so every view was planned
	// again (1.0 ms of each inbox view at a million events).
	one, err := models.Open(ctx, s.URL(), models.OpenOpts{Logger: slog.New(slog.DiscardHandler), MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	// So does the page of each queue and of each reason: every filter value
	// is a statement of its own, planned for its value once (the one its
	// first view prepared). With the queue as a parameter, the empty queue
	// stayed on custom plans, or shared the other queue's statement.
	const views = 8
	for _, f := range []models.InboxFilter{{}, {Queue: "nowhere"}, {Queue: "billing"}, {Reason: models.AllReasonCodes[0]}} {
		for range views {
			if _, err := one.Inbox(ctx, models.InboxOpts{InboxFilter: f, Me: "user:usr_3", Limit: 50}); err != nil {
				t.Fatal(err)
			}
		}
		var plans struct{ Generic, Custom int64 }
		if err := one.DB.Raw(`SELECT generic_plans AS generic, custom_plans AS custom FROM pg_prepared_statements
			WHERE statement LIKE 'SELECT 0 AS kind, r.*%' ORDER BY prepare_time DESC LIMIT 1`).Scan(&plans).Error; err != nil {
			t.Fatal(err)
		}
		if plans.Generic+plans.Custom != views || plans.Generic < views-5 {
			t.Fatalf("inbox page statement (filter %+v) over %d views: %d generic plans, %d custom (want the generic plan from the sixth view on)",
				f, views, plans.Generic, plans.Custom)
		}
	}
}
