package models_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// padHistory appends n audit-only events to the session with raw SQL (the
// write path would take minutes), as if it had a long history: the
// session's chain head moves on so that the write path continues after
// them. The reads tested here do not verify hashes.
func padHistory(t *testing.T, s *models.Store, id string, n int) {
	t.Helper()
	row, err := s.GetSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	from := row.LastSeq + 1
	// A recursive CTE rather than generate_series, which SQLite lacks.
	err = s.DB.Exec(`WITH RECURSIVE g(i) AS (SELECT CAST(? AS bigint) UNION ALL SELECT i + 1 FROM g WHERE i < ?)
INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, prev_hash, hash, created_at)
SELECT ? || '-' || i, ?, i, 'escalation.sla_breached', 'system', ?, ?, '{}', 'x', 'x', ? FROM g`,
		from, from+int64(n)-1, "evt_pad_"+id, id, row.StateVersion, row.StateVersion, row.UpdatedAt).Error
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DB.Exec(`UPDATE sessions SET last_seq = ? WHERE id = ?`, from+int64(n)-1, id).Error; err != nil {
		t.Fatal(err)
	}
}

// escalatedAfter creates a session, pads its history with pad events, then
// delegates, leases and escalates it through the write path and lets u
// claim it: the newest events are the same whatever pad is.
func escalatedAfter(t *testing.T, s *models.Store, u models.User, pad int) string {
	t.Helper()
	ctx := context.Background()
	id := storetest.Session(ctx, t, s, nil)
	if pad > 0 {
		padHistory(t, s, id, pad)
	}
	v := int64(1)
	out, err := s.Delegate(ctx, id, "test:controller", "", models.DelegateInput{Queue: "refunds", Step: "check", ExpectedVersion: &v})
	if err != nil {
		t.Fatal(err)
	}
	var dc models.DelegationCreated
	if err := out.DecodeData(&dc); err != nil {
		t.Fatal(err)
	}
	l, err := s.Claim(ctx, "refunds", "w-7", "token:worker", "")
	if err != nil || l == nil {
		t.Fatalf("lease: %v %v", l, err)
	}
	if _, err := s.SubmitResult(ctx, dc.DelegationID, "token:worker", "", models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: id, Step: "check", ResultType: "escalated",
		Output: json.RawMessage(`{}`), Question: "Refund over 200 EUR?",
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimEscalation(ctx, id, u, "", models.ClaimInput{ExpectedVersion: version(t, s, id)}); err != nil {
		t.Fatal(err)
	}
	return id
}

func version(t *testing.T, s *models.Store, id string) *int64 {
	t.Helper()
	row, err := s.GetSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return &row.StateVersion
}

func agent(t *testing.T, s *models.Store) models.User {
	t.Helper()
	u, err := s.CreateUser(context.Background(), models.CreateUserInput{Email: "alex@example.com", Name: "Alex", Role: models.RoleAgent, Password: "correct horse battery"})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestTimelinePages walks a long timeline page by page, newest first, on
// both databases: every event exactly once, in seq order, each page at most
// the page size, and the type filter pages the same way.
func TestTimelinePages(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		u := agent(t, s)
		id := escalatedAfter(t, s, u, 120)
		row, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var seen []int64
		q := models.TimelineQuery{}
		pages := 0
		for {
			p, err := s.ReadTimelinePage(ctx, id, q)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(p.Events) > models.TimelinePageSize {
				t.Fatalf("page of %d events", len(p.Events))
			}
			for _, e := range p.Events {
				seen = append(seen, e.Seq)
			}
			if p.Older == 0 {
				break
			}
			q.Before = p.Older
		}
		if int64(len(seen)) != row.LastSeq || pages != int(row.LastSeq+models.TimelinePageSize-1)/models.TimelinePageSize {
			t.Fatalf("%d events in %d pages, want %d", len(seen), pages, row.LastSeq)
		}
		for i, seq := range seen {
			if seq != row.LastSeq-int64(i) {
				t.Fatalf("event %d has seq %d, want %d", i, seq, row.LastSeq-int64(i))
			}
		}
		p, err := s.ReadTimelinePage(ctx, id, models.TimelineQuery{Type: models.EventEscalationSLABreached, Limit: 100})
		if err != nil || len(p.Events) != 100 || p.Older == 0 {
			t.Fatalf("filtered page: %d events, older %d, %v", len(p.Events), p.Older, err)
		}
		p, err = s.ReadTimelinePage(ctx, id, models.TimelineQuery{Type: models.EventEscalationSLABreached, Before: p.Older, Limit: 100})
		if err != nil || len(p.Events) != 20 || p.Older != 0 || p.Events[19].Seq != 2 {
			t.Fatalf("last filtered page: %d events, older %d, %v", len(p.Events), p.Older, err)
		}
	})
}

// TestSessionDetailOldContext checks that what the page says about a long
// session still comes out right when the events it names are far behind the
// newest page: who holds it since when, and when each kept note was
// written.
func TestSessionDetailOldContext(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		u := agent(t, s)
		id := escalatedAfter(t, s, u, 0)
		claimed, err := s.GetSessionDetail(ctx, id, models.ReaderOfUser(u))
		if err != nil || claimed.ClaimedAt().IsZero() {
			t.Fatalf("claimed at = %v, %v", claimed.ClaimedAt(), err)
		}
		if _, err := s.AddNote(ctx, id, u, "", models.NoteInput{Text: "called the customer", ExpectedVersion: version(t, s, id)}); err != nil {
			t.Fatal(err)
		}
		padHistory(t, s, id, 2*models.TimelinePageSize)
		d, err := s.GetSessionDetail(ctx, id, models.ReaderOfUser(u))
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Timeline.Events) != models.TimelinePageSize || d.Timeline.Older == 0 {
			t.Fatalf("first page: %d events, older %d", len(d.Timeline.Events), d.Timeline.Older)
		}
		if got := d.ClaimedAt(); !got.Equal(claimed.ClaimedAt().Time) {
			t.Errorf("claimed at = %v, want %v", got, claimed.ClaimedAt())
		}
		x := d.ExplainStatus()
		if x.Since.IsZero() || x.Actor != u.Actor() {
			t.Errorf("status since %v by %q: the note that made the current version was not read", x.Since, x.Actor)
		}
		note := d.State.Notes[0]
		found := false
		for _, e := range d.Events {
			found = found || (e.Type == models.EventHumanNoted && e.VersionAfter == note.AtVersion)
		}
		if !found {
			t.Errorf("the event of the kept note (v%d) was not read", note.AtVersion)
		}
	})
}

