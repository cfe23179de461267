package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/web"
)

// benchWebhookReport is the --webhook-rounds summary; its JSON is the
// --json line.
type benchWebhookReport struct {
	Mode          string    `json:"mode"`
	Dialect       string    `json:"dialect"`
	Workers       int       `json:"workers"`
	Rounds        int       `json:"rounds"`
	ReceiverNice  int       `json:"receiver_nice"`
	RoundS        float64   `json:"round_s"`
	WithoutPerSec []float64 `json:"without_webhook_lifecycles_per_sec"`
	WithPerSec    []float64 `json:"with_webhook_lifecycles_per_sec"`
	WithoutMedian float64   `json:"without_webhook_median"`
	WithMedian    float64   `json:"with_webhook_median"`
	Ratio         float64   `json:"ratio"`
	// PairRatios are with/without of each round pair, run back to back;
	// their median is steadier than the ratio of medians on a noisy host.
	PairRatios      []float64 `json:"pair_ratios"`
	PairRatioMedian float64   `json:"pair_ratio_median"`
	// CPU milliseconds per lifecycle (this process plus its PostgreSQL
	// backends) in each round without and with the webhook, when
	// measurable (PostgreSQL on this machine); CPURatio is the median of
	// with/without per round pair: what delivery costs per lifecycle,
	// whatever the neighbours do.
	WithoutCPUMs []float64 `json:"without_webhook_cpu_ms_per_lifecycle,omitempty"`
	WithCPUMs    []float64 `json:"with_webhook_cpu_ms_per_lifecycle,omitempty"`
	CPURatio     float64   `json:"cpu_ratio,omitempty"`
	// DeliveryCPUShare is, per round, the CPU it took to deliver the
	// events of the "without" round afterwards, with no writer running,
	// over the CPU that round's writes took: what delivering a lifecycle's
	// events costs next to writing them, free of the contention that makes
	// throughput and CPU per lifecycle on a busy host swing by tens of
	// percent from round to round.
	DeliveryCPUShare       []float64 `json:"delivery_cpu_share,omitempty"`
	DeliveryCPUShareMedian float64   `json:"delivery_cpu_share_median,omitempty"`
	EventsCommitted        int64     `json:"events_committed_with_webhook"`
	DeliveriesReceived     int64     `json:"deliveries_received"`
	DeliveryBacklogAtEnds  []int64   `json:"delivery_backlog_at_round_ends"`
	DrainS                 []float64 `json:"drain_s"`
}

