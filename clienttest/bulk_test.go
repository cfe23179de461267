package clienttest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func TestBulk(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ts := newTestServer(t, s, nil)
		var ids []string
		for _, ticket := range []string{"T-1", "T-1", "T-2"} {
			out, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund order 1182", TicketRef: ticket})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, out.SessionID)
		}
		if _, err := ts.controller.Cancel(ctx, ids[1], client.TransitionInput{ExpectedVersion: 1}); err != nil {
			t.Fatal(err)
		}

		// A dry run by filter says what a bulk would do.
		in := client.BulkInput{Action: client.BulkPause, Filter: &client.BulkFilter{TicketRef: "T-1"}, Reason: "provider outage", DryRun: true}
		dry, err := ts.controller.Bulk(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if dry.Matched != 2 || !slices.Equal(dry.Applied, []string{ids[0]}) || len(dry.Skipped) != 1 || dry.Skipped[0].SessionID != ids[1] {
			t.Fatalf("dry run %+v", dry)
		}
		if got, _ := ts.controller.GetSession(ctx, ids[0]); got.Status != "open" {
			t.Fatalf("a dry run paused %s: %s", ids[0], got.Status)
		}

		// For real, twice with one key: the same answer, one pause.
		in.DryRun = false
		key := client.WithIdempotencyKey("bulk-pause-1")
		first, err := ts.controller.Bulk(ctx, in, key)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ts.controller.Bulk(ctx, in, key)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(first.Applied, []string{ids[0]}) || !slices.Equal(again.Applied, first.Applied) || again.Matched != first.Matched {
			t.Fatalf("first %+v, again %+v", first, again)
		}
		if got, _ := ts.controller.GetSession(ctx, ids[0]); got.Status != "paused" || got.StateVersion != 2 {
			t.Fatalf("session after bulk: %s v%d", got.Status, got.StateVersion)
		}

		// Invalid input is a 422 naming the field.
		_, err = ts.controller.Bulk(ctx, client.BulkInput{Action: "delete", SessionIDs: ids})
		var ve *client.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("bad action: %v", err)
		}
		if _, ok := ve.Field("action"); !ok {
			t.Fatalf("fields %+v", ve.Fields)
		}
		// A worker's token may not.
		if _, err := ts.worker.Bulk(ctx, client.BulkInput{Action: client.BulkCancel, SessionIDs: ids}); client.StatusCode(err) != 403 {
			t.Fatalf("worker bulk: %v", err)
		}
	})
}
