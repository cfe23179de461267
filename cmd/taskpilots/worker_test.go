package main

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models/demo"
)

func demoLease(queue string, facts map[string]any) *client.Lease {
	return &client.Lease{
		Queue: queue, DelegationID: "dlg_1", SessionID: "ses_1", Step: "check", Attempt: 1,
		Packet: client.Packet{Goal: "Handle ticket", ConfirmedFacts: facts,
			Resources: []client.Resource{{Name: "orders-db", URI: "db://orders"}}},
	}
}

// noDice never fails transiently and never spot-checks.
func noDice() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

func TestDemoRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, queue string
		facts       map[string]any
		want        string
	}{
		{"refund above the limit escalates", "refunds", map[string]any{"order_total": "240 EUR"}, client.ResultEscalated},
		{"refund amount as a number", "refunds", map[string]any{"amount": 250.5}, client.ResultEscalated},
		{"refund within the limit completes", "refunds", map[string]any{"order_total": "€19,90"}, client.ResultCompleted},
		{"refund without an amount asks", "refunds", map[string]any{"customer": "c-1"}, client.ResultNeedsInput},
		{"billing completes", "billing", map[string]any{"invoice": "INV-7"}, client.ResultCompleted},
	}
	for _, c := range cases {
		in, why := decide(demoLease(c.queue, c.facts), c.queue, noDice(), 0)
		if in.ResultType != c.want {
			t.Errorf("%s: %s (%s); want %s", c.name, in.ResultType, why, c.want)
			continue
		}
		// Every result must satisfy the return contract.
		switch in.ResultType {
		case client.ResultCompleted:
			if len(in.Evidence) == 0 {
				t.Errorf("%s: completed without evidence", c.name)
			}
			for _, e := range in.Evidence {
				if e.Claim == "" || e.Source == "" {
					t.Errorf("%s: evidence %+v lacks a claim or a source", c.name, e)
				}
			}
		case client.ResultEscalated:
			if in.Question == "" || in.NextStep == "" || len(in.Risks) == 0 || !strings.Contains(in.Question, "EUR") {
				t.Errorf("%s: escalation %+v lacks question, next step or risks", c.name, in)
			}
		case client.ResultNeedsInput:
			if in.Question == "" {
				t.Errorf("%s: needs_input without a question", c.name)
			}
		}
	}
	if in, _ := decide(demoLease("billing", nil), "billing", noDice(), 1); in.ResultType != "" {
		t.Errorf("fail rate 1 gave %s; want a transient failure", in.ResultType)
	}
}

func TestDemoDiceAreReproducible(t *testing.T) {
	t.Parallel()
	d := &demoWorker{seed: 7, failRate: 0.1}
	l := demoLease("billing", nil)
	a, b := d.dice(l).Float64(), d.dice(l).Float64()
	l.Attempt = 2
	if c := d.dice(l).Float64(); a != b || a == c {
		t.Fatalf("dice: %v %v %v; want the same per attempt and different across attempts", a, b, c)
	}
}

// TestDemoRulesFollowRoutes: every next_step the demo worker completes with
// has a demo route, so demo sessions flow from step to step
// (check-eligibility → issue-refund → notify-customer) instead of stalling,
// and a notification ends the session. Every queue a demo route targets is
// one the worker works.
func TestDemoRulesFollowRoutes(t *testing.T) {
	t.Parallel()
	lease := func(queue, step string, facts map[string]any) *client.Lease {
		l := demoLease(queue, facts)
		l.Step = step
		return l
	}
	cases := []struct {
		queue, step string
		facts       map[string]any
		next        string
	}{
		{"refunds", "check-eligibility", map[string]any{"order_total": "45 EUR"}, "issue-refund"},
		{"refunds", "issue-refund", map[string]any{"order_total": "45 EUR"}, "notify-customer"},
		{"refunds", "issue-refund", map[string]any{"order_total": "260 EUR", "approved_amount": "260 EUR"}, "notify-customer"},
		{"refunds", "refund-balance", map[string]any{"amount": "37.50 EUR"}, "notify-customer"},
		{"billing", "correct-invoice", map[string]any{"invoice": "INV-7"}, "notify-customer"},
		{"notifications", "notify-customer", nil, ""},
	}
	for _, c := range cases {
		in, why := decide(lease(c.queue, c.step, c.facts), c.queue, noDice(), 0)
		if in.ResultType != client.ResultCompleted || in.NextStep != c.next {
			t.Errorf("%s/%s: %s next %q (%s); want completed next %q", c.queue, c.step, in.ResultType, in.NextStep, why, c.next)
			continue
		}
		if _, ok := demo.Routes[in.NextStep]; in.NextStep != "" && !ok {
			t.Errorf("%s/%s: next step %q has no demo route", c.queue, c.step, in.NextStep)
		}
	}
	for step, r := range demo.Routes {
		if !slices.Contains(DemoQueues, r.Queue) {
			t.Errorf("demo route %s goes to %s, which the demo worker does not work", step, r.Queue)
		}
	}
	if _, ok := demo.Routes[demo.UnroutedStep]; ok {
		t.Errorf("the deliberately unrouted step %s has a route", demo.UnroutedStep)
	}
}

// TestWorkerTokenFile: the token can come from a file (a mounted container
// secret), trimmed of its newline; both sources at once, a missing file and an
// empty file are usage errors.
func TestWorkerTokenFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	if err := os.WriteFile(good, []byte("tp_secret123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := &cliEnv{stderr: io.Discard, getenv: func(string) string { return "" }}
	o, err := workerFlags(env, []string{"--token-file", good})
	if err != nil || o.token != "tp_secret123" {
		t.Fatalf("token file: %q, %v", o.token, err)
	}
	envFile := &cliEnv{stderr: io.Discard, getenv: func(k string) string {
		if k == "TASKPILOTS_TOKEN_FILE" {
			return good
		}
		return ""
	}}
	if o, err := workerFlags(envFile, nil); err != nil || o.token != "tp_secret123" {
		t.Fatalf("TASKPILOTS_TOKEN_FILE: %q, %v", o.token, err)
	}
	for name, args := range map[string][]string{
		"both":    {"--token", "x", "--token-file", good},
		"missing": {"--token-file", filepath.Join(dir, "nope")},
		"empty":   {"--token-file", empty},
	} {
		var ee *exitError
		if _, err := workerFlags(env, args); !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("%s: %v, want a usage error", name, err)
		}
	}
}
