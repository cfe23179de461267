package models_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func summaryIDs(rows []models.SessionSummary) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// listAll follows next_cursor to the end and fails on a repeated session.
func listAll(t *testing.T, s *models.Store, q models.SessionQuery) []string {
	t.Helper()
	var all []string
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("paging does not end")
		}
		page, err := s.ListSessions(context.Background(), q)
		if err != nil {
			t.Fatalf("list %+v: %v", q, err)
		}
		if q.Limit > 0 && len(page.Sessions) > q.Limit {
			t.Fatalf("page of %d rows, limit %d", len(page.Sessions), q.Limit)
		}
		for _, r := range page.Sessions {
			if seen[r.ID] {
				t.Fatalf("%s listed twice (query %+v)", r.ID, q)
			}
			seen[r.ID] = true
			all = append(all, r.ID)
		}
		if page.NextCursor == "" {
			return all
		}
		if len(page.Sessions) == 0 {
			t.Fatal("empty page with a next cursor")
		}
		q.Cursor = page.NextCursor
	}
}

// searchFixture is a small world of sessions written through the write path,
// with a clock that moves one minute per write.
type searchFixture struct {
	refund, blender, parent, child1, child2, noted string
	// order is every session id, most recently updated first.
	order []string
	// midway is a time between the writes, for updated_after.
	midway time.Time
}

