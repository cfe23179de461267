package handlers_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// TestNotesAPI: POST /sessions/{id}/notes for controllers and admins, on a
// session in any status, with 422 naming every field and 404 for an
// unknown session; nothing is written on a refusal.
func TestNotesAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		id := e.createSession(map[string]any{"goal": "Refund order 1182"})
		path := "/sessions/" + id + "/notes"

		r := wantStatus(t, e.post(e.controller, path, map[string]any{"text": "Customer is a VIP",
			"evidence": map[string]any{"claim": "CRM tier gold", "source": "crm:42"}}), http.StatusOK).JSON(t)
		if r["session_id"] != id || r["status"] != "open" || jsonInt(t, r, "state_version") != 2 {
			t.Fatalf("note answer %v", r)
		}
		// Any version named is only recorded: an old one is fine.
		wantStatus(t, e.post(e.admin, path, map[string]any{"text": "Seen by the admin", "expected_version": 1}), http.StatusOK)
		st := apiState(t, s, id)
		if len(st.Notes) != 2 || st.Notes[0].By == st.Notes[1].By || st.Notes[1].SeenVersion != 1 ||
			st.Notes[0].Evidence == nil || st.Evidence[0].Source != "crm:42" {
			t.Fatalf("notes %+v evidence %+v", st.Notes, st.Evidence)
		}

		noWrites(t, s, func() {
			p := wantProblem(t, e.post(e.controller, path, map[string]any{"text": " ", "evidence": map[string]any{"source": "x"}, "expected_version": 0}), http.StatusUnprocessableEntity)
			wantFields(t, p, "text", "evidence.claim", "expected_version")
			p = wantProblem(t, e.post(e.controller, path, map[string]any{"text": strings.Repeat("x", models.MaxNoteLen+1), "note": "?"}), http.StatusUnprocessableEntity)
			wantFields(t, p, "text", "note")
			wantProblem(t, e.post(e.worker, path, map[string]any{"text": "x"}), http.StatusForbidden)
			wantProblem(t, e.post("", path, map[string]any{"text": "x"}), http.StatusUnauthorized)
			wantProblem(t, e.post(e.controller, "/sessions/ses_missing/notes", map[string]any{"text": "x"}), http.StatusNotFound)
		})

		// A repeat with the same key answers the first outcome.
		first := wantStatus(t, e.post(e.controller, path, map[string]any{"text": "once"}, "Idempotency-Key", "note-1"), http.StatusOK)
		noWrites(t, s, func() {
			again := wantStatus(t, e.post(e.controller, path, map[string]any{"text": "once"}, "Idempotency-Key", "note-1"), http.StatusOK)
			if string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("repeat %s vs %s", again.Body, first.Body)
			}
		})

		// Closed sessions take notes too.
		wantStatus(t, e.post(e.controller, "/sessions/"+id+"/cancel", map[string]any{"expected_version": 4, "reason": "duplicate"}), http.StatusOK)
		r = wantStatus(t, e.post(e.controller, path, map[string]any{"text": "Duplicate of T-9"}), http.StatusOK).JSON(t)
		if r["status"] != "cancelled" {
			t.Fatalf("note on a cancelled session: %v", r)
		}
	})
}

func apiState(t *testing.T, s *models.Store, id string) models.State {
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

// TestConsoleInboxReasonFilter: the inbox filters by reason code and counts
// each code; an unknown code is refused.
func TestConsoleInboxReasonFilter(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		ana, _ := agent(t, b, "Ana Agent", models.RoleAgent)
		ctl := escalate(t, s, 2, "T-1")
		wrk := workerEscalated(t, s, nil)

		d := getDoc(ana, "/console/inbox?reason=worker")
		if got := attrs(d.Find(`[data-testid="inbox-row"]`), "data-session-id"); !slices.Equal(got, []string{wrk}) {
			t.Fatalf("reason=worker rows %v, want [%s]", got, wrk)
		}
		if got := attrs(d.Find(`[data-testid="inbox-row"] [data-testid="reason-code"]`), "data-code"); !slices.Equal(got, []string{"worker"}) {
			t.Errorf("row reason tags %v", got)
		}
		sel := d.Find(`select[data-testid="filter-reason"]`)
		if v, _ := sel.Find("option[selected]").Attr("value"); v != "worker" {
			t.Errorf("selected reason %q", v)
		}
		if opt := squash(sel.Find(`option[value="controller"]`)); opt != "Controller escalated (1)" {
			t.Errorf("controller option %q", opt)
		}
		if got := sel.Find("option").Length(); got != len(models.AllReasonCodes)+1 {
			t.Errorf("%d reason options", got)
		}
		d = getDoc(ana, "/console/inbox?reason=controller")
		if got := attrs(d.Find(`[data-testid="inbox-row"]`), "data-session-id"); !slices.Equal(got, []string{ctl}) {
			t.Fatalf("reason=controller rows %v", got)
		}
		if p := ana.get("/console/inbox?reason=bored"); p.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("unknown reason: %d", p.StatusCode)
		}
	})
}

