package storetest

import (
	"context"
	"testing"

	"github.com/taskpilots/handoff/models"
)

// SessionOpts configures Session.
type SessionOpts struct {
	Goal      string
	TicketRef string
	Priority  int
	Facts     map[string]any
}

// Session creates a session and returns its id (at version 1).
func Session(ctx context.Context, t testing.TB, s *models.Store, o *SessionOpts) string {
	t.Helper()
	if o == nil {
		o = &SessionOpts{}
	}
	in := models.CreateSessionInput{Goal: o.Goal, TicketRef: o.TicketRef, Facts: o.Facts}
	if in.Goal == "" {
		in.Goal = "Refund order 1182 if eligible"
	}
	if o.Priority != 0 {
		p := o.Priority
		in.Priority = &p
	}
	out, err := s.CreateSession(ctx, "test:controller", "", in)
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	return out.SessionID
}

// Delegated creates a session and delegates one step to queue; it returns
// the session and delegation ids (session at version 2).
func Delegated(ctx context.Context, t testing.TB, s *models.Store, queue string) (sessionID, delegationID string) {
	t.Helper()
	id := Session(ctx, t, s, nil)
	v := int64(1)
	out, err := s.Delegate(ctx, id, "test:controller", "", models.DelegateInput{Queue: queue, Step: "check-eligibility", ExpectedVersion: &v})
	if err != nil {
		t.Fatalf("delegate: %v", err)
	}
	var d models.DelegationCreated
	if err := out.DecodeData(&d); err != nil {
		t.Fatalf("decode delegation: %v", err)
	}
	return id, d.DelegationID
}

// Ptr returns a pointer to v.
func Ptr[T any](v T) *T { return &v }
