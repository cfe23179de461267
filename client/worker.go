package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Handler works one leased delegation and returns its return contract.
// ctx is cancelled when the lease is lost (a heartbeat was refused) or the
// shutdown grace period ran out; the result is then not sent.
//
// A returned error is reported as a failed result: with the error's class
// when it is a *FailureError, as a transient failure otherwise.
type Handler func(ctx context.Context, l *Lease) (ResultInput, error)

// FailureError makes a Handler's error report a failure of a given class.
type FailureError struct {
	Class string // FailureTransient, FailureBadInput or FailurePermanent
	Err   error
}

func (e *FailureError) Error() string { return e.Class + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *FailureError) Unwrap() error { return e.Err }

// Permanent wraps err so that the Worker reports a permanent failure (the
// session escalates to humans instead of retrying).
func Permanent(err error) error { return &FailureError{Class: FailurePermanent, Err: err} }

// BadInput wraps err so that the Worker reports a bad_input failure (the
// session waits for input).
func BadInput(err error) error { return &FailureError{Class: FailureBadInput, Err: err} }

// ErrLeaseLost is the cause of a handler context cancelled because a
// heartbeat found the lease no longer held (context.Cause tells it).
var ErrLeaseLost = errors.New("lease lost")

// ErrShutdown is the cause of a handler context cancelled because the
// shutdown grace period ran out.
var ErrShutdown = errors.New("worker shut down before the handler finished")

// Worker leases delegations from a queue and works them with Handler,
// Concurrency at a time. It heartbeats each lease automatically and sends
// the handler's result; when Run's context is cancelled it stops leasing and
// gives in-flight work GracePeriod to finish.
//
//	w := &client.Worker{Client: c, Queue: "refunds", Name: "w-1", Handler: h, Concurrency: 4}
//	if err := w.Run(ctx); err != nil {
//		log.Fatal(err)
//	}
type Worker struct {
	Client *Client
	// Queue is the queue to work. Queues adds more: the worker's slots are
	// spread over all of them round robin (at least one slot per queue).
	Queue  string
	Queues []string
	// Name identifies the worker in leases and events (default "worker").
	Name    string
	Handler Handler
	// Concurrency is how many delegations are worked at once (default 1).
	Concurrency int
	// WaitSeconds is each lease request's long poll (default 10, at most 30).
	WaitSeconds int
	// HeartbeatFraction is the share of the lease after which a heartbeat is
	// sent (default 1/3: a 30 s lease is renewed every 10 s).
	HeartbeatFraction float64
	// GracePeriod is how long in-flight work may run after shutdown begins
	// (default 30 s).
	GracePeriod time.Duration
	// Logger logs the worker's decisions (default: discard).
	Logger *slog.Logger
	// OnResult, if set, is called after each result was sent (err is nil)
	// or could not be (the lease was lost, the contract was refused, …).
	OnResult func(l *Lease, in ResultInput, out Outcome, err error)
}

func (w *Worker) queues() []string {
	var qs []string
	if w.Queue != "" {
		qs = append(qs, w.Queue)
	}
	for _, q := range w.Queues {
		if q != "" && q != w.Queue {
			qs = append(qs, q)
		}
	}
	return qs
}