// TestSessionPageCostIndependentOfHistory opens the same session page for a
// session with 5 events and one with 10,000 more: the same statements and
// round trips, one page of events, and on PostgreSQL every events read is
// an index range (no sequential scan), filtered pages included.
func TestSessionPageCostIndependentOfHistory(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	u := agent(t, s)
	small := escalatedAfter(t, s, u, 0)
	big := escalatedAfter(t, s, u, 10_000)
	if err := s.DB.Exec(`ANALYZE events; ANALYZE sessions`).Error; err != nil {
		t.Fatal(err)
	}
	captured := captureSQL(t, s)
	// Reads run outside a transaction: one statement is one round trip.
	cost := func(id string, q models.TimelineQuery) ([]string, models.SessionDetail) {
		*captured = (*captured)[:0]
		d, err := s.GetSessionDetailPage(ctx, id, models.ReaderOfUser(u), q)
		if err != nil {
			t.Fatal(err)
		}
		return append([]string(nil), *captured...), d
	}
	sq, sd := cost(small, models.TimelineQuery{})
	bq, bd := cost(big, models.TimelineQuery{})
	if len(sq) != len(bq) {
		t.Errorf("5 events: %d statements %v; 10,005 events: %d %v", len(sq), sq, len(bq), bq)
	}
	if len(sd.Timeline.Events) != 5 || len(bd.Timeline.Events) != models.TimelinePageSize || bd.Timeline.Older == 0 {
		t.Errorf("pages: %d and %d events", len(sd.Timeline.Events), len(bd.Timeline.Events))
	}
	if bd.ClaimedAt().IsZero() || bd.ExplainStatus().Actor != u.Actor() {
		t.Errorf("the big session's page lost its context")
	}
	t.Logf("session page: %d statements for 5 and for 10,005 events", len(bq))
	for _, q := range []models.TimelineQuery{{}, {Before: 5000}, {Type: models.EventEscalationSLABreached, Before: 5000}, {Type: models.EventHumanClaimed}} {
		*captured = (*captured)[:0]
		if _, err := s.GetSessionDetailPage(ctx, big, models.ReaderOfUser(u), q); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, sql := range *captured {
			if !strings.Contains(sql, `"events"`) && !strings.Contains(sql, "FROM events") {
				continue
			}
			n++
			var plan []string
			if err := s.DB.Raw("EXPLAIN " + sql).Scan(&plan).Error; err != nil {
				t.Fatalf("explain: %v", err)
			}
			text := strings.Join(plan, "\n")
			if strings.Contains(text, "Seq Scan") || !strings.Contains(text, "events_session_") {
				t.Errorf("%+v: %s\n%s", q, sql, text)
			}
		}
		if n == 0 {
			t.Fatalf("%+v: no events query captured: %v", q, *captured)
		}
	}

	// The change notice's poll: one primary-key read while nothing
	// changed, an index range when something did.
	*captured = (*captured)[:0]
	if c, err := s.ChangesSince(ctx, big, 5); err != nil || c.Version != 5 || len(*captured) != 1 {
		t.Fatalf("unchanged: %+v, %v, %d queries", c, err, len(*captured))
	}
	*captured = (*captured)[:0]
	c, err := s.ChangesSince(ctx, big, 2)
	if err != nil || c.Version != 5 || len(c.Events) != 3 || c.Events[0].Type != models.EventHumanClaimed || c.More {
		t.Fatalf("changed: %+v, %v", c, err)
	}
	var plan []string
	if err := s.DB.Raw("EXPLAIN " + (*captured)[1]).Scan(&plan).Error; err != nil {
		t.Fatal(err)
	}
	if text := strings.Join(plan, "\n"); strings.Contains(text, "Seq Scan") || !strings.Contains(text, "events_session_") {
		t.Errorf("changes since: %s\n%s", (*captured)[1], text)
	}
}

// BenchmarkSessionPage opens the newest page of a session's timeline for
// sessions of growing history: the time per page should not grow with it.
func BenchmarkSessionPage(b *testing.B) {
	s := storetest.New(b, models.Postgres)
	ctx := context.Background()
	for _, n := range []int{5, 1_000, 10_000} {
		id := storetest.Session(ctx, b, s, nil)
		row, err := s.GetSession(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		err = s.DB.Exec(`INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, prev_hash, hash, created_at)
SELECT ? || '-' || i, ?, i, 'escalation.sla_breached', 'system', 1, 1, '{}', 'x', 'x', ?
FROM generate_series(2, ?) AS i`, "evt_b_"+id, id, row.UpdatedAt, n).Error
		if err != nil {
			b.Fatal(err)
		}
		_ = s.DB.Exec(`ANALYZE events`)
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := s.GetSessionDetail(ctx, id, models.ReaderOfUser(models.User{Role: models.RoleAdmin})); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