func newSearchFixture(ctx context.Context, t *testing.T, s *models.Store) searchFixture {
	t.Helper()
	tick(s)
	var f searchFixture
	f.refund = storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-1182", Goal: "Refund order 1182 if eligible"})
	f.blender, _ = storetest.Delegated(ctx, t, s, "shipping")
	// Delegated's goal is the default one; give the blender its own words
	// through a fresh session instead.
	f.blender = storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-2001", Goal: "Replace the damaged blender"})
	v := int64(1)
	if _, err := s.Delegate(ctx, f.blender, "test:controller", "", models.DelegateInput{Queue: "shipping", Step: "ship", ExpectedVersion: &v}); err != nil {
		t.Fatal(err)
	}
	f.midway = s.Now()
	f.parent = storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-3000", Goal: "Audit the ledger"})
	out, err := s.SpawnChildren(ctx, f.parent, "test:controller", "", models.SpawnInput{
		ExpectedVersion: &v, Join: models.JoinInput{Policy: models.JoinAll},
		Children: []models.ChildInput{
			{Goal: "Check the invoices", Queue: "accounts", Step: "invoices"},
			{Goal: "Check the payments", Queue: "accounts", Step: "payments"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var spawned models.ChildrenSpawned
	if err := out.DecodeData(&spawned); err != nil {
		t.Fatal(err)
	}
	f.child1, f.child2 = spawned.Children[0].SessionID, spawned.Children[1].SessionID
	// A note written after creation must be found by its words.
	f.noted = escalated(ctx, t, s, 2, "T-4000", "")
	agent := mustUser(t, s, "agent-"+strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))+"@example.com", models.RoleAgent)
	if _, err := s.AddNote(ctx, f.noted, agent, "", models.NoteInput{ExpectedVersion: storetest.Ptr(int64(2)), Text: "Customer phoned about a chargeback; wants a callback."}); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListSessions(ctx, models.SessionQuery{Limit: models.MaxSessionsLimit})
	if err != nil {
		t.Fatal(err)
	}
	f.order = summaryIDs(page.Sessions)
	return f
}

func TestListSessionsFiltersAndSearch(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		f := newSearchFixture(ctx, t, s)
		// Newest updated first: the noted session was written last; the
		// refund session was created first and never written since.
		if len(f.order) != 7 || f.order[0] != f.noted || f.order[len(f.order)-1] != f.refund {
			t.Fatalf("order %v", f.order)
		}
		// The delegated session made by Delegated is the one with the default goal.
		var defaultGoal string
		for _, id := range f.order {
			if !slices.Contains([]string{f.refund, f.blender, f.parent, f.child1, f.child2, f.noted}, id) {
				defaultGoal = id
			}
		}
		keep := func(ids ...string) []string {
			var out []string
			for _, id := range f.order {
				if slices.Contains(ids, id) {
					out = append(out, id)
				}
			}
			return out
		}
		cases := []struct {
			name string
			q    models.SessionQuery
			want []string
		}{
			{"all", models.SessionQuery{}, f.order},
			{"one status", models.SessionQuery{Statuses: []models.Status{models.StatusOpen}}, keep(f.refund)},
			{"two statuses", models.SessionQuery{Statuses: []models.Status{models.StatusQueued, models.StatusEscalated}}, keep(f.blender, defaultGoal, f.child1, f.child2, f.noted)},
			{"repeated status", models.SessionQuery{Statuses: []models.Status{models.StatusEscalated, models.StatusEscalated}}, keep(f.noted)},
			{"queue", models.SessionQuery{Queue: "accounts"}, keep(f.child1, f.child2)},
			{"queue and status", models.SessionQuery{Queue: "shipping", Statuses: []models.Status{models.StatusQueued, models.StatusOpen}}, keep(f.blender, defaultGoal)},
			{"ticket", models.SessionQuery{TicketRef: "T-2001"}, keep(f.blender)},
			{"parent", models.SessionQuery{ParentID: f.parent}, keep(f.child1, f.child2)},
			{"updated after", models.SessionQuery{UpdatedAfter: f.midway}, keep(f.parent, f.child1, f.child2, f.noted)},
			{"goal word", models.SessionQuery{Q: "blender"}, keep(f.blender)},
			{"goal word, any case", models.SessionQuery{Q: "REFUND"}, keep(f.refund, defaultGoal, f.noted)},
			{"goal words in any order", models.SessionQuery{Q: "blender replace"}, keep(f.blender)},
			{"ticket as typed", models.SessionQuery{Q: "T-1182"}, keep(f.refund)},
			{"ticket number", models.SessionQuery{Q: "2001"}, keep(f.blender)},
			{"note word", models.SessionQuery{Q: "chargeback"}, keep(f.noted)},
			{"note words", models.SessionQuery{Q: "callback customer"}, keep(f.noted)},
			{"phrase in order", models.SessionQuery{Q: "damaged-blender"}, keep(f.blender)},
			{"phrase out of order", models.SessionQuery{Q: "blender-damaged"}, nil},
			{"part of a word", models.SessionQuery{Q: "blend"}, nil},
			{"word and filter", models.SessionQuery{Q: "check", ParentID: f.parent, Statuses: []models.Status{models.StatusQueued}}, keep(f.child1, f.child2)},
			{"word no session has", models.SessionQuery{Q: "refund zebra"}, nil},
			{"a note's author is not searched", models.SessionQuery{Q: "user"}, nil},
		}
		for _, tc := range cases {
			got := listAll(t, s, tc.q)
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s: got %v\nwant %v", tc.name, got, tc.want)
			}
			// The same in pages of two.
			tc.q.Limit = 2
			if got := listAll(t, s, tc.q); !slices.Equal(got, tc.want) {
				t.Errorf("%s in pages of 2: got %v\nwant %v", tc.name, got, tc.want)
			}
		}

		// The listed columns.
		page, err := s.ListSessions(ctx, models.SessionQuery{Q: "blender"})
		if err != nil {
			t.Fatal(err)
		}
		r := page.Sessions[0]
		if r.TicketRef != "T-2001" || r.Goal != "Replace the damaged blender" || r.Status != models.StatusQueued ||
			r.StateVersion != 2 || r.Queue != "shipping" || r.CurrentStep != "ship" || r.Priority != models.DefaultPriority || r.UpdatedAt.IsZero() {
			t.Errorf("row %+v", r)
		}
		if page.NextCursor != "" {
			t.Errorf("single page has a next cursor")
		}
	})
}

