package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// escalatedTwice takes a session through an escalation (version 4) that
// decider claims and resumes, and a second escalation by the controller:
// it returns the id, at version 7, with a review item of version 4.
func escalatedTwice(t *testing.T, s *models.Store, decider models.User) string {
	t.Helper()
	ctx := context.Background()
	id := workerEscalated(t, s, []models.Evidence{{Claim: "order paid", Source: "orders-db:1182"}})
	v := int64(4)
	if _, err := s.ClaimEscalation(ctx, id, decider, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
		t.Fatalf("claim: %v", err)
	}
	v = 5
	if _, err := s.ResumeAutomation(ctx, id, decider, "", models.ResumeInput{ExpectedVersion: &v, Queue: "refunds", Step: "issue-refund"}); err != nil {
		t.Fatalf("resume: %v", err)
	}
	v = 6
	if _, err := s.Transition(ctx, id, models.EventSessionEscalated, "token:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "refund API down"}); err != nil {
		t.Fatalf("escalate: %v", err)
	}
	if _, err := s.SyncReviewItems(ctx, models.ReviewPolicy{DoubleShare: -1}); err != nil {
		t.Fatal(err)
	}
	return id
}

// appendAudit appends the two audit-only events after the session's
// version: an SLA breach marker and reviewer's score of its first
// escalation. Neither may move the version (invariant 10).
func appendAudit(t *testing.T, s *models.Store, id string, reviewer models.User) {
	t.Helper()
	ctx := context.Background()
	before, err := s.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Execute(ctx, models.Command{SessionID: id, Type: models.EventEscalationSLABreached, Actor: models.SLAActor,
		Payload: models.SLABreachPayload{Priority: 3, Status: models.StatusEscalated}}); err != nil {
		t.Fatalf("sla marker: %v", err)
	}
	if _, err := s.ScoreReview(ctx, reviewer, "", models.ScoreInput{Key: models.ReviewKey{SessionID: id, AtVersion: 4}, Scores: rubricScores(3)}); err != nil {
		t.Fatalf("score: %v", err)
	}
	after, _ := s.GetSession(ctx, id)
	if after.LastSeq != before.LastSeq+2 {
		t.Fatalf("audit events: seq %d→%d, want two appended", before.LastSeq, after.LastSeq)
	}
}

func rubricScores(v int) map[string]int {
	m := map[string]int{}
	for _, c := range models.Rubric {
		m[c.Key] = v
	}
	return m
}

// TestAPIWriteCurrentAfterAuditEvents: a controller's write naming version 7
// succeeds after an SLA breach marker and a review score were appended; a
// work event (a note) still makes it 409.
func TestAPIWriteCurrentAfterAuditEvents(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		ana := newUser(t, s, "ana@example.com", models.RoleAgent)
		rita := newUser(t, s, "rita@example.com", models.RoleReviewer)

		id := escalatedTwice(t, s, ana)
		appendAudit(t, s, id, rita)
		if v, _ := e.sessionState(id); v != 7 {
			t.Fatalf("state_version %d after audit events, want 7", v)
		}
		r := wantStatus(t, e.post(e.controller, "/sessions/"+id+"/cancel", map[string]any{"expected_version": 7, "reason": "customer withdrew"}), http.StatusOK)
		if got := jsonInt(t, r.JSON(t), "state_version"); got != 8 {
			t.Fatalf("cancel answered state_version %d, want 8", got)
		}

		// A note is work: a write still naming 7 is stale.
		other := escalatedTwice(t, s, ana)
		appendAudit(t, s, other, rita)
		wantStatus(t, e.post(e.controller, "/sessions/"+other+"/notes", map[string]any{"text": "customer called back"}), http.StatusOK)
		p := wantProblem(t, e.post(e.controller, "/sessions/"+other+"/cancel", map[string]any{"expected_version": 7, "reason": "late"}), http.StatusConflict)
		if p.CurrentVersion == nil || *p.CurrentVersion != 8 {
			t.Fatalf("409 %+v, want current_version 8", p)
		}
	})
}

// TestConsoleFormCurrentAfterAuditEvents: an agent's open claim form
// (hidden state_version 7) is accepted after an SLA marker and a review
// score; a colleague's note still makes an open form stale (409 banner).
func TestConsoleFormCurrentAfterAuditEvents(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{Reviews: models.ReviewPolicy{DoubleShare: -1}})
		ana, anaU := agent(t, b, "Ana Agent", models.RoleAgent)
		_, ben := agent(t, b, "Ben Agent", models.RoleAgent)
		rita := newUser(t, s, "rita@example.com", models.RoleReviewer)
		ctx := context.Background()

		id := escalatedTwice(t, s, anaU)
		form := getDoc(ana, "/console/sessions/"+id).Find(`form[data-testid="action-claim"]`)
		if v, _ := form.Find(`input[name="state_version"]`).Attr("value"); v != "7" {
			t.Fatalf("claim form at version %q, want 7", v)
		}
		appendAudit(t, s, id, rita)
		p := submitForm(ana, form, nil)
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("claim after audit events: status %d, want 303\n%s", p.StatusCode, p.Body)
		}
		row, _ := s.GetSession(ctx, id)
		if row.Assignee != anaU.Actor() || row.StateVersion != 8 {
			t.Fatalf("after the claim: assignee %q version %d", row.Assignee, row.StateVersion)
		}

		// Work moves the version: Ben's note makes Ana's open form stale.
		form = getDoc(ana, "/console/sessions/"+id).Find(`form[data-testid="action-release"]`)
		if _, err := s.AddNote(ctx, id, ben, "", models.NoteInput{Text: "customer called back"}); err != nil {
			t.Fatal(err)
		}
		p = submitForm(ana, form, nil)
		if p.StatusCode != http.StatusConflict || p.Doc(t).Find(`[data-testid="conflict-banner"]`).Length() != 1 {
			t.Fatalf("release after a note: status %d, want 409 with the conflict banner", p.StatusCode)
		}
	})
}

