package handlers_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// takeoverEnv is a server with two agents and an admin, and a session that a
// worker escalated (version 4).
type takeoverEnv struct {
	s             *models.Store
	ana, ben, adm *browser
	anaU, benU    models.User
	admU          models.User
	id, path      string
}

func newTakeoverEnv(t *testing.T, s *models.Store) *takeoverEnv {
	t.Helper()
	b := newBrowser(t, s, web.Config{})
	e := &takeoverEnv{s: s}
	e.ana, e.anaU = agent(t, b, "Ana Agent", models.RoleAgent)
	e.ben, e.benU = agent(t, b, "Ben Agent", models.RoleAgent)
	e.adm, e.admU = agent(t, b, "Ada Admin", models.RoleAdmin)
	e.id = workerEscalated(t, s, []models.Evidence{{Claim: "order paid 2026-11-20", Source: "orders-db:1182"}})
	e.path = "/console/sessions/" + e.id
	return e
}

func (e *takeoverEnv) state(t *testing.T) models.State {
	t.Helper()
	row, err := e.s.GetSession(context.Background(), e.id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := row.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// claimAs makes u hold the session through the models write path.
func (e *takeoverEnv) claimAs(t *testing.T, u models.User) {
	t.Helper()
	v := e.state(t).Version
	if _, err := e.s.ClaimEscalation(context.Background(), e.id, u, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
		t.Fatal(err)
	}
}

// noteAs moves the session on by one version without changing who holds it.
func (e *takeoverEnv) noteAs(t *testing.T, u models.User, text string) {
	t.Helper()
	v := e.state(t).Version
	if _, err := e.s.AddNote(context.Background(), e.id, u, "", models.NoteInput{ExpectedVersion: &v, Text: text}); err != nil {
		t.Fatal(err)
	}
}

func lastEvent(t *testing.T, s *models.Store, id string) models.Event {
	t.Helper()
	evs, err := s.Timeline(context.Background(), id)
	if err != nil || len(evs) == 0 {
		t.Fatalf("timeline: %v", err)
	}
	return evs[len(evs)-1]
}

func form(d *goquery.Document, action string) *goquery.Selection {
	return d.Find(`form[data-testid="action-` + action + `"]`)
}

var takeoverCases = []struct {
	action  string
	claimed bool // the session is held by Ana first
	fields  map[string]string
	event   models.EventType
	check   func(t *testing.T, st models.State)
	// required is a field that, left empty (or given bad), makes the form
	// invalid; bad is that value.
	required, bad string
	// neverStale: the action names no version (a note), so a form rendered
	// before the session moved on is applied, not refused.
	neverStale bool
}{
	{action: "claim", event: models.EventHumanClaimed,
		check: func(t *testing.T, st models.State) {
			if st.Status != models.StatusHumanActive {
				t.Errorf("status %s", st.Status)
			}
		}},
	{action: "note", fields: map[string]string{"text": "Called the customer", "evidence_claim": "customer confirmed the address", "evidence_source": "phone call 10:02"},
		event: models.EventHumanNoted, required: "text", neverStale: true,
		check: func(t *testing.T, st models.State) {
			if n := len(st.Notes); n != 2 || st.Notes[n-1].Text != "Called the customer" || len(st.Evidence) != 2 || st.Evidence[1].Source != "phone call 10:02" {
				t.Errorf("notes %+v evidence %+v", st.Notes, st.Evidence)
			}
		}},
	{action: "release", claimed: true, fields: map[string]string{"reason": "end of shift"}, event: models.EventHumanReleased,
		check: func(t *testing.T, st models.State) {
			if st.Status != models.StatusEscalated || st.Assignee != "" {
				t.Errorf("status %s assignee %q", st.Status, st.Assignee)
			}
		}},
	{action: "request-input", claimed: true, fields: map[string]string{"question": "Which IBAN should receive the refund?"},
		event: models.EventHumanRequestedInput, required: "question",
		check: func(t *testing.T, st models.State) {
			if st.Status != models.StatusAwaitingInput || !slices.Contains(st.OpenQuestions, "Which IBAN should receive the refund?") {
				t.Errorf("status %s questions %v", st.Status, st.OpenQuestions)
			}
		}},
	{action: "resume", claimed: true,
		fields: map[string]string{"queue": "refunds-l2", "step": "issue-refund", "instructions": "Refund 240 EUR", "facts": "approved_by=Ana\n\nlimit = 300\n"},
		event:  models.EventHumanResumed, required: "facts", bad: "no equals sign here",
		check: func(t *testing.T, st models.State) {
			if st.Status != models.StatusQueued || st.Delegation == nil || st.Delegation.Queue != "refunds-l2" || st.Delegation.Step != "issue-refund" ||
				st.Facts["approved_by"] != "Ana" || st.Facts["limit"] != "300" {
				t.Errorf("status %s delegation %+v facts %v", st.Status, st.Delegation, st.Facts)
			}
		}},
	{action: "hand-back", claimed: true, fields: map[string]string{"queue": ""}, event: models.EventHumanHandedBack,
		required: "queue", bad: "not a queue!",
		check: func(t *testing.T, st models.State) {
			if st.Status != models.StatusQueued || st.Delegation == nil || st.Delegation.Queue != "refunds" || st.Delegation.Step != "check-eligibility" {
				t.Errorf("status %s delegation %+v", st.Status, st.Delegation)
			}
		}},
	{action: "complete", claimed: true, fields: map[string]string{"resolution": "Refund approved: customer is eligible"},
		event: models.EventHumanCompleted, required: "resolution",
		check: func(t *testing.T, st models.State) {
			if st.Status != models.StatusCompleted || st.Outcome != "Refund approved: customer is eligible" {
				t.Errorf("status %s outcome %q", st.Status, st.Outcome)
			}
		}},
	{action: "reject", claimed: true, fields: map[string]string{"reason": "Duplicate of T-1181"},
		event: models.EventHumanRejected, required: "reason",
		check: func(t *testing.T, st models.State) {
			if st.Status != models.StatusRejected {
				t.Errorf("status %s", st.Status)
			}
		}},
}

// TestConsoleTakeoverActions runs every takeover form's happy path, its
// validation path and its stale-version path on each dialect.
func TestConsoleTakeoverActions(t *testing.T) {
	for _, tc := range takeoverCases {
		t.Run(tc.action, func(t *testing.T) {
			t.Parallel()
			storetest.Each(t, func(t *testing.T, s *models.Store) {
				e := newTakeoverEnv(t, s)
				// The resume case's queue is a known one (a route sends a
				// step there), so that the form goes through without the
				// unknown-queue question (TestConsoleUnknownQueueConfirmation).
				if _, err := s.PutRoute(context.Background(), "test:controller", "", "escalate-refund", models.RouteInput{Queue: "refunds-l2",
					LeaseSeconds: storetest.Ptr(45), MaxAttempts: storetest.Ptr(5)}); err != nil {
					t.Fatal(err)
				}
				if tc.claimed {
					e.claimAs(t, e.anaU)
				}

				// Validation: nothing written, 422, the error next to its
				// field and the other fields kept.
				if tc.required != "" {
					d := getDoc(e.ana, e.path)
					bad := map[string]string{}
					for k, v := range tc.fields {
						bad[k] = v
					}
					bad[tc.required] = tc.bad
					var p page
					noWrites(t, s, func() { p = submitForm(e.ana, form(d, tc.action), bad) })
					if p.StatusCode != http.StatusUnprocessableEntity {
						t.Fatalf("invalid %s: status %d", tc.action, p.StatusCode)
					}
					d = p.Doc(t)
					f := form(d, tc.action)
					if f.Find(`[data-testid="field-error"][data-field="`+tc.required+`"]`).Length() != 1 {
						t.Fatalf("no inline error for %s in %s", tc.required, squash(f))
					}
					if inv, _ := f.Find(`[name="` + tc.required + `"]`).Attr("aria-invalid"); inv != "true" {
						t.Errorf("%s is not marked invalid", tc.required)
					}
					for k, v := range tc.fields {
						if k != tc.required && fieldValue(f, k) != v {
							t.Errorf("field %s = %q after the refusal, want %q kept", k, fieldValue(f, k), v)
						}
					}
				}

				// Stale version: Ana renders the form, the session moves on,
				// she submits: 409, the banner lists what happened, her text
				// is kept, nothing is written.
				d := getDoc(e.ana, e.path)
				rendered := e.state(t).Version
				e.noteAs(t, e.anaU, "a note from another tab")
				if tc.neverStale {
					// A note is never lost because the session moved on: it
					// is recorded, remembering the version Ana was looking at.
					p := submitForm(e.ana, form(d, tc.action), tc.fields)
					if p.StatusCode != http.StatusSeeOther {
						t.Fatalf("note from a stale page: status %d\n%s", p.StatusCode, p.Body)
					}
					st := e.state(t)
					if n := st.Notes[len(st.Notes)-1]; n.SeenVersion != rendered || n.AtVersion != rendered+2 || n.Text != tc.fields["text"] {
						t.Fatalf("stale note recorded as %+v", n)
					}
					tc.check(t, st)
					return
				}
				var p page
				noWrites(t, s, func() { p = submitForm(e.ana, form(d, tc.action), tc.fields) })
				if p.StatusCode != http.StatusConflict {
					t.Fatalf("stale %s: status %d\n%s", tc.action, p.StatusCode, p.Body)
				}
				d = p.Doc(t)
				banner := d.Find(`[data-testid="conflict-banner"]`)
				if banner.Length() != 1 || !strings.Contains(squash(banner), "human.noted") || banner.Find(`[data-testid="conflict-event"]`).Length() != 1 {
					t.Fatalf("conflict banner = %q", squash(banner))
				}
				f := form(d, tc.action)
				for k, v := range tc.fields {
					if fieldValue(f, k) != v {
						t.Errorf("field %s = %q after the conflict, want %q kept", k, fieldValue(f, k), v)
					}
				}
				if v, _ := f.Find(`input[name="state_version"]`).Attr("value"); v != itoa(rendered+1) {
					t.Errorf("re-rendered form is based on version %s, want %d", v, rendered+1)
				}

				// Happy path: resubmitting the re-rendered form applies it,
				// as Ana, under the same session id.
				p = submitForm(e.ana, f, tc.fields)
				if p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != e.path {
					t.Fatalf("%s: status %d location %q\n%s", tc.action, p.StatusCode, p.Header.Get("Location"), p.Body)
				}
				ev := lastEvent(t, s, e.id)
				if ev.Type != tc.event || ev.Actor != "user:"+e.anaU.ID || ev.SessionID != e.id {
					t.Fatalf("last event = %s by %s", ev.Type, ev.Actor)
				}
				tc.check(t, e.state(t))
				d = getDoc(e.ana, e.path)
				if d.Find(`#banners .banner-success`).Length() != 1 {
					t.Errorf("no success banner after %s", tc.action)
				}
				// The timeline is newest first.
				if got := attrs(d.Find(`[data-testid="event-row"]`).First(), "data-type"); !slices.Equal(got, []string{string(tc.event)}) {
					t.Errorf("timeline starts with %v", got)
				}
			})
		})
	}
}

func fieldValue(f *goquery.Selection, name string) string {
	in := f.Find(`[name="` + name + `"]`)
	if goquery.NodeName(in) == "textarea" {
		return in.Text()
	}
	v, _ := in.Attr("value")
	return v
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestConsoleClaimRace(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newTakeoverEnv(t, s)
		anaPage := getDoc(e.ana, e.path)
		benPage := getDoc(e.ben, e.path)

		if p := submitForm(e.ben, form(benPage, "claim"), nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("ben's claim: %d", p.StatusCode)
		}
		var p page
		noWrites(t, s, func() { p = submitForm(e.ana, form(anaPage, "claim"), nil) })
		if p.StatusCode != http.StatusConflict {
			t.Fatalf("ana's late claim: %d", p.StatusCode)
		}
		d := p.Doc(t)
		if got := squash(d.Find(`[data-testid="conflict-holder"]`)); got != "Ben Agent" {
			t.Errorf("conflict holder = %q", got)
		}
		if !strings.Contains(squash(d.Find(`[data-testid="holder"]`)), "Held by Ben Agent since") {
			t.Errorf("holder = %q", squash(d.Find(`[data-testid="holder"]`)))
		}
		if got := attrs(d.Find("form.action-form"), "data-testid"); !slices.Equal(got, []string{"action-note"}) {
			t.Errorf("ana gets %v on ben's session, want only the note form", got)
		}
		if st := e.state(t); st.Assignee != "user:"+e.benU.ID {
			t.Errorf("assignee = %s", st.Assignee)
		}

		// Ana's note, typed on the page rendered before Ben claimed: notes
		// are taken from anyone, holder or not, whatever happened since.
		p = submitForm(e.ana, form(anaPage, "note"), map[string]string{"text": "customer called back"})
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("stale note: %d\n%s", p.StatusCode, p.Body)
		}
		if ev := lastEvent(t, s, e.id); ev.Type != models.EventHumanNoted || ev.Actor != "user:"+e.anaU.ID {
			t.Fatalf("last event %s by %s", ev.Type, ev.Actor)
		}
		if st := e.state(t); st.Assignee != "user:"+e.benU.ID || st.Status != models.StatusHumanActive {
			t.Fatalf("the note changed the holder: %s %s", st.Status, st.Assignee)
		}

		// Every other form of Ana's stale page is still refused: she does not
		// hold the session (403, nothing written).
		cur := e.state(t).Version
		vals := url.Values{"_csrf": {e.ana.csrf(e.path)}, "state_version": {itoa(cur)}, "resolution": {"sneaky"}}
		noWrites(t, s, func() { p = e.ana.post(e.path+"/complete", vals) })
		if p.StatusCode != http.StatusForbidden || !strings.Contains(squash(p.Doc(t).Find(`[data-testid="action-problem"]`)), "Ben Agent holds this session") {
			t.Fatalf("complete on ben's session: %d\n%s", p.StatusCode, p.Body)
		}

		// The admin may force the release, decide in Ben's place or cancel
		// (the takeover policy); Ben may not force a release.
		d = getDoc(e.adm, e.path)
		if got := attrs(d.Find("form.action-form"), "data-testid"); !slices.Equal(got, []string{"action-accept-recommendation",
			"action-complete", "action-resume", "action-hand-back", "action-request-input", "action-reject",
			"action-note", "action-force-release", "action-cancel"}) {
			t.Fatalf("admin forms = %v", got)
		}
		noWrites(t, s, func() {
			p = e.ben.post(e.path+"/force-release", url.Values{"_csrf": {e.ben.csrf(e.path)}, "state_version": {itoa(cur)}})
		})
		if p.StatusCode != http.StatusForbidden {
			t.Fatalf("ben force-release: %d", p.StatusCode)
		}
		if p := submitForm(e.adm, form(d, "force-release"), map[string]string{"reason": "Ben is out sick"}); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("force release: %d\n%s", p.StatusCode, p.Body)
		}
		ev := lastEvent(t, s, e.id)
		if ev.Type != models.EventHumanReleased || ev.Actor != "user:"+e.admU.ID || !strings.Contains(ev.Payload, `"forced":true`) {
			t.Errorf("force release event = %s %s %s", ev.Type, ev.Actor, ev.Payload)
		}
	})
}