// TestListSessionsPaging pages through more sessions than a page, with
// several statuses (the merged branches) and with updated_at ties (a frozen
// clock), and checks that nothing is missed or repeated, and that a session
// written while a reader pages moves to the front without being repeated.
func TestListSessionsPaging(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		frozen := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
		s.Now = func() time.Time { return frozen }
		var open, queued []string
		for i := range 23 {
			id := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: fmt.Sprintf("T-%d", i), Goal: "Refund order"})
			if i%3 == 0 {
				v := int64(1)
				if _, err := s.Delegate(ctx, id, "test:controller", "", models.DelegateInput{Queue: "refunds", Step: "check", ExpectedVersion: &v}); err != nil {
					t.Fatal(err)
				}
				queued = append(queued, id)
			} else {
				open = append(open, id)
			}
		}
		// Every updated_at is equal: the order is by id alone.
		desc := func(ids []string) []string {
			out := slices.Clone(ids)
			slices.Sort(out)
			slices.Reverse(out)
			return out
		}
		for _, limit := range []int{1, 4, 7, 50} {
			if got, want := listAll(t, s, models.SessionQuery{Limit: limit}), desc(append(slices.Clone(open), queued...)); !slices.Equal(got, want) {
				t.Fatalf("limit %d: got %v\nwant %v", limit, got, want)
			}
			q := models.SessionQuery{Limit: limit, Statuses: []models.Status{models.StatusQueued, models.StatusOpen}, Q: "refund order"}
			if got, want := listAll(t, s, q), desc(append(slices.Clone(open), queued...)); !slices.Equal(got, want) {
				t.Fatalf("two statuses, limit %d: got %v\nwant %v", limit, got, want)
			}
		}

		// A session written between two pages moves to the front: the
		// reader does not see it again, and sees every other session.
		s.Now = func() time.Time { return frozen.Add(time.Minute) }
		first, err := s.ListSessions(ctx, models.SessionQuery{Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		moved := first.Sessions[0].ID
		v := int64(1)
		if slices.Contains(queued, moved) {
			v = 2
		}
		if _, err := s.Transition(ctx, moved, models.EventSessionPaused, "test:controller", "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		rest := listAll(t, s, models.SessionQuery{Limit: 5, Cursor: first.NextCursor})
		all := append(summaryIDs(first.Sessions), rest...)
		if len(all) != 23 || slices.Contains(rest, moved) {
			t.Fatalf("%d sessions seen across the write, moved one repeated: %v", len(all), slices.Contains(rest, moved))
		}
		if top, _ := s.ListSessions(ctx, models.SessionQuery{Limit: 1}); top.Sessions[0].ID != moved {
			t.Fatalf("the written session is not first: %v", summaryIDs(top.Sessions))
		}
	})
}

func TestListSessionsRejectsBadQueries(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		storetest.Session(ctx, t, s, nil)
		for _, tc := range []struct {
			q     models.SessionQuery
			field string
		}{
			{models.SessionQuery{Limit: models.MaxSessionsLimit + 1}, "limit"},
			{models.SessionQuery{Limit: -1}, "limit"},
			{models.SessionQuery{Statuses: []models.Status{"open", "bogus"}}, "status"},
			{models.SessionQuery{Cursor: "not-a-cursor"}, "cursor"},
			{models.SessionQuery{Cursor: "e30"}, "cursor"}, // {} decodes but names no position
			{models.SessionQuery{Q: "!!! ---"}, "q"},
			{models.SessionQuery{Q: strings.Repeat("word ", 41)}, "q"},
			{models.SessionQuery{Q: strings.Repeat("w ", 17)}, "q"},
			{models.SessionQuery{Queue: "no spaces allowed"}, "queue"},
			{models.SessionQuery{TicketRef: strings.Repeat("t", models.MaxTicketRef+1)}, "ticket_ref"},
		} {
			_, err := s.ListSessions(ctx, tc.q)
			if models.ErrorCode(err) != models.EINVALID || !strings.Contains(err.Error(), tc.field+":") {
				t.Errorf("%+v: %v, want a validation error naming %s", tc.q, err, tc.field)
			}
		}
		// Every problem at once.
		_, err := s.ListSessions(ctx, models.SessionQuery{Limit: 1000, Statuses: []models.Status{"nope"}, Cursor: "x"})
		for _, f := range []string{"limit:", "status:", "cursor:"} {
			if !strings.Contains(fmt.Sprint(err), f) {
				t.Errorf("%v does not name %s", err, f)
			}
		}
	})
}

// TestInboxSearchUsesWordMatch checks that the console inbox's search box
// finds sessions by words of goal, ticket and notes with the same predicate
// as ListSessions, and still by a pasted session id.
func TestInboxSearchUsesWordMatch(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		f := newSearchFixture(ctx, t, s)
		other := escalated(ctx, t, s, 3, "T-5000", "")
		for _, tc := range []struct {
			search string
			want   []string
		}{
			{"chargeback", []string{f.noted}},
			{"T-4000", []string{f.noted}},
			{"4000", []string{f.noted}},
			{"refund eligible", []string{f.noted, other}}, // storetest's default goal
			{f.noted, []string{f.noted}},
			{"blender", nil}, // not in the inbox
		} {
			page, err := s.Inbox(ctx, models.InboxOpts{InboxFilter: models.InboxFilter{Search: tc.search}})
			if err != nil {
				t.Fatal(err)
			}
			got := ids(page.Rows)
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("inbox search %q = %v, want %v", tc.search, got, want)
			}
			// The listing finds the same sessions among those in human hands.
			if tc.search == f.noted {
				continue
			}
			lp, err := s.ListSessions(ctx, models.SessionQuery{Q: tc.search, Statuses: []models.Status{models.StatusEscalated, models.StatusHumanActive}})
			if err != nil {
				t.Fatal(err)
			}
			lg := summaryIDs(lp.Sessions)
			slices.Sort(lg)
			if !slices.Equal(lg, want) {
				t.Errorf("listing q=%q = %v, want %v", tc.search, lg, want)
			}
		}
	})
}