// Run works until ctx is cancelled, then stops leasing, lets in-flight work
// finish within GracePeriod and returns nil. It returns an error early only
// when the server refuses the worker (401, 403, or a 4xx for the lease
// request itself, such as an invalid queue name).
func (w *Worker) Run(ctx context.Context) error {
	qs := w.queues()
	if w.Client == nil || w.Handler == nil || len(qs) == 0 {
		return errors.New("client: Worker needs Client, Handler and Queue")
	}
	n := max(w.Concurrency, 1, len(qs))
	log := w.Logger
	if log == nil {
		log = slog.New(discardHandler{})
	}
	grace := w.GracePeriod
	if grace <= 0 {
		grace = 30 * time.Second
	}
	// Leasing stops when ctx is done (or a slot hits a fatal error);
	// handlers run under a context that outlives that by the grace period.
	leasing, stopLeasing := context.WithCancel(ctx)
	defer stopLeasing()
	work, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelWork(nil)
	stopGrace := context.AfterFunc(leasing, func() {
		t := time.AfterFunc(grace, func() { cancelWork(ErrShutdown) })
		context.AfterFunc(work, func() { t.Stop() })
	})
	defer stopGrace()

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.slot(leasing, work, qs[i%len(qs)], log); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				// The other slots stop leasing and finish what they hold.
				stopLeasing()
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// slot leases and works one delegation at a time until ctx is done.
func (w *Worker) slot(ctx, work context.Context, queue string, log *slog.Logger) error {
	name := w.Name
	if name == "" {
		name = "worker"
	}
	wait := w.WaitSeconds
	if wait <= 0 {
		wait = 10
	}
	wait = min(wait, 30)
	failures := 0
	for ctx.Err() == nil && work.Err() == nil {
		lctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(work, cancel)
		l, err := w.Client.Lease(lctx, queue, LeaseInput{Worker: name, WaitSeconds: wait})
		stop()
		cancel()
		if err != nil {
			if ctx.Err() != nil || work.Err() != nil {
				return nil
			}
			if s := StatusCode(err); s >= 400 && s < 500 && s != 408 && s != 429 {
				return fmt.Errorf("lease from %s: %w", queue, err)
			}
			failures++
			d := min(time.Duration(failures)*500*time.Millisecond, 10*time.Second)
			log.Warn("lease failed; backing off", "queue", queue, "err", err, "delay", d)
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
			continue
		}
		failures = 0
		if l == nil {
			continue
		}
		w.work(work, l, log)
	}
	return nil
}

// work runs the handler on one lease with heartbeats and sends its result.
func (w *Worker) work(parent context.Context, l *Lease, log *slog.Logger) {
	log = log.With("delegation", l.DelegationID, "session", l.SessionID, "step", l.Step, "attempt", l.Attempt)
	// The lease's trace continues in the handler, the heartbeats and the
	// result (unless the caller's context carries a trace of its own).
	if tp, _ := Traceparent(parent); tp == "" {
		parent = WithTraceparent(parent, l.Traceparent, l.Tracestate)
	}
	hctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeat(hctx, l, cancel, log)
	}()
	in, herr := w.Handler(hctx, l)
	lost := context.Cause(hctx)
	cancel(context.Canceled)
	<-hbDone
	switch {
	case errors.Is(lost, ErrLeaseLost):
		log.Warn("lease lost while working; result dropped")
		w.report(l, in, Outcome{}, ErrLeaseLost)
		return
	case errors.Is(lost, ErrShutdown):
		log.Warn("shutdown grace period ran out; result dropped (the lease will expire and be retried)")
		w.report(l, in, Outcome{}, ErrShutdown)
		return
	}
	if herr != nil {
		class := FailureTransient
		var fe *FailureError
		if errors.As(herr, &fe) {
			class = fe.Class
		}
		in = ResultInput{ResultType: ResultFailed, Failure: &Failure{Class: class, Message: herr.Error()}}
	}
	if in.LeaseToken == "" {
		in.LeaseToken = l.LeaseToken
	}
	if in.SessionID == "" {
		in.SessionID = l.SessionID
	}
	if in.Step == "" {
		in.Step = l.Step
	}
	// The result must get through even during shutdown: a bounded,
	// uncancelled context; retries reuse one idempotency key.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(parent), 60*time.Second)
	defer rcancel()
	out, err := w.Client.Result(rctx, l.DelegationID, in)
	switch {
	case err == nil:
		log.Debug("result sent", "result_type", in.ResultType, "status", out.Status, "version", out.StateVersion)
	case IsConflict(err):
		log.Warn("result refused: the lease expired or was superseded", "err", err)
	default:
		log.Error("result not sent", "result_type", in.ResultType, "err", err)
	}
	w.report(l, in, out, err)
}

func (w *Worker) report(l *Lease, in ResultInput, out Outcome, err error) {
	if w.OnResult != nil {
		w.OnResult(l, in, out, err)
	}
}

// heartbeat renews the lease at a fraction of its length until ctx is done.
// A refused heartbeat (409) cancels the handler with ErrLeaseLost.
func (w *Worker) heartbeat(ctx context.Context, l *Lease, cancel context.CancelCauseFunc, log *slog.Logger) {
	frac := w.HeartbeatFraction
	if frac <= 0 || frac >= 1 {
		frac = 1.0 / 3
	}
	length := time.Until(l.LeaseExpiresAt)
	if length <= 0 {
		// The clocks disagree; assume the default lease.
		length = 30 * time.Second
	}
	every := max(time.Duration(float64(length)*frac), 200*time.Millisecond)
	expires := time.Now().Add(length)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Each attempt may retry, but not past the lease's end.
		hctx, hcancel := context.WithDeadline(ctx, expires)
		_, err := w.Client.Heartbeat(hctx, l.DelegationID, l.LeaseToken)
		hcancel()
		switch {
		case err == nil:
			expires = time.Now().Add(length)
		case ctx.Err() != nil:
			return
		case IsConflict(err) || IsNotFound(err):
			log.Warn("heartbeat refused: lease lost; cancelling the handler", "err", err)
			cancel(ErrLeaseLost)
			return
		default:
			log.Warn("heartbeat failed", "err", err)
			if !time.Now().Before(expires) {
				log.Warn("lease ran out without a heartbeat; cancelling the handler")
				cancel(ErrLeaseLost)
				return
			}
		}
		t.Reset(every)
	}
}
