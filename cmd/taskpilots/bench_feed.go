package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
)

// The event feed in the benchmark: the sequencer runs beside the writers as
// it does in `serve` (--sequencer, on by default), and --feed-readers
// readers read the feed while the lifecycles run. Each reader reads the
// whole feed from its oldest event in pages of 1,000, then starts over (the
// throughput of a reader catching up); one more follows the end of the feed
// with long polls and measures how long after it was written (its
// created_at, taken just before the commit) each event reaches it: the lag
// of a live controller, commit and sequencing included.

// feedBenchOpts are the feed's flags of `bench`.
type feedBenchOpts struct {
	sequencer bool
	readers   int
	follow    bool
}

func feedBenchFlags(fs *flag.FlagSet, o *feedBenchOpts) {
	fs.BoolVar(&o.sequencer, "sequencer", true, "run the event feed's sequencer, as serve does")
	fs.IntVar(&o.readers, "feed-readers", 0, "readers scanning the event feed from its start over and over while the lifecycles run (db statements per lifecycle then count their reads too)")
	fs.BoolVar(&o.follow, "feed-follow", false, "one reader following the end of the feed with long polls, measuring the lag from write to read")
}

// feedPager reads one page of the feed through one API.
type feedPager func(ctx context.Context, after string, limit, wait int) (created []time.Time, next string, err error)

func inprocFeed(s *models.Store) feedPager {
	return func(ctx context.Context, after string, limit, wait int) ([]time.Time, string, error) {
		p, err := s.WaitFeed(ctx, models.FeedQuery{After: after, Limit: limit}, time.Duration(wait)*time.Second)
		created := make([]time.Time, len(p.Events))
		for i, e := range p.Events {
			created[i] = e.CreatedAt.Time
		}
		return created, p.NextCursor, err
	}
}

func httpFeed(c *client.Client) feedPager {
	return func(ctx context.Context, after string, limit, wait int) ([]time.Time, string, error) {
		p, err := c.Feed(ctx, client.FeedOptions{After: after, Limit: limit, WaitSeconds: wait})
		created := make([]time.Time, len(p.Events))
		for i, e := range p.Events {
			created[i] = e.CreatedAt
		}
		return created, p.NextCursor, err
	}
}

// feedBenchResult is what the feed's readers measured.
type feedBenchResult struct {
	batches, numbered int64        // the sequencer's, during the run
	scanned           atomic.Int64 // events read by the scanning readers
	scans             atomic.Int64 // full scans finished
	followed          int64        // events the live follower received
	lag               []time.Duration
	firstErr          error
	mu                sync.Mutex
}

func (r *feedBenchResult) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstErr == nil {
		r.firstErr = err
	}
}

// startFeedBench starts the sequencer and the readers; stop ends them and
// returns what they measured.
func startFeedBench(ctx context.Context, s *models.Store, o feedBenchOpts, read feedPager) (stop func() *feedBenchResult) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	res := &feedBenchResult{}
	if o.sequencer {
		// Events left unnumbered by an earlier run without the sequencer
		// are numbered before the clock starts, so that this run measures
		// the steady state.
		if _, err := s.SequenceFeed(ctx); err != nil {
			res.fail(fmt.Errorf("feed backlog: %w", err))
		}
	}
	b0, n0 := s.FeedSequencerStats()
	if o.sequencer {
		wg.Go(func() { s.RunSequencer(ctx, time.Second) })
	}
	for range o.readers {
		wg.Go(func() {
			after := ""
			for ctx.Err() == nil {
				created, next, err := read(ctx, after, models.MaxFeedLimit, 0)
				if err != nil {
					if ctx.Err() == nil {
						res.fail(fmt.Errorf("feed scan: %w", err))
					}
					return
				}
				res.scanned.Add(int64(len(created)))
				after = next
				if len(created) < models.MaxFeedLimit {
					res.scans.Add(1)
					after = "" // at the end: start over
				}
			}
		})
	}
	if o.sequencer && o.follow {
		wg.Go(func() {
			// Events committed before the run (by a run without the
			// sequencer, say) are numbered now and told late; they are not
			// the lag of a live reader.
			since := time.Now()
			after := models.FeedCursorNow
			for ctx.Err() == nil {
				created, next, err := read(ctx, after, models.MaxFeedLimit, 5)
				if err != nil {
					if ctx.Err() == nil {
						res.fail(fmt.Errorf("feed follow: %w", err))
					}
					return
				}
				now := time.Now()
				for _, t := range created {
					if !t.Before(since) {
						res.lag = append(res.lag, now.Sub(t))
					}
				}
				res.followed += int64(len(created))
				after = next
			}
		})
	}
	return func() *feedBenchResult {
		cancel()
		wg.Wait()
		b1, n1 := s.FeedSequencerStats()
		res.batches, res.numbered = b1-b0, n1-n0
		return res
	}
}

// feedReport is the feed's part of benchReport.
type feedReport struct {
	Sequencer         bool    `json:"sequencer"`
	SequencerBatches  int64   `json:"sequencer_batches"`
	SequencerEvents   int64   `json:"sequencer_events"`
	FeedReaders       int     `json:"feed_readers"`
	FeedScannedEvents int64   `json:"feed_scanned_events"`
	FeedScanPerSec    float64 `json:"feed_scan_events_per_sec"`
	FeedFullScans     int64   `json:"feed_full_scans"`
	FeedFollowed      int64   `json:"feed_followed_events"`
	FeedLagP50Ms      float64 `json:"feed_lag_p50_ms"`
	FeedLagP99Ms      float64 `json:"feed_lag_p99_ms"`
}

func summariseFeed(o feedBenchOpts, r *feedBenchResult, elapsed time.Duration) feedReport {
	return feedReport{
		Sequencer: o.sequencer, SequencerBatches: r.batches, SequencerEvents: r.numbered, FeedReaders: o.readers,
		FeedScannedEvents: r.scanned.Load(), FeedScanPerSec: round3(float64(r.scanned.Load()) / elapsed.Seconds()),
		FeedFullScans: r.scans.Load(), FeedFollowed: r.followed,
		FeedLagP50Ms: pct(r.lag, 0.50), FeedLagP99Ms: pct(r.lag, 0.99),
	}
}

func printFeedBench(w io.Writer, r feedReport, res *feedBenchResult) {
	fmt.Fprintf(w, "feed sequencer %v", r.Sequencer)
	if r.SequencerBatches > 0 {
		fmt.Fprintf(w, " (%d batches, %d events, %.1f events per batch)", r.SequencerBatches, r.SequencerEvents,
			float64(r.SequencerEvents)/float64(r.SequencerBatches))
	}
	if r.FeedReaders > 0 {
		fmt.Fprintf(w, "; %d readers scanned %d events (%.0f/s, %d full scans)", r.FeedReaders, r.FeedScannedEvents, r.FeedScanPerSec, r.FeedFullScans)
	}
	if r.FeedFollowed > 0 {
		fmt.Fprintf(w, "; the follower got %d events, lag p50 %.2f ms, p99 %.2f ms", r.FeedFollowed, r.FeedLagP50Ms, r.FeedLagP99Ms)
	}
	fmt.Fprintln(w)
	if res.firstErr != nil {
		fmt.Fprintf(w, "feed error: %v\n", res.firstErr)
	}
}
