package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskpilots/handoff/models"
)

// Dispatcher delivers webhooks (models/webhooks.go describes the states).
// Each pass rescues deliveries whose dispatcher died, claims due deliveries
// (retries, redeliveries, events held behind an open delivery of their
// session) and POSTs them concurrently, then sends each webhook's new feed
// events straight from the feed (models.WebhookPage) and records them in
// their final state. All its state is in the database, so any number of
// server processes may run one: claims and pages are exclusive (SKIP LOCKED
// and leases) and a restart continues where the last process stopped. It
// only reads the feed; the write path never waits for it.
type Dispatcher struct {
	Store  *models.Store
	Policy models.WebhookPolicy
	// Client sends the deliveries; default an http.Client that does not
	// follow redirects (a redirect is an answer, not a delivery), whose
	// transport send uses directly. Each attempt is bounded by
	// Policy.Timeout through its context, whatever the client.
	Client *http.Client
	// Batch is how many deliveries one claim takes (default 64) and
	// Parallel how many it sends at once (default 8).
	Batch    int
	Parallel int
	// EnqueueLimit is the feed page size per webhook (default 500).
	EnqueueLimit int
	// Coalesce is the least time between passes woken by the feed;
	// default 250ms: under a steady stream of events a pass then carries
	// a few hundred deliveries rather than a few, which is what keeps the
	// dispatcher's share of the database small.
	Coalesce time.Duration
	Log      *slog.Logger
	// Now is the clock of the webhook-timestamp header; default time.Now.
	Now func() time.Time
	// transport is the default Client's, used directly (send).
	transport http.RoundTripper
}

