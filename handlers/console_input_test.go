package handlers_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// awaitingSession has a worker ask a question (needs_input): the session
// waits in awaiting_input at version 4.
func awaitingSession(t *testing.T, s *models.Store, question string) string {
	t.Helper()
	ctx := context.Background()
	id, did := storetest.Delegated(ctx, t, s, "refunds")
	l, err := s.Claim(ctx, "refunds", "w-1", "token:worker", "")
	if err != nil || l == nil {
		t.Fatalf("lease: %v %v", l, err)
	}
	if _, err := s.SubmitResult(ctx, did, "token:worker", "", models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: id, Step: "check-eligibility", ResultType: models.ResultNeedsInput, Question: question,
	}); err != nil {
		t.Fatalf("needs_input: %v", err)
	}
	return id
}

// TestConsoleProvideInput answers a session waiting for input from its
// page: only agents and admins get the form; invalid input is refused inline
// with nothing written; a stale form gets the conflict banner with the text
// kept; the answer with a next step writes both events as the user.
func TestConsoleProvideInput(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{})
		ana, anaU := agent(t, b, "Ana Agent", models.RoleAgent)
		rev, _ := agent(t, b, "Rita Reviewer", models.RoleReviewer)
		id := awaitingSession(t, s, "Which card was charged?")
		path := "/console/sessions/" + id

		if got := attrs(getDoc(rev, path).Find("form.action-form"), "data-testid"); len(got) != 0 {
			t.Fatalf("reviewer gets forms %v", got)
		}
		d := getDoc(ana, path)
		if got := attrs(d.Find("form.action-form"), "data-testid"); !slices.Equal(got, []string{"action-provide-input", "action-note"}) {
			t.Fatalf("agent forms = %v", got)
		}

		// Invalid: no answer nor facts, a bad queue and no step.
		bad := map[string]string{"answer": "", "facts": "", "delegate.queue": "bad queue!", "delegate.instructions": "Refund it"}
		var p page
		noWrites(t, s, func() { p = submitForm(ana, form(d, "provide-input"), bad) })
		if p.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("invalid answer: status %d", p.StatusCode)
		}
		f := form(p.Doc(t), "provide-input")
		for _, field := range []string{"answer", "delegate.queue", "delegate.step"} {
			if f.Find(`[data-testid="field-error"][data-field="`+field+`"]`).Length() != 1 {
				t.Errorf("no inline error for %s in %s", field, squash(f))
			}
		}
		if fieldValue(f, "delegate.queue") != "bad queue!" || fieldValue(f, "delegate.instructions") != "Refund it" {
			t.Errorf("typed values not kept: %q %q", fieldValue(f, "delegate.queue"), fieldValue(f, "delegate.instructions"))
		}
		// Instructions alone ask for a delegation: queue and step are missing.
		noWrites(t, s, func() {
			p = submitForm(ana, form(d, "provide-input"), map[string]string{"answer": "Visa", "delegate.instructions": "Refund it"})
		})
		if f := form(p.Doc(t), "provide-input"); p.StatusCode != http.StatusUnprocessableEntity ||
			f.Find(`[data-field="delegate.queue"]`).Length() != 1 || f.Find(`[data-field="delegate.step"]`).Length() != 1 {
			t.Fatalf("instructions without a queue: status %d", p.StatusCode)
		}
		// Facts that are not key=value lines.
		noWrites(t, s, func() { p = submitForm(ana, form(d, "provide-input"), map[string]string{"facts": "no equals"}) })
		if p.StatusCode != http.StatusUnprocessableEntity || form(p.Doc(t), "provide-input").Find(`[data-field="facts"]`).Length() != 1 {
			t.Fatalf("bad facts: status %d", p.StatusCode)
		}

		// Stale: the session is paused and resumed after Ana opened it.
		good := map[string]string{"answer": "Visa ending 4242", "facts": "card=visa",
			"delegate.queue": "payments", "delegate.step": "issue-refund", "delegate.instructions": "Refund to the card."}
		for i, typ := range []models.EventType{models.EventSessionPaused, models.EventSessionResumed} {
			v := int64(4 + i)
			if _, err := s.Transition(ctx, id, typ, "token:controller", "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
				t.Fatal(err)
			}
		}
		noWrites(t, s, func() { p = submitForm(ana, form(d, "provide-input"), good) })
		if p.StatusCode != http.StatusConflict {
			t.Fatalf("stale answer: status %d\n%s", p.StatusCode, p.Body)
		}
		d = p.Doc(t)
		if n := d.Find(`[data-testid="conflict-banner"] [data-testid="conflict-event"]`).Length(); n != 2 {
			t.Fatalf("conflict banner lists %d events, want 2", n)
		}
		f = form(d, "provide-input")
		for k, v := range good {
			if fieldValue(f, k) != v {
				t.Errorf("field %s = %q after the conflict, want %q kept", k, fieldValue(f, k), v)
			}
		}

		// Happy path: the re-rendered form applies, as Ana.
		p = submitForm(ana, f, good)
		if p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != path {
			t.Fatalf("answer: status %d location %q\n%s", p.StatusCode, p.Header.Get("Location"), p.Body)
		}
		evs, err := s.Timeline(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		last2 := evs[len(evs)-2:]
		if last2[0].Type != models.EventInputProvided || last2[1].Type != models.EventDelegationCreated ||
			last2[0].Actor != anaU.Actor() || last2[1].Actor != anaU.Actor() || last2[0].VersionAfter != 7 {
			t.Fatalf("last events = %s/%s by %s at v%d", last2[0].Type, last2[1].Type, last2[0].Actor, last2[0].VersionAfter)
		}
		row, _ := s.GetSession(ctx, id)
		st, _ := row.Decode()
		if st.Status != models.StatusQueued || st.Facts["card"] != "visa" || st.Delegation == nil || st.Delegation.Queue != "payments" || len(st.OpenQuestions) != 0 {
			t.Fatalf("state after the answer: %+v", st)
		}
		d = getDoc(ana, path)
		if !strings.Contains(squash(d.Find(`#banners .banner-success`)), "next step queued") {
			t.Errorf("success banner = %q", squash(d.Find(`#banners`)))
		}
		if form(d, "provide-input").Length() != 0 {
			t.Errorf("the answer form is still offered on a queued session")
		}
	})
}

