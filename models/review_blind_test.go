package models_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// blindPayload decodes a review.scored payload as a reader got it.
type blindPayload struct {
	Reviewer string         `json:"reviewer"`
	Scores   map[string]int `json:"scores"`
	Comment  string         `json:"comment"`
	Redacted bool           `json:"redacted"`
}

func blindOf(t *testing.T, payload string) blindPayload {
	t.Helper()
	var p blindPayload
	if err := json.Unmarshal([]byte(payload), &p); err != nil {
		t.Fatalf("payload %s: %v", payload, err)
	}
	return p
}

// TestBlindDoubleReviewRedacted: while a double review waits for its second
// score, the first reviewer's scores and comment reach no other reader but
// admins, in every read path of the models (timeline, feed, webhook
// bodies); once the reader scored, or the item has all its scores, they do.
func TestBlindDoubleReviewRedacted(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		rita := mustUser(t, s, "rita@example.com", models.RoleReviewer)
		rolf := mustUser(t, s, "rolf@example.com", models.RoleReviewer)
		admin := mustUser(t, s, "root@example.com", models.RoleAdmin)
		p := models.ReviewPolicy{DoubleShare: 1}
		s.Reviews = p
		hook := newHook(t, s, string(models.EventReviewScored))
		sid := decided(ctx, t, s, agent, "refunds")
		if _, err := s.SyncReviewItems(ctx, p); err != nil {
			t.Fatal(err)
		}
		k := models.ReviewKey{SessionID: sid, AtVersion: 4}
		if _, err := s.ClaimReview(ctx, k, rolf, p); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ScoreReview(ctx, rita, "", models.ScoreInput{Key: k, Scores: allScores(2), Comment: "question was vague"}); err != nil {
			t.Fatal(err)
		}

		timeline := func(u models.User) blindPayload {
			t.Helper()
			d, err := s.GetSessionDetail(ctx, sid, models.ReaderOfUser(u))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range d.Events {
				if e.Type == models.EventReviewScored {
					return blindOf(t, e.Payload)
				}
			}
			t.Fatal("no review event in the timeline")
			return blindPayload{}
		}
		feed := func(r models.ReviewReader) blindPayload {
			t.Helper()
			if _, err := s.SequenceFeed(ctx); err != nil {
				t.Fatal(err)
			}
			page, err := s.ReadFeed(ctx, models.FeedQuery{SessionID: sid, Types: []models.EventType{models.EventReviewScored}, Reader: r})
			if err != nil || len(page.Events) == 0 {
				t.Fatalf("feed %+v %v", page, err)
			}
			return blindOf(t, string(page.Events[0].Payload))
		}
		hidden := func(where string, p blindPayload) {
			t.Helper()
			if !p.Redacted || p.Scores != nil || p.Comment != "" || p.Reviewer != rita.Actor() {
				t.Errorf("%s: %+v, want the scores and comment redacted", where, p)
			}
		}
		shown := func(where string, p blindPayload) {
			t.Helper()
			if p.Redacted || p.Scores["goal_clear"] != 2 || p.Comment != "question was vague" {
				t.Errorf("%s: %+v, want the scores and comment", where, p)
			}
		}

		hidden("second reviewer's timeline", timeline(rolf))
		hidden("agent's timeline", timeline(agent))
		shown("author's timeline", timeline(rita))
		shown("admin's timeline", timeline(admin))
		hidden("second reviewer's feed", feed(models.ReaderOfUser(rolf)))
		hidden("controller token's feed", feed(models.ReaderOfToken(models.APIToken{Name: "ctl", Role: models.RoleController})))
		shown("admin token's feed", feed(models.ReaderOfToken(models.APIToken{Name: "root", Role: models.RoleAdmin})))
		enqueue(t, s)
		jobs, err := s.ClaimWebhookDeliveries(ctx, 10, time.Minute)
		if err != nil || len(jobs) != 1 || jobs[0].WebhookID != hook.ID {
			t.Fatalf("jobs %s %v", jobsString(jobs), err)
		}
		var body struct{ Payload json.RawMessage }
		if err := json.Unmarshal(jobs[0].Body, &body); err != nil {
			t.Fatal(err)
		}
		hidden("webhook body", blindOf(t, string(body.Payload)))
		if strings.Contains(string(jobs[0].Body), "vague") {
			t.Errorf("webhook body tells the comment: %s", jobs[0].Body)
		}

		// Rolf scores: now he may read Rita's, and with all scores in the
		// review is no longer blind to anyone.
		if _, err := s.ScoreReview(ctx, rolf, "", models.ScoreInput{Key: k, Scores: allScores(5)}); err != nil {
			t.Fatal(err)
		}
		shown("second reviewer's timeline after scoring", timeline(rolf))
		shown("agent's timeline after both scores", timeline(agent))
		shown("controller token's feed after both scores", feed(models.ReaderOfToken(models.APIToken{Name: "ctl", Role: models.RoleController})))
		// The stored event is never changed: verify still passes.
		verifyAll(ctx, t, s)
	})
}

// TestMayReadReview is the rule's table.
func TestMayReadReview(t *testing.T) {
	t.Parallel()
	double := models.ReviewItem{Needed: 2, Scored: 1}
	for _, c := range []struct {
		name   string
		r      models.ReviewReader
		item   models.ReviewItem
		scored bool
		want   bool
	}{
		{"other reviewer, blind", models.ReviewReader{Actor: "user:b"}, double, false, false},
		{"no identity, blind", models.ReviewReader{}, double, false, false},
		{"author", models.ReviewReader{Actor: "user:a"}, double, false, true},
		{"admin", models.ReviewReader{Actor: "user:c", Admin: true}, double, false, true},
		{"reader scored", models.ReviewReader{Actor: "user:b"}, double, true, true},
		{"all scores in", models.ReviewReader{}, models.ReviewItem{Needed: 2, Scored: 2}, false, true},
		{"single review", models.ReviewReader{}, models.ReviewItem{Needed: 1, Scored: 1}, false, true},
	} {
		if got := models.MayReadReview(c.r, "user:a", c.item, c.scored); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