// bulkSessions fills the sessions table of a private PostgreSQL schema with n
// rows in one INSERT … SELECT generate_series, then VACUUM ANALYZEs. The
// history grows with n; the backlogs the console lists (in human hands,
// waiting on input, stalled) keep about the same size at any n, as they do
// in a working deployment, so that a query whose cost follows the history
// rather than the backlog shows. With k = n/8000, the data is spread
// deterministically:
//
//	status      i%k = 2: escalated, or human_active (assignee "user:usr_" ||
//	            i%7) one in three: about 8,000 in human hands;
//	            i%k = 3 and i/k even: awaiting_input (about 4,000);
//	            i%k = 4 and i/k even: open on "triage", a step without a
//	            route: stalled (about 4,000);
//	            otherwise by i%40: 5% each open and queued, 10% running,
//	            the rest completed
//	priority    1 + (i/k) % 5
//	queue       refunds, shipping, accounts, billing by (i/7) % 4; "legal" 1 in 5,000
//	reason_code one of the seven codes on the sessions in human hands
//	escalated_at, input_requested_at  a permutation of n seconds from 2026-01-01
//	ticket_ref  T-(i/3): three sessions per ticket
//	parent_id   every tenth session is the child of session i/10
//	goal        one of five phrases and a number; "chargeback" 1 in 1,000
//	notes       "customer phoned about a callback" 1 in 500
//	updated_at  a permutation of n seconds from 2026-01-01, unrelated to id
//
// Speed: the secondary indexes are dropped before the insert and built
// afterwards (a sorted build is much faster than row-by-row upkeep), the GIN
// index on one connection while the B-trees build on another.
func bulkSessions(t *testing.T, s *models.Store, n int) {
	t.Helper()
	var defs []string
	if err := s.DB.Raw(`SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'sessions'
AND indexname <> 'sessions_pkey' ORDER BY indexname`).Scan(&defs).Error; err != nil {
		t.Fatal(err)
	}
	var names []string
	if err := s.DB.Raw(`SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'sessions'
AND indexname <> 'sessions_pkey' ORDER BY indexname`).Scan(&names).Error; err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if err := s.DB.Exec(`DROP INDEX ` + name).Error; err != nil {
			t.Fatal(err)
		}
	}
	k := max(n/8000, 5)
	// The insert skips triggers (below), among them the one that stores
	// the search document (migration 00033): the outer SELECT computes it
	// with the model's expression.
	insert := fmt.Sprintf(`INSERT INTO sessions (id, parent_id, ticket_ref, goal, status, priority, state_version, current_step, queue, last_hash, search_notes,
       next_step, assignee, reason_code, escalated_at, input_requested_at, created_at, updated_at, search_doc)
SELECT g.*, %[3]s FROM (
SELECT 'ses_' || lpad(i::text, 8, '0'),
       CASE WHEN i %% 10 = 0 THEN 'ses_' || lpad((i / 10)::text, 8, '0') END,
       'T-' || (i / 3) AS ticket_ref,
       (ARRAY['Refund order', 'Replace the blender', 'Check the invoice', 'Ship the parcel', 'Close the account'])[i %% 5 + 1]
         || ' ' || (i %% 997) || CASE WHEN i %% 1000 = 0 THEN ' after a chargeback' ELSE '' END AS goal,
       CASE WHEN i %% %[1]d = 2 AND (i / %[1]d) %% 3 = 0 THEN 'human_active'
            WHEN i %% %[1]d = 2 THEN 'escalated'
            WHEN i %% %[1]d = 3 AND (i / %[1]d) %% 2 = 0 THEN 'awaiting_input'
            WHEN i %% %[1]d = 4 AND (i / %[1]d) %% 2 = 0 THEN 'open'
            ELSE CASE i %% 40 WHEN 0 THEN 'open' WHEN 20 THEN 'open' WHEN 1 THEN 'queued' WHEN 21 THEN 'queued'
              WHEN 2 THEN 'running' WHEN 22 THEN 'running' WHEN 3 THEN 'running' WHEN 23 THEN 'running' ELSE 'completed' END END,
       1 + (i / %[1]d) %% 5, 1, 'step',
       CASE WHEN i %% 5000 = 0 THEN 'legal' ELSE (ARRAY['refunds', 'shipping', 'accounts', 'billing'])[(i / 7) %% 4 + 1] END,
       '',
       CASE WHEN i %% 500 = 0 THEN 'customer phoned about a callback' ELSE '' END AS search_notes,
       CASE WHEN i %% %[1]d = 4 AND (i / %[1]d) %% 2 = 0 THEN 'triage' ELSE '' END,
       CASE WHEN i %% %[1]d = 2 AND (i / %[1]d) %% 3 = 0 THEN 'user:usr_' || (i %% 7) ELSE '' END,
       CASE WHEN i %% %[1]d = 2 THEN (ARRAY['worker', 'permanent_failure', 'retries_exhausted', 'leases_exhausted', 'controller', 'join_conflict', 'join_timeout'])[(i / 3) %% 7 + 1] ELSE '' END,
       CASE WHEN i %% %[1]d = 2 THEN timestamptz '2026-01-01 00:00:00+00' + ((i::bigint * 7919) %% %[2]d) * interval '1 second' END,
       CASE WHEN i %% %[1]d = 3 AND (i / %[1]d) %% 2 = 0 THEN timestamptz '2026-01-01 00:00:00+00' + ((i::bigint * 7919) %% %[2]d) * interval '1 second' END,
       timestamptz '2026-01-01 00:00:00+00',
       timestamptz '2026-01-01 00:00:00+00' + ((i::bigint * 7919) %% %[2]d) * interval '1 second'
FROM generate_series(1, %[2]d) AS i) AS g`, k, n, models.SearchDocumentSQL)
	began := time.Now()
	err := s.DB.Transaction(func(tx *gorm.DB) error {
		// The parent ids exist by construction: skip the foreign key
		// trigger where the test role may.
		if err := tx.Exec(`SET LOCAL session_replication_role = replica`).Error; err != nil {
			return err
		}
		return tx.Exec(insert).Error
	})
	if err != nil {
		t.Logf("bulk insert without the foreign key trigger failed (%v); inserting with it", err)
		if err := s.DB.Exec(insert).Error; err != nil {
			t.Fatalf("bulk sessions: %v", err)
		}
	}
	t.Logf("insert: %v", time.Since(began).Round(time.Millisecond))
	build := func(defs []string) error {
		for _, def := range defs {
			began := time.Now()
			err := s.DB.Transaction(func(tx *gorm.DB) error {
				// Enough memory for the GIN build to sort its entries at once.
				if err := tx.Exec(`SET LOCAL maintenance_work_mem = '256MB'`).Error; err != nil {
					return err
				}
				return tx.Exec(def).Error
			})
			if err != nil {
				return fmt.Errorf("%s: %w", def, err)
			}
			t.Logf("%v: %.60s…", time.Since(began).Round(time.Millisecond), def)
		}
		return nil
	}
	gin := slices.IndexFunc(defs, func(d string) bool { return strings.Contains(d, "USING gin") })
	ginDone := make(chan error, 1)
	go func() { ginDone <- build(defs[gin : gin+1]) }()
	err = build(slices.Delete(slices.Clone(defs), gin, gin+1))
	if gerr := <-ginDone; gerr != nil {
		err = gerr
	}
	if err != nil {
		t.Fatal(err)
	}
	// The insert without triggers left the inbox's maintained counts and
	// the count of the sessions waiting on input empty: rebuild them, as
	// migrate up would.
	if _, err := s.RepairInboxCounts(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RepairInboxRows(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RepairWaitingCounts(context.Background()); err != nil {
		t.Fatal(err)
	}
	// VACUUM as autovacuum would after a bulk load: it sets the visibility
	// map, without which no index-only scan is possible.
	if err := s.DB.Exec(`VACUUM ANALYZE sessions, inbox_counts, inbox_rows, waiting_counts`).Error; err != nil {
		t.Fatal(err)
	}
}

// TestListSessionsPlansAtScale fills one PostgreSQL schema with a million
// sessions and checks, for every filter of ListSessions, on the first page
// and on a page after a cursor, that the page query reads an index and never
// scans sessions sequentially. It runs the real ListSessions and EXPLAINs the
// SQL it ran; it asserts on plans and results, never on time (the times are
// logged for the record).
func TestListSessionsPlansAtScale(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	// About 30 s of CPU to build at a million rows (most of it the GIN
	// index); -short builds a tenth for a quick local run.
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	start := time.Now()
	bulkSessions(t, s, n)
	t.Logf("inserted and indexed %d sessions in %v", n, time.Since(start).Round(time.Millisecond))

	captured := captureSQL(t, s)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		q    models.SessionQuery
		// check, if set, is true for every row the query may return.
		check func(r models.SessionSummary) bool
	}{
		{"newest first", models.SessionQuery{}, nil},
		{"status common", models.SessionQuery{Statuses: []models.Status{models.StatusCompleted}}, func(r models.SessionSummary) bool { return r.Status == models.StatusCompleted }},
		{"status rare", models.SessionQuery{Statuses: []models.Status{models.StatusOpen}}, func(r models.SessionSummary) bool { return r.Status == models.StatusOpen }},
		{"statuses", models.SessionQuery{Statuses: []models.Status{models.StatusEscalated, models.StatusOpen, models.StatusCompleted}}, func(r models.SessionSummary) bool {
			return r.Status != models.StatusQueued && r.Status != models.StatusRunning
		}},
		{"queue common", models.SessionQuery{Queue: "refunds"}, func(r models.SessionSummary) bool { return r.Queue == "refunds" }},
		{"queue rare", models.SessionQuery{Queue: "legal"}, func(r models.SessionSummary) bool { return r.Queue == "legal" }},
		{"ticket_ref", models.SessionQuery{TicketRef: "T-4242"}, func(r models.SessionSummary) bool { return r.TicketRef == "T-4242" }},
		{"parent_id", models.SessionQuery{ParentID: "ses_00004242"}, func(r models.SessionSummary) bool { return r.ParentID != nil && *r.ParentID == "ses_00004242" }},
		{"parent_id of many", models.SessionQuery{ParentID: "ses_00000042"}, nil},
		{"updated_after recent", models.SessionQuery{UpdatedAfter: base.Add(time.Duration(n-500) * time.Second)}, func(r models.SessionSummary) bool {
			return r.UpdatedAt.After(base.Add(time.Duration(n-500) * time.Second))
		}},
		{"updated_after old", models.SessionQuery{UpdatedAfter: base.Add(time.Hour)}, nil},
		{"q rare goal word", models.SessionQuery{Q: "chargeback"}, func(r models.SessionSummary) bool { return strings.Contains(r.Goal, "chargeback") }},
		{"q common goal word", models.SessionQuery{Q: "refund"}, func(r models.SessionSummary) bool { return strings.HasPrefix(r.Goal, "Refund") }},
		{"q ticket", models.SessionQuery{Q: "T-4242"}, func(r models.SessionSummary) bool { return r.TicketRef == "T-4242" }},
		{"q note words", models.SessionQuery{Q: "callback customer"}, nil},
		{"q and status", models.SessionQuery{Q: "chargeback", Statuses: []models.Status{models.StatusCompleted, models.StatusOpen}}, func(r models.SessionSummary) bool { return strings.Contains(r.Goal, "chargeback") }},
		{"queue and updated_after", models.SessionQuery{Queue: "refunds", UpdatedAfter: base.Add(time.Duration(n-5000) * time.Second)}, func(r models.SessionSummary) bool { return r.Queue == "refunds" }},
		// Every filter at once (sessions i%20 == 0 match them all).
		{"everything", models.SessionQuery{Statuses: []models.Status{models.StatusOpen}, Queue: "refunds", Q: "refund", UpdatedAfter: base.Add(time.Hour)},
			func(r models.SessionSummary) bool {
				return r.Status == models.StatusOpen && r.Queue == "refunds" && strings.HasPrefix(r.Goal, "Refund")
			}},
	}
	for _, tc := range cases {
		q := tc.q
		q.Limit = models.DefaultSessionsLimit
		for p := range 2 {
			*captured = (*captured)[:0]
			began := time.Now()
			page, err := s.ListSessions(ctx, q)
			took := time.Since(began)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if len(*captured) != 1 {
				t.Fatalf("%s: %d queries captured", tc.name, len(*captured))
			}
			for i, r := range page.Sessions {
				if tc.check != nil && !tc.check(r) {
					t.Fatalf("%s page %d: row %+v does not match", tc.name, p, r)
				}
				if i > 0 && !(r.UpdatedAt.Before(page.Sessions[i-1].UpdatedAt.Time)) {
					t.Fatalf("%s page %d: not newest first at %d", tc.name, p, i)
				}
			}
			var plan []string
			if err := s.DB.Raw("EXPLAIN " + (*captured)[0]).Scan(&plan).Error; err != nil {
				t.Fatalf("explain %s: %v", (*captured)[0], err)
			}
			text := strings.Join(plan, "\n")
			if strings.Contains(text, "Seq Scan on sessions") {
				t.Errorf("%s (page %d) scans sessions sequentially:\n%s\n%s", tc.name, p, (*captured)[0], text)
			}
			// A search that walks sessions newest first checks each row's
			// stored document; computing it per row cost ~25 µs a row.
			if strings.Contains(text, "to_tsvector") {
				t.Errorf("%s (page %d) computes the search document per row instead of reading search_doc:\n%s", tc.name, p, text)
			}
			t.Logf("%s, page %d: %d rows in %v\n%s", tc.name, p, len(page.Sessions), took.Round(10*time.Microsecond), text)
			if page.NextCursor == "" {
				break
			}
			q.Cursor = page.NextCursor
		}
	}
	// The console's other list pages, on the same million sessions.
	t.Run("console", func(t *testing.T) { checkConsolePlans(t, s, n) })
}

