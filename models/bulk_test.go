package models_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// controllerToken makes an API token principal of role r.
func bulkToken(t testing.TB, s *models.Store, name string, r models.Role) models.BulkBy {
	t.Helper()
	_, tok, err := s.CreateToken(context.Background(), name, r)
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	return models.BulkBy{Token: &tok}
}

// countEvents counts a session's events of type typ.
func countEvents(t testing.TB, s *models.Store, sid string, typ models.EventType) int64 {
	t.Helper()
	var n int64
	if err := s.DB.Model(&models.Event{}).Where("session_id = ? AND type = ?", sid, typ).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

func cancelNow(ctx context.Context, t testing.TB, s *models.Store, sid string) {
	t.Helper()
	row, err := s.GetSession(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	v := row.StateVersion
	if _, err := s.Transition(ctx, sid, models.EventSessionCancelled, "test:controller", "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
}

func TestBulkCancelAppliesAndSkips(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		by := bulkToken(t, s, "ctl", models.RoleController)
		a := storetest.Session(ctx, t, s, nil)
		b, _ := storetest.Delegated(ctx, t, s, "billing")
		done := storetest.Session(ctx, t, s, nil)
		cancelNow(ctx, t, s, done)
		doneBefore := snapshot(t, s, done)
		missing := "ses_01JZZZZZZZZZZZZZZZZZZZZZZZ"

		res, err := s.Bulk(ctx, by, "", models.BulkInput{Action: models.BulkCancel,
			SessionIDs: []string{a, done, b, missing, a}, Reason: "duplicate tickets"})
		if err != nil {
			t.Fatalf("bulk: %v", err)
		}
		if res.Matched != 4 || !slices.Equal(res.Applied, []string{a, b}) || len(res.Skipped) != 2 {
			t.Fatalf("result = %+v", res)
		}
		if res.Skipped[0].SessionID != done || res.Skipped[0].Detail != "a session that is cancelled cannot be cancelled" {
			t.Fatalf("skip = %+v", res.Skipped[0])
		}
		if res.Skipped[1].SessionID != missing || res.Skipped[1].Detail != "no such session" {
			t.Fatalf("skip = %+v", res.Skipped[1])
		}
		for _, id := range []string{a, b} {
			st := mustState(t, s, id)
			if st.Status != models.StatusCancelled {
				t.Fatalf("%s status = %s", id, st.Status)
			}
			if n := countEvents(t, s, id, models.EventSessionCancelled); n != 1 {
				t.Fatalf("%s has %d cancel events", id, n)
			}
		}
		// The cancel went through the single command: the delegation is
		// cancelled with the session, as POST /sessions/{id}/cancel does.
		var dl []models.Delegation
		if err := s.DB.Where("session_id = ?", b).Find(&dl).Error; err != nil || len(dl) != 1 || dl[0].Status != models.DelegationCancelled {
			t.Fatalf("delegation of %s = %+v %v", b, dl, err)
		}
		assertUnchanged(t, s, done, doneBefore)
	})
}

func TestBulkValidation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		by := bulkToken(t, s, "ctl", models.RoleController)
		sid := storetest.Session(ctx, t, s, nil)
		before := snapshot(t, s, sid)
		many := make([]string, models.MaxBulkSessions+1)
		for i := range many {
			many[i] = sid
		}
		cases := []struct {
			in   models.BulkInput
			want []string
		}{
			{models.BulkInput{SessionIDs: []string{sid}}, []string{"action"}},
			{models.BulkInput{Action: "delete", SessionIDs: []string{sid}}, []string{"action"}},
			// release is for people holding sessions, not for tokens.
			{models.BulkInput{Action: models.BulkRelease, SessionIDs: []string{sid}}, []string{"action"}},
			{models.BulkInput{Action: models.BulkCancel}, []string{"session_ids"}},
			{models.BulkInput{Action: models.BulkCancel, SessionIDs: []string{sid}, Filter: &models.BulkFilter{Status: "open"}}, []string{"filter"}},
			{models.BulkInput{Action: models.BulkCancel, SessionIDs: []string{}}, []string{"session_ids"}},
			{models.BulkInput{Action: models.BulkCancel, SessionIDs: many}, []string{"session_ids"}},
			{models.BulkInput{Action: models.BulkCancel, SessionIDs: []string{sid, "x; drop", ""}}, []string{"session_ids[1]", "session_ids[2]"}},
			{models.BulkInput{Action: models.BulkCancel, Filter: &models.BulkFilter{}}, []string{"filter"}},
			{models.BulkInput{Action: models.BulkCancel, Filter: &models.BulkFilter{Status: "done", Queue: "a b"}}, []string{"filter.status", "filter.queue"}},
			{models.BulkInput{Action: models.BulkCancel, SessionIDs: []string{sid}, Reason: strings.Repeat("x", models.MaxItemLen+1)}, []string{"reason"}},
		}
		for i, c := range cases {
			for _, dry := range []bool{false, true} {
				c.in.DryRun = dry
				_, err := s.Bulk(ctx, by, fmt.Sprintf("key-%d", i), c.in)
				wantFields(t, err, c.want...)
			}
		}
		assertUnchanged(t, s, sid, before)

		// A worker's token may not run a bulk; an agent may not cancel.
		_, err := s.Bulk(ctx, bulkToken(t, s, "wrk", models.RoleWorker), "", models.BulkInput{Action: models.BulkCancel, SessionIDs: []string{sid}})
		wantForbidden(t, err)
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		_, err = s.Bulk(ctx, models.BulkBy{User: &agent}, "", models.BulkInput{Action: models.BulkCancel, SessionIDs: []string{sid}})
		wantForbidden(t, err)
		assertUnchanged(t, s, sid, before)
	})
}

func TestBulkDryRunWritesNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		by := bulkToken(t, s, "ctl", models.RoleController)
		a := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-9"})
		b := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-9"})
		cancelNow(ctx, t, s, b)
		other := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-10"})
		snaps := map[string]snap{}
		for _, id := range []string{a, b, other} {
			snaps[id] = snapshot(t, s, id)
		}
		res, err := s.Bulk(ctx, by, "dry-1", models.BulkInput{Action: models.BulkPause, Filter: &models.BulkFilter{TicketRef: "T-9"}, DryRun: true})
		if err != nil {
			t.Fatalf("dry run: %v", err)
		}
		if res.Matched != 2 || !slices.Equal(res.Applied, []string{a}) || len(res.Skipped) != 1 || res.Skipped[0].SessionID != b {
			t.Fatalf("dry run = %+v", res)
		}
		// Not the events, not the rows, not even the idempotency key.
		for id, sn := range snaps {
			assertUnchanged(t, s, id, sn)
		}
		// The same filter for real does what the dry run said.
		real, err := s.Bulk(ctx, by, "dry-1", models.BulkInput{Action: models.BulkPause, Filter: &models.BulkFilter{TicketRef: "T-9"}})
		if err != nil || !slices.Equal(real.Applied, res.Applied) || real.Matched != res.Matched || real.Replayed {
			t.Fatalf("real run = %+v, %v", real, err)
		}
		if st := mustState(t, s, a); st.Status != models.StatusPaused {
			t.Fatalf("status = %s", st.Status)
		}
	})
}

func TestBulkFilterMatchesListSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		by := bulkToken(t, s, "adm", models.RoleAdmin)
		var want []string
		for i := 0; i < 4; i++ {
			id, _ := storetest.Delegated(ctx, t, s, "refunds")
			want = append(want, id)
		}
		storetest.Delegated(ctx, t, s, "billing")
		storetest.Session(ctx, t, s, nil)
		page, err := s.ListSessions(ctx, models.SessionQuery{Queue: "refunds", Statuses: []models.Status{models.StatusQueued}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Bulk(ctx, by, "", models.BulkInput{Action: models.BulkEscalate, Filter: &models.BulkFilter{Queue: "refunds", Status: "queued,running"}, Reason: "outage"})
		if err != nil {
			t.Fatalf("bulk: %v", err)
		}
		var listed []string
		for _, r := range page.Sessions {
			listed = append(listed, r.ID)
		}
		slices.Sort(want)
		got := slices.Sorted(slices.Values(res.Applied))
		if !slices.Equal(got, want) || res.Matched != 4 || !slices.Equal(res.Applied, listed) {
			t.Fatalf("applied %v, want %v in listing order %v", res.Applied, want, listed)
		}
		for _, id := range want {
			st := mustState(t, s, id)
			if st.Status != models.StatusEscalated || st.Escalation == nil {
				t.Fatalf("%s = %s", id, st.Status)
			}
		}
	})
}

