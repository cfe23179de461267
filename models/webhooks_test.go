package models_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// fakeClock is a Store clock tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func newClock(s *models.Store) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Now().UnixNano())
	s.Now = c.Now
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// enqueue sequences the feed and enqueues deliveries.
func enqueue(t *testing.T, s *models.Store) int {
	t.Helper()
	ctx := context.Background()
	if _, err := s.SequenceFeed(ctx); err != nil {
		t.Fatal(err)
	}
	n, _, err := s.EnqueueWebhookDeliveries(ctx, 500)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return n
}

// jobsString shows claimed jobs without their bodies.
func jobsString(jobs []models.DeliveryJob) string {
	var b strings.Builder
	for _, j := range jobs {
		fmt.Fprintf(&b, "[%s %s#%d attempt %d secrets %d] ", j.EventID, j.SessionID, j.Seq, j.Attempt, len(j.Secrets))
	}
	return b.String()
}

func newHook(t *testing.T, s *models.Store, types ...string) models.WebhookView {
	t.Helper()
	w, secret, err := s.CreateWebhook(context.Background(), "test:admin", "", models.WebhookInput{URL: "https://example.test/hook", Types: types})
	if err != nil {
		t.Fatalf("create webhook: %v", err)
	}
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret %q", secret)
	}
	return w
}

func TestWebhookInputValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in     models.WebhookInput
		fields []string
	}{
		{models.WebhookInput{URL: "https://example.com/h"}, nil},
		{models.WebhookInput{URL: "http://127.0.0.1:8080/h", Types: []string{"session.escalated"}}, nil},
		{models.WebhookInput{URL: ""}, []string{"url"}},
		{models.WebhookInput{URL: "ftp://example.com/h"}, []string{"url"}},
		{models.WebhookInput{URL: "/relative"}, []string{"url"}},
		{models.WebhookInput{URL: "https://"}, []string{"url"}},
		{models.WebhookInput{URL: "https://u:p@example.com/"}, []string{"url"}},
		{models.WebhookInput{URL: "https://example.com/", Types: []string{"session.escalated", "nope", "also.nope"}}, []string{"types[1]", "types[2]"}},
		{models.WebhookInput{URL: "mailto:x", Types: []string{""}, Description: strings.Repeat("d", 501)}, []string{"url", "types[0]", "description"}},
	}
	for _, c := range cases {
		err := c.in.Validate()
		var ve *models.ValidationError
		if c.fields == nil {
			if err != nil {
				t.Errorf("%+v: %v", c.in, err)
			}
			continue
		}
		if !errors.As(err, &ve) {
			t.Errorf("%+v: err = %v, want a ValidationError", c.in, err)
			continue
		}
		var got []string
		for _, f := range ve.Fields {
			got = append(got, f.Field)
		}
		if strings.Join(got, ",") != strings.Join(c.fields, ",") {
			t.Errorf("%+v: fields %v, want %v", c.in, got, c.fields)
		}
	}
}