// TestListSessionsPlansOnSQLite checks the same on the embedded database,
// at a size it is meant for: no page query reads the sessions table in full
// (SQLite's "SCAN sessions" without an index), and the word search answers
// from the FTS5 index.
func TestListSessionsPlansOnSQLite(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.SQLite)
	ctx := context.Background()
	const n = 20_000
	// Inserted through the triggers, so the FTS index is filled as the write
	// path fills it.
	err := s.DB.Exec(`WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?)
INSERT INTO sessions (id, parent_id, ticket_ref, goal, status, priority, state_version, current_step, queue, last_hash, search_notes, created_at, updated_at)
SELECT printf('ses_%08d', i), CASE WHEN i % 10 = 0 THEN printf('ses_%08d', i / 10) END, 'T-' || (i / 3),
       CASE i % 5 WHEN 0 THEN 'Refund order ' WHEN 1 THEN 'Replace the blender ' ELSE 'Check the invoice ' END || (i % 997)
         || CASE WHEN i % 1000 = 0 THEN ' after a chargeback' ELSE '' END,
       CASE i % 20 WHEN 0 THEN 'open' WHEN 1 THEN 'queued' WHEN 2 THEN 'escalated' ELSE 'completed' END,
       3, 1, 'step', CASE i % 4 WHEN 0 THEN 'refunds' ELSE 'shipping' END, '',
       CASE WHEN i % 500 = 0 THEN 'customer phoned about a callback' ELSE '' END,
       '2026-01-01T00:00:00.000000Z', strftime('%Y-%m-%dT%H:%M:%S.000000Z', '2026-01-01', '+' || ((i * 7919) % ?) || ' seconds')
FROM g`, n, n).Error
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DB.Exec(`ANALYZE`).Error; err != nil {
		t.Fatal(err)
	}
	captured := captureSQL(t, s)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, q := range []models.SessionQuery{
		{},
		{Statuses: []models.Status{models.StatusOpen}},
		{Statuses: []models.Status{models.StatusOpen, models.StatusEscalated}},
		{Queue: "refunds"},
		{TicketRef: "T-4242"},
		{ParentID: "ses_00000042"},
		{UpdatedAfter: base.Add(time.Duration(n-100) * time.Second)},
		{Q: "chargeback"},
		{Q: "T-4242"},
		{Q: "callback customer"},
		{Q: "refund", Statuses: []models.Status{models.StatusOpen}, Queue: "refunds"},
	} {
		q.Limit = 20
		for p := range 2 {
			*captured = (*captured)[:0]
			page, err := s.ListSessions(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			var plan []struct {
				Detail string
			}
			if err := s.DB.Raw("EXPLAIN QUERY PLAN " + (*captured)[0]).Scan(&plan).Error; err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, r := range plan {
				lines = append(lines, r.Detail)
			}
			text := strings.Join(lines, "\n")
			for _, l := range lines {
				if (l == "SCAN sessions" || strings.HasPrefix(l, "SCAN sessions ")) && !strings.Contains(l, "USING") {
					t.Errorf("%+v (page %d) reads sessions in full:\n%s", q, p, text)
				}
			}
			t.Logf("%+v, page %d:\n%s", q, p, text)
			if q.Q != "" && !strings.Contains(text, "sessions_fts") {
				t.Errorf("%+v does not use the FTS index:\n%s", q, text)
			}
			if page.NextCursor == "" {
				break
			}
			q.Cursor = page.NextCursor
		}
	}
}

