package handlers_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/views"
	"github.com/taskpilots/handoff/web"
)

// padEvents appends n audit-only events to the session with raw SQL, as if
// it had a long history (the write path would take long, and is tested
// elsewhere); the session's chain head moves on with them.
func padEvents(t *testing.T, s *models.Store, id string, n int) {
	t.Helper()
	row, err := s.GetSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	from := row.LastSeq + 1
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

// TestConsoleTimelinePages follows the "Older events" links of a long
// timeline as a browser without JavaScript would: pages of 50, newest
// first, no event twice, and a position that is not a number is a 422 that
// still shows the newest page.
func TestConsoleTimelinePages(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		ana, _ := agent(t, b, "Ana Agent", models.RoleAgent)
		id := workerEscalated(t, s, nil)
		padEvents(t, s, id, 120) // 124 events
		path := "/console/sessions/" + id
		var seqs []int
		pages := 0
		for path != "" {
			doc := getDoc(ana, path)
			pages++
			rows := doc.Find(`[data-testid="event-row"]`)
			if rows.Length() > models.TimelinePageSize || rows.Length() == 0 {
				t.Fatalf("page %d has %d events", pages, rows.Length())
			}
			for _, v := range attrs(rows, "data-seq") {
				n, _ := strconv.Atoi(v)
				seqs = append(seqs, n)
			}
			if pages > 1 && doc.Find(`[data-testid="timeline-newest"]`).Length() != 1 {
				t.Errorf("page %d has no link to the newest events", pages)
			}
			path, _ = doc.Find(`[data-testid="timeline-older"]`).Attr("href")
		}
		if pages != 3 || len(seqs) != 124 {
			t.Fatalf("%d pages, %d events", pages, len(seqs))
		}
		for i, n := range seqs {
			if n != 124-i {
				t.Fatalf("event %d has seq %d", i, n)
			}
		}
		for _, bad := range []string{"?before=abc", "?before=-3", "?type=nope"} {
			p := ana.get("/console/sessions/" + id + bad)
			doc := p.Doc(t)
			if p.StatusCode != http.StatusUnprocessableEntity || doc.Find(`[data-testid="timeline-error"]`).Length() != 1 ||
				doc.Find(`[data-testid="event-row"]`).Length() != models.TimelinePageSize {
				t.Errorf("%s: status %d, error %q, %d events", bad, p.StatusCode,
					squash(doc.Find(`[data-testid="timeline-error"]`)), doc.Find(`[data-testid="event-row"]`).Length())
			}
		}
	})
}

// TestConsoleChangeNotice polls the endpoint the session page polls: no
// content while the session is at the page's version, then the notice of
// who moved it on; a version that is not a number is a 400.
func TestConsoleChangeNotice(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		ana, _ := agent(t, b, "Ana Agent", models.RoleAgent)
		_, bo := agent(t, b, "Bo Agent", models.RoleAgent)
		id := workerEscalated(t, s, nil)
		doc := getDoc(ana, "/console/sessions/"+id)
		poll, _ := doc.Find(`[data-testid="change-watch"]`).Attr("hx-get")
		if poll != "/console/sessions/"+id+"/changes?version=4" {
			t.Fatalf("the page polls %q", poll)
		}
		if p := ana.get(poll); p.StatusCode != http.StatusNoContent || p.Body != "" {
			t.Fatalf("unchanged: status %d %q", p.StatusCode, p.Body)
		}
		v := int64(4)
		if _, err := s.ClaimEscalation(context.Background(), id, bo, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		p := ana.get(poll)
		notice := p.Doc(t).Find(`[data-testid="change-notice"]`)
		if p.StatusCode != http.StatusOK || !strings.HasPrefix(squash(notice), "v5: claimed by Bo Agent — reload") {
			t.Fatalf("changed: status %d notice %q", p.StatusCode, squash(notice))
		}
		if strings.Contains(p.Body, "<html") {
			t.Errorf("the notice is a whole page, not a fragment")
		}
		if p := ana.get("/console/sessions/" + id + "/changes?version=x"); p.StatusCode != http.StatusBadRequest {
			t.Errorf("bad version: status %d", p.StatusCode)
		}
	})
}

