package clienttest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func TestPacketV2AndPrompt(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ts := newTestServer(t, s, nil)
		sess, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund order 1182 if eligible", Facts: map[string]any{"order": "1182"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ts.controller.Delegate(ctx, sess.SessionID, client.DelegateInput{Queue: "cl-pk", Step: "check", ExpectedVersion: sess.StateVersion,
			PacketMaxBytes: 8192}); err != nil {
			t.Fatal(err)
		}
		l, err := ts.worker.Lease(ctx, "cl-pk", client.LeaseInput{Worker: "w-1"})
		if err != nil || l == nil {
			t.Fatalf("lease %v %v", l, err)
		}
		p := l.Packet
		if p.RunReason.Kind != "first_run" || p.RunReason.Attempt != 1 || p.Budget.MaxBytes != 8192 || p.Budget.Bytes == 0 || p.Notes == nil || p.PreviousOutputs == nil {
			t.Fatalf("packet v2 fields: %+v %+v", p.RunReason, p.Budget)
		}
		pr, err := ts.worker.PacketPrompt(ctx, sess.SessionID)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(pr.Text[:pr.PrefixBytes]))
		if pr.PrefixHash != hex.EncodeToString(sum[:]) || !strings.HasPrefix(pr.Text, "# Goal\nRefund order 1182 if eligible") ||
			!strings.Contains(pr.Text[pr.PrefixBytes:], "order: 1182") {
			t.Fatalf("prompt %+v", pr)
		}
		in := completed(l)
		in.Usage = &client.Usage{InputTokens: 1500, CachedInputTokens: 1200}
		if _, err := ts.worker.Result(ctx, l.DelegationID, in); err != nil {
			t.Fatalf("result with usage: %v", err)
		}
		if _, err := ts.worker.PacketPrompt(ctx, "ses_nope"); client.StatusCode(err) != 404 {
			t.Fatalf("unknown session: %v", err)
		}
	})
}
