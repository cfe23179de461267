package clienttest

import (
	"context"
	"errors"
	"testing"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestLeaseBatch: LeaseBatch takes up to max leases in one request, each a
// lease of its own (token, result), then fewer, then none; a max out of
// range is a validation error on "max".
func TestLeaseBatch(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ts := newTestServer(t, s, nil)
		want := map[string]bool{}
		for range 3 {
			_, d := ts.delegated(t, "batch-q", map[string]any{"order_total": "120 EUR"})
			want[d.DelegationID] = true
		}
		first, err := ts.worker.LeaseBatch(ctx, "batch-q", client.LeaseInput{Worker: "w-1"}, 2)
		if err != nil || len(first) != 2 {
			t.Fatalf("lease batch of 2 = %+v, %v", first, err)
		}
		rest, err := ts.worker.LeaseBatch(ctx, "batch-q", client.LeaseInput{Worker: "w-1", WaitSeconds: 1}, 5)
		if err != nil || len(rest) != 1 {
			t.Fatalf("lease batch of up to 5 with 1 left = %+v, %v", rest, err)
		}
		tokens := map[string]bool{}
		for _, l := range append(first, rest...) {
			if !want[l.DelegationID] || l.Queue != "batch-q" || l.LeaseToken == "" || tokens[l.LeaseToken] || l.Packet.SessionID != l.SessionID {
				t.Fatalf("lease = %+v (tokens so far %v)", l, tokens)
			}
			delete(want, l.DelegationID)
			tokens[l.LeaseToken] = true
			if _, err := ts.worker.Result(ctx, l.DelegationID, completed(&l)); err != nil {
				t.Fatalf("result for %s: %v", l.DelegationID, err)
			}
		}
		none, err := ts.worker.LeaseBatch(ctx, "batch-q", client.LeaseInput{Worker: "w-1"}, 3)
		if err != nil || none != nil {
			t.Fatalf("lease batch from an empty queue = %+v, %v; want nil, nil (204)", none, err)
		}
		var ve *client.ValidationError
		if _, err := ts.worker.LeaseBatch(ctx, "batch-q", client.LeaseInput{Worker: "w-1"}, 101); !errors.As(err, &ve) || !hasField(ve, "max") {
			t.Fatalf("max 101 = %v; want a ValidationError on max", err)
		}
	})
}

func hasField(ve *client.ValidationError, f string) bool {
	_, ok := ve.Field(f)
	return ok
}
