package handlers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// TestConsolePacketPreview: the session page's packet preview says why the
// next worker runs and how much of its budget the packet uses.
func TestConsolePacketPreview(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{})
		ana, _ := agent(t, b, "Ana Agent", models.RoleAgent)
		sid, did := storetest.Delegated(ctx, t, s, "console-pk")
		l, err := s.Claim(ctx, "console-pk", "w-1", "test:worker", "")
		if err != nil || l == nil || l.DelegationID != did {
			t.Fatalf("claim %+v %v", l, err)
		}
		if _, err := s.SubmitResult(ctx, did, "test:worker", "", models.ResultInput{LeaseToken: l.LeaseToken, SessionID: sid, Step: l.Step,
			ResultType: models.ResultFailed, Failure: &models.Failure{Class: models.FailureTransient, Message: "carrier API timed out"}}); err != nil {
			t.Fatal(err)
		}
		doc := getDoc(ana, "/console/sessions/"+sid)
		if got := squash(doc.Find(`[data-testid="packet-run-reason"]`)); !strings.Contains(got, "retry") || !strings.Contains(got, "carrier API timed out") {
			t.Errorf("run reason = %q", got)
		}
		if got := squash(doc.Find(`[data-testid="packet-budget"]`)); !strings.HasSuffix(got, "of 32768 bytes") {
			t.Errorf("budget = %q", got)
		}
	})
}