func TestBulkFilterOverCap(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		by := bulkToken(t, s, "ctl", models.RoleController)
		n := models.MaxBulkSessions + 1
		var last string
		for i := 0; i < n; i++ {
			last = storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-BIG"})
		}
		before := snapshot(t, s, last)
		_, err := s.Bulk(ctx, by, "", models.BulkInput{Action: models.BulkCancel, Filter: &models.BulkFilter{TicketRef: "T-BIG"}})
		wantFields(t, err, "filter")
		assertUnchanged(t, s, last, before)
	})
}

func TestBulkIdempotentReplay(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		by := bulkToken(t, s, "ctl", models.RoleController)
		a := storetest.Session(ctx, t, s, nil)
		b := storetest.Session(ctx, t, s, nil)
		cancelNow(ctx, t, s, b)
		in := models.BulkInput{Action: models.BulkCancel, SessionIDs: []string{a, b}, Reason: "r"}
		first, err := s.Bulk(ctx, by, "bulk-1", in)
		if err != nil || first.Replayed {
			t.Fatalf("first: %+v %v", first, err)
		}
		before := snapshot(t, s, a)
		again, err := s.Bulk(ctx, by, "bulk-1", in)
		if err != nil || !again.Replayed {
			t.Fatalf("again: %+v %v", again, err)
		}
		// The whole first answer, a applied, although a is cancelled now.
		again.Replayed = false
		if fmt.Sprint(again) != fmt.Sprint(first) {
			t.Fatalf("replay %+v, first %+v", again, first)
		}
		assertUnchanged(t, s, a, before)
		// The key with another request is refused and writes nothing.
		in.Reason = "other"
		_, err = s.Bulk(ctx, by, "bulk-1", in)
		if models.ErrorCode(err) != models.EIDEMPOTENCY {
			t.Fatalf("reuse: %v", err)
		}
		// Keys are scoped to the caller: another token's bulk-1 is its own.
		c := storetest.Session(ctx, t, s, nil)
		other, err := s.Bulk(ctx, bulkToken(t, s, "ctl2", models.RoleController), "bulk-1", models.BulkInput{Action: models.BulkCancel, SessionIDs: []string{c}})
		if err != nil || other.Replayed || !slices.Equal(other.Applied, []string{c}) {
			t.Fatalf("other caller: %+v %v", other, err)
		}
	})
}

// A session that changes between the bulk's read and its write is judged
// again on what it is now: applied when the action is still allowed, skipped
// with the reason when not, and never half-written either way.
func TestBulkConcurrentChange(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		by := bulkToken(t, s, "ctl", models.RoleController)
		paused := storetest.Session(ctx, t, s, nil)
		closed := storetest.Session(ctx, t, s, nil)
		changed := map[string]bool{}
		s.SetBulkHook(func(id string) {
			if changed[id] {
				return // the bulk's second look: leave it be
			}
			changed[id] = true
			switch id {
			case paused:
				// Still cancellable once paused: applied at the new version.
				row, _ := s.GetSession(ctx, id)
				v := row.StateVersion
				if _, err := s.Transition(ctx, id, models.EventSessionPaused, "test:other", "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
					t.Errorf("pause: %v", err)
				}
			case closed:
				cancelNow(ctx, t, s, id)
			}
		})
		defer s.SetBulkHook(nil)
		res, err := s.Bulk(ctx, by, "", models.BulkInput{Action: models.BulkCancel, SessionIDs: []string{paused, closed}})
		if err != nil {
			t.Fatalf("bulk: %v", err)
		}
		if !slices.Equal(res.Applied, []string{paused}) || len(res.Skipped) != 1 || res.Skipped[0].Detail != "a session that is cancelled cannot be cancelled" {
			t.Fatalf("result = %+v", res)
		}
		if n := countEvents(t, s, closed, models.EventSessionCancelled); n != 1 {
			t.Fatalf("closed has %d cancel events", n)
		}
		st := mustState(t, s, paused)
		if st.Status != models.StatusCancelled || st.Version != 3 {
			t.Fatalf("paused session = %s v%d", st.Status, st.Version)
		}
	})
}