// TestConsoleWaitingOnInput: the inbox's "Waiting on input" view lists the
// sessions in awaiting_input with how long each has waited, oldest first,
// and the inbox links to it with its count.
func TestConsoleWaitingOnInput(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
		s.Now = func() time.Time { return now }
		b := newBrowser(t, s, web.Config{})
		ana, _ := agent(t, b, "Ana Agent", models.RoleAgent)
		older := awaitingSession(t, s, "asked first")
		now = now.Add(20 * time.Minute)
		newer := awaitingSession(t, s, "asked later")
		escalated := escalate(t, s, 2, "T-9")
		now = now.Add(5 * time.Minute)

		d := getDoc(ana, "/console/inbox")
		if got := squash(d.Find(`[data-testid="inbox-tab-waiting"]`)); got != "Waiting on input 2" {
			t.Fatalf("inbox tab = %q", got)
		}
		if d.Find(`[data-testid="inbox-row"][data-session-id="`+older+`"]`).Length() != 0 {
			t.Fatalf("an awaiting_input session is in the human-hands list")
		}
		d = getDoc(ana, "/console/inbox/waiting")
		if got := attrs(d.Find(`[data-testid="waiting-row"]`), "data-session-id"); !slices.Equal(got, []string{older, newer}) {
			t.Fatalf("waiting rows = %v, want %v (not %s)", got, []string{older, newer}, escalated)
		}
		if got := squash(d.Find(`[data-testid="waited"]`).First()); got != "25m" {
			t.Errorf("oldest waited %q, want 25m", got)
		}
		if got := squash(d.Find(`[data-testid="waiting-total"]`)); !strings.HasPrefix(got, "2 ") {
			t.Errorf("total = %q", got)
		}
		if got := squash(d.Find(`[data-testid="inbox-tab-humans"]`)); got != "In human hands 1" {
			t.Errorf("humans tab = %q", got)
		}
	})
}