// TestConsoleUnknownQueueConfirmation hands a session back to a queue that
// no route serves and no worker leased from: the form comes back with what
// was typed, the known queues and a box to tick, nothing written; ticked,
// it goes through. A known queue needs no confirmation.
func TestConsoleUnknownQueueConfirmation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{})
		ana, _ := agent(t, b, "Ana Agent", models.RoleAgent)
		id := workerEscalated(t, s, nil) // w-1 leased from refunds
		if _, err := s.PutRoute(ctx, "test:controller", "", "notify", models.RouteInput{Queue: "mail",
			LeaseSeconds: storetest.Ptr(45), MaxAttempts: storetest.Ptr(5)}); err != nil {
			t.Fatal(err)
		}
		path := "/console/sessions/" + id
		form := getDoc(ana, path).Find(`[data-testid="action-hand-back"]`)
		p := submitForm(ana, form, map[string]string{"queue": "refundz"})
		doc := p.Doc(t)
		confirm := doc.Find(`[data-testid="action-hand-back"] [data-testid="queue-confirm"]`)
		if p.StatusCode != http.StatusUnprocessableEntity || confirm.Length() != 1 {
			t.Fatalf("unknown queue: status %d, confirmation %d\n%s", p.StatusCode, confirm.Length(), squash(doc.Find("main")))
		}
		if got := squash(confirm.Find(`[data-testid="known-queues"]`)); got != "Known queues: mail, refunds" {
			t.Errorf("known queues = %q", got)
		}
		if got, _ := doc.Find(`#hand-back-queue`).Attr("value"); got != "refundz" {
			t.Errorf("typed queue not kept: %q", got)
		}
		row, err := s.GetSession(ctx, id)
		if err != nil || row.StateVersion != 4 {
			t.Fatalf("something was written: v%d %v", row.StateVersion, err)
		}
		p = submitForm(ana, doc.Find(`[data-testid="action-hand-back"]`), map[string]string{"confirm_queue": "refundz"})
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("confirmed: status %d\n%s", p.StatusCode, squash(p.Doc(t).Find("main")))
		}
		if st := stateOf(t, s, id); st.Delegation == nil || st.Delegation.Queue != "refundz" {
			t.Fatalf("delegation after confirmation = %+v", st.Delegation)
		}

		// Known through a route, or through a worker's recent lease: no
		// question asked.
		for _, q := range []string{"mail", "refunds"} {
			other := workerEscalated(t, s, nil)
			form := getDoc(ana, "/console/sessions/"+other).Find(`[data-testid="action-hand-back"]`)
			if p := submitForm(ana, form, map[string]string{"queue": q}); p.StatusCode != http.StatusSeeOther {
				t.Errorf("hand back to %s: status %d", q, p.StatusCode)
			}
		}
	})
}

func stateOf(t *testing.T, s *models.Store, id string) models.State {
	t.Helper()
	row, err := s.GetSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := row.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestTimeZoneSetting: a user saves a time zone on the account page; the
// session page rendered for a browser without script shows times in it
// (UTC stays in the title); a name that is no time zone is refused inline
// and nothing is saved.
func TestTimeZoneSetting(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		ana, u := agent(t, b, "Ana Agent", models.RoleAgent)
		id := workerEscalated(t, s, nil)
		form := getDoc(ana, "/console/account/password").Find(`[data-testid="time-zone-form"]`)
		p := submitForm(ana, form, map[string]string{"time_zone": "Mars/Olympus"})
		doc := p.Doc(t)
		if p.StatusCode != http.StatusUnprocessableEntity || doc.Find(`[data-field="time_zone"]`).Length() != 1 {
			t.Fatalf("bad zone: status %d", p.StatusCode)
		}
		if got, _ := doc.Find(`#time_zone`).Attr("value"); got != "Mars/Olympus" {
			t.Errorf("typed zone not kept: %q", got)
		}
		if got, err := s.GetUser(context.Background(), u.ID); err != nil || got.TimeZone != "" {
			t.Fatalf("saved %q, %v", got.TimeZone, err)
		}
		if p := submitForm(ana, doc.Find(`[data-testid="time-zone-form"]`), map[string]string{"time_zone": "Asia/Tokyo"}); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("good zone: status %d", p.StatusCode)
		}
		evs, err := s.Timeline(context.Background(), id, models.EventSessionCreated)
		if err != nil || len(evs) != 1 {
			t.Fatal(err)
		}
		tokyo, _ := time.LoadLocation("Asia/Tokyo")
		at := evs[0].CreatedAt.Time
		tm := getDoc(ana, "/console/sessions/"+id).Find(`[data-testid="event-row"][data-type="session.created"] time`)
		if got, want := squash(tm), at.In(tokyo).Format("2006-01-02 15:04 MST"); got != want {
			t.Errorf("time = %q, want %q", got, want)
		}
		if title, _ := tm.Attr("title"); title != views.Stamp(at) {
			t.Errorf("title = %q, want UTC", title)
		}
	})
}