// TestWebhookEnqueueFollowsTheFeed: a webhook gets a delivery for each
// matching event committed after it was registered, once, however often the
// dispatcher runs; deleting it drops its deliveries.
func TestWebhookEnqueueFollowsTheFeed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		storetest.Session(ctx, t, s, nil) // before registration: not delivered
		enqueue(t, s)
		all := newHook(t, s)
		esc := newHook(t, s, "session.escalated", "delegation.created")
		id, _ := storetest.Delegated(ctx, t, s, "refunds")
		v := int64(2)
		if _, err := s.Transition(ctx, id, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "needs a human"}); err != nil {
			t.Fatal(err)
		}
		if n := enqueue(t, s); n != 3+2 {
			t.Fatalf("enqueued %d deliveries, want 5 (3 for the catch-all, 2 for the filtered)", n)
		}
		if n := enqueue(t, s); n != 0 {
			t.Fatalf("second pass enqueued %d", n)
		}
		ds, err := s.ListWebhookDeliveries(ctx, all.ID, 50)
		if err != nil || len(ds) != 3 {
			t.Fatalf("deliveries of the catch-all = %+v, %v", ds, err)
		}
		for i, d := range ds { // newest first
			if d.SessionID != id || d.Seq != int64(3-i) || d.Status != models.DeliveryPending || d.Attempt != 0 || d.NextAttemptAt == nil {
				t.Errorf("delivery %d = %+v", i, d)
			}
		}
		ds, _ = s.ListWebhookDeliveries(ctx, esc.ID, 50)
		if len(ds) != 2 || ds[0].Seq != 3 || ds[1].Seq != 2 {
			t.Fatalf("deliveries of the filtered webhook = %+v", ds)
		}
		if _, err := s.ListWebhookDeliveries(ctx, "whk_missing", 10); models.ErrorCode(err) != models.ENOTFOUND {
			t.Errorf("unknown webhook: %v", err)
		}
		if _, err := s.ListWebhookDeliveries(ctx, all.ID, 0); models.ErrorCode(err) != models.EINVALID {
			t.Errorf("limit 0: %v", err)
		}
		if err := s.DeleteWebhook(ctx, "test:admin", "", esc.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteWebhook(ctx, "test:admin", "", esc.ID); models.ErrorCode(err) != models.ENOTFOUND {
			t.Errorf("second delete: %v", err)
		}
		ws, err := s.ListWebhooks(ctx)
		if err != nil || len(ws) != 1 || ws[0].ID != all.ID || ws[0].Pending != 3 {
			t.Fatalf("webhooks = %+v, %v", ws, err)
		}
		var left int64
		s.DB.Raw(`SELECT count(*) FROM webhook_deliveries WHERE webhook_id = ?`, esc.ID).Scan(&left)
		if left != 0 {
			t.Errorf("%d deliveries of the deleted webhook remain", left)
		}
	})
}

