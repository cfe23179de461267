package handlers_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// lastEvents returns the session's last n events, oldest first.
func lastEvents(t *testing.T, s *models.Store, id string, n int) []models.Event {
	t.Helper()
	evs, err := s.Timeline(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) < n {
		t.Fatalf("session %s has %d events, want at least %d", id, len(evs), n)
	}
	return evs[len(evs)-n:]
}

// wantClaimThen checks that the session's last two events are the user's
// claim and then ev, with consecutive seqs: one transaction wrote both.
func wantClaimThen(t *testing.T, s *models.Store, id string, u models.User, ev models.EventType) {
	t.Helper()
	evs := lastEvents(t, s, id, 2)
	if evs[0].Type != models.EventHumanClaimed || evs[1].Type != ev {
		t.Fatalf("last events = %s, %s; want %s, %s", evs[0].Type, evs[1].Type, models.EventHumanClaimed, ev)
	}
	if evs[1].Seq != evs[0].Seq+1 || evs[0].Actor != u.Actor() || evs[1].Actor != u.Actor() {
		t.Fatalf("claim seq %d by %s, decision seq %d by %s", evs[0].Seq, evs[0].Actor, evs[1].Seq, evs[1].Actor)
	}
}

// TestConsoleDecideUnclaimed decides on an escalation nobody holds in one
// POST after opening its page: the claim and the decision are written
// together, or, when someone else claimed first, neither (409 naming the
// holder, the typed text kept).
func TestConsoleDecideUnclaimed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newTakeoverEnv(t, s)

		// Open the page, submit the decision: two interactions.
		page := getDoc(e.ana, e.path)
		p := submitForm(e.ana, form(page, "complete"), map[string]string{"resolution": "refund approved by policy 4.2"})
		if p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != e.path {
			t.Fatalf("complete unclaimed: %d %s\n%s", p.StatusCode, p.Header.Get("Location"), p.Body)
		}
		wantClaimThen(t, s, e.id, e.anaU, models.EventHumanCompleted)
		if st := e.state(t); st.Status != models.StatusCompleted || st.Assignee != e.anaU.Actor() {
			t.Fatalf("after decide: %s held by %s", st.Status, st.Assignee)
		}

		// A race: Ben claims while Ana's page is open; her decision is
		// refused cleanly and nothing is written.
		path2 := "/console/sessions/" + escalatedOnFreshQueue(t, s)
		anaPage := getDoc(e.ana, path2)
		benPage := getDoc(e.ben, path2)
		if p := submitForm(e.ben, form(benPage, "claim"), nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("ben's claim: %d", p.StatusCode)
		}
		noWrites(t, s, func() {
			p = submitForm(e.ana, form(anaPage, "reject"), map[string]string{"reason": "duplicate of T-99"})
		})
		if p.StatusCode != http.StatusConflict {
			t.Fatalf("ana's decision after ben's claim: %d\n%s", p.StatusCode, p.Body)
		}
		d := p.Doc(t)
		if got := squash(d.Find(`[data-testid="conflict-holder"]`)); got != "Ben Agent" {
			t.Errorf("conflict holder = %q", got)
		}
		if !strings.Contains(squash(d.Find(`[data-testid="conflict-kept"]`)), "duplicate of T-99") {
			t.Errorf("ana's reason is lost: %q", squash(d.Find(`[data-testid="conflict-kept"]`)))
		}
	})
}

// TestConsoleAcceptRecommendation: one click queues the step the worker
// recommended on the session's queue, claiming the escalation with it.
func TestConsoleAcceptRecommendation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newTakeoverEnv(t, s)
		page := getDoc(e.ana, e.path)
		f := form(page, "accept-recommendation")
		if !strings.Contains(squash(f), "issue-refund") {
			t.Fatalf("accept form = %q", squash(f))
		}
		if p := submitForm(e.ana, f, nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("accept: %d\n%s", p.StatusCode, p.Body)
		}
		wantClaimThen(t, s, e.id, e.anaU, models.EventHumanResumed)
		st := e.state(t)
		if st.Status != models.StatusQueued || st.Delegation == nil || st.Delegation.Step != "issue-refund" || st.Delegation.Queue != "refunds" {
			t.Fatalf("after accept: %s %+v", st.Status, st.Delegation)
		}
		if n := countRows(t, s, "delegations", "session_id = ? AND status = ? AND step = ?", e.id, "queued", "issue-refund"); n != 1 {
			t.Fatalf("queued delegations for issue-refund = %d", n)
		}
		// No recommendation (a controller's escalation), no button.
		noRec := getDoc(e.ana, "/console/sessions/"+escalate(t, s, 3, "T-1"))
		if form(noRec, "accept-recommendation").Length() != 0 {
			t.Fatalf("the button without a recommended step")
		}
	})
}

// TestConsoleSubmitAndNext: a decision sent with "submit and next" opens the
// next session of the inbox the user can decide on, then the inbox itself
// when none is left.
func TestConsoleSubmitAndNext(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newTakeoverEnv(t, s)
		second := escalatedOnFreshQueue(t, s)
		page := getDoc(e.ana, e.path)
		p := submitForm(e.ana, form(page, "complete"), map[string]string{"resolution": "done", "next": "1"})
		if p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != "/console/sessions/"+second {
			t.Fatalf("submit and next: %d to %q, want the session %s", p.StatusCode, p.Header.Get("Location"), second)
		}
		page = getDoc(e.ana, "/console/sessions/"+second)
		if !strings.Contains(squash(page.Find(`#banners`)), "next session in the inbox") {
			t.Errorf("banner = %q", squash(page.Find(`#banners`)))
		}
		p = submitForm(e.ana, form(page, "reject"), map[string]string{"reason": "spam", "next": "1"})
		if p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != "/console/inbox" {
			t.Fatalf("submit and next on the last one: %d to %q", p.StatusCode, p.Header.Get("Location"))
		}
	})
}
