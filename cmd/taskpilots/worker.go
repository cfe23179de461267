package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models/demo"
)

func init() {
	commands["worker"] = command{
		summary: "run the demo worker against a server's queues (over the Go SDK)",
		run:     runWorker,
	}
}

// DemoQueues are the queues the demo data delegates to, directly or through
// its step routes (demo.Routes).
var DemoQueues = demo.Queues

// RefundThreshold is the refund amount (EUR) above which the demo worker
// escalates to a human instead of deciding.
const RefundThreshold = 200.0

type workerOpts struct {
	url, token, name string
	queues           []string
	concurrency      int
	wait             int
	seed             uint64
	failRate         float64
	workTime         time.Duration
	grace            time.Duration
}

func workerFlags(env *cliEnv, args []string) (workerOpts, error) {
	fs := newFlagSet(env, "worker")
	d := newEnvDefaults(env)
	var o workerOpts
	host, _ := os.Hostname()
	fs.StringVar(&o.url, "url", d.String("TASKPILOTS_URL", "http://"+DefaultAddr), "server base URL (env TASKPILOTS_URL)")
	fs.StringVar(&o.token, "token", d.String("TASKPILOTS_TOKEN", ""), "worker or admin API token (env TASKPILOTS_TOKEN)")
	tokenFile := fs.String("token-file", d.String("TASKPILOTS_TOKEN_FILE", ""),
		"read the token from this file instead, as container secrets are mounted (env TASKPILOTS_TOKEN_FILE)")
	queues := fs.String("queue", d.String("TASKPILOTS_QUEUES", strings.Join(DemoQueues, ",")), "comma-separated queues to work (env TASKPILOTS_QUEUES)")
	fs.StringVar(&o.name, "name", d.String("TASKPILOTS_WORKER_NAME", fmt.Sprintf("demo-%s-%d", host, os.Getpid())), "worker name shown in leases and events")
	fs.IntVar(&o.concurrency, "concurrency", d.Int("TASKPILOTS_CONCURRENCY", 4), "delegations worked at once (at least one per queue)")
	fs.IntVar(&o.wait, "wait", 10, "long-poll seconds per lease request (1-30)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the worker's dice (transient failures, some questions)")
	fs.Float64Var(&o.failRate, "fail-rate", 0.10, "share of attempts that fail transiently (0-1)")
	fs.DurationVar(&o.workTime, "work-time", 300*time.Millisecond, "typical time spent on one delegation")
	fs.DurationVar(&o.grace, "grace", 30*time.Second, "on Ctrl-C, how long in-flight work may finish")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots worker --url URL --token TOKEN [--queue Q[,Q2…]] [flags]\n\n"+
			"Works the demo queues with simple rules: completes most delegations with\n"+
			"evidence and a next step that the demo's step routes delegate on\n"+
			"(check-eligibility → issue-refund → notify-customer), asks for input when a\n"+
			"needed fact is missing, escalates refunds above 200 EUR, and fails\n"+
			"transiently now and then. Ctrl-C stops leasing and lets in-flight work\n"+
			"finish.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if err := d.Err(); err != nil {
		return o, err
	}
	for _, q := range strings.Split(*queues, ",") {
		if q = strings.TrimSpace(q); q != "" {
			o.queues = append(o.queues, q)
		}
	}
	if *tokenFile != "" {
		if o.token != "" {
			return o, usageErr("give --token or --token-file, not both")
		}
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return o, usageErr("--token-file: %v", err)
		}
		o.token = strings.TrimSpace(string(b))
		if o.token == "" {
			return o, usageErr("--token-file %s is empty", *tokenFile)
		}
	}
	switch {
	case o.token == "":
		return o, usageErr("--token (or TASKPILOTS_TOKEN, or --token-file) is required: create one with `taskpilots token create --name demo-worker --role worker`")
	case len(o.queues) == 0:
		return o, usageErr("--queue names no queue")
	case o.concurrency < 1:
		return o, usageErr("--concurrency must be at least 1")
	case o.wait < 1 || o.wait > 30:
		return o, usageErr("--wait must be between 1 and 30")
	case o.failRate < 0 || o.failRate > 1:
		return o, usageErr("--fail-rate must be between 0 and 1")
	}
	return o, nil
}