// runBenchWebhook measures the write path without and with one active
// webhook, in alternating rounds of o.duration each, so that the noise of a
// shared host falls on both alike. Both run as serve runs: the feed's
// sequencer and the webhook dispatcher are on; "without" has no webhook
// registered, "with" has one for every event type, whose receiver (on
// localhost, in a process of its own: bench_receiver.go) answers 204. After each "with" round the run waits for the
// dispatcher to drain its backlog, reports how long that took, and deletes
// the webhook. After each "without" round it also delivers that round's
// events, alone, to a webhook registered for the purpose, and compares the
// CPU that took with the CPU of writing them (deliveryShare).
func runBenchWebhook(ctx context.Context, env *cliEnv, o benchOpts, s *models.Store, lc lifecycler, queue string, quiet *slog.Logger) error {
	rcv, err := startBenchReceiver(ctx, o.receiverNice)
	if err != nil {
		return fmt.Errorf("start the webhook receiver: %w", err)
	}
	defer rcv.stop()

	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() { s.RunSequencer(bg, time.Second) })
	d := &web.Dispatcher{Store: s, Log: quiet}
	wg.Go(func() { d.Run(bg, time.Second) })

	rep := benchWebhookReport{Mode: o.mode, Dialect: string(s.Dialect), Workers: o.workers, Rounds: o.webhookRounds, ReceiverNice: o.receiverNice, RoundS: o.duration.Seconds()}
	meter := &cpuMeter{s: s}
	var cpuRatios []float64
	// cpuStart and cpuPer measure the CPU per lifecycle from one point to
	// another: a "without" round, and a "with" round up to the end of its
	// drain, so that every delivery of the round's events is counted.
	var (
		self0 float64
		cpuOK bool
	)
	cpuStart := func() { self0, _, cpuOK = meter.read(ctx) }
	cpuPer := func(lifecycles int64) float64 {
		if self1, server, ok := meter.read(ctx); ok && cpuOK && lifecycles > 0 {
			return round3((self1 - self0 + server) * 1000 / float64(lifecycles))
		}
		return 0
	}
	// round runs the workers for o.duration.
	round := func() (perSec float64, lifecycles int64, err error) {
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
			return 0, 0, fmt.Errorf("no lifecycle completed")
		}
		return r.LifecyclesPerSec, r.Lifecycles, nil
	}
	countEvents := func() int64 {
		var n int64
		s.DB.WithContext(ctx).Raw(`SELECT count(*) FROM events`).Scan(&n)
		return n
	}
	for i := range o.webhookRounds {
		head0, err := s.ReadFeed(ctx, models.FeedQuery{After: models.FeedCursorNow, Limit: 1})
		if err != nil {
			return err
		}
		from, _ := models.DecodeFeedCursor(head0.NextCursor)
		cpuStart()
		without, n, err := round()
		if err != nil {
			return err
		}
		cpuWithout := cpuPer(n)
		if share, err := deliveryShare(ctx, s, quiet, rcv.addr, from, cpuWithout, n, meter); err != nil {
			return err
		} else if share > 0 {
			rep.DeliveryCPUShare = append(rep.DeliveryCPUShare, share)
		}
		w, _, err := s.CreateWebhook(ctx, "cli:bench", "", models.WebhookInput{URL: "http://" + rcv.addr + "/hook", Description: "bench"})
		if err != nil {
			return err
		}
		before := countEvents()
		cpuStart()
		with, nWith, err := round()
		if err != nil {
			return err
		}
		rep.EventsCommitted += countEvents() - before
		// The backlog: open deliveries, and the feed events past the
		// webhook's cursor (it takes every type), which the dispatcher
		// sends straight from the feed.
		var backlog int64
		ws, _ := s.ListWebhooks(ctx)
		for _, x := range ws {
			if x.ID == w.ID {
				backlog += x.Pending
			}
		}
		if head, err := s.ReadFeed(ctx, models.FeedQuery{After: models.FeedCursorNow, Limit: 1}); err == nil {
			hi, _ := models.DecodeFeedCursor(head.NextCursor)
			cs, _ := s.WebhookCursors(ctx)
			for _, c := range cs {
				if c.ID == w.ID && hi > c.CursorPos {
					backlog += hi - c.CursorPos
				}
			}
		}
		rep.DeliveryBacklogAtEnds = append(rep.DeliveryBacklogAtEnds, backlog)
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
		cpuWith := cpuPer(nWith)
		if err := s.DeleteWebhook(ctx, "cli:bench", "", w.ID); err != nil {
			return err
		}
		rep.WithoutPerSec = append(rep.WithoutPerSec, without)
		rep.WithPerSec = append(rep.WithPerSec, with)
		rep.PairRatios = append(rep.PairRatios, round3(with/without))
		if cpuWithout > 0 && cpuWith > 0 {
			rep.WithoutCPUMs = append(rep.WithoutCPUMs, cpuWithout)
			rep.WithCPUMs = append(rep.WithCPUMs, cpuWith)
			cpuRatios = append(cpuRatios, cpuWith/cpuWithout)
		}
		fmt.Fprintf(env.stderr, "round %d: without %.1f/s, with one webhook %.1f/s\n", i+1, without, with)
	}
	rep.DeliveriesReceived = rcv.count()
	rep.WithoutMedian, rep.WithMedian = median(rep.WithoutPerSec), median(rep.WithPerSec)
	if rep.WithoutMedian > 0 {
		rep.Ratio = round3(rep.WithMedian / rep.WithoutMedian)
	}
	rep.PairRatioMedian = median(rep.PairRatios)
	rep.CPURatio = round3(median(cpuRatios))
	rep.DeliveryCPUShareMedian = median(rep.DeliveryCPUShare)
	fmt.Fprintf(env.stdout, "mode %s, %s, %d workers, %d rounds of %s each way, receiver at nice %d\n", rep.Mode, rep.Dialect, rep.Workers, rep.Rounds, o.duration, rep.ReceiverNice)
	fmt.Fprintf(env.stdout, "lifecycles/s without a webhook: median %.1f %v\n", rep.WithoutMedian, rep.WithoutPerSec)
	fmt.Fprintf(env.stdout, "lifecycles/s with one webhook:  median %.1f %v (ratio %.3f)\n", rep.WithMedian, rep.WithPerSec, rep.Ratio)
	fmt.Fprintf(env.stdout, "ratio of each round pair: %v, median %.3f\n", rep.PairRatios, rep.PairRatioMedian)
	if len(rep.WithCPUMs) > 0 {
		fmt.Fprintf(env.stdout, "cpu ms per lifecycle (bench + its postgres backends): without %v, with %v; with/without median %.3f\n",
			rep.WithoutCPUMs, rep.WithCPUMs, rep.CPURatio)
	}
	if len(rep.DeliveryCPUShare) > 0 {
		fmt.Fprintf(env.stdout, "delivering a round's events afterwards, alone, over writing them (cpu): %v, median %.3f\n",
			rep.DeliveryCPUShare, rep.DeliveryCPUShareMedian)
	}
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

