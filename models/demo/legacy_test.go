package demo

import (
	"context"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestRetireLegacyAccounts: a demo user that still has the password earlier
// releases published loses it and is disabled, recorded in the admin log; a
// demo user with another password, and every other user, is left alone.
func TestRetireLegacyAccounts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		mk := func(email, password string) models.User {
			u, err := s.CreateUser(ctx, models.CreateUserInput{Email: email, Name: email, Role: models.RoleAgent, Password: password})
			if err != nil {
				t.Fatal(err)
			}
			return u
		}
		agent := mk(AgentEmail, legacyPassword)
		reviewer := mk(ReviewerEmail, "a password of its own")
		other := mk("dana@example.com", legacyPassword)
		op := models.CLIOperator("ops")

		retired, err := RetireLegacyAccounts(ctx, s, op)
		if err != nil || len(retired) != 1 || retired[0] != AgentEmail {
			t.Fatalf("retired %v, %v", retired, err)
		}
		if _, err := s.Authenticate(ctx, AgentEmail, legacyPassword); err == nil {
			t.Fatal("the published password still logs the demo agent in")
		}
		if u, _ := s.GetUser(ctx, agent.ID); !u.Disabled || models.PasswordMatches(u, legacyPassword) {
			t.Fatalf("retired agent = disabled %v, password kept %v", u.Disabled, models.PasswordMatches(u, legacyPassword))
		}
		for _, u := range []models.User{reviewer, other} {
			if got, _ := s.GetUser(ctx, u.ID); got.Disabled || got.PasswordHash != u.PasswordHash {
				t.Fatalf("%s was changed", u.Email)
			}
		}
		page, err := s.ListAdminAudit(ctx, models.AdminAuditOpts{})
		if err != nil || len(page.Rows) != 2 {
			t.Fatalf("admin log %+v, %v", page.Rows, err)
		}
		for _, r := range page.Rows {
			if r.Actor != "cli:ops" || r.TargetID != agent.ID {
				t.Fatalf("admin log row %+v", r)
			}
		}
		// Nothing left to retire: a second start changes nothing.
		if again, err := RetireLegacyAccounts(ctx, s, op); err != nil || len(again) != 0 {
			t.Fatalf("second pass retired %v, %v", again, err)
		}
	})
}