func runWorker(ctx context.Context, env *cliEnv, args []string) error {
	o, err := workerFlags(env, args)
	if err != nil {
		return err
	}
	c := client.New(o.url, o.token, client.WithLogger(env.log))
	dw := &demoWorker{seed: o.seed, failRate: o.failRate, workTime: o.workTime, log: env.log}
	w := &client.Worker{
		Client: c, Queues: o.queues, Name: o.name, Concurrency: o.concurrency, WaitSeconds: o.wait,
		GracePeriod: o.grace, Logger: env.log, Handler: dw.handle,
		OnResult: func(l *client.Lease, in client.ResultInput, out client.Outcome, err error) {
			if err != nil {
				env.log.Warn("result not applied", "session", l.SessionID, "delegation", l.DelegationID, "result_type", in.ResultType, "err", err)
				return
			}
			env.log.Info("result applied", "session", l.SessionID, "step", l.Step, "result_type", in.ResultType,
				"status", out.Status, "version", out.StateVersion)
		},
	}
	env.log.Info("demo worker started", "url", c.BaseURL(), "queues", o.queues, "name", o.name, "concurrency", o.concurrency)
	err = w.Run(ctx)
	if client.IsUnauthorized(err) || client.IsForbidden(err) {
		return fmt.Errorf("the server refused the token (it must be a worker or admin token): %w", err)
	}
	if err != nil {
		return err
	}
	env.log.Info("demo worker stopped")
	return nil
}

// demoWorker decides delegations of the demo queues with simple,
// reproducible rules: the dice for a delegation's attempt are seeded from
// the worker's seed, the delegation id and the attempt.
type demoWorker struct {
	seed     uint64
	failRate float64
	workTime time.Duration
	log      *slog.Logger
}

func (d *demoWorker) dice(l *client.Lease) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", l.DelegationID, l.Attempt)
	return rand.New(rand.NewPCG(d.seed, h.Sum64()))
}

func (d *demoWorker) handle(ctx context.Context, l *client.Lease) (client.ResultInput, error) {
	r := d.dice(l)
	queue := queueOf(l)
	log := d.log.With("session", l.SessionID, "delegation", l.DelegationID, "step", l.Step, "attempt", l.Attempt, "queue", queue)
	// Pretend to work: between half and one and a half the typical time.
	if d.workTime > 0 {
		t := time.NewTimer(d.workTime/2 + time.Duration(r.Int64N(int64(d.workTime)+1)))
		select {
		case <-ctx.Done():
			t.Stop()
			return client.ResultInput{}, context.Cause(ctx)
		case <-t.C:
		}
	}
	in, why := decide(l, queue, r, d.failRate)
	if in.ResultType == "" {
		log.Info("decided: transient failure", "why", why)
		return client.ResultInput{}, errors.New(why)
	}
	log.Info("decided", "result_type", in.ResultType, "why", why, "next_step", in.NextStep)
	return in, nil
}

// queueOf is the lease's queue, or a guess from the step and the packet.
func queueOf(l *client.Lease) string {
	if l.Queue != "" {
		return l.Queue
	}
	text := strings.ToLower(l.Step + " " + l.Packet.Goal + " " + l.Packet.Instructions)
	for _, q := range []string{"refund", "ship", "account", "bill"} {
		if strings.Contains(text, q) {
			return map[string]string{"refund": "refunds", "ship": "shipping", "account": "accounts", "bill": "billing"}[q]
		}
	}
	return "general"
}

// The demo steps the worker names as next_step; the demo seeds a route for
// each (demo.Routes), so a session flows on without a controller:
// check-eligibility → issue-refund → notify-customer, and every other
// completed step → notify-customer. A notification ends the session.
const (
	stepCheckEligibility = "check-eligibility"
	stepIssueRefund      = "issue-refund"
	stepNotifyCustomer   = "notify-customer"
	queueNotifications   = "notifications"
)