// TestWebhookClaimKeepsSessionOrder: the claim never hands out seq N+1 of a
// session while seq N is pending or being sent; a failure is retried after
// a backoff; once seq N is delivered, or failed for good after
// GiveUpAfter, seq N+1 becomes due.
func TestWebhookClaimKeepsSessionOrder(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clock := newClock(s)
		newHook(t, s)
		a, _ := storetest.Delegated(ctx, t, s, "refunds") // seq 1, 2
		b := storetest.Session(ctx, t, s, nil)            // seq 1
		enqueue(t, s)
		p := models.WebhookPolicy{BaseDelay: time.Minute, MaxDelay: time.Hour, GiveUpAfter: 24 * time.Hour}

		jobs, err := s.ClaimWebhookDeliveries(ctx, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, j := range jobs {
			got[j.SessionID] = j.Seq
			if j.Attempt != 1 || j.URL == "" || len(j.Secrets) != 1 || !strings.Contains(string(j.Body), `"event_id":"`+j.EventID+`"`) {
				t.Errorf("job = %s", jobsString([]models.DeliveryJob{j}))
			}
		}
		if len(jobs) != 2 || got[a] != 1 || got[b] != 1 {
			t.Fatalf("claimed %+v; want seq 1 of each session only", jobsString(jobs))
		}
		var ja models.DeliveryJob
		for _, j := range jobs {
			if j.SessionID == a {
				ja = j
			} else if st, err := s.FinishWebhookDelivery(ctx, j, models.DeliveryResult{StatusCode: 204}, p); err != nil || st != models.DeliveryDelivered {
				t.Fatalf("finish b = %v, %v", st, err)
			}
		}
		// seq 1 of a fails: retried after the backoff, and seq 2 waits.
		if st, err := s.FinishWebhookDelivery(ctx, ja, models.DeliveryResult{StatusCode: 500}, p); err != nil || st != models.DeliveryPending {
			t.Fatalf("finish a#1 = %v, %v", st, err)
		}
		if jobs, _ := s.ClaimWebhookDeliveries(ctx, 10, time.Minute); len(jobs) != 0 {
			t.Fatalf("claimed %+v during the backoff", jobsString(jobs))
		}
		ds, _ := s.ListWebhookDeliveries(ctx, ja.WebhookID, 10)
		var d1 models.Delivery
		for _, d := range ds {
			if d.EventID == ja.EventID {
				d1 = d
			}
		}
		if d1.StatusCode == nil || *d1.StatusCode != 500 || d1.Error == "" || d1.NextAttemptAt == nil {
			t.Fatalf("after a 500: %+v", d1)
		}
		if wait := d1.NextAttemptAt.Sub(clock.Now()); wait < 30*time.Second || wait > time.Minute {
			t.Errorf("first retry in %s; want 30s..1m (base 1m, jittered)", wait)
		}
		clock.Advance(time.Minute)
		jobs, _ = s.ClaimWebhookDeliveries(ctx, 10, time.Minute)
		if len(jobs) != 1 || jobs[0].EventID != ja.EventID || jobs[0].Attempt != 2 {
			t.Fatalf("retry claimed %+v", jobsString(jobs))
		}
		// A day later the next failure is final, and seq 2 becomes due.
		clock.Advance(24 * time.Hour)
		if st, err := s.FinishWebhookDelivery(ctx, jobs[0], models.DeliveryResult{Err: "timed out"}, p); err != nil || st != models.DeliveryFailed {
			t.Fatalf("finish a#2 = %v, %v", st, err)
		}
		jobs, _ = s.ClaimWebhookDeliveries(ctx, 10, time.Minute)
		if len(jobs) != 1 || jobs[0].SessionID != a || jobs[0].Seq != 2 {
			t.Fatalf("after the failure claimed %+v; want seq 2 of a", jobsString(jobs))
		}
		ws, _ := s.ListWebhooks(ctx)
		if ws[0].Failed != 1 || ws[0].Pending != 1 {
			t.Errorf("counts = %+v", ws[0])
		}
		// Redeliver the failed one: pending again, due now.
		if err := s.RedeliverWebhook(ctx, "test:admin", "", ja.WebhookID, ja.EventID); err != nil {
			t.Fatal(err)
		}
		if err := s.RedeliverWebhook(ctx, "test:admin", "", ja.WebhookID, "evt_missing"); models.ErrorCode(err) != models.ENOTFOUND {
			t.Errorf("redeliver unknown: %v", err)
		}
		jobs2, _ := s.ClaimWebhookDeliveries(ctx, 10, time.Minute)
		if len(jobs2) != 1 || jobs2[0].EventID != ja.EventID || jobs2[0].Attempt != 3 {
			t.Fatalf("redelivery claimed %+v", jobsString(jobs2))
		}
	})
}

// TestWebhookLeaseRescue: a delivery whose dispatcher died holding it is
// claimed again once its lease expires; the dead dispatcher's late answer
// changes nothing.
func TestWebhookLeaseRescue(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clock := newClock(s)
		newHook(t, s)
		storetest.Session(ctx, t, s, nil)
		enqueue(t, s)
		dead, _ := s.ClaimWebhookDeliveries(ctx, 10, 30*time.Second)
		if len(dead) != 1 {
			t.Fatalf("claimed %d", len(dead))
		}
		if n, _ := s.RescueWebhookDeliveries(ctx); n != 0 {
			t.Fatalf("rescued %d before the lease expired", n)
		}
		if jobs, _ := s.ClaimWebhookDeliveries(ctx, 10, 30*time.Second); len(jobs) != 0 {
			t.Fatalf("claimed a leased delivery: %+v", jobsString(jobs))
		}
		clock.Advance(31 * time.Second)
		if n, err := s.RescueWebhookDeliveries(ctx); err != nil || n != 1 {
			t.Fatalf("rescued %d, %v", n, err)
		}
		jobs, _ := s.ClaimWebhookDeliveries(ctx, 10, 30*time.Second)
		if len(jobs) != 1 || jobs[0].Attempt != 2 || jobs[0].EventID != dead[0].EventID {
			t.Fatalf("after rescue claimed %+v", jobsString(jobs))
		}
		if _, err := s.FinishWebhookDelivery(ctx, dead[0], models.DeliveryResult{StatusCode: 200}, models.WebhookPolicy{}); !errors.Is(err, models.ErrLeaseLost) {
			t.Fatalf("late finish of the dead claim: %v", err)
		}
		if st, err := s.FinishWebhookDelivery(ctx, jobs[0], models.DeliveryResult{StatusCode: 200}, models.WebhookPolicy{}); err != nil || st != models.DeliveryDelivered {
			t.Fatalf("finish = %v, %v", st, err)
		}
	})
}

