// Command riverbench measures River (github.com/riverqueue/river), the
// PostgreSQL job queue, on the database and machine that `taskpilots bench`
// uses, so that scripts/bench.sh can put the two side by side. It is
// benchmark tooling, not part of the product: its own module, so the
// product's go.mod never depends on River.
//
// A job is River's unit of delegated work: inserted, fetched by a worker,
// worked (a no-op) and completed. That is the job-queue part of a
// TaskPilots lifecycle (delegate → lease → result), without the session,
// its state, its events or their hash chain.
//
//	riverbench --database-url postgres://…/bench_river --mode single --clients 8 --duration 15s
//
// --mode single inserts one job per call from --clients goroutines, each
// waiting for nothing (River's insert, then its producers and completer
// work and complete them); --mode batch inserts --batch jobs per InsertMany
// call. The rate is jobs completed per second over the run, counted from
// River's completion events; the database is migrated (River's own tables)
// and emptied first. The last line of the output is one JSON object.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

type report struct {
	Mode          string  `json:"mode"`
	Clients       int     `json:"clients"`
	Batch         int     `json:"batch,omitempty"`
	DurationS     float64 `json:"duration_s"`
	Inserted      int64   `json:"inserted"`
	Completed     int64   `json:"completed"`
	CompletedPerS float64 `json:"completed_per_sec"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
}

func run() error {
	dbURL := flag.String("database-url", "", "postgres://… URL of a scratch database (River's tables are created and emptied)")
	mode := flag.String("mode", "single", "single (one job per Insert call) or batch (InsertMany)")
	clients := flag.Int("clients", 8, "concurrent inserting goroutines")
	batch := flag.Int("batch", 100, "jobs per InsertMany call in batch mode")
	workers := flag.Int("workers", 100, "River MaxWorkers of the queue")
	duration := flag.Duration("duration", 15*time.Second, "how long to insert")
	flag.Parse()
	switch {
	case *dbURL == "":
		return errors.New("--database-url is required")
	case *mode != "single" && *mode != "batch":
		return fmt.Errorf("--mode must be single or batch, not %q", *mode)
	case *clients < 1 || *batch < 1 || *workers < 1 || *duration <= 0:
		return errors.New("--clients, --batch, --workers and --duration must be positive")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate River's tables: %w", err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return err
	}

	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *workers}},
		Workers: ws,
		// Fetch as soon as a job is there (River's own benchmark does the
		// same): the default poll interval would measure the poll.
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            nil,
	})
	if err != nil {
		return err
	}
	completed, cancelSub := client.Subscribe(river.EventKindJobCompleted)
	defer cancelSub()
	var done atomic.Int64
	go func() {
		for range completed {
			done.Add(1)
		}
	}()
	if err := client.Start(ctx); err != nil {
		return err
	}

	var inserted atomic.Int64
	runCtx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	var insertErr atomic.Value
	for range *clients {
		wg.Go(func() {
			params := make([]river.InsertManyParams, *batch)
			for i := range params {
				params[i] = river.InsertManyParams{Args: noopArgs{}}
			}
			for runCtx.Err() == nil {
				var err error
				if *mode == "single" {
					_, err = client.Insert(runCtx, noopArgs{}, nil)
					if err == nil {
						inserted.Add(1)
					}
				} else {
					_, err = client.InsertMany(runCtx, params)
					if err == nil {
						inserted.Add(int64(*batch))
					}
				}
				if err != nil && runCtx.Err() == nil {
					insertErr.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := done.Load()
	stopCtx, stopCancel := context.WithTimeout(ctx, 30*time.Second)
	defer stopCancel()
	_ = client.Stop(stopCtx)
	if err, ok := insertErr.Load().(error); ok {
		return fmt.Errorf("insert: %w", err)
	}
	rep := report{Mode: *mode, Clients: *clients, DurationS: elapsed.Seconds(), Inserted: inserted.Load(), Completed: n,
		CompletedPerS: float64(n) / elapsed.Seconds()}
	if *mode == "batch" {
		rep.Batch = *batch
	}
	fmt.Fprintf(os.Stderr, "river %s: %d clients, %d inserted, %d completed in %.1fs: %.0f jobs/s\n",
		rep.Mode, rep.Clients, rep.Inserted, rep.Completed, rep.DurationS, rep.CompletedPerS)
	return json.NewEncoder(os.Stdout).Encode(rep)
}