// TestSearchNotesBackfill rolls migration 00009 back and applies it again on
// a database holding notes: the migration fills search_notes from the
// stored states exactly as the projection writes it (verify compares the
// column with the replayed state), and the notes are searchable at once.
func TestSearchNotesBackfill(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid := escalated(ctx, t, s, 2, "T-77", "")
		agent := mustUser(t, s, "backfill@example.com", models.RoleAgent)
		for i, text := range []string{"Customer said \"it's urgent\" — ünïcödé", "Second line\nwith a chargeback"} {
			if _, err := s.AddNote(ctx, sid, agent, "", models.NoteInput{ExpectedVersion: storetest.Ptr(int64(2 + i)), Text: text}); err != nil {
				t.Fatal(err)
			}
		}
		plain := storetest.Session(ctx, t, s, nil)
		// Roll back every migration down to and including 00009, then up again.
		for {
			v, err := s.MigrateDown(ctx)
			if err != nil || v < 9 {
				t.Fatalf("down: %d, %v", v, err)
			}
			if v == 9 {
				break
			}
		}
		if _, err := s.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		rep, err := s.Verify(ctx, models.VerifyOpts{SessionIDs: []string{sid, plain}})
		if err != nil || !rep.OK() {
			t.Fatalf("verify after the backfill: %+v, %v", rep.Problems, err)
		}
		for _, q := range []string{"chargeback", "urgent", "ünïcödé", "T-77"} {
			page, err := s.ListSessions(ctx, models.SessionQuery{Q: q})
			if err != nil {
				t.Fatal(err)
			}
			if got := summaryIDs(page.Sessions); !slices.Equal(got, []string{sid}) {
				t.Errorf("q=%s after the backfill: %v", q, got)
			}
		}
		// Tampering with the column is caught by verify.
		if err := s.DB.Exec(`UPDATE sessions SET search_notes = 'forged' WHERE id = ?`, sid).Error; err != nil {
			t.Fatal(err)
		}
		if rep, err := s.Verify(ctx, models.VerifyOpts{SessionIDs: []string{sid}}); err != nil || rep.OK() {
			t.Fatalf("verify missed a forged search_notes: %+v, %v", rep, err)
		}
	})
}