// Two bulks over the same sessions at once: every session is cancelled
// exactly once, by one of them, and the other reports it skipped.
func TestBulkConcurrentBulks(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		var ids []string
		for i := 0; i < 20; i++ {
			ids = append(ids, storetest.Session(ctx, t, s, nil))
		}
		bys := []models.BulkBy{bulkToken(t, s, "c1", models.RoleController), bulkToken(t, s, "c2", models.RoleController)}
		results := make([]models.BulkResult, 2)
		var wg sync.WaitGroup
		for i := range bys {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				order := slices.Clone(ids)
				if i == 1 {
					slices.Reverse(order)
				}
				var err error
				if results[i], err = s.Bulk(ctx, bys[i], "", models.BulkInput{Action: models.BulkCancel, SessionIDs: order}); err != nil {
					t.Errorf("bulk %d: %v", i, err)
				}
			}(i)
		}
		wg.Wait()
		applied := append(slices.Clone(results[0].Applied), results[1].Applied...)
		slices.Sort(applied)
		want := slices.Sorted(slices.Values(ids))
		if !slices.Equal(applied, want) {
			t.Fatalf("applied by both = %v, want each of %v once", applied, want)
		}
		if len(results[0].Skipped)+len(results[1].Skipped) != len(ids) {
			t.Fatalf("skipped = %+v / %+v", results[0].Skipped, results[1].Skipped)
		}
		for _, id := range ids {
			if n := countEvents(t, s, id, models.EventSessionCancelled); n != 1 {
				t.Fatalf("%s has %d cancel events", id, n)
			}
		}
	})
}

// In the console the takeover policy decides per session: an agent may
// release what they hold and nothing else; an admin force-releases.
func TestBulkReleaseFollowsPolicy(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ann := mustUser(t, s, "ann@example.com", models.RoleAgent)
		bob := mustUser(t, s, "bob@example.com", models.RoleAgent)
		root := mustUser(t, s, "root@example.com", models.RoleAdmin)
		mine := escalated(ctx, t, s, 3, "T-1", "")
		claim(ctx, t, s, mine, ann.Actor())
		bobs := escalated(ctx, t, s, 3, "T-2", "")
		claim(ctx, t, s, bobs, bob.Actor())
		free := escalated(ctx, t, s, 3, "T-3", "")

		if got := models.BulkActionsFor(ann); !slices.Equal(got, []models.BulkAction{models.BulkRelease}) {
			t.Fatalf("agent's bulk actions = %v", got)
		}
		if got := models.BulkActionsFor(root); !slices.Equal(got, models.ConsoleBulkActions) {
			t.Fatalf("admin's bulk actions = %v", got)
		}
		res, err := s.Bulk(ctx, models.BulkBy{User: &ann}, "", models.BulkInput{Action: models.BulkRelease, SessionIDs: []string{mine, bobs, free}, Reason: "end of shift"})
		if err != nil {
			t.Fatalf("bulk: %v", err)
		}
		want := []models.BulkSkip{
			{SessionID: bobs, Detail: "only the holder releases; an admin force-releases"},
			{SessionID: free, Detail: "nobody holds the session"},
		}
		if !slices.Equal(res.Applied, []string{mine}) || !slices.Equal(res.Skipped, want) {
			t.Fatalf("agent release = %+v", res)
		}
		res, err = s.Bulk(ctx, models.BulkBy{User: &root}, "", models.BulkInput{Action: models.BulkRelease, SessionIDs: []string{mine, bobs}})
		if err != nil || !slices.Equal(res.Applied, []string{bobs}) {
			t.Fatalf("admin release = %+v %v", res, err)
		}
		st := mustState(t, s, bobs)
		if st.Status != models.StatusEscalated || st.Assignee != "" {
			t.Fatalf("force-released = %s %q", st.Status, st.Assignee)
		}
	})
}

