package models_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// wantNameTaken fails unless err is a validation error on the token name
// saying that it is taken.
func wantNameTaken(t *testing.T, what string, err error) {
	t.Helper()
	var ve *models.ValidationError
	if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "name" || ve.Fields[0].Message != models.TokenNameTaken {
		t.Fatalf("%s: want the name-taken field error, got %v", what, err)
	}
}

// TestTokenNamesUnique: a token's name is its actor (token:<name>), so a
// second token of a name is refused with a field error (not a 500), by every
// path that creates tokens, even when the first one is revoked.
func TestTokenNamesUnique(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		op := models.CLIOperator("alice")
		if _, _, err := s.CreateToken(ctx, "fleet", models.RoleWorker); err != nil {
			t.Fatal(err)
		}
		_, _, err := s.CreateToken(ctx, "fleet", models.RoleController)
		wantNameTaken(t, "CreateToken", err)
		_, _, err = s.AdminCreateToken(ctx, op, "fleet", models.RoleWorker)
		wantNameTaken(t, "AdminCreateToken", err)
		if _, err := s.AdminRevokeToken(ctx, op, "fleet"); err != nil {
			t.Fatal(err)
		}
		_, _, err = s.AdminCreateToken(ctx, op, "fleet", models.RoleWorker)
		wantNameTaken(t, "AdminCreateToken after revoking the first", err)

		ts, err := s.ListTokens(ctx)
		if err != nil || len(ts) != 1 {
			t.Fatalf("tokens = %+v, %v", ts, err)
		}
		// The refused creations left no admin log row: only the revoke.
		page, err := s.ListAdminAudit(ctx, models.AdminAuditOpts{})
		if err != nil || len(page.Rows) != 1 || page.Rows[0].Action != models.AdminTokenRevoke {
			t.Fatalf("admin log = %+v, %v", page.Rows, err)
		}
		if _, _, err := s.AdminCreateToken(ctx, op, "fleet-2", models.RoleWorker); err != nil {
			t.Fatalf("another name: %v", err)
		}
	})
}

// TestTokenNameMigrationRenamesDuplicates: migration 14 succeeds on a
// database whose tokens share names (allowed before it). The oldest of each
// name keeps it, the others get <name>-<id> and keep authenticating, and
// each rename is in the admin log.
func TestTokenNameMigrationRenamesDuplicates(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		for {
			v, err := s.MigrateDown(ctx)
			if err != nil || v < 14 {
				t.Fatalf("migrate down = %d, %v", v, err)
			}
			if v == 14 {
				break
			}
		}
		base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		var secrets []string
		for i, name := range []string{"fleet", "fleet", "solo", "fleet"} {
			s.Now = func() time.Time { return base.Add(time.Duration(i) * time.Minute) }
			secret, _, err := s.CreateToken(ctx, name, models.RoleWorker)
			if err != nil {
				t.Fatalf("token %d before the migration: %v", i, err)
			}
			secrets = append(secrets, secret)
		}
		s.Now = time.Now
		if _, err := s.MigrateUp(ctx); err != nil {
			t.Fatalf("migrate up over duplicate names: %v", err)
		}

		var names []string
		for i, secret := range secrets {
			tok, err := s.AuthenticateToken(ctx, secret)
			if err != nil {
				t.Fatalf("token %d no longer authenticates: %v", i, err)
			}
			names = append(names, tok.Name)
		}
		if names[0] != "fleet" || names[2] != "solo" {
			t.Fatalf("the oldest tokens were renamed: %v", names)
		}
		ts, _ := s.ListTokens(ctx)
		ids := map[string]string{}
		for _, tok := range ts {
			ids[tok.Name] = tok.ID
		}
		for _, i := range []int{1, 3} {
			if !strings.HasPrefix(names[i], "fleet-tok_") || ids[names[i]] != strings.TrimPrefix(names[i], "fleet-") {
				t.Fatalf("duplicate %d renamed to %q, want fleet-<its id>", i, names[i])
			}
		}
		page, err := s.ListAdminAudit(ctx, models.AdminAuditOpts{})
		if err != nil || len(page.Rows) != 2 {
			t.Fatalf("admin log after the migration = %+v, %v", page.Rows, err)
		}
		for _, r := range page.Rows {
			if r.Actor != "migration:00014" || r.Action != models.AdminTokenRename || r.TargetKind != "token" ||
				r.Before == nil || *r.Before != `{"name":"fleet"}` || r.After == nil || !strings.Contains(*r.After, r.TargetID) {
				t.Errorf("rename row = %+v before %v after %v", r, r.Before, r.After)
			}
		}
		// Newest first, and in the fixed-width time layout the binary
		// writes (SQLite compares times as text).
		if !page.Rows[0].CreatedAt.After(base) {
			t.Errorf("rename recorded at %v", page.Rows[0].CreatedAt)
		}
		_, _, err = s.CreateToken(ctx, "fleet", models.RoleWorker)
		wantNameTaken(t, "after the migration", err)
	})
}

