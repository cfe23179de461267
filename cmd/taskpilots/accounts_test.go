package main

import (
	"context"
	"errors"
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
)

// expectedOperator is the actor the CLI should record when run by this test
// process, worked out independently of operator().
func expectedOperator(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil || u.Username == "" {
		return "cli:unknown" // runCLI's environment has no USER
	}
	return "cli:" + u.Username
}

// TestCLIChangesAudited: every user and token change made with the CLI
// leaves the admin log row the console leaves for the same action, with the
// actor cli:<os user>.
func TestCLIChangesAudited(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		ctx := context.Background()
		migratedURL(t, dbURL)
		vars := map[string]string{"TASKPILOTS_DATABASE_URL": dbURL}
		s := openTestStore(t, dbURL)
		actor := expectedOperator(t)

		// want runs one command and checks that it added exactly one admin
		// log row, for this action on this target, by the operator.
		want := func(action, kind string, target func() string, args ...string) {
			t.Helper()
			before, err := s.ListAdminAudit(ctx, models.AdminAuditOpts{Limit: 200})
			if err != nil {
				t.Fatal(err)
			}
			r := runCLI(t, vars, "", args...)
			if r.code != 0 {
				t.Fatalf("%v exited %d: %s", args, r.code, r.stderr)
			}
			after, err := s.ListAdminAudit(ctx, models.AdminAuditOpts{Limit: 200})
			if err != nil {
				t.Fatal(err)
			}
			if len(after.Rows) != len(before.Rows)+1 {
				t.Fatalf("%v: %d admin log rows before, %d after", args, len(before.Rows), len(after.Rows))
			}
			row := after.Rows[0]
			if row.Actor != actor || row.Action != action || row.TargetKind != kind || row.TargetID != target() || row.After == nil {
				t.Fatalf("%v: admin log row %+v, want %s %s %s/%s", args, row, actor, action, kind, target())
			}
			if strings.Contains(*row.After, "password_hash") || strings.Contains(*row.After, "token_hash") {
				t.Fatalf("%v: the admin log holds a hash: %s", args, *row.After)
			}
		}
		userID := func() string {
			u, err := s.FindUser(ctx, "dana@example.com")
			if err != nil {
				t.Fatal(err)
			}
			return u.ID
		}
		tokenID := func() string {
			ts, err := s.ListTokens(ctx)
			if err != nil || len(ts) != 1 {
				t.Fatalf("tokens %+v, %v", ts, err)
			}
			return ts[0].ID
		}

		want(models.AdminUserCreate, "user", userID, "user", "create", "--email", "dana@example.com", "--name", "Dana", "--role", "agent")
		want(models.AdminUserDisable, "user", userID, "user", "disable", "dana@example.com")
		u, _ := s.FindUser(ctx, "dana@example.com")
		if !u.Disabled {
			t.Fatal("user disable did not disable")
		}
		want(models.AdminUserEnable, "user", userID, "user", "enable", u.ID)
		want(models.AdminUserPassword, "user", userID, "user", "reset-password", "DANA@example.com")
		want(models.AdminTokenCreate, "token", tokenID, "token", "create", "--name", "fleet", "--role", "worker")
		want(models.AdminTokenRevoke, "token", tokenID, "token", "revoke", "fleet")

		// The reset password is printed once, alone on stdout, and works.
		r := runCLI(t, vars, "", "user", "reset-password", "dana@example.com")
		pw := strings.TrimSuffix(r.stdout, "\n")
		if _, err := s.Authenticate(ctx, "dana@example.com", pw); r.code != 0 || err != nil {
			t.Fatalf("reset password %q does not log in (exit %d): %v", pw, r.code, err)
		}
		r = runCLI(t, vars, "", "user", "disable", "nobody@example.com")
		if r.code != 1 || !strings.Contains(r.stderr, "not found") {
			t.Fatalf("disabling an unknown user: %d %q", r.code, r.stderr)
		}
	})
}

// TestOperatorFallbacks: the actor names the OS account, else $USER, else
// "unknown", so that a CLI change is recorded even when nobody can be named.
func TestOperatorFallbacks(t *testing.T) {
	env := func(osUser func() (string, error), vars map[string]string) *cliEnv {
		return &cliEnv{osUser: osUser, getenv: func(k string) string { return vars[k] }}
	}
	noPasswd := func() (string, error) { return "", errors.New("user: unknown userid 4242") }
	for _, c := range []struct {
		name string
		env  *cliEnv
		want string
	}{
		{"os user", env(func() (string, error) { return "carol", nil }, map[string]string{"USER": "mallory"}), "cli:carol"},
		{"no passwd entry", env(noPasswd, map[string]string{"USER": "bob"}), "cli:bob"},
		{"nothing", env(noPasswd, nil), "cli:unknown"},
		{"no environment", &cliEnv{osUser: noPasswd}, "cli:unknown"},
	} {
		if got := operator(c.env).Actor(); got != c.want {
			t.Errorf("%s: actor %q, want %q", c.name, got, c.want)
		}
	}
	if got := operator(&cliEnv{getenv: func(string) string { return "" }}).Actor(); got != expectedOperator(t) {
		t.Errorf("the real OS user: %q, want %q", got, expectedOperator(t))
	}
}

// TestTokenNameTakenCLI: a second token of a name is refused with a message
// that says why, and nothing is stored.
func TestTokenNameTakenCLI(t *testing.T) {
	dbURL := migratedURL(t, "sqlite:"+t.TempDir()+"/dup.db")
	vars := map[string]string{"TASKPILOTS_DATABASE_URL": dbURL}
	if r := runCLI(t, vars, "", "token", "create", "--name", "fleet", "--role", "worker"); r.code != 0 {
		t.Fatalf("first create exited %d", r.code)
	}
	r := runCLI(t, vars, "", "token", "create", "--name", "fleet", "--role", "controller")
	if r.code != 1 || r.stdout != "" {
		t.Fatalf("duplicate create: exit %d, stdout %q", r.code, r.stdout)
	}
	wantContains(t, "stderr", r.stderr, "invalid input:\n", "\n  name: is already used by another token")
	if ts, _ := openTestStore(t, dbURL).ListTokens(context.Background()); len(ts) != 1 {
		t.Fatalf("%d tokens stored", len(ts))
	}
}

// TestTokenListLastUsed: `token list` shows when a token last authenticated.
func TestTokenListLastUsed(t *testing.T) {
	dbURL := migratedURL(t, "sqlite:"+t.TempDir()+"/used.db")
	vars := map[string]string{"TASKPILOTS_DATABASE_URL": dbURL}
	secret := strings.TrimSpace(runCLI(t, vars, "", "token", "create", "--name", "fleet", "--role", "worker").stdout)
	r := runCLI(t, vars, "", "token", "list")
	if fields := strings.Fields(strings.Split(r.stdout, "\n")[1]); len(fields) != 6 || fields[4] != "-" {
		t.Fatalf("an unused token's row: %q", fields)
	}
	s := openTestStore(t, dbURL)
	used := time.Date(2026, 11, 30, 9, 15, 42, 0, time.UTC)
	s.Now = func() time.Time { return used }
	if _, err := s.AuthenticateToken(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, vars, "", "token", "list")
	if fields := strings.Fields(strings.Split(r.stdout, "\n")[1]); len(fields) != 6 || fields[4] != "2026-11-30T09:15:42Z" {
		t.Fatalf("a used token's row: %q", fields)
	}
}
