package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/taskpilots/handoff/client"
)

// A controller follows the event feed instead of polling each session: it
// learns at once when a step completes or a session is escalated, and
// resumes where it stopped after a restart.
func ExampleClient_Follow() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c := client.New("http://127.0.0.1:8080", os.Getenv("TASKPILOTS_TOKEN"))

	cursor, _ := os.ReadFile("feed.cursor") // empty at first: from the oldest event
	err := c.Follow(ctx, client.FeedOptions{
		After: string(cursor),
		Types: []string{"result.completed", "session.escalated", "human.completed"},
		// Persist the position once a page is handled: every committed
		// event is told once, so nothing is lost or handled twice across
		// restarts (handle each event idempotently all the same).
		OnCursor: func(next string) { _ = os.WriteFile("feed.cursor", []byte(next), 0o600) },
	}, func(e client.FeedEvent) error {
		switch e.Type {
		case "result.completed":
			var r struct {
				Step     string `json:"step"`
				NextStep string `json:"next_step"`
			}
			if err := e.DecodePayload(&r); err != nil {
				return err
			}
			fmt.Printf("%s finished %s; next: %q\n", e.SessionID, r.Step, r.NextStep)
		default:
			fmt.Printf("%s: %s by %s\n", e.SessionID, e.Type, e.Actor)
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