// decide applies the demo rules. An empty ResultType means "fail
// transiently" with the returned reason.
func decide(l *client.Lease, queue string, r *rand.Rand, failRate float64) (client.ResultInput, string) {
	p := l.Packet
	if r.Float64() < failRate {
		return client.ResultInput{}, "upstream system timed out (simulated)"
	}
	evidence := evidenceFrom(p)
	switch queue {
	case queueNotifications:
		return client.ResultInput{
			ResultType: client.ResultCompleted,
			Evidence:   append(evidence, client.Evidence{Claim: "customer notified about " + truncate(p.Goal, 80), Source: "mailer:outbox"}),
			Output:     map[string]any{"notified": true, "channel": "email"},
		}, "customer notified; the session is done"
	case "refunds":
		amount, src, ok := refundAmount(p.ConfirmedFacts)
		if !ok {
			return client.ResultInput{
				ResultType: client.ResultNeedsInput, Question: "What is the order total (amount and currency) to refund?",
				NextStep: l.Step, Output: map[string]any{"missing": []string{"order_total"}},
			}, "no refund amount among the confirmed facts"
		}
		_, approved := firstFact(p.ConfirmedFacts, "approved_amount", "approved_by_human")
		if amount > RefundThreshold && !approved {
			return client.ResultInput{
				ResultType:  client.ResultEscalated,
				Question:    fmt.Sprintf("Approve a refund of %.2f EUR? It is above the %.0f EUR limit for automatic refunds.", amount, RefundThreshold),
				Risks:       []string{fmt.Sprintf("refund of %.2f EUR exceeds the automatic limit", amount), "refunding twice if the order was already refunded"},
				NextStep:    "human-approve-refund",
				Evidence:    append(evidence, client.Evidence{Claim: fmt.Sprintf("refund amount is %.2f EUR", amount), Source: src}),
				Uncertainty: &client.Uncertainty{Level: 0.3, Notes: "amount above policy threshold"},
				Output:      map[string]any{"amount_eur": amount, "eligible": "needs approval"},
			}, "refund above threshold"
		}
		if l.Step == stepCheckEligibility {
			return client.ResultInput{
				ResultType: client.ResultCompleted, NextStep: stepIssueRefund,
				Evidence:    append(evidence, client.Evidence{Claim: fmt.Sprintf("refund amount %.2f EUR is within the automatic limit or approved", amount), Source: src}),
				Uncertainty: &client.Uncertainty{Level: 0.1},
				Output:      map[string]any{"eligible": true, "amount_eur": amount},
			}, "eligible; the route delegates the refund"
		}
		return client.ResultInput{
			ResultType: client.ResultCompleted, NextStep: stepNotifyCustomer,
			Evidence:    append(evidence, client.Evidence{Claim: fmt.Sprintf("refunded %.2f EUR", amount), Source: src}),
			Uncertainty: &client.Uncertainty{Level: 0.1},
			Output:      map[string]any{"refunded_eur": amount},
		}, "refunded; the route notifies the customer"
	case "shipping":
		if _, ok := firstFact(p.ConfirmedFacts, "address", "shipping_address", "tracking", "tracking_number", "carrier"); !ok && r.Float64() < 0.5 {
			return client.ResultInput{
				ResultType: client.ResultNeedsInput, Question: "Which shipping address or tracking number applies?",
				NextStep: l.Step,
			}, "no address or tracking number"
		}
	case "accounts":
		if _, ok := firstFact(p.ConfirmedFacts, "email", "account", "account_id", "customer_id", "user"); !ok && r.Float64() < 0.5 {
			return client.ResultInput{
				ResultType: client.ResultNeedsInput, Question: "Which account (email or customer id) is this about?",
				NextStep: l.Step,
			}, "account not identified"
		}
	}
	if r.Float64() < 0.05 {
		return client.ResultInput{
			ResultType: client.ResultNeedsInput, Question: "Can the customer confirm the details before we proceed?",
			NextStep: l.Step,
		}, "spot check: confirm with the customer"
	}
	return client.ResultInput{
		ResultType: client.ResultCompleted, Evidence: evidence, NextStep: stepNotifyCustomer,
		Uncertainty: &client.Uncertainty{Level: 0.15, Notes: "demo worker rules"},
		Output:      map[string]any{"done": l.Step, "queue": queue},
	}, "routine " + queue + " step; the route notifies the customer"
}

// evidenceFrom cites the packet's resources and confirmed facts.
func evidenceFrom(p client.Packet) []client.Evidence {
	var ev []client.Evidence
	keys := make([]string, 0, len(p.ConfirmedFacts))
	for k := range p.ConfirmedFacts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys[:min(len(keys), 3)] {
		ev = append(ev, client.Evidence{Claim: fmt.Sprintf("%s is %v", k, p.ConfirmedFacts[k]), Source: "facts." + k})
	}
	for _, res := range p.Resources[:min(len(p.Resources), 2)] {
		src := res.Name
		if res.URI != "" {
			src = res.Name + ":" + res.URI
		}
		ev = append(ev, client.Evidence{Claim: "checked " + res.Name, Source: src})
	}
	if len(ev) == 0 {
		ev = append(ev, client.Evidence{Claim: "goal reviewed: " + truncate(p.Goal, 120), Source: "packet.goal"})
	}
	return ev
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func firstFact(facts map[string]any, keys ...string) (string, bool) {
	for _, k := range keys {
		if v, ok := facts[k]; ok && v != nil && fmt.Sprint(v) != "" {
			return k, true
		}
	}
	return "", false
}

var amountPattern = regexp.MustCompile(`[-+]?[0-9]+(?:[.,][0-9]+)?`)

// refundAmount finds the refund amount among the facts: amount,
// refund_amount, order_total or total, as a number or text such as
// "240 EUR" or "€19.90".
func refundAmount(facts map[string]any) (float64, string, bool) {
	for _, k := range []string{"amount", "refund_amount", "order_total", "total"} {
		v, ok := facts[k]
		if !ok {
			continue
		}
		var s string
		switch x := v.(type) {
		case float64:
			return x, "facts." + k, true
		case string:
			s = x
		default:
			s = fmt.Sprint(x)
		}
		m := amountPattern.FindString(s)
		if m == "" {
			continue
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(m, ",", "."), 64)
		if err == nil {
			return f, "facts." + k, true
		}
	}
	return 0, "", false
}
