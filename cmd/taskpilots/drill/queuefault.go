package drill

// Queue fault mode: `taskpilots drill --against URL --queue refunds
// --expire-share 0.2 --duration 2m` injects one fault into a named real
// queue of a deployment instead of running the drill's own scenario: it
// expires that share of the queue's live leases at once (POST
// /api/v1/queues/{queue}/expire-leases, admin token), as if those workers
// had gone silent together (the server records each expiry at once through
// the rescuer's own code, with the worker's real last sign of life), and
// then watches each expired delegation's session through the API until the
// expiry is recorded and one of the queue's workers has leased the step
// again (or the session escalated because the attempts ran out), for at
// most --duration. It reports the time to rescue and to re-lease per
// delegation and the queue's own metrics (GET
// /api/v1/metrics?queue=, 24 h window) before and after: infrastructure
// retries, lease expiries, handoff success, machine recovery time. Exit
// status 1 when a delegation did not recover in time.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/cmd/taskpilots/cliout"
	"github.com/taskpilots/handoff/models"
)

// QueueFaultReport is what a queue fault run found.
type QueueFaultReport struct {
	OK      bool    `json:"ok"`
	Mode    string  `json:"mode"` // "queue"
	URL     string  `json:"url"`
	Queue   string  `json:"queue"`
	Share   float64 `json:"share"`
	Leased  int     `json:"leased"`
	Expired int     `json:"expired"`
	// Rescued: the rescuer recorded delegation.lease_expired; Released: a
	// worker leased the step again as the next attempt; Escalated: the
	// expiry exhausted the attempts and the session went to a human.
	Rescued     int      `json:"rescued"`
	Released    int      `json:"released"`
	Escalated   int      `json:"escalated"`
	Unrecovered []string `json:"unrecovered"`
	// Seconds from the injection to the rescue and to the next lease.
	TimeToRescue  Seconds              `json:"time_to_rescue"`
	TimeToRelease Seconds              `json:"time_to_release"`
	Delegations   []QueueFaultRecovery `json:"delegations"`
	Before        *drillMetrics        `json:"metrics_before,omitempty"`
	After         *drillMetrics        `json:"metrics_after,omitempty"`
	// MetricsError says why the queue's metrics could not be read.
	MetricsError   string   `json:"metrics_error,omitempty"`
	ElapsedSeconds float64  `json:"elapsed_seconds"`
	Violations     []string `json:"violations"`
}

// Seconds summarises durations: how many, mean and longest.
type Seconds struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	Max   float64 `json:"max"`
}

func summarise(xs []float64) Seconds {
	s := Seconds{Count: len(xs)}
	for _, x := range xs {
		s.Mean += x
		s.Max = math.Max(s.Max, x)
	}
	if len(xs) > 0 {
		s.Mean /= float64(len(xs))
	}
	return s
}

// QueueFaultRecovery is one expired delegation's recovery.
type QueueFaultRecovery struct {
	DelegationID string  `json:"delegation_id"`
	SessionID    string  `json:"session_id"`
	Attempt      int     `json:"attempt"`
	RescuedAfter float64 `json:"rescued_after_seconds,omitempty"`
	LeasedAfter  float64 `json:"leased_after_seconds,omitempty"`
	LeasedBy     string  `json:"leased_by,omitempty"`
	Escalated    bool    `json:"escalated,omitempty"`
	done         bool
}

// validateQueueMode checks the options of the queue fault mode.
func (o drillOpts) validateQueueMode() error {
	v := &models.ValidationError{}
	if o.url == "" {
		v.Add("against", "is required with --queue: the base URL of the deployment (or --url)")
	}
	if o.adminToken == "" {
		v.Add("admin-token", "is required with --queue (env TASKPILOTS_ADMIN_TOKEN): expiring leases is an admin action")
	}
	if math.IsNaN(o.expireShare) || o.expireShare <= 0 || o.expireShare > 1 {
		v.Add("expire-share", "must be greater than 0 and at most 1 (the share of the queue's live leases to expire)")
	}
	if o.duration <= 0 {
		v.Add("duration", "must be positive")
	}
	if o.timeout <= o.duration {
		v.Add("timeout", "must be longer than --duration")
	}
	if err := v.Err(); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	return nil
}