// Reassign hands a session in human hands to another agent: an escalated
// one is claimed for them, a held one force-released and claimed for them in
// one transaction; the bulk skips what is not in human hands and what they
// hold already.
func TestBulkReassign(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ann := mustUser(t, s, "ann@example.com", models.RoleAgent)
		bob := mustUser(t, s, "bob@example.com", models.RoleAgent)
		rita := mustUser(t, s, "rita@example.com", models.RoleReviewer)
		root := mustUser(t, s, "root@example.com", models.RoleAdmin)
		free := escalated(ctx, t, s, 3, "T-1", "")
		bobs := escalated(ctx, t, s, 3, "T-2", "")
		claim(ctx, t, s, bobs, bob.Actor())
		anns := escalated(ctx, t, s, 3, "T-3", "")
		claim(ctx, t, s, anns, ann.Actor())
		open := storetest.Session(ctx, t, s, nil)

		// Refusals write nothing.
		before := snapshot(t, s, bobs)
		v := mustState(t, s, bobs).Version
		_, err := s.Reassign(ctx, bobs, ann, "", models.ReassignInput{ExpectedVersion: &v, To: ann.ID})
		wantForbidden(t, err)
		_, err = s.Reassign(ctx, bobs, root, "", models.ReassignInput{ExpectedVersion: &v, To: rita.ID})
		wantFields(t, err, "to")
		_, err = s.Reassign(ctx, bobs, root, "", models.ReassignInput{ExpectedVersion: &v, To: bob.ID})
		wantFields(t, err, "to")
		_, err = s.Bulk(ctx, models.BulkBy{User: &root}, "", models.BulkInput{Action: models.BulkReassign, SessionIDs: []string{bobs}})
		wantFields(t, err, "to")
		assertUnchanged(t, s, bobs, before)

		res, err := s.Bulk(ctx, models.BulkBy{User: &root}, "", models.BulkInput{Action: models.BulkReassign,
			SessionIDs: []string{free, bobs, anns, open}, To: ann.Email, Reason: "Bob is off today"})
		if err != nil {
			t.Fatalf("bulk reassign: %v", err)
		}
		want := []models.BulkSkip{
			{SessionID: anns, Detail: "held by that person already"},
			{SessionID: open, Detail: "only a session in human hands (escalated or held) can be reassigned"},
		}
		if !slices.Equal(res.Applied, []string{free, bobs}) || !slices.Equal(res.Skipped, want) {
			t.Fatalf("bulk reassign = %+v", res)
		}
		for _, id := range []string{free, bobs} {
			st := mustState(t, s, id)
			if st.Status != models.StatusHumanActive || st.Assignee != ann.Actor() {
				t.Fatalf("%s: %s held by %q", id, st.Status, st.Assignee)
			}
		}
		// Bob's claim ended by a forced release and Ann's claim, one after
		// the other, both by the admin.
		evs, err := s.Timeline(ctx, bobs)
		if err != nil {
			t.Fatal(err)
		}
		rel, cl := evs[len(evs)-2], evs[len(evs)-1]
		if rel.Type != models.EventHumanReleased || cl.Type != models.EventHumanClaimed || cl.Seq != rel.Seq+1 ||
			rel.Actor != root.Actor() || cl.Actor != root.Actor() {
			t.Fatalf("last events %s #%d by %s, %s #%d by %s", rel.Type, rel.Seq, rel.Actor, cl.Type, cl.Seq, cl.Actor)
		}
	})
}
