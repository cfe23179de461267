package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/taskpilots/handoff/client"
)

// A controller starts a session and delegates its first step.
func Example() {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:8080", os.Getenv("TASKPILOTS_TOKEN"))
	s, err := c.CreateSession(ctx, client.CreateSessionInput{
		Goal:        "Refund order 1182 if eligible",
		TicketRef:   "T-1182",
		Constraints: []string{"refunds over 200 EUR need a human"},
		Resources:   []client.Resource{{Name: "orders-db", URI: "db://orders"}},
		Facts:       map[string]any{"order_total": "240 EUR"},
	})
	if err != nil {
		log.Fatal(err)
	}
	d, err := c.Delegate(ctx, s.SessionID, client.DelegateInput{
		Queue: "refunds", Step: "check-eligibility", ExpectedVersion: s.StateVersion,
	})
	var conflict *client.ConflictError
	switch {
	case errors.As(err, &conflict):
		fmt.Println("someone else changed the session; it is now at version", conflict.CurrentVersion)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("queued", d.DelegationID)
	}
}

// A worker leases work from a queue until Ctrl-C, then finishes what it
// holds.
func ExampleWorker() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	w := &client.Worker{
		Client:      client.New("http://127.0.0.1:8080", os.Getenv("TASKPILOTS_TOKEN")),
		Queue:       "refunds",
		Name:        "refund-bot-1",
		Concurrency: 4,
		Handler: func(ctx context.Context, l *client.Lease) (client.ResultInput, error) {
			total, ok := l.Packet.ConfirmedFacts["order_total"]
			if !ok {
				return client.ResultInput{ResultType: client.ResultNeedsInput, Question: "What is the order total?"}, nil
			}
			return client.ResultInput{
				ResultType: client.ResultCompleted,
				Output:     map[string]any{"eligible": true},
				Evidence:   []client.Evidence{{Claim: fmt.Sprintf("order total is %v", total), Source: "facts.order_total"}},
			}, nil
		},
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Writes carry an idempotency key; a repeat with the same key returns the
// first answer and writes nothing.
func ExampleWithIdempotencyKey() {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:8080", os.Getenv("TASKPILOTS_TOKEN"))
	key := "create-T-1182" // e.g. derived from the ticket, so a rerun cannot start a second session
	s, err := c.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund order 1182 if eligible"}, client.WithIdempotencyKey(key))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.SessionID)
}