// TestConsoleQuestionAndOutcome: the page states the question that is open
// (an escalation's, or the one waiting for input, never "no question" above
// it), and a closed session shows its outcome first with its escalation as
// answered history.
func TestConsoleQuestionAndOutcome(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{})
		ana, anaU := agent(t, b, "Ana Agent", models.RoleAgent)
		id := workerEscalated(t, s, nil)
		path := "/console/sessions/" + id

		question := func(path string) (open []string, none bool) {
			d := getDoc(ana, path)
			q := d.Find(`[data-testid="pkg-question"]`)
			q.Find(`[data-testid="open-question"]`).Each(func(_ int, x *goquery.Selection) {
				open = append(open, strings.TrimSpace(x.Text()))
			})
			return open, q.Find(`[data-testid="no-question"]`).Length() > 0 || strings.Contains(squash(q), "No question was asked")
		}
		if open, none := question(path); none || !slices.Equal(open, []string{"Is a refund over 200 EUR allowed for this customer?"}) {
			t.Fatalf("escalated: open %v, none %v", open, none)
		}

		// Ana asks the requester: the page shows her question, not the
		// escalation's, and no "no question".
		v := int64(4)
		if _, err := s.ClaimEscalation(ctx, id, anaU, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		v = 5
		if _, err := s.RequestInput(ctx, id, anaU, "", models.RequestInputInput{ExpectedVersion: &v, Question: "Which IBAN?"}); err != nil {
			t.Fatal(err)
		}
		if open, none := question(path); none || !slices.Equal(open, []string{"Which IBAN?"}) {
			t.Fatalf("awaiting input: open %v, none %v", open, none)
		}
		if got := squash(getDoc(ana, path).Find(`[data-testid="past-escalation"] [data-testid="past-answer"]`)); !strings.Contains(got, "Ana Agent requested input — Which IBAN?") {
			t.Errorf("past escalation answer = %q", got)
		}

		// Closed by a human: outcome first, escalation as answered history.
		other := workerEscalated(t, s, nil)
		v = 4
		if _, err := s.ClaimEscalation(ctx, other, anaU, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		v = 5
		if _, err := s.CompleteHuman(ctx, other, anaU, "", models.CompleteInput{ExpectedVersion: &v, Resolution: "Refund approved by the team lead"}); err != nil {
			t.Fatal(err)
		}
		p := ana.get("/console/sessions/" + other)
		body := string(p.Body)
		d := p.Doc(t)
		if got := squash(d.Find(`[data-testid="closed-decision"]`)); !strings.HasPrefix(got, "Ana Agent completed the session") {
			t.Fatalf("closed decision = %q", got)
		}
		if got := squash(d.Find(`[data-testid="closed-text"]`)); got != "Refund approved by the team lead" {
			t.Errorf("closed text = %q", got)
		}
		if i, j := strings.Index(body, `data-testid="closed-outcome"`), strings.Index(body, `data-testid="escalation-package"`); i < 0 || i > j {
			t.Errorf("the outcome is not shown before the package (%d, %d)", i, j)
		}
		if d.Find(`[data-testid="pkg-reason"]`).Length() != 0 || d.Find(`[data-testid="open-question"]`).Length() != 0 {
			t.Errorf("a closed session still shows an open escalation")
		}
		past := d.Find(`[data-testid="past-escalation"]`)
		if got := squash(past.Find(`[data-testid="past-question"]`)); got != "Is a refund over 200 EUR allowed for this customer?" {
			t.Errorf("past question = %q", got)
		}
		if got := squash(past.Find(`[data-testid="past-answer"]`)); !strings.Contains(got, "Ana Agent completed — Refund approved by the team lead") {
			t.Errorf("past answer = %q", got)
		}

		// Cancelled by a controller: who and why.
		cancelled := storetest.Session(ctx, t, s, nil)
		v = 1
		if _, err := s.Transition(ctx, cancelled, models.EventSessionCancelled, "token:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "customer withdrew"}); err != nil {
			t.Fatal(err)
		}
		d = getDoc(ana, "/console/sessions/"+cancelled)
		if got := squash(d.Find(`[data-testid="closed-decision"]`)); !strings.HasPrefix(got, "token:controller cancelled the session") {
			t.Errorf("cancelled decision = %q", got)
		}
		if got := squash(d.Find(`[data-testid="closed-text"]`)); got != "customer withdrew" {
			t.Errorf("cancel reason = %q", got)
		}
	})
}