// countTokenUpdates counts UPDATE statements on api_tokens made through s.
func countTokenUpdates(t *testing.T, s *models.Store) *atomic.Int64 {
	t.Helper()
	n := &atomic.Int64{}
	err := s.DB.Callback().Update().After("gorm:update").Register("test:count-token-updates", func(db *gorm.DB) {
		if db.Statement.Table == "api_tokens" {
			n.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTokenLastUsed: authenticating writes last_used_at, at most once per
// LastUsedGranularity per token: calls within the period issue no UPDATE at
// all, and another process (replica, CLI) within the period of the last
// write leaves the stored time alone.
func TestTokenLastUsed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		secret, tok, err := s.CreateToken(ctx, "fleet", models.RoleWorker)
		if err != nil {
			t.Fatal(err)
		}
		_, other, err := s.CreateToken(ctx, "other", models.RoleWorker)
		if err != nil {
			t.Fatal(err)
		}
		lastUsed := func(id string) models.NullTime {
			t.Helper()
			ts, err := s.ListTokens(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range ts {
				if x.ID == id {
					return x.LastUsedAt
				}
			}
			t.Fatalf("token %s not listed", id)
			return models.NullTime{}
		}
		if lastUsed(tok.ID).Valid {
			t.Fatal("a new token has a last use")
		}
		t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
		clock := t0
		s.Now = func() time.Time { return clock }
		updates := countTokenUpdates(t, s)
		auth := func() {
			t.Helper()
			if _, err := s.AuthenticateToken(ctx, secret); err != nil {
				t.Fatal(err)
			}
		}

		auth()
		if got := lastUsed(tok.ID); !got.Valid || !got.Time.Equal(t0) {
			t.Fatalf("last_used_at after the first call = %+v, want %v", got, t0)
		}
		if lastUsed(other.ID).Valid {
			t.Fatal("another token's last use was written")
		}
		for i := 0; i < 50; i++ {
			clock = t0.Add(time.Duration(i) * time.Second)
			auth()
		}
		if n := updates.Load(); n != 1 {
			t.Fatalf("%d UPDATEs for 51 calls within a minute, want 1", n)
		}
		if got := lastUsed(tok.ID); !got.Time.Equal(t0) {
			t.Fatalf("last_used_at moved within the minute: %v", got)
		}
		clock = t0.Add(models.LastUsedGranularity)
		auth()
		if got := lastUsed(tok.ID); !got.Time.Equal(clock) || updates.Load() != 2 {
			t.Fatalf("a minute later last_used_at = %v after %d UPDATEs, want %v after 2", got, updates.Load(), clock)
		}

		// A second process on the same database has its own memory; the
		// UPDATE's condition still keeps it from writing within the minute.
		s2, err := models.Open(ctx, s.URL(), models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		written := clock
		clock = written.Add(30 * time.Second)
		s2.Now = func() time.Time { return clock }
		if _, err := s2.AuthenticateToken(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if got := lastUsed(tok.ID); !got.Time.Equal(written) {
			t.Fatalf("another process rewrote last_used_at within the minute: %v, want %v", got, written)
		}
		clock = written.Add(2 * models.LastUsedGranularity)
		if _, err := s2.AuthenticateToken(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if got := lastUsed(tok.ID); !got.Time.Equal(clock) {
			t.Fatalf("another process after the minute: %v, want %v", got, clock)
		}
	})
}

// TestCLIOperatorActs: the CLI operator passes the admin check that a
// console user must pass, and its changes are recorded as cli:<name>.
func TestCLIOperatorActs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		op := models.CLIOperator("alice")
		if op.Actor() != "cli:alice" || models.CLIOperator("").Actor() != "cli:unknown" {
			t.Fatalf("actors %q, %q", op.Actor(), models.CLIOperator("").Actor())
		}
		u, _, err := s.AdminCreateUser(ctx, op, models.CreateUserInput{Email: "dana@example.com", Name: "Dana", Role: models.RoleAgent})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetUserDisabled(ctx, op, u.ID, true); err != nil {
			t.Fatal(err)
		}
		page, err := s.ListAdminAudit(ctx, models.AdminAuditOpts{})
		if err != nil || len(page.Rows) != 2 {
			t.Fatalf("admin log = %+v, %v", page.Rows, err)
		}
		for _, r := range page.Rows {
			if r.Actor != "cli:alice" || r.TargetID != u.ID {
				t.Errorf("row %+v", r)
			}
		}
		if got, err := s.FindUser(ctx, "  DANA@example.com "); err != nil || got.ID != u.ID {
			t.Fatalf("FindUser by email = %+v, %v", got, err)
		}
		if got, err := s.FindUser(ctx, u.ID); err != nil || got.Email != "dana@example.com" {
			t.Fatalf("FindUser by id = %+v, %v", got, err)
		}
		if _, err := s.FindUser(ctx, "nobody@example.com"); models.ErrorCode(err) != models.ENOTFOUND {
			t.Fatalf("FindUser of nobody: %v", err)
		}
		// A plain user value (say, a disabled console admin) is still
		// checked: only CLIOperator skips the account check.
		fake := models.User{ID: "usr_nobody", Role: models.RoleAdmin, Name: "alice"}
		if _, _, err := s.AdminCreateToken(ctx, fake, "x", models.RoleWorker); models.ErrorCode(err) != models.EFORBIDDEN {
			t.Fatalf("a user that is not an enabled admin created a token: %v", err)
		}
	})
}