// TestWebhookRotationSignsWithBoth: during the grace both secrets sign;
// after it only the new one.
func TestWebhookRotationSignsWithBoth(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clock := newClock(s)
		w := newHook(t, s)
		secret, until, err := s.RotateWebhookSecret(ctx, "test:admin", "", w.ID)
		if err != nil || !strings.HasPrefix(secret, "whsec_") || until.Sub(clock.Now()).Round(time.Millisecond) != models.WebhookRotationGrace {
			t.Fatalf("rotate = %q, %v, %v", secret, until, err)
		}
		if _, _, err := s.RotateWebhookSecret(ctx, "test:admin", "", "whk_missing"); models.ErrorCode(err) != models.ENOTFOUND {
			t.Errorf("rotate unknown: %v", err)
		}
		storetest.Session(ctx, t, s, nil)
		enqueue(t, s)
		jobs, _ := s.ClaimWebhookDeliveries(ctx, 1, time.Minute)
		if len(jobs) != 1 || len(jobs[0].Secrets) != 2 || jobs[0].Secrets[0] != secret {
			t.Fatalf("during the grace: %+v", jobsString(jobs))
		}
		sig, err := models.SignWebhook(jobs[0].Secrets, "msg_1", time.Unix(1700000000, 0), []byte("{}"))
		if err != nil || len(strings.Split(sig, " ")) != 2 || !strings.HasPrefix(sig, "v1,") {
			t.Fatalf("signature %q, %v", sig, err)
		}
		ws, _ := s.ListWebhooks(ctx)
		if ws[0].SecretRotationEndsAt == nil {
			t.Errorf("the listing does not show the grace")
		}
		clock.Advance(models.WebhookRotationGrace + time.Second)
		if err := s.RedeliverWebhook(ctx, "test:admin", "", w.ID, jobs[0].EventID); err != nil {
			t.Fatal(err) // a delivery being sent is left alone
		}
		clock.Advance(time.Hour) // lease expired
		if _, err := s.RescueWebhookDeliveries(ctx); err != nil {
			t.Fatal(err)
		}
		jobs, _ = s.ClaimWebhookDeliveries(ctx, 1, time.Minute)
		if len(jobs) != 1 || len(jobs[0].Secrets) != 1 || jobs[0].Secrets[0] != secret {
			t.Fatalf("after the grace: %+v", jobsString(jobs))
		}
	})
}

func TestWebhookBackoff(t *testing.T) {
	t.Parallel()
	p := models.WebhookPolicy{BaseDelay: 5 * time.Second, MaxDelay: time.Hour}
	for n, want := range map[int]time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 5: 80 * time.Second, 12: time.Hour, 100: time.Hour} {
		for range 20 {
			if d := p.Backoff(n); d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %s, want %s..%s", n, d, want/2, want)
			}
		}
	}
	// The default schedule keeps retrying for the whole day: count attempts.
	var total time.Duration
	n := 0
	for total < 24*time.Hour {
		n++
		total += models.WebhookPolicy{}.Backoff(n)
	}
	if n < 20 {
		t.Errorf("only %d attempts in 24h", n)
	}
}

