package clienttest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func TestListSessions(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ts := newTestServer(t, s, nil)
		start := time.Now().Add(-time.Minute)
		var created []string
		for _, in := range []client.CreateSessionInput{
			{Goal: "Refund order 1182 if eligible", TicketRef: "T-1182"},
			{Goal: "Replace the damaged blender", TicketRef: "T-2001"},
			{Goal: "Refund order 77", TicketRef: "T-77"},
			{Goal: "Close the account", TicketRef: "T-9"},
			{Goal: "Refund the shipping fee", TicketRef: "T-10"},
		} {
			out, err := ts.controller.CreateSession(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			created = append(created, out.SessionID)
		}
		if _, err := ts.controller.Delegate(ctx, created[1], client.DelegateInput{Queue: "shipping", Step: "ship", ExpectedVersion: 1}); err != nil {
			t.Fatal(err)
		}

		page, err := ts.worker.ListSessions(ctx, client.ListSessionsOptions{Q: "blender", Statuses: []string{"queued", "open"}, UpdatedAfter: start})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Sessions) != 1 || page.NextCursor != "" {
			t.Fatalf("page %+v", page)
		}
		if got := page.Sessions[0]; got.SessionID != created[1] || got.Status != "queued" || got.Queue != "shipping" ||
			got.StateVersion != 2 || got.TicketRef != "T-2001" || got.UpdatedAt.IsZero() {
			t.Fatalf("row %+v", got)
		}

		// The iterator follows the cursor across pages of two.
		var refunds []string
		for s, err := range ts.controller.AllSessions(ctx, client.ListSessionsOptions{Q: "refund", Limit: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			refunds = append(refunds, s.SessionID)
		}
		if want := []string{created[4], created[2], created[0]}; !slices.Equal(refunds, want) {
			t.Fatalf("refunds %v, want %v", refunds, want)
		}
		// Stopping early stops paging.
		n := 0
		for range ts.controller.AllSessions(ctx, client.ListSessionsOptions{Limit: 1}) {
			if n++; n == 2 {
				break
			}
		}
		if n != 2 {
			t.Fatalf("iterated %d", n)
		}

		// Bad options are a typed validation error naming them; the
		// iterator yields it.
		_, err = ts.controller.ListSessions(ctx, client.ListSessionsOptions{Statuses: []string{"bogus"}, Limit: 501})
		var ve *client.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("err %v, want a *client.ValidationError", err)
		}
		for _, f := range []string{"status", "limit"} {
			if _, ok := ve.Field(f); !ok {
				t.Errorf("%v does not name %s", ve.Fields, f)
			}
		}
		for _, err := range ts.controller.AllSessions(ctx, client.ListSessionsOptions{Cursor: "nope"}) {
			if !errors.As(err, &ve) {
				t.Fatalf("iterator error %v", err)
			}
			if _, ok := ve.Field("cursor"); !ok {
				t.Errorf("%v does not name cursor", ve.Fields)
			}
		}
	})
}