// TestSearchDocumentStored holds the stored search document (migration
// 00033, kept by a trigger) to the expression it replaces, through every
// path that writes the text it covers: creation, a note, a write that does
// not touch the text, an erasure (whose words must stop matching: a stale
// document would keep finding erased personal data) and a migration down
// and up (the backfill).
func TestSearchDocumentStored(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	stale := func(step string) {
		t.Helper()
		var n int64
		if err := s.DB.Raw(`SELECT count(*) FROM sessions WHERE search_doc IS DISTINCT FROM ` + models.SearchDocumentSQL).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s: %d sessions with a stale search document", step, n)
		}
	}
	found := func(step, q string, want ...string) {
		t.Helper()
		page, err := s.ListSessions(ctx, models.SessionQuery{Q: q})
		if err != nil {
			t.Fatal(err)
		}
		if got := summaryIDs(page.Sessions); !slices.Equal(got, want) {
			t.Errorf("%s: q=%s found %v, want %v", step, q, got, want)
		}
	}
	sid := escalated(ctx, t, s, 2, "T-9001", "")
	other := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-9002", Goal: "Ship the (fragile) vase; call Ms. Ågren"})
	stale("created")
	found("created", "agren")
	found("created", "Ågren", other)
	found("created", "fragile-vase", other)

	agent := mustUser(t, s, "searchdoc@example.com", models.RoleAgent)
	if _, err := s.AddNote(ctx, sid, agent, "", models.NoteInput{ExpectedVersion: storetest.Ptr(int64(2)), Text: "Spoke to Mrs. Oyelaran-Smith about the zebra print"}); err != nil {
		t.Fatal(err)
	}
	stale("noted")
	found("noted", "oyelaran smith", sid)
	found("noted", "zebra", sid)

	// A write that leaves the text alone keeps the document.
	if _, err := s.ClaimEscalation(ctx, sid, agent, "", models.ClaimInput{ExpectedVersion: storetest.Ptr(int64(3))}); err != nil {
		t.Fatal(err)
	}
	stale("claimed")
	found("claimed", "zebra", sid)

	if _, err := s.EraseTicket(ctx, models.CLIOperator("ops"), "T-9001", "request 7"); err != nil {
		t.Fatal(err)
	}
	stale("erased")
	found("erased", "zebra")
	found("erased", "oyelaran")
	found("erased", "T-9001", sid) // the ticket stays: it is what finds the erasure

	migrateDownThrough(ctx, t, s, 33)
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	stale("migrated down and up")
	found("migrated down and up", "fragile", other)
	found("migrated down and up", "zebra")
}