func TestConsoleActionRefusals(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newTakeoverEnv(t, s)
		b := newBrowser(t, s, web.Config{})
		rev, _ := agent(t, b, "Rita Reviewer", models.RoleReviewer)
		d := getDoc(e.ana, e.path)

		// Reviewers read the page but may not post a takeover form.
		var p page
		noWrites(t, s, func() {
			p = rev.post(e.path+"/claim", url.Values{"_csrf": {rev.csrf(e.path)}, "state_version": {"4"}})
		})
		if p.StatusCode != http.StatusForbidden {
			t.Errorf("reviewer claim: %d", p.StatusCode)
		}

		// Without the CSRF token.
		noWrites(t, s, func() { p = e.ana.post(e.path+"/claim", url.Values{"state_version": {"4"}}) })
		if p.StatusCode != http.StatusForbidden {
			t.Errorf("claim without CSRF: %d", p.StatusCode)
		}
		// Without a version.
		noWrites(t, s, func() {
			p = e.ana.post(e.path+"/claim", url.Values{"_csrf": {e.ana.csrf(e.path)}})
		})
		if p.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(squash(p.Doc(t).Find(`form[data-testid="action-claim"] .form-error`)), "version") {
			t.Errorf("claim without version: %d", p.StatusCode)
		}
		// Completing an escalation nobody claimed claims it too, but only at
		// the version the form saw: a stale form writes neither event.
		noWrites(t, s, func() {
			p = e.ana.post(e.path+"/complete", url.Values{"_csrf": {e.ana.csrf(e.path)}, "state_version": {"3"}, "resolution": {"done"}})
		})
		if p.StatusCode != http.StatusConflict || p.Doc(t).Find(`[data-testid="conflict-banner"]`).Length() != 1 {
			t.Errorf("stale complete unclaimed: %d\n%s", p.StatusCode, p.Body)
		}
		// Unknown session.
		noWrites(t, s, func() {
			p = e.ana.post("/console/sessions/ses_nope/claim", url.Values{"_csrf": {e.ana.csrf(e.path)}, "state_version": {"1"}})
		})
		if p.StatusCode != http.StatusNotFound {
			t.Errorf("claim unknown session: %d", p.StatusCode)
		}

		// A double submit of the same rendered form applies once.
		if p := submitForm(e.ana, form(d, "claim"), nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("claim: %d", p.StatusCode)
		}
		noWrites(t, s, func() { p = submitForm(e.ana, form(d, "claim"), nil) })
		if p.StatusCode != http.StatusSeeOther {
			t.Errorf("repeated claim: %d\n%s", p.StatusCode, p.Body)
		}
		// Ana holds the session now, so the page offers no claim form; an
		// invalid claim still says why it was refused (found by the fuzzer).
		noWrites(t, s, func() {
			p = e.ana.post(e.path+"/claim", url.Values{"_csrf": {e.ana.csrf(e.path)}, "state_version": {"five"}})
		})
		if banner := squash(p.Doc(t).Find(`[data-testid="action-problem"]`)); p.StatusCode != http.StatusUnprocessableEntity ||
			!strings.Contains(banner, "claim was refused") || !strings.Contains(banner, "whole number") {
			t.Errorf("invalid claim of a held session: %d, banner %q", p.StatusCode, banner)
		}
	})
}