// TestBlindReviewRedactedInReadPaths: the second reviewer of a blind double
// review sees neither the first one's scores nor comment on the session
// page, and tokens other than admin get them redacted from the events API
// and the feed.
func TestBlindReviewRedactedInReadPaths(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{Reviews: models.ReviewPolicy{DoubleShare: 1}})
		_, anaU := agent(t, b, "Ana Agent", models.RoleAgent)
		rolf, _ := agent(t, b, "Rolf Reviewer", models.RoleReviewer)
		root, _ := agent(t, b, "Root Admin", models.RoleAdmin)
		rita := newUser(t, s, "rita@example.com", models.RoleReviewer)
		e := newAPIEnv(t, s)
		s.Reviews = models.ReviewPolicy{DoubleShare: 1} // newAPIEnv's server set the default

		id := decidedBy(t, s, anaU)
		if _, err := s.SyncReviewItems(ctx, models.ReviewPolicy{DoubleShare: 1}); err != nil {
			t.Fatal(err)
		}
		const secret = "question-was-vague-7c1"
		if _, err := s.ScoreReview(ctx, rita, "", models.ScoreInput{Key: models.ReviewKey{SessionID: id, AtVersion: 4}, Scores: rubricScores(2), Comment: secret}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SequenceFeed(ctx); err != nil {
			t.Fatal(err)
		}

		// Console timeline.
		if body := rolf.get("/console/sessions/" + id).Body; !strings.Contains(body, "review.scored") || strings.Contains(body, secret) ||
			strings.Contains(body, `"goal_clear"`) {
			t.Errorf("the second reviewer's session page tells the first review (or shows no review event)")
		}
		if body := root.get("/console/sessions/" + id).Body; !strings.Contains(body, secret) {
			t.Errorf("the admin's session page hides the review comment")
		}

		reviewPayload := func(raw []byte) map[string]any {
			t.Helper()
			var page struct {
				Events []struct {
					Type    string         `json:"type"`
					Payload map[string]any `json:"payload"`
				} `json:"events"`
			}
			if err := json.Unmarshal(raw, &page); err != nil {
				t.Fatal(err)
			}
			for _, ev := range page.Events {
				if ev.Type == string(models.EventReviewScored) {
					return ev.Payload
				}
			}
			t.Fatalf("no review event in %s", raw)
			return nil
		}
		for name, raw := range map[string][]byte{
			"events API": wantStatus(t, e.get(e.controller, "/sessions/"+id+"/events"), http.StatusOK).Body,
			"feed":       wantStatus(t, e.get(e.controller, "/events?session_id="+id), http.StatusOK).Body,
		} {
			p := reviewPayload(raw)
			if p["redacted"] != true || p["scores"] != nil || strings.Contains(string(raw), secret) {
				t.Errorf("%s for a controller token: %v, want the scores and comment redacted", name, p)
			}
		}
		for name, raw := range map[string][]byte{
			"events API": wantStatus(t, e.get(e.admin, "/sessions/"+id+"/events"), http.StatusOK).Body,
			"feed":       wantStatus(t, e.get(e.admin, "/events?session_id="+id), http.StatusOK).Body,
		} {
			if p := reviewPayload(raw); p["comment"] != secret {
				t.Errorf("%s for an admin token: %v, want the comment", name, p)
			}
		}
	})
}

// reviewSnapshot renders every row of the tables a write would touch,
// review tables included.
func reviewSnapshot(t *testing.T, s *models.Store) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(apiSnapshot(t, s))
	for _, table := range []string{"review_items", "review_claims", "review_scores", "review_sync"} {
		var rows []map[string]any
		if err := s.DB.Table(table).Find(&rows).Error; err != nil {
			t.Fatalf("snapshot %s: %v", table, err)
		}
		fmt.Fprintf(&b, "%s: %d rows %v\n", table, len(rows), rows)
	}
	return b.String()
}

// TestReviewQueuePageOnlyReads: the review queue page shows a decision made
// a moment ago, and loading it writes nothing (it used to fill the queue on
// page load; the decision's own transaction does now).
func TestReviewQueuePageOnlyReads(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{Reviews: models.ReviewPolicy{DoubleShare: -1}})
		_, ana := agent(t, b, "Ana Agent", models.RoleAgent)
		rita, _ := agent(t, b, "Rita Reviewer", models.RoleReviewer)
		id := decidedBy(t, s, ana)

		before := reviewSnapshot(t, s)
		for _, path := range []string{"/console/reviews", "/console/reviews?assigned=me", "/console/reviews/" + id + "/4"} {
			getDoc(rita, path)
		}
		doc := getDoc(rita, "/console/reviews")
		if after := reviewSnapshot(t, s); after != before {
			t.Fatalf("GET of the review pages wrote:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		if got := attrs(doc.Find(`[data-testid="review-item"]`), "data-session-id"); len(got) != 1 || got[0] != id {
			t.Fatalf("queue = %v, want the decided session %s", got, id)
		}
	})
}
