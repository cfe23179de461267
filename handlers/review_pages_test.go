package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// decidedBy escalates a session through a worker and has u claim and
// complete it; the escalation is at version 4.
func decidedBy(t *testing.T, s *models.Store, u models.User) string {
	t.Helper()
	ctx := context.Background()
	id := workerEscalated(t, s, []models.Evidence{{Claim: "order paid", Source: "orders-db:1182"}})
	v := int64(4)
	if _, err := s.ClaimEscalation(ctx, id, u, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
		t.Fatalf("claim: %v", err)
	}
	v = 5
	if _, err := s.CompleteHuman(ctx, id, u, "", models.CompleteInput{ExpectedVersion: &v, Resolution: "refunded"}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	return id
}

// postRubric submits the rubric form as a browser would with only the given
// radios chosen: its hidden fields (CSRF token, idempotency key) plus fields.
func postRubric(b *browser, form *goquery.Selection, fields map[string]string) page {
	b.t.Helper()
	vals := url.Values{}
	form.Find(`input[type="hidden"]`).Each(func(_ int, in *goquery.Selection) {
		name, _ := in.Attr("name")
		v, _ := in.Attr("value")
		vals.Set(name, v)
	})
	for k, v := range fields {
		vals.Set(k, v)
	}
	action, _ := form.Attr("action")
	return b.post(action, vals)
}

func TestReviewPages(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		// No double scoring, so each item needs exactly one score.
		b := newBrowser(t, s, web.Config{Reviews: models.ReviewPolicy{DoubleShare: -1}})
		_, ana := agent(t, b, "Ana Agent", models.RoleAgent)
		rita, _ := agent(t, b, "Rita Reviewer", models.RoleReviewer)
		first := decidedBy(t, s, ana)
		second := decidedBy(t, s, ana)

		doc := getDoc(rita, "/console/reviews")
		items := doc.Find(`[data-testid="review-item"]`)
		if got := attrs(items, "data-session-id"); strings.Join(got, ",") != first+","+second {
			t.Fatalf("queue = %v, want oldest first [%s %s]", got, first, second)
		}

		// Start reviewing: the oldest item is claimed and opened.
		p := rita.submit("/console/reviews", "/console/reviews/next", nil)
		if p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != "/console/reviews/"+first+"/4" {
			t.Fatalf("next: %d %q", p.StatusCode, p.Header.Get("Location"))
		}
		doc = getDoc(rita, "/console/reviews/"+first+"/4")
		pkg := doc.Find(`[data-testid="escalation-package"]`)
		if !strings.Contains(squash(pkg), "Is a refund over 200 EUR allowed") || !strings.Contains(squash(pkg), "order paid") {
			t.Fatalf("package = %q", squash(pkg))
		}
		// The package is the one at the escalation, not today's completed session.
		if !strings.Contains(squash(pkg.Find(`[data-testid="pkg-state"]`)), "version 4") {
			t.Errorf("package state = %q", squash(pkg.Find(`[data-testid="pkg-state"]`)))
		}
		form := doc.Find(`[data-testid="rubric-form"]`)
		for _, c := range models.Rubric {
			g := form.Find(`[data-testid="score-` + c.Key + `"]`)
			if g.Find(`input[type="radio"]`).Length() != 5 || !strings.Contains(squash(g), c.Levels[4]) {
				t.Fatalf("criterion %s: %q", c.Key, squash(g))
			}
		}
		if doc.Find(`script[src^="/static/review.js"]`).Length() != 1 {
			t.Error("the page does not load review.js")
		}
		mine := getDoc(rita, "/console/reviews?assigned=me").Find(`[data-testid="review-item"]`)
		if got := attrs(mine, "data-session-id"); len(got) != 1 || got[0] != first {
			t.Fatalf("assigned to me = %v", got)
		}

		// Missing scores: 422, inline errors, the chosen ones kept.
		p = postRubric(rita, form, map[string]string{models.CriterionGoalClear: "4"})
		if p.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("incomplete score: status %d", p.StatusCode)
		}
		errDoc := p.Doc(t)
		if n := errDoc.Find(`[data-testid="field-error"]`).Length(); n != 4 {
			t.Errorf("field errors = %d, want 4", n)
		}
		if errDoc.Find(`#score-goal_clear-4[checked]`).Length() != 1 {
			t.Error("the chosen score was not kept")
		}

		// A full score: saved as review.scored, then the next item opens.
		scores := map[string]string{"comment": "clear enough"}
		for i, c := range models.Rubric {
			scores[c.Key] = []string{"5", "4", "3", "2", "1"}[i]
		}
		p = postRubric(rita, form, scores)
		if p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != "/console/reviews/"+second+"/4" {
			t.Fatalf("score: %d %q\n%s", p.StatusCode, p.Header.Get("Location"), p.Body)
		}
		evs, err := s.Timeline(context.Background(), first, models.EventReviewScored)
		if err != nil || len(evs) != 1 {
			t.Fatalf("review events = %d, %v", len(evs), err)
		}
		var payload models.ReviewPayload
		if err := json.Unmarshal([]byte(evs[0].Payload), &payload); err != nil {
			t.Fatal(err)
		}
		if payload.AtVersion != 4 || payload.Scores[models.CriterionRisksExplicit] != 2 || payload.Comment != "clear enough" {
			t.Fatalf("payload = %+v", payload)
		}
		// The same form again is an idempotent repeat, not a second score.
		p = postRubric(rita, form, scores)
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("repeat: %d", p.StatusCode)
		}
		if evs, _ := s.Timeline(context.Background(), first, models.EventReviewScored); len(evs) != 1 {
			t.Fatalf("a repeat wrote %d review events", len(evs))
		}

		// A second reviewer cannot take the item Rita holds.
		ruth, _ := agent(t, b, "Ruth Reviewer", models.RoleReviewer)
		doc = getDoc(ruth, "/console/reviews/"+second+"/4")
		if doc.Find(`[data-testid="review-unavailable"]`).Length() != 1 || doc.Find(`[data-testid="rubric-form"]`).Length() != 0 {
			t.Fatal("a held item offers its rubric to another reviewer")
		}
		p = ruth.submit("/console/reviews", "/console/reviews/"+second+"/4/claim", nil)
		if p.StatusCode != http.StatusConflict || !strings.Contains(p.Body, "another reviewer is scoring it") {
			t.Fatalf("claim of a held item: %d", p.StatusCode)
		}
		// Rita releases it; then Ruth can.
		p = rita.submit("/console/reviews", "/console/reviews/"+second+"/4/release", nil)
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("release: %d", p.StatusCode)
		}
		p = ruth.submit("/console/reviews", "/console/reviews/"+second+"/4/claim", nil)
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("claim after release: %d", p.StatusCode)
		}

		if p := rita.get("/console/reviews/" + first + "/99"); p.StatusCode != http.StatusNotFound {
			t.Errorf("unknown item: %d", p.StatusCode)
		}
		if p := rita.get("/console/reviews/" + first + "/x"); p.StatusCode != http.StatusNotFound {
			t.Errorf("bad version: %d", p.StatusCode)
		}
		agentB, _ := agent(t, b, "Al Agent", models.RoleAgent)
		if p := agentB.get("/console/reviews"); p.StatusCode != http.StatusForbidden {
			t.Errorf("agent on the review queue: %d", p.StatusCode)
		}

		// Statistics show the score.
		doc = getDoc(rita, "/console/reviews/stats")
		row := doc.Find(`[data-testid="stats-by-queue"] tr[data-queue="refunds"]`)
		var cells []string
		row.Find("td").Each(func(_ int, td *goquery.Selection) { cells = append(cells, squash(td)) })
		if got := strings.Join(cells, " "); got != "5.00 4.00 3.00 2.00 1.00 1" {
			t.Errorf("stats row = %q", got)
		}
		if p := rita.get("/console/reviews/stats?window=7y"); p.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("bad window: %d", p.StatusCode)
		}
		getDoc(rita, "/console/reviews/stats?window=365d")
	})
}

func TestReviewNextWhenEmpty(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		rita, _ := agent(t, b, "Rita Reviewer", models.RoleReviewer)
		p := rita.submit("/console/reviews", "/console/reviews/next", url.Values{})
		if p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != "/console/reviews" {
			t.Fatalf("next on an empty queue: %d %q", p.StatusCode, p.Header.Get("Location"))
		}
		doc := getDoc(rita, "/console/reviews")
		if !strings.Contains(squash(doc.Find("#banners")), "Nothing left to review") || doc.Find(`[data-testid="review-empty"]`).Length() != 1 {
			t.Fatalf("empty queue page: %q", squash(doc.Find("main")))
		}
	})
}