// TestConsoleNotesAndRisks: the package shows the notes newest first with
// who and when, any agent may add one (also on a closed session), and any
// agent may mark an open risk resolved; resolved risks fold away.
func TestConsoleNotesAndRisks(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newTakeoverEnv(t, s)
		b := newBrowser(t, s, web.Config{})
		rev, _ := agent(t, b, "Rita Reviewer", models.RoleReviewer)
		e.claimAs(t, e.anaU)
		e.noteAs(t, e.anaU, "first note")

		// Ben does not hold the session; he may still note and resolve.
		d := getDoc(e.ben, e.path)
		if p := submitForm(e.ben, form(d, "note"), map[string]string{"text": "second note"}); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("ben's note: %d\n%s", p.StatusCode, p.Body)
		}
		d = getDoc(e.ana, e.path)
		rows := d.Find(`[data-testid="pkg-notes"] [data-testid="note-row"]`)
		if rows.Length() != 2 || squash(rows.Eq(0).Find(`[data-testid="note-text"]`)) != "second note" ||
			squash(rows.Eq(0).Find(`[data-testid="note-by"]`)) != "Ben Agent" || squash(rows.Eq(1).Find(`[data-testid="note-by"]`)) != "Ana Agent" ||
			rows.Eq(0).Find("time").Length() != 1 {
			t.Fatalf("note rows: %q", squash(rows))
		}
		if code, _ := d.Find(`[data-testid="pkg-reason-code"]`).Attr("data-code"); code != "worker" ||
			d.Find(`[data-testid="pkg-recommended-action"]`).Length() != 1 {
			t.Errorf("package cause: %q", squash(d.Find(`[data-testid="escalation-package"]`)))
		}

		// The risk form: one per open risk, for agents, not for reviewers.
		if n := getDoc(rev, e.path).Find(`[data-testid="action-resolve-risk"]`).Length(); n != 0 {
			t.Errorf("reviewer gets %d risk forms", n)
		}
		d = getDoc(e.ben, e.path)
		forms := d.Find(`[data-testid="action-resolve-risk"]`)
		if forms.Length() != 1 || d.Find(`[data-testid="risks-resolved"]`).Length() != 0 {
			t.Fatalf("%d risk forms", forms.Length())
		}
		if p := submitForm(e.ben, forms, nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("resolve: %d\n%s", p.StatusCode, p.Body)
		}
		st := e.state(t)
		if len(st.Risks) != 0 || len(st.ResolvedRisks) != 1 || st.ResolvedRisks[0].By != "user:"+e.benU.ID || st.Assignee != "user:"+e.anaU.ID {
			t.Fatalf("risks %v resolved %+v assignee %s", st.Risks, st.ResolvedRisks, st.Assignee)
		}
		after := getDoc(e.ana, e.path)
		folded := after.Find(`details[data-testid="risks-resolved"]`)
		if folded.Length() != 1 || folded.AttrOr("open", "closed") != "closed" ||
			!strings.Contains(squash(folded), "customer already refunded once this year") || !strings.Contains(squash(folded), "Ben Agent") ||
			after.Find(`[data-testid="risk-open"]`).Length() != 0 {
			t.Fatalf("resolved risks: %q", squash(after.Find(`[data-testid="pkg-risks"]`)))
		}

		// The same form submitted twice applies once (its idempotency key);
		// from another tab rendered before (another key), the risk is no
		// longer open: 422 with a banner, nothing written.
		var p page
		noWrites(t, s, func() { p = submitForm(e.ben, forms, nil) })
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("double submit: %d", p.StatusCode)
		}
		noWrites(t, s, func() { p = submitForm(e.ben, forms, map[string]string{"idempotency_key": "another-tab"}) })
		if p.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(squash(p.Doc(t).Find(`[data-testid="action-problem"]`)), "not an open risk") {
			t.Fatalf("resolve twice: %d %q", p.StatusCode, squash(p.Doc(t).Find(`[data-testid="action-problem"]`)))
		}

		// Once closed, the page still takes a note, and says nothing is left
		// to decide.
		d = getDoc(e.ana, e.path)
		if p := submitForm(e.ana, form(d, "complete"), map[string]string{"resolution": "refund approved"}); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("complete: %d", p.StatusCode)
		}
		d = getDoc(e.ben, e.path)
		if got := attrs(d.Find("form.action-form"), "data-testid"); !slices.Equal(got, []string{"action-note"}) || d.Find(`[data-testid="no-actions"]`).Length() != 1 {
			t.Fatalf("closed session forms %v", got)
		}
		if p := submitForm(e.ben, form(d, "note"), map[string]string{"text": "customer thanked us"}); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("note on a closed session: %d", p.StatusCode)
		}
		if st := e.state(t); st.Status != models.StatusCompleted || st.Notes[len(st.Notes)-1].Text != "customer thanked us" {
			t.Fatalf("closed session notes %+v", st.Notes)
		}
	})
}