func (d *Dispatcher) defaults() {
	d.Policy = d.Policy.WithDefaults()
	if d.Client == nil {
		// Idle connections are kept per receiver for every parallel
		// sender, so that deliveries reuse connections instead of opening
		// one each (the default keeps two).
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = max(d.Parallel, 8)
		// No Accept-Encoding: a receiver's answer is judged by its status,
		// and its body is drained unread.
		tr.DisableCompression = true
		// No Client.Timeout: send bounds each request with a context
		// deadline of Policy.Timeout already, and a second timer per
		// request costs CPU for nothing.
		d.Client = &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		d.transport = tr
	}
	if d.Batch <= 0 {
		d.Batch = 64
	}
	if d.Parallel <= 0 {
		d.Parallel = 8
	}
	if d.EnqueueLimit <= 0 {
		d.EnqueueLimit = 500
	}
	if d.Coalesce <= 0 {
		d.Coalesce = 250 * time.Millisecond
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
}

// PassReport counts what one pass did.
type PassReport struct {
	Enqueued, Rescued, Delivered, Retrying, Failed int
}

// Pass runs one round: rescue, claim and send what is due, then send the
// new feed events. It keeps claiming while batches come back full, and
// reading pages while they come back full, so a backlog drains in one pass.
// The claim path runs first so that a session's held events are sent
// before its newer ones are looked at.
func (d *Dispatcher) Pass(ctx context.Context) (PassReport, error) {
	d.defaults()
	var r PassReport
	var errs []error
	hooks, err := d.Store.WebhookCursors(ctx)
	if err != nil {
		return r, err
	}
	if len(hooks) == 0 {
		return r, nil // no webhook, no delivery: spare the database
	}
	// Retries, redeliveries, held events and expired leases exist only
	// where a webhook has an open delivery; on a healthy system none has,
	// and the pass skips their two statements. (One opened after the
	// cursors were read waits for the next pass, at most a period away.)
	open := false
	for _, w := range hooks {
		open = open || w.Open
	}
	if open {
		r.Rescued, err = d.Store.RescueWebhookDeliveries(ctx)
		errs = append(errs, err)
		for range 100 {
			jobs, err := d.Store.ClaimWebhookDeliveries(ctx, d.Batch, d.Policy.Lease)
			if err != nil {
				errs = append(errs, err)
				break
			}
			d.sendAll(ctx, jobs, &r)
			if len(jobs) < d.Batch || ctx.Err() != nil {
				break
			}
		}
	}
	for _, w := range hooks {
		for range 100 {
			page, err := d.Store.LeaseWebhookPage(ctx, w, d.EnqueueLimit, d.Policy.Lease)
			if err != nil {
				errs = append(errs, err)
				break
			}
			if page == nil {
				break // nothing new, or another dispatcher has it
			}
			if err := d.sendPage(ctx, page, &r); err != nil {
				errs = append(errs, err)
				break
			}
			if !page.Full || ctx.Err() != nil {
				break
			}
			w.CursorPos = page.To
		}
	}
	return r, errors.Join(errs...)
}

// sendPage sends a leased page of the feed and records it. Sessions are
// sent in parallel, each session's events one after the other in feed (so
// seq) order; after a failure the session's later events are not sent but
// recorded as pending, behind the failed one, for the claim path. Held
// events are not sent either.
func (d *Dispatcher) sendPage(ctx context.Context, page *models.WebhookPage, r *PassReport) error {
	sent := make([]bool, len(page.Jobs))
	results := make([]models.DeliveryResult, len(page.Jobs))
	bySession := map[string][]int{}
	var order []string
	for i, j := range page.Jobs {
		if page.Held[i] {
			continue
		}
		if _, ok := bySession[j.SessionID]; !ok {
			order = append(order, j.SessionID)
		}
		bySession[j.SessionID] = append(bySession[j.SessionID], i)
	}
	d.parallel(len(order), func(k int) {
		for _, i := range bySession[order[k]] {
			if ctx.Err() != nil {
				return
			}
			results[i], sent[i] = d.send(ctx, page.Jobs[i]), true
			if !results[i].OK() {
				return
			}
		}
	})
	// Recorded even when ctx ends (a shutdown), so that deliveries that
	// were made are not sent again needlessly.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	sts, err := d.Store.RecordWebhookPage(fctx, page, sent, results, d.Policy)
	if err != nil {
		return err
	}
	r.Enqueued += len(page.Jobs)
	for i, st := range sts {
		if !sent[i] {
			continue
		}
		d.count(r, page.Jobs[i], results[i], st)
	}
	return nil
}

// parallel runs do(0) … do(n-1) on up to d.Parallel goroutines, each taking
// the next index when it is done with one. A few long-lived senders rather
// than a goroutine per session: each grows its stack once for the HTTP
// client, not once per session.
func (d *Dispatcher) parallel(n int, do func(i int)) {
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range min(d.Parallel, n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				do(i)
			}
		})
	}
	wg.Wait()
}

// count adds an attempt's outcome to the report and logs what needs it.
func (d *Dispatcher) count(r *PassReport, job models.DeliveryJob, res models.DeliveryResult, st models.DeliveryStatus) {
	switch st {
	case models.DeliveryDelivered:
		r.Delivered++
	case models.DeliveryFailed:
		r.Failed++
		d.Log.Error("webhook delivery failed for good", "webhook", job.WebhookID, "event", job.EventID,
			"attempts", job.Attempt, "status_code", res.StatusCode, "err", res.Err)
	case models.DeliveryPending:
		r.Retrying++
		d.Log.Info("webhook delivery will be retried", "webhook", job.WebhookID, "event", job.EventID,
			"attempt", job.Attempt, "status_code", res.StatusCode, "err", res.Err)
	}
}

func (d *Dispatcher) sendAll(ctx context.Context, jobs []models.DeliveryJob, r *PassReport) {
	results := make([]models.DeliveryResult, len(jobs))
	d.parallel(len(jobs), func(i int) { results[i] = d.send(ctx, jobs[i]) })
	// The outcomes are recorded even when ctx ends (a shutdown), so that
	// deliveries that were made are not sent again needlessly.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	sts, err := d.Store.FinishWebhookDeliveries(fctx, jobs, results, d.Policy)
	if err != nil {
		d.Log.Warn("webhook deliveries not all recorded", "err", err)
	}
	for i, st := range sts {
		d.count(r, jobs[i], results[i], st)
	}
}