// runQueueFault runs the queue fault mode and prints its report.
func runQueueFault(ctx context.Context, env *Env, o drillOpts) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()
	api := newDrillAPI([]string{strings.TrimRight(o.url, "/")}, o.adminToken, "", "drill-queue-")
	rep := QueueFaultReport{Mode: "queue", URL: o.url, Queue: o.queue, Share: o.expireShare, Unrecovered: []string{}, Violations: []string{}}
	progress := func(format string, args ...any) {
		if !o.quiet {
			fmt.Fprintf(env.Stderr, "drill: "+format+"\n", args...)
		}
	}
	if m, err := api.metrics(ctx, o.queue); err != nil {
		rep.MetricsError = err.Error()
	} else {
		rep.Before = &m
	}
	inj, err := expireLeases(ctx, api, o.queue, o.expireShare)
	if err != nil {
		return fmt.Errorf("expire the leases of queue %s: %w", o.queue, err)
	}
	rep.Leased, rep.Expired = inj.Leased, len(inj.Expired)
	progress("queue %s: expired %d of %d live leases at %s; watching their recovery for up to %s",
		o.queue, rep.Expired, rep.Leased, inj.At.Format(time.RFC3339), o.duration)
	recs := make([]*QueueFaultRecovery, len(inj.Expired))
	for i, e := range inj.Expired {
		recs[i] = &QueueFaultRecovery{DelegationID: e.DelegationID, SessionID: e.SessionID, Attempt: e.Attempt}
	}
	deadline := start.Add(o.duration)
	for {
		pending := 0
		for _, r := range recs {
			if r.done {
				continue
			}
			evs, err := api.events(ctx, r.SessionID)
			if err != nil {
				return fmt.Errorf("read the events of %s: %w", r.SessionID, err)
			}
			observeRecovery(r, evs, inj.At)
			if !r.done {
				pending++
			}
		}
		if pending == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	var rescue, release []float64
	for _, r := range recs {
		rep.Delegations = append(rep.Delegations, *r)
		if r.RescuedAfter > 0 {
			rep.Rescued++
			rescue = append(rescue, r.RescuedAfter)
		}
		switch {
		case r.Escalated:
			rep.Escalated++
		case r.LeasedAfter > 0:
			rep.Released++
			release = append(release, r.LeasedAfter)
		default:
			rep.Unrecovered = append(rep.Unrecovered, r.DelegationID)
			rep.Violations = append(rep.Violations, fmt.Sprintf("delegation %s (session %s) %s within %s of the injection",
				r.DelegationID, r.SessionID, map[bool]string{true: "was rescued but not leased again", false: "was not rescued"}[r.RescuedAfter > 0], o.duration))
		}
	}
	rep.TimeToRescue, rep.TimeToRelease = summarise(rescue), summarise(release)
	// The metrics window ends at the current whole second: wait until the
	// last recovery is inside it.
	last := inj.At.Add(time.Duration(math.Max(rep.TimeToRescue.Max, rep.TimeToRelease.Max) * float64(time.Second)))
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(last.Truncate(time.Second).Add(1100 * time.Millisecond))):
	}
	if m, err := api.metrics(ctx, o.queue); err != nil {
		rep.MetricsError = err.Error()
	} else {
		rep.After = &m
	}
	rep.ElapsedSeconds = time.Since(start).Seconds()
	rep.OK = len(rep.Violations) == 0
	printQueueFaultReport(env.Stdout, rep)
	if o.json {
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, string(b))
	}
	if !rep.OK {
		return &ExitError{Code: 1, Err: fmt.Errorf("drill failed: %s did not recover", cliout.Plural(len(rep.Unrecovered), "expired lease", "expired leases"))}
	}
	return nil
}

