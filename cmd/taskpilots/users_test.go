package main

import (
	"context"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
)

func TestUserCreate(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		ctx := context.Background()
		migratedURL(t, dbURL)
		vars := map[string]string{"TASKPILOTS_DATABASE_URL": dbURL}
		s := openTestStore(t, dbURL)

		r := runCLI(t, vars, "correct horse battery\n", "user", "create",
			"--email", "Dana@Example.com", "--name", "Dana Support", "--role", "agent", "--password-stdin")
		if r.code != 0 {
			t.Fatalf("user create exited %d", r.code)
		}
		if r.stdout != "" {
			t.Errorf("--password-stdin printed to stdout: %q", r.stdout)
		}
		u, err := s.Authenticate(ctx, "dana@example.com", "correct horse battery")
		if err != nil || u.Role != models.RoleAgent || u.Name != "Dana Support" {
			t.Fatalf("Authenticate = %+v, %v", u, err)
		}

		// Without --password-stdin the generated password is all of stdout.
		r = runCLI(t, vars, "", "user", "create", "--email", "rev@example.com", "--name", "Rev", "--role", "reviewer")
		if r.code != 0 {
			t.Fatalf("user create (generated) exited %d", r.code)
		}
		pw := strings.TrimSuffix(r.stdout, "\n")
		if len(pw) < models.MinPasswordLen || strings.ContainsAny(pw, " \n") {
			t.Fatalf("stdout is not a lone password: %q", r.stdout)
		}
		if _, err := s.Authenticate(ctx, "rev@example.com", pw); err != nil {
			t.Fatalf("generated password does not authenticate: %v", err)
		}

		r = runCLI(t, vars, "other password 123\n", "user", "create",
			"--email", "dana@example.com", "--name", "Dana Again", "--role", "agent", "--password-stdin")
		if r.code != 1 {
			t.Fatalf("duplicate email exited %d", r.code)
		}
		wantContains(t, "duplicate", r.stderr, "email: is already taken")
	})
}

func TestUserCreateValidation(t *testing.T) {
	dbURL := migratedURL(t, "sqlite:"+t.TempDir()+"/v.db")
	r := runCLI(t, nil, "short\n", "user", "create", "--database-url", dbURL,
		"--email", "not-an-email", "--role", "root", "--password-stdin")
	if r.code != 1 {
		t.Fatalf("exit %d", r.code)
	}
	wantContains(t, "stderr", r.stderr, "invalid input:\n", "\n  email: ", "\n  name: is required", "\n  role: ", "\n  password: must be at least")
	s := openTestStore(t, dbURL)
	if n, _ := s.CountUsers(context.Background()); n != 0 {
		t.Fatalf("%d users stored after invalid input", n)
	}

	r = runCLI(t, nil, "", "user", "create", "--database-url", dbURL,
		"--email", "a@example.com", "--name", "A", "--role", "admin", "--password-stdin")
	if r.code != 1 || !strings.Contains(r.stderr, "password: standard input was empty") {
		t.Fatalf("empty stdin: %d %q", r.code, r.stderr)
	}
}

// TestUserResetPasswordEndsLogins: the CLI's reset (models.ResetPassword,
// as the console's) signs the user out everywhere and gives a one-time
// password; the CLI's create refuses a weak password (the one policy).
func TestUserResetPasswordEndsLogins(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		ctx := context.Background()
		migratedURL(t, dbURL)
		vars := map[string]string{"TASKPILOTS_DATABASE_URL": dbURL}
		s := openTestStore(t, dbURL)
		u, err := s.CreateUser(ctx, models.CreateUserInput{Email: "dana@example.com", Name: "Dana", Role: models.RoleAdmin, Password: "correct horse battery"})
		if err != nil {
			t.Fatal(err)
		}
		secret, _, err := s.StartLogin(ctx, u.ID, models.LoginMeta{}, models.LoginPolicy{})
		if err != nil {
			t.Fatal(err)
		}

		r := runCLI(t, vars, "", "user", "reset-password", "dana@example.com")
		if r.code != 0 {
			t.Fatalf("reset exited %d: %s", r.code, r.stderr)
		}
		pw := strings.TrimSuffix(r.stdout, "\n")
		got, err := s.Authenticate(ctx, "dana@example.com", pw)
		if err != nil || !got.MustChangePassword {
			t.Fatalf("after reset: %+v %v; want the printed password, to be changed at sign-in", got, err)
		}
		if _, _, err := s.ResumeLogin(ctx, secret, models.LoginPolicy{}); err == nil {
			t.Fatal("the user's login survived the reset")
		}

		r = runCLI(t, vars, "password1234\n", "user", "create",
			"--email", "weak@example.com", "--name", "Weak", "--role", "agent", "--password-stdin")
		if r.code != 1 || !strings.Contains(r.stderr, "password: is too easy to guess") {
			t.Fatalf("weak password: exit %d %q", r.code, r.stderr)
		}
	})
}