// TestConsoleSystemEscalationPackage: a system escalation's package names
// its reason code, the attempt, the recommended action and each failed
// attempt's message.
func TestConsoleSystemEscalationPackage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{})
		ana, _ := agent(t, b, "Ana Agent", models.RoleAgent)
		id, did := storetest.Delegated(ctx, t, s, "sys-q")
		l, err := s.Claim(ctx, "sys-q", "w-7", "token:worker", "")
		if err != nil || l == nil {
			t.Fatalf("lease: %v %v", l, err)
		}
		if _, err := s.SubmitResult(ctx, did, "token:worker", "", models.ResultInput{LeaseToken: l.LeaseToken, SessionID: id,
			Step: l.Step, ResultType: models.ResultFailed, Failure: &models.Failure{Class: models.FailurePermanent, Message: "order 1182 does not exist"}}); err != nil {
			t.Fatal(err)
		}
		d := getDoc(ana, "/console/sessions/"+id)
		pkg := d.Find(`[data-testid="escalation-package"]`)
		if code, _ := pkg.Find(`[data-testid="pkg-reason-code"]`).Attr("data-code"); code != "permanent_failure" {
			t.Errorf("reason code %q", code)
		}
		if got := squash(pkg.Find(`[data-testid="pkg-attempts"]`)); got != "· attempt 1 of 3" {
			t.Errorf("attempts %q", got)
		}
		if got := squash(pkg.Find(`[data-testid="pkg-failure-message"]`)); got != "order 1182 does not exist" {
			t.Errorf("failure message %q", got)
		}
		if q := squash(pkg.Find(`[data-testid="pkg-question"]`)); !strings.Contains(q, "failed permanently") || strings.Contains(q, "No question was asked") {
			t.Errorf("question %q", q)
		}
		if a := squash(pkg.Find(`[data-testid="pkg-recommended-action"]`)); !strings.Contains(a, "will not pass on a retry") {
			t.Errorf("recommended action %q", a)
		}
	})
}

// TestMetricsCountEscalationsByReason: the API and the admin page count
// escalations per reason code.
func TestMetricsCountEscalationsByReason(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		escalate(t, s, 2, "T-1")
		workerEscalated(t, s, nil)
		workerEscalated(t, s, nil)
		// The window ends at now truncated to the second: look from later.
		s.Now = func() time.Time { return time.Now().Add(2 * time.Second) }
		var pm models.ProductMetrics
		wantStatus(t, e.get(e.controller, "/metrics?window=24h"), http.StatusOK).Decode(t, &pm)
		by := pm.Overall.EscalationClarity.EscalationsByReason
		if by[models.ReasonWorker] != 2 || by[models.ReasonController] != 1 || len(by) != len(models.AllReasonCodes) {
			t.Fatalf("escalations by reason %v", by)
		}

		b := newBrowser(t, s, web.Config{})
		adm, _ := agent(t, b, "Ada Admin", models.RoleAdmin)
		d := getDoc(adm, "/console/admin/metrics?window=24h")
		if got := squash(d.Find(`[data-testid="reason-count"][data-code="worker"] [data-testid="reason-count-value"]`)); got != "2" {
			t.Fatalf("admin page worker escalations %q", got)
		}
	})
}