// observeRecovery reads a session's events for the expired delegation's
// rescue (delegation.lease_expired of its attempt) and next lease
// (delegation.leased of a later attempt), or an escalation after the rescue.
func observeRecovery(r *QueueFaultRecovery, evs []client.Event, at time.Time) {
	for _, e := range evs {
		var p struct {
			DelegationID string `json:"delegation_id"`
			Attempt      int    `json:"attempt"`
			Worker       string `json:"worker"`
			Exhausted    bool   `json:"exhausted"`
		}
		if e.DecodePayload(&p) != nil || p.DelegationID != r.DelegationID {
			continue
		}
		after := math.Max(e.CreatedAt.Sub(at).Seconds(), 0.000001)
		switch {
		case e.Type == string(models.EventDelegationExpired) && p.Attempt == r.Attempt && r.RescuedAfter == 0:
			r.RescuedAfter = after
			if p.Exhausted {
				r.Escalated, r.done = true, true
				return
			}
		case e.Type == string(models.EventDelegationLeased) && p.Attempt > r.Attempt && r.RescuedAfter > 0:
			r.LeasedAfter, r.LeasedBy, r.done = after, p.Worker, true
			return
		}
	}
}

// expireLeases calls POST /api/v1/queues/{queue}/expire-leases once: it is
// not idempotent (a repeat expires another share), so it is not retried.
func expireLeases(ctx context.Context, api *drillAPI, queue string, share float64) (client.ExpireLeasesResult, error) {
	return api.ep(0).ctrl.ExpireLeases(ctx, queue, share)
}

func printQueueFaultReport(w io.Writer, r QueueFaultReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("queue fault", "queue %s at %s: expire %.0f%% of its live leases", r.Queue, r.URL, 100*r.Share)
	row("leases expired", "%d of %d live", r.Expired, r.Leased)
	row("recovered", "%d rescued, %d leased again, %d escalated (attempts exhausted), %d not recovered", r.Rescued, r.Released, r.Escalated, len(r.Unrecovered))
	row("time to rescue", "mean %.2fs, longest %.2fs (%d)", r.TimeToRescue.Mean, r.TimeToRescue.Max, r.TimeToRescue.Count)
	row("time to re-lease", "mean %.2fs, longest %.2fs (%d)", r.TimeToRelease.Mean, r.TimeToRelease.Max, r.TimeToRelease.Count)
	metric := func(name string, f func(m *drillMetrics) string) {
		if r.Before != nil && r.After != nil {
			row(name, "%s before, %s after", f(r.Before), f(r.After))
		}
	}
	metric("queue retries", func(m *drillMetrics) string {
		return fmt.Sprintf("%d (%d lease expiries)", m.InfraRetries.Retries, m.InfraRetries.LeaseExpiries)
	})
	metric("handoff success", func(m *drillMetrics) string { return ratePct(m.HandoffSuccess.Rate) })
	metric("machine recovery", func(m *drillMetrics) string {
		if m.Recovery.Machine.MeanSeconds == nil {
			return "n/a"
		}
		return fmt.Sprintf("mean %.2fs of %d", *m.Recovery.Machine.MeanSeconds, m.Recovery.Machine.Recoveries)
	})
	if r.MetricsError != "" {
		row("queue metrics", "unavailable: %s", r.MetricsError)
	}
	row("duration", "%.1fs", r.ElapsedSeconds)
	verdict := "PASS"
	if !r.OK {
		verdict = fmt.Sprintf("FAIL (%s)", cliout.Plural(len(r.Violations), "violation", "violations"))
	}
	row("result", "%s", verdict)
	tw.Flush()
	for _, v := range slices.Sorted(slices.Values(r.Violations)) {
		fmt.Fprintln(w, "  "+v)
	}
}