// deliveryShare delivers the events after feed position from (the round
// just written) to a webhook registered for the purpose, with no writer
// running, and returns the CPU it took over the CPU of writing them
// (writeMs per lifecycle for lifecycles); 0 when CPU is not measurable.
func deliveryShare(ctx context.Context, s *models.Store, log *slog.Logger, addr string, from int64, writeMs float64, lifecycles int64, meter *cpuMeter) (float64, error) {
	if writeMs <= 0 {
		return 0, nil
	}
	if _, err := s.SequenceFeed(ctx); err != nil {
		return 0, err
	}
	self0, _, ok := meter.read(ctx)
	if !ok {
		return 0, nil
	}
	w, _, err := s.CreateWebhook(ctx, "cli:bench", "", models.WebhookInput{URL: "http://" + addr + "/hook", Description: "bench: delivery cost"})
	if err != nil {
		return 0, err
	}
	defer s.DeleteWebhook(context.WithoutCancel(ctx), "cli:bench", "", w.ID)
	// The round's events, from its start.
	if err := s.DB.WithContext(ctx).Exec(`UPDATE webhooks SET cursor_pos = ? WHERE id = ?`, from, w.ID).Error; err != nil {
		return 0, err
	}
	hi, err := s.ReadFeed(ctx, models.FeedQuery{After: models.FeedCursorNow, Limit: 1})
	if err != nil {
		return 0, err
	}
	end, _ := models.DecodeFeedCursor(hi.NextCursor)
	// Passes until the webhook's cursor is at the end and nothing is open
	// (the serve-like dispatcher running beside may take pages too: its
	// CPU is this process's as well).
	d := &web.Dispatcher{Store: s, Log: log}
	for ctx.Err() == nil {
		if _, err := d.Pass(ctx); err != nil {
			return 0, err
		}
		cs, err := s.WebhookCursors(ctx)
		if err != nil {
			return 0, err
		}
		ws, err := s.ListWebhooks(ctx)
		if err != nil {
			return 0, err
		}
		done := true
		for _, c := range cs {
			done = done && (c.ID != w.ID || c.CursorPos >= end)
		}
		for _, x := range ws {
			done = done && (x.ID != w.ID || x.Pending == 0)
		}
		if done {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	self1, server, ok := meter.read(ctx)
	if !ok {
		return 0, nil
	}
	return round3((self1 - self0 + server) * 1000 / (writeMs * float64(lifecycles))), nil
}
