package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/web"
)

// benchWebhookReport is the --webhook-rounds summary; its JSON is the
// --json line.
type benchWebhookReport struct {
	Mode                  string    `json:"mode"`
	Dialect               string    `json:"dialect"`
	Workers               int       `json:"workers"`
	Rounds                int       `json:"rounds"`
	RoundS                float64   `json:"round_s"`
	WithoutPerSec         []float64 `json:"without_webhook_lifecycles_per_sec"`
	WithPerSec            []float64 `json:"with_webhook_lifecycles_per_sec"`
	WithoutMedian         float64   `json:"without_webhook_median"`
	WithMedian            float64   `json:"with_webhook_median"`
	Ratio                 float64   `json:"ratio"`
	EventsCommitted       int64     `json:"events_committed_with_webhook"`
	DeliveriesReceived    int64     `json:"deliveries_received"`
	DeliveryBacklogAtEnds []int64   `json:"delivery_backlog_at_round_ends"`
	DrainS                []float64 `json:"drain_s"`
}

// runBenchWebhook measures the write path without and with one active
// webhook, in alternating rounds of o.duration each, so that the noise of a
// shared host falls on both alike. Both run as serve runs: the feed's
// sequencer and the webhook dispatcher are on; "without" has no webhook
// registered, "with" has one for every event type, whose receiver (on
// localhost) answers 204. After each "with" round the run waits for the
// dispatcher to drain its backlog, reports how long that took, and deletes
// the webhook.
func runBenchWebhook(ctx context.Context, env *cliEnv, o benchOpts, s *models.Store, lc lifecycler, queue string, quiet *slog.Logger) error {
	var received atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	recv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})}
	go recv.Serve(ln)
	defer recv.Close()

	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() { s.RunSequencer(bg, time.Second) })
	d := &web.Dispatcher{Store: s, Log: quiet}
	wg.Go(func() { d.Run(bg, time.Second) })

	rep := benchWebhookReport{Mode: o.mode, Dialect: string(s.Dialect), Workers: o.workers, Rounds: o.webhookRounds, RoundS: o.duration.Seconds()}
	round := func() (float64, error) {
		runCtx, cancel := context.WithTimeout(ctx, o.duration)
		defer cancel()
		samples := make([]*benchSamples, o.workers)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range o.workers {
			samples[i] = &benchSamples{}
			wg.Go(func() { benchWorkerLoop(runCtx, lc, queue, fmt.Sprintf("bench-w%d", i), samples[i]) })
		}
		wg.Wait()
		r := summarise(o, string(s.Dialect), time.Since(start), samples, 0, 0)
		if r.Lifecycles == 0 {
			return 0, fmt.Errorf("no lifecycle completed")
		}
		return r.LifecyclesPerSec, nil
	}
	countEvents := func() int64 {
		var n int64
		s.DB.WithContext(ctx).Raw(`SELECT count(*) FROM events`).Scan(&n)
		return n
	}
	for i := range o.webhookRounds {
		without, err := round()
		if err != nil {
			return err
		}
		w, _, err := s.CreateWebhook(ctx, "cli:bench", models.WebhookInput{URL: "http://" + ln.Addr().String() + "/hook", Description: "bench"})
		if err != nil {
			return err
		}
		before := countEvents()
		with, err := round()
		if err != nil {
			return err
		}
		rep.EventsCommitted += countEvents() - before
		ws, _ := s.ListWebhooks(ctx)
		for _, x := range ws {
			if x.ID == w.ID {
				rep.DeliveryBacklogAtEnds = append(rep.DeliveryBacklogAtEnds, x.Pending)
			}
		}
		t0 := time.Now()
		for ctx.Err() == nil {
			// Drained: every event is numbered, the dispatcher's cursor
			// is at the end of the feed, and no delivery is open.
			if _, err := s.SequenceFeed(ctx); err != nil {
				return err
			}
			head, err := s.ReadFeed(ctx, models.FeedQuery{After: models.FeedCursorNow, Limit: 1})
			if err != nil {
				return err
			}
			hi, _ := models.DecodeFeedCursor(head.NextCursor)
			cs, err := s.WebhookCursors(ctx)
			if err != nil {
				return err
			}
			ws, err := s.ListWebhooks(ctx)
			if err != nil {
				return err
			}
			if len(cs) == 1 && cs[0].CursorPos >= hi && len(ws) == 1 && ws[0].Pending == 0 && ws[0].Failed == 0 {
				break
			}
			if time.Since(t0) > 5*time.Minute {
				return fmt.Errorf("the webhook backlog did not drain in 5 minutes")
			}
			time.Sleep(100 * time.Millisecond)
		}
		rep.DrainS = append(rep.DrainS, round3(time.Since(t0).Seconds()))
		if err := s.DeleteWebhook(ctx, "cli:bench", w.ID); err != nil {
			return err
		}
		rep.WithoutPerSec = append(rep.WithoutPerSec, without)
		rep.WithPerSec = append(rep.WithPerSec, with)
		fmt.Fprintf(env.stderr, "round %d: without %.1f/s, with one webhook %.1f/s\n", i+1, without, with)
	}
	rep.DeliveriesReceived = received.Load()
	rep.WithoutMedian, rep.WithMedian = median(rep.WithoutPerSec), median(rep.WithPerSec)
	if rep.WithoutMedian > 0 {
		rep.Ratio = round3(rep.WithMedian / rep.WithoutMedian)
	}
	fmt.Fprintf(env.stdout, "mode %s, %s, %d workers, %d rounds of %s each way\n", rep.Mode, rep.Dialect, rep.Workers, rep.Rounds, o.duration)
	fmt.Fprintf(env.stdout, "lifecycles/s without a webhook: median %.1f %v\n", rep.WithoutMedian, rep.WithoutPerSec)
	fmt.Fprintf(env.stdout, "lifecycles/s with one webhook:  median %.1f %v (ratio %.3f)\n", rep.WithMedian, rep.WithPerSec, rep.Ratio)
	fmt.Fprintf(env.stdout, "deliveries received %d for %d events; backlog at round ends %v; drained in %v s\n",
		rep.DeliveriesReceived, rep.EventsCommitted, rep.DeliveryBacklogAtEnds, rep.DrainS)
	if o.json {
		b, _ := json.Marshal(rep)
		fmt.Fprintln(env.stdout, string(b))
	}
	return nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	ys := slices.Clone(xs)
	slices.Sort(ys)
	if len(ys)%2 == 1 {
		return ys[len(ys)/2]
	}
	return round3((ys[len(ys)/2-1] + ys[len(ys)/2]) / 2)
}