// TestWebhookClaimConcurrentPostgres: dispatchers claiming at once never get
// the same delivery and never break a session's order.
func TestWebhookClaimConcurrentPostgres(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	newHook(t, s)
	newHook(t, s)
	var sessions []string
	for range 10 {
		id, _ := storetest.Delegated(ctx, t, s, "refunds")
		v := int64(2)
		if _, err := s.Transition(ctx, id, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "x"}); err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, id)
	}
	if n := enqueue(t, s); n != 2*10*3 {
		t.Fatalf("enqueued %d", n)
	}
	type key struct{ hook, session string }
	var (
		mu        sync.Mutex
		delivered = map[key][]int64{}
		claims    = map[string]int{}
		wg        sync.WaitGroup
	)
	for w := range 6 {
		wg.Go(func() {
			for idle := 0; idle < 20; {
				jobs, err := s.ClaimWebhookDeliveries(ctx, 3, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if len(jobs) == 0 {
					idle++
					time.Sleep(5 * time.Millisecond)
					continue
				}
				idle = 0
				for _, j := range jobs {
					mu.Lock()
					claims[j.WebhookID+"/"+j.EventID]++
					k := key{j.WebhookID, j.SessionID}
					delivered[k] = append(delivered[k], j.Seq)
					mu.Unlock()
					// Fail some first attempts so that retries interleave.
					res := models.DeliveryResult{StatusCode: 200}
					if (j.Seq+int64(w))%3 == 0 && j.Attempt == 1 {
						res = models.DeliveryResult{StatusCode: 503}
					}
					if _, err := s.FinishWebhookDelivery(ctx, j, res, models.WebhookPolicy{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(delivered) != 20 {
		t.Fatalf("%d (webhook, session) pairs delivered, want 20", len(delivered))
	}
	for k, seqs := range delivered {
		// Attempts of one session are strictly sequential: each seq's
		// attempts come before the next seq's first.
		if !sort.SliceIsSorted(seqs, func(i, j int) bool { return seqs[i] < seqs[j] }) || seqs[len(seqs)-1] != 3 {
			t.Errorf("%v: attempts in order %v", k, seqs)
		}
	}
	var open int64
	s.DB.Raw(`SELECT count(*) FROM webhook_deliveries WHERE status <> 'delivered'`).Scan(&open)
	if open != 0 {
		t.Errorf("%d deliveries not delivered", open)
	}
	_ = sessions
}

// TestWebhookFinishBatch: a batch's accepted deliveries are recorded
// together, failures one by one, and a delivery whose lease was taken over
// is left to its new holder.
func TestWebhookFinishBatch(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clock := newClock(s)
		newHook(t, s)
		for range 3 {
			storetest.Session(ctx, t, s, nil)
		}
		enqueue(t, s)
		jobs, err := s.ClaimWebhookDeliveries(ctx, 10, time.Minute)
		if err != nil || len(jobs) != 3 {
			t.Fatalf("claimed %d, %v", len(jobs), err)
		}
		// The third one's lease expires and another dispatcher takes it.
		if err := s.DB.Exec(`UPDATE webhook_deliveries SET lease_expires_at = ? WHERE event_id = ?`,
			models.NewUTCTime(clock.Now().Add(-time.Second)), jobs[2].EventID).Error; err != nil {
			t.Fatal(err)
		}
		if n, _ := s.RescueWebhookDeliveries(ctx); n != 1 {
			t.Fatalf("rescued %d", n)
		}
		again, _ := s.ClaimWebhookDeliveries(ctx, 10, time.Minute)
		if len(again) != 1 {
			t.Fatalf("reclaimed %d", len(again))
		}
		sts, err := s.FinishWebhookDeliveries(ctx, jobs, []models.DeliveryResult{{StatusCode: 200}, {StatusCode: 502}, {StatusCode: 200}}, models.WebhookPolicy{})
		if !errors.Is(err, models.ErrLeaseLost) {
			t.Fatalf("err = %v, want the lost lease reported", err)
		}
		if sts[0] != models.DeliveryDelivered || sts[1] != models.DeliveryPending || sts[2] != "" {
			t.Fatalf("statuses = %v", sts)
		}
		if st, err := s.FinishWebhookDelivery(ctx, again[0], models.DeliveryResult{StatusCode: 201}, models.WebhookPolicy{}); err != nil || st != models.DeliveryDelivered {
			t.Fatalf("the new holder's finish = %v, %v", st, err)
		}
	})
}