// send POSTs one delivery, signed per the Standard Webhooks specification.
// The body is the job's bytes as they are, and the headers are set under
// their canonical names directly (Header.Set would canonicalise each name
// on every request); on the wire they are the same.
func (d *Dispatcher) send(ctx context.Context, job models.DeliveryJob) models.DeliveryResult {
	ts := d.Now()
	var sig string
	if job.Signer != nil {
		sig = job.Signer.Sign(job.EventID, ts, job.Body)
	} else {
		var err error
		if sig, err = models.SignWebhook(job.Secrets, job.EventID, ts, job.Body); err != nil {
			return models.DeliveryResult{Err: err.Error()}
		}
	}
	rctx, cancel := context.WithTimeout(ctx, d.Policy.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, job.URL, bytes.NewReader(job.Body))
	if err != nil {
		return models.DeliveryResult{Err: fmt.Sprintf("build request: %v", err)}
	}
	vals := []string{job.EventID, strconv.FormatInt(ts.Unix(), 10), sig} // one allocation for the three
	req.Header = http.Header{
		"Content-Type":      contentTypeJSON,
		"User-Agent":        userAgent,
		"Webhook-Id":        vals[0:1:1],
		"Webhook-Timestamp": vals[1:2:2],
		"Webhook-Signature": vals[2:3:3],
	}
	var resp *http.Response
	if d.transport != nil {
		// The default client follows no redirect and has no cookie jar
		// or timeout of its own: the transport alone does what it would,
		// without the per-request copy of the headers that
		// http.Client keeps for redirects. Errors read as the client's.
		if resp, err = d.transport.RoundTrip(req); err != nil {
			err = &url.Error{Op: "Post", URL: job.URL, Err: err}
		}
	} else {
		resp, err = d.Client.Do(req)
	}
	if err != nil {
		if rctx.Err() == context.DeadlineExceeded {
			return models.DeliveryResult{Err: fmt.Sprintf("timed out after %s", d.Policy.Timeout)}
		}
		return models.DeliveryResult{Err: err.Error()}
	}
	// The body is drained (up to a bound) and closed, so that the
	// connection goes back to the idle pool and the next delivery to this
	// receiver reuses it instead of dialling.
	if resp.Body != http.NoBody { // a 204 has none
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	}
	_ = resp.Body.Close()
	return models.DeliveryResult{StatusCode: resp.StatusCode}
}

// The constant header values of a delivery, shared by every request (the
// transport only reads them).
var (
	contentTypeJSON = []string{"application/json"}
	userAgent       = []string{"taskpilots-webhooks/1"}
)

// Run runs passes until ctx is done: at least every period (with jitter),
// for retries that come due, and soon after the feed tells new events (a
// long poll on the feed, which the sequencer wakes in this process and,
// through LISTEN/NOTIFY, in others). Wake-ups closer than Coalesce are
// merged into one pass, so a busy write path costs the database a few
// dispatcher queries per Coalesce, not per event. Failures are logged and
// retried.
func (d *Dispatcher) Run(ctx context.Context, every time.Duration) {
	d.defaults()
	var (
		failing    bool
		lastLogged time.Time
	)
	pause := func(t time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(t):
		}
	}
	for ctx.Err() == nil {
		// The feed's end before the pass: whatever is numbered after it
		// ends the wait below at once.
		head, err := d.Store.ReadFeed(ctx, models.FeedQuery{After: models.FeedCursorNow, Limit: 1})
		if err != nil {
			pause(jitter(every))
			continue
		}
		rep, err := d.Pass(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing || time.Since(lastLogged) > 30*time.Second {
				d.Log.Error("webhook pass failed", "err", err)
				lastLogged = time.Now()
			}
			failing = true
		case err == nil:
			failing = false
			if rep.Rescued > 0 {
				d.Log.Info("webhook deliveries rescued", "count", rep.Rescued)
			}
		}
		page, err := d.Store.WaitFeed(ctx, models.FeedQuery{After: head.NextCursor, Limit: 1}, jitter(every))
		if err != nil || len(page.Events) > 0 {
			pause(d.Coalesce)
		}
	}
}
