package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// received is one request a test receiver got.
type received struct {
	header http.Header
	body   []byte
	msg    models.WebhookBody
	status int
}

// receiver is a webhook receiver: answer decides each response (n counts
// requests from 1); it dedupes on webhook-id as receivers must.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	answer func(n int, r received) int
	mu     sync.Mutex
	got    []received
	seen   map[string]bool // webhook-ids answered 2xx
	n      int             // requests arrived, answered or not
	onRecv func(r received)
}

func newReceiver(t *testing.T, answer func(n int, r received) int) *receiver {
	rc := &receiver{t: t, answer: answer, seen: map[string]bool{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		in := received{header: r.Header.Clone(), body: body}
		if err := json.Unmarshal(body, &in.msg); err != nil {
			t.Errorf("delivery body %q: %v", body, err)
		}
		rc.mu.Lock()
		rc.n++
		n := rc.n
		if rc.onRecv != nil {
			rc.onRecv(in)
		}
		rc.mu.Unlock()
		code := rc.answer(n, in)
		if code == 0 { // hang until the dispatcher gives up
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		in.status = code
		rc.mu.Lock()
		rc.got = append(rc.got, in)
		if code/100 == 2 {
			rc.seen[r.Header.Get("webhook-id")] = true
		}
		rc.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

func (rc *receiver) unique() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.seen)
}

func fastPolicy() models.WebhookPolicy {
	return models.WebhookPolicy{Timeout: 300 * time.Millisecond, BaseDelay: 20 * time.Millisecond, MaxDelay: 40 * time.Millisecond, Lease: 2 * time.Second}
}

func registerHook(t *testing.T, s *models.Store, url string, types ...string) (models.WebhookView, string) {
	t.Helper()
	w, secret, err := s.CreateWebhook(context.Background(), "test:admin", "", models.WebhookInput{URL: url, Types: types})
	if err != nil {
		t.Fatal(err)
	}
	return w, secret
}

// drain sequences the feed and runs passes until cond holds.
func drain(t *testing.T, s *models.Store, d *Dispatcher, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("deliveries did not finish in 20s")
		}
		if _, err := s.SequenceFeed(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// verifyCase is one delivery for the independent verifier.
type verifyCase struct {
	Secret  string            `json:"secret"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

type verifyResult struct {
	OK      bool   `json:"ok"`
	EventID string `json:"event_id"`
	Error   string `json:"error"`
}

// nodeVerify checks signatures with the standardwebhooks npm package (in
// testdata/webhooks-verify; `make test` runs npm ci there).
func nodeVerify(t *testing.T, cases []verifyCase) []verifyResult {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: the webhook signatures are checked with the standardwebhooks npm package; install Node.js and run `npm ci` in web/testdata/webhooks-verify (make test does it)")
	}
	dir, _ := filepath.Abs(filepath.Join("testdata", "webhooks-verify"))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "standardwebhooks")); err != nil {
		t.Fatalf("the standardwebhooks npm package is not installed: run `npm ci` in %s (make test does it)", dir)
	}
	in := filepath.Join(t.TempDir(), "cases.json")
	b, _ := json.Marshal(cases)
	if err := os.WriteFile(in, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join(dir, "verify.js"), in)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("node verify.js: %v\n%s", err, stderr)
	}
	var res []verifyResult
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(cases) {
		t.Fatalf("verify.js answered %s (%v)", out, err)
	}
	return res
}

func caseOf(secret string, r received) verifyCase {
	return verifyCase{Secret: secret, Body: string(r.body), Headers: map[string]string{
		"webhook-id":        r.header.Get("webhook-id"),
		"webhook-timestamp": r.header.Get("webhook-timestamp"),
		"webhook-signature": r.header.Get("webhook-signature"),
	}}
}

// TestWebhookSignaturesVerifyIndependently: deliveries carry the contract's
// body and headers, and the standardwebhooks npm package accepts their
// signatures; a tampered body or another secret is refused. After a secret
// rotation, during the grace, the new and the old secret both verify.
func TestWebhookSignaturesVerifyIndependently(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		rc := newReceiver(t, func(int, received) int { return 204 })
		w, secret := registerHook(t, s, rc.srv.URL+"/hooks")
		d := &Dispatcher{Store: s, Policy: fastPolicy(), Log: slog.New(slog.DiscardHandler)}
		id, _ := storetest.Delegated(ctx, t, s, "refunds")
		drain(t, s, d, func() bool { return rc.unique() == 2 })

		got := rc.requests()
		first := got[0]
		if first.msg.SessionID != id || first.msg.Seq != 1 || first.msg.Type != models.EventSessionCreated ||
			first.msg.StateVersion != 1 || first.msg.EventID == "" || first.header.Get("webhook-id") != first.msg.EventID ||
			len(first.msg.Payload) == 0 || first.msg.CreatedAt.IsZero() {
			t.Errorf("first delivery = %+v, headers %v", first.msg, first.header)
		}
		var top map[string]json.RawMessage
		_ = json.Unmarshal(first.body, &top)
		for _, k := range []string{"event_id", "type", "session_id", "seq", "state_version", "created_at", "payload"} {
			if _, ok := top[k]; !ok {
				t.Errorf("body lacks %q: %s", k, first.body)
			}
		}
		if ct := first.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}

		tampered := caseOf(secret, got[1])
		tampered.Body = strings.Replace(tampered.Body, `"seq":2`, `"seq":3`, 1)
		res := nodeVerify(t, []verifyCase{
			caseOf(secret, got[0]), caseOf(secret, got[1]), tampered, caseOf(models.NewWebhookSecret(), got[0]),
		})
		if !res[0].OK || !res[1].OK || res[0].EventID != got[0].msg.EventID {
			t.Fatalf("standardwebhooks refused our signatures: %+v", res)
		}
		if res[2].OK || res[3].OK {
			t.Fatalf("standardwebhooks accepted a tampered body or a wrong secret: %+v", res)
		}

		// Rotation: both secrets verify during the grace.
		newSecret, _, err := s.RotateWebhookSecret(ctx, "test:admin", "", w.ID)
		if err != nil {
			t.Fatal(err)
		}
		storetest.Session(ctx, t, s, nil)
		drain(t, s, d, func() bool { return rc.unique() == 3 })
		third := rc.requests()[2]
		if n := len(strings.Fields(third.header.Get("webhook-signature"))); n != 2 {
			t.Fatalf("during the grace webhook-signature has %d signatures: %q", n, third.header.Get("webhook-signature"))
		}
		res = nodeVerify(t, []verifyCase{caseOf(newSecret, third), caseOf(secret, third)})
		if !res[0].OK || !res[1].OK {
			t.Fatalf("during the grace: new secret %+v, old secret %+v", res[0], res[1])
		}
	})
}

// TestWebhookFailsTimesOutRecovers: a receiver that answers 500, then
// hangs past the timeout, then 200: the delivery is retried with backoff,
// every attempt is recorded, and it ends delivered after three attempts.
func TestWebhookFailsTimesOutRecovers(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		rc := newReceiver(t, func(n int, _ received) int {
			switch n {
			case 1:
				return 500
			case 2:
				return 0 // hang: the dispatcher times out
			}
			return 200
		})
		w, _ := registerHook(t, s, rc.srv.URL, "session.created")
		d := &Dispatcher{Store: s, Policy: fastPolicy(), Log: slog.New(slog.DiscardHandler)}
		storetest.Session(ctx, t, s, nil)
		if _, err := s.SequenceFeed(ctx); err != nil {
			t.Fatal(err)
		}
		log := func() models.Delivery {
			t.Helper()
			ds, err := s.ListWebhookDeliveries(ctx, w.ID, 10)
			if err != nil || len(ds) != 1 {
				t.Fatalf("deliveries = %+v, %v", ds, err)
			}
			return ds[0]
		}

		rep, err := d.Pass(ctx)
		if err != nil || rep.Enqueued != 1 || rep.Retrying != 1 {
			t.Fatalf("pass 1 = %+v, %v", rep, err)
		}
		l := log()
		if l.Status != models.DeliveryPending || l.Attempt != 1 || l.StatusCode == nil || *l.StatusCode != 500 ||
			l.Error != "receiver answered 500" || l.NextAttemptAt == nil || !l.NextAttemptAt.After(l.UpdatedAt.Time) {
			t.Fatalf("after the 500: %+v", l)
		}
		time.Sleep(40 * time.Millisecond)
		start := time.Now()
		if rep, err := d.Pass(ctx); err != nil || rep.Retrying != 1 {
			t.Fatalf("pass 2 = %+v, %v", rep, err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("the hung attempt took %s; the timeout is %s", el, d.Policy.Timeout)
		}
		l = log()
		if l.Status != models.DeliveryPending || l.Attempt != 2 || l.StatusCode != nil || !strings.Contains(l.Error, "timed out") {
			t.Fatalf("after the timeout: %+v", l)
		}
		time.Sleep(60 * time.Millisecond)
		if rep, err := d.Pass(ctx); err != nil || rep.Delivered != 1 {
			t.Fatalf("pass 3 = %+v, %v", rep, err)
		}
		l = log()
		if l.Status != models.DeliveryDelivered || l.Attempt != 3 || l.StatusCode == nil || *l.StatusCode != 200 ||
			l.Error != "" || l.DeliveredAt == nil || l.NextAttemptAt != nil {
			t.Fatalf("after the recovery: %+v", l)
		}
		if got := rc.requests(); len(got) != 2 || rc.unique() != 1 || got[0].header.Get("webhook-id") != got[1].header.Get("webhook-id") {
			t.Fatalf("the receiver answered %d requests (%d unique)", len(got), rc.unique())
		}
		// Nothing more is sent.
		time.Sleep(60 * time.Millisecond)
		if rep, _ := d.Pass(ctx); rep != (PassReport{}) {
			t.Fatalf("a delivered event was sent again: %+v", rep)
		}
	})
}

// TestWebhookSessionOrderUnderFailures: with a receiver that fails at
// random and three dispatchers (three server processes) at once, every
// event arrives, and no event of a session reaches the receiver before
// every earlier event of that session was accepted.
func TestWebhookSessionOrderUnderFailures(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		var (
			mu       sync.Mutex
			accepted = map[string]int64{} // session -> highest seq accepted
			failures atomic.Int64
		)
		rc := newReceiver(t, func(_ int, r received) int {
			mu.Lock()
			defer mu.Unlock()
			if hi := accepted[r.msg.SessionID]; r.msg.Seq > hi+1 {
				t.Errorf("session %s: seq %d arrived before seq %d was accepted", r.msg.SessionID, r.msg.Seq, hi+1)
			}
			if rand.IntN(10) < 4 {
				failures.Add(1)
				return 503
			}
			if r.msg.Seq > accepted[r.msg.SessionID] {
				accepted[r.msg.SessionID] = r.msg.Seq
			}
			return 200
		})
		registerHook(t, s, rc.srv.URL)
		const sessions = 6
		for range sessions {
			id, _ := storetest.Delegated(ctx, t, s, "refunds")
			v := int64(2)
			if _, err := s.Transition(ctx, id, models.EventSessionPaused, "test:controller", "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
				t.Fatal(err)
			}
			v = 3
			if _, err := s.Transition(ctx, id, models.EventSessionResumed, "test:controller", "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.SequenceFeed(ctx); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		deadline := time.Now().Add(30 * time.Second)
		for range 3 {
			wg.Go(func() {
				d := &Dispatcher{Store: s, Policy: fastPolicy(), Batch: 2, Log: slog.New(slog.DiscardHandler)}
				for rc.unique() < sessions*4 && time.Now().Before(deadline) {
					if _, err := d.Pass(ctx); err != nil && !strings.Contains(err.Error(), "locked") {
						t.Error(err)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		if rc.unique() != sessions*4 {
			t.Fatalf("%d of %d events delivered", rc.unique(), sessions*4)
		}
		for id, hi := range accepted {
			if hi != 4 {
				t.Errorf("session %s: last accepted seq %d", id, hi)
			}
		}
		if failures.Load() == 0 {
			t.Errorf("the receiver never failed: the test proves nothing")
		}
	})
}

// TestWebhookDispatcherKilledMidDelivery: a dispatcher sends a delivery
// and dies before recording it; once its lease expires another dispatcher
// sends it again. The receiver gets it twice and, deduping on webhook-id,
// processes it once.
func TestWebhookDispatcherKilledMidDelivery(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		rc := newReceiver(t, func(int, received) int { return 200 })
		w, _ := registerHook(t, s, rc.srv.URL)
		storetest.Session(ctx, t, s, nil)
		if _, err := s.SequenceFeed(ctx); err != nil {
			t.Fatal(err)
		}
		policy := fastPolicy()
		policy.Lease = 300 * time.Millisecond
		dead := &Dispatcher{Store: s, Policy: policy, Log: slog.New(slog.DiscardHandler)}
		dead.defaults()
		if _, _, err := s.EnqueueWebhookDeliveries(ctx, 100); err != nil {
			t.Fatal(err)
		}
		jobs, err := s.ClaimWebhookDeliveries(ctx, 10, policy.Lease)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim = %d, %v", len(jobs), err)
		}
		if res := dead.send(ctx, jobs[0]); !res.OK() {
			t.Fatalf("send = %+v", res)
		}
		// ...and the process dies here, before FinishWebhookDelivery.

		other := &Dispatcher{Store: s, Policy: policy, Log: slog.New(slog.DiscardHandler)}
		if rep, err := other.Pass(ctx); err != nil || rep.Delivered != 0 {
			t.Fatalf("while the lease runs: %+v, %v", rep, err)
		}
		time.Sleep(policy.Lease + 50*time.Millisecond)
		rep, err := other.Pass(ctx)
		if err != nil || rep.Rescued != 1 || rep.Delivered != 1 {
			t.Fatalf("after the lease: %+v, %v", rep, err)
		}
		got := rc.requests()
		if len(got) != 2 || rc.unique() != 1 || got[0].header.Get("webhook-id") != got[1].header.Get("webhook-id") {
			t.Fatalf("receiver got %d requests, %d unique", len(got), rc.unique())
		}
		ds, _ := s.ListWebhookDeliveries(ctx, w.ID, 10)
		if len(ds) != 1 || ds[0].Status != models.DeliveryDelivered || ds[0].Attempt != 2 {
			t.Fatalf("log = %+v", ds)
		}
	})
}

// TestWebhookRunWakesOnTheFeed: the dispatcher loop (as Serve runs it,
// with the sequencer) delivers a new event well before its period.
func TestWebhookRunWakesOnTheFeed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rc := newReceiver(t, func(int, received) int { return 200 })
		registerHook(t, s, rc.srv.URL)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Go(func() { s.RunSequencer(ctx, time.Minute) })
		d := &Dispatcher{Store: s, Policy: fastPolicy(), Log: slog.New(slog.DiscardHandler)}
		wg.Go(func() { d.Run(ctx, time.Minute) })
		time.Sleep(100 * time.Millisecond) // the loop is waiting on the feed
		start := time.Now()
		storetest.Session(ctx, t, s, nil)
		for rc.unique() < 1 {
			if time.Since(start) > 20*time.Second {
				t.Fatal("not delivered within 20s; the period is a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("delivered %s after the commit", time.Since(start).Round(time.Millisecond))
	})
}

// TestWebhookPageHeldBehindOpenDelivery: the fast path sends new feed
// events straight from the feed, but never past an open delivery of the
// same session: with seq 1 of a session waiting for its retry, seq 2 of it
// (and seq 3, committed later) are recorded as pending behind it and sent
// only after seq 1 was accepted, while another session's event goes out at
// once.
func TestWebhookPageHeldBehindOpenDelivery(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		var (
			mu    sync.Mutex
			order []string
			fail  = true
		)
		rc := newReceiver(t, func(_ int, r received) int {
			mu.Lock()
			defer mu.Unlock()
			if fail && r.msg.Seq == 1 {
				return 503
			}
			order = append(order, r.msg.SessionID+"/"+strconv.FormatInt(r.msg.Seq, 10))
			return 200
		})
		w, _ := registerHook(t, s, rc.srv.URL)
		policy := fastPolicy()
		policy.BaseDelay, policy.MaxDelay = time.Hour, time.Hour // seq 1 waits until told
		d := &Dispatcher{Store: s, Policy: policy, Log: slog.New(slog.DiscardHandler)}
		a := storetest.Session(ctx, t, s, nil)
		if _, err := s.SequenceFeed(ctx); err != nil {
			t.Fatal(err)
		}
		if rep, err := d.Pass(ctx); err != nil || rep.Enqueued != 1 || rep.Retrying != 1 {
			t.Fatalf("pass 1 = %+v, %v", rep, err)
		}
		mu.Lock()
		fail = false
		mu.Unlock()
		for v := int64(1); v <= 2; v++ {
			typ := models.EventSessionPaused
			if v == 2 {
				typ = models.EventSessionResumed
			}
			if _, err := s.Transition(ctx, a, typ, "test:controller", "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
				t.Fatal(err)
			}
		}
		b := storetest.Session(ctx, t, s, nil)
		if _, err := s.SequenceFeed(ctx); err != nil {
			t.Fatal(err)
		}
		rep, err := d.Pass(ctx)
		if err != nil || rep.Enqueued != 3 || rep.Delivered != 1 {
			t.Fatalf("pass 2 = %+v, %v", rep, err)
		}
		mu.Lock()
		if len(order) != 1 || order[0] != b+"/1" {
			t.Fatalf("sent %v; want only %s/1: %s's events wait behind its seq 1", order, b, a)
		}
		mu.Unlock()
		// seq 1 becomes due; then everything goes, in order.
		if err := s.DB.Exec(`UPDATE webhook_deliveries SET next_attempt_at = ? WHERE event_id IN (SELECT id FROM events WHERE session_id = ? AND seq = 1)`,
			models.NewUTCTime(time.Now().Add(-time.Second)), a).Error; err != nil {
			t.Fatal(err)
		}
		drain(t, s, d, func() bool { return rc.unique() == 4 })
		mu.Lock()
		defer mu.Unlock()
		want := []string{b + "/1", a + "/1", a + "/2", a + "/3"}
		if !slices.Equal(order, want) {
			t.Fatalf("accepted in order %v, want %v", order, want)
		}
		ds, _ := s.ListWebhookDeliveries(ctx, w.ID, 10)
		for _, dl := range ds {
			if dl.Status != models.DeliveryDelivered {
				t.Errorf("delivery %+v not delivered", dl)
			}
		}
	})
}

// TestWebhookPageLeaseAndCrash: a dispatcher leases a page of the feed,
// sends it and dies before recording it. While its lease runs no other
// dispatcher sends the page; once it expired another one sends it again
// (at least once) and records it, and the cursor moves on: nothing is sent
// a third time.
func TestWebhookPageLeaseAndCrash(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		rc := newReceiver(t, func(int, received) int { return 200 })
		w, _ := registerHook(t, s, rc.srv.URL)
		storetest.Session(ctx, t, s, nil)
		storetest.Session(ctx, t, s, nil)
		if _, err := s.SequenceFeed(ctx); err != nil {
			t.Fatal(err)
		}
		policy := fastPolicy()
		policy.Lease = 300 * time.Millisecond
		dead := &Dispatcher{Store: s, Policy: policy, Log: slog.New(slog.DiscardHandler)}
		dead.defaults()
		hooks, err := s.WebhookCursors(ctx)
		if err != nil || len(hooks) != 1 {
			t.Fatalf("cursors = %+v, %v", hooks, err)
		}
		page, err := s.LeaseWebhookPage(ctx, hooks[0], 100, policy.Lease)
		if err != nil || page == nil || len(page.Jobs) != 2 {
			t.Fatalf("page = %+v, %v", page, err)
		}
		for _, j := range page.Jobs {
			if res := dead.send(ctx, j); !res.OK() {
				t.Fatalf("send = %+v", res)
			}
		}
		// ...and the process dies here, before RecordWebhookPage.

		other := &Dispatcher{Store: s, Policy: policy, Log: slog.New(slog.DiscardHandler)}
		if rep, err := other.Pass(ctx); err != nil || rep != (PassReport{}) {
			t.Fatalf("while the lease runs: %+v, %v", rep, err)
		}
		if got := len(rc.requests()); got != 2 {
			t.Fatalf("the page was sent %d times during the lease", got)
		}
		time.Sleep(policy.Lease + 50*time.Millisecond)
		if rep, err := other.Pass(ctx); err != nil || rep.Enqueued != 2 || rep.Delivered != 2 {
			t.Fatalf("after the lease: %+v, %v", rep, err)
		}
		if got := len(rc.requests()); got != 4 || rc.unique() != 2 {
			t.Fatalf("receiver got %d requests, %d unique; want 4, 2", got, rc.unique())
		}
		// The dead dispatcher's late record changes nothing.
		if _, err := s.RecordWebhookPage(ctx, page, []bool{true, true}, []models.DeliveryResult{{StatusCode: 200}, {StatusCode: 200}}, policy); !errors.Is(err, models.ErrLeaseLost) {
			t.Fatalf("late record = %v, want ErrLeaseLost", err)
		}
		if rep, err := other.Pass(ctx); err != nil || rep != (PassReport{}) {
			t.Fatalf("after recording: %+v, %v", rep, err)
		}
		ds, _ := s.ListWebhookDeliveries(ctx, w.ID, 10)
		if len(ds) != 2 || ds[0].Status != models.DeliveryDelivered || ds[0].Attempt != 1 || ds[1].Status != models.DeliveryDelivered {
			t.Fatalf("log = %+v", ds)
		}
	})
}

// TestWebhookPageStatements pins what delivering the feed costs the
// database on PostgreSQL, in statements counted on the store's pool
// (models.Store.PoolStats): a pass reads the cursors once (and, with no
// delivery open anywhere, nothing else of the claim path), and each page
// of the feed takes four statements whatever its size: the feed's end and
// the page, the lease (which brings back the sessions still held), and the
// record (cursor moved and one row per event inserted, in one statement).
// A statement per event, or one that slips back in per page, fails here
// rather than as a slower bench. The rows recorded are checked too.
func TestWebhookPageStatements(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	rc := newReceiver(t, func(int, received) int { return 204 })
	w, _ := registerHook(t, s, rc.srv.URL)
	d := &Dispatcher{Store: s, EnqueueLimit: 10, Log: slog.New(slog.DiscardHandler)}
	measure := func(sessions, wantEvents, wantStatements int) {
		t.Helper()
		// Sessions created only: a delegation would also send a queue
		// notice from the store's announcer, a statement of the write
		// path that may land inside the measure.
		for range sessions {
			storetest.Session(ctx, t, s, nil)
		}
		if _, err := s.SequenceFeed(ctx); err != nil {
			t.Fatal(err)
		}
		st0, _ := s.PoolStats()
		rep, err := d.Pass(ctx)
		st1, _ := s.PoolStats()
		if err != nil || rep.Delivered != wantEvents {
			t.Fatalf("pass = %+v, %v; want %d delivered", rep, err, wantEvents)
		}
		if got := st1 - st0; got != int64(wantStatements) {
			t.Errorf("%d events delivered with %d statements; want %d", wantEvents, got, wantStatements)
		}
	}
	// One event per session. One page of 4: cursors, then 4 for the page.
	measure(4, 4, 1+4)
	// Three pages of 10, 10 and 4: the statements follow the pages, not
	// the events.
	measure(24, 24, 1+3*4)
	// Nothing new: the cursors and the feed's end.
	measure(0, 0, 2)

	ds, err := s.ListWebhookDeliveries(ctx, w.ID, 100)
	if err != nil || len(ds) != 28 {
		t.Fatalf("deliveries = %d, %v; want 28", len(ds), err)
	}
	for _, dl := range ds {
		if dl.Status != models.DeliveryDelivered || dl.Attempt != 1 || dl.StatusCode == nil || *dl.StatusCode != 204 ||
			dl.Error != "" || dl.DeliveredAt == nil || dl.NextAttemptAt != nil || !dl.DeliveredAt.Equal(dl.UpdatedAt.Time) {
			t.Errorf("delivery recorded as %+v; want delivered at the first attempt with 204, when it was recorded", dl)
		}
	}
	if rc.unique() != 28 {
		t.Errorf("receiver got %d events, want 28", rc.unique())
	}

	// A page whose delivery gets no answer: recorded pending, without a
	// status code, with the reason and its retry after the time it was
	// recorded; the session's second event waits behind it, due now.
	hang := newReceiver(t, func(int, received) int { return 0 })
	if err := s.DeleteWebhook(ctx, "test:admin", "", w.ID); err != nil {
		t.Fatal(err)
	}
	w2, _ := registerHook(t, s, hang.srv.URL)
	d2 := &Dispatcher{Store: s, Policy: fastPolicy(), Log: slog.New(slog.DiscardHandler)}
	storetest.Delegated(ctx, t, s, "stmts")
	if _, err := s.SequenceFeed(ctx); err != nil {
		t.Fatal(err)
	}
	if rep, err := d2.Pass(ctx); err != nil || rep.Retrying != 1 {
		t.Fatalf("pass = %+v, %v; want 1 retrying", rep, err)
	}
	ds, err = s.ListWebhookDeliveries(ctx, w2.ID, 10)
	if err != nil || len(ds) != 2 {
		t.Fatalf("deliveries = %+v, %v", ds, err)
	}
	held, first := ds[0], ds[1] // newest first
	if first.Status != models.DeliveryPending || first.Attempt != 1 || first.StatusCode != nil || !strings.Contains(first.Error, "timed out") ||
		first.NextAttemptAt == nil || !first.NextAttemptAt.After(first.UpdatedAt.Time) || first.DeliveredAt != nil {
		t.Errorf("unanswered delivery recorded as %+v", first)
	}
	if held.Status != models.DeliveryPending || held.Attempt != 0 || held.StatusCode != nil || held.NextAttemptAt == nil ||
		!held.NextAttemptAt.Equal(held.UpdatedAt.Time) {
		t.Errorf("held delivery recorded as %+v", held)
	}
}
