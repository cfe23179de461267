package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
)

func TestTokenCreateListRevoke(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		ctx := context.Background()
		migratedURL(t, dbURL)
		vars := map[string]string{"TASKPILOTS_DATABASE_URL": dbURL}

		r := runCLI(t, vars, "", "token", "create", "--name", "refund-workers", "--role", "worker")
		if r.code != 0 {
			t.Fatalf("token create exited %d", r.code)
		}
		// The whole of stdout is the token and its newline, so that
		// TOKEN=$(taskpilots token create …) captures exactly the token.
		secret := strings.TrimSuffix(r.stdout, "\n")
		if secret == "" || strings.ContainsAny(secret, " \n\t") || !strings.HasPrefix(secret, models.TokenPrefix) {
			t.Fatalf("stdout is not a lone token: %q", r.stdout)
		}
		if strings.Contains(r.stderr, secret) {
			t.Errorf("the token also went to stderr")
		}
		// Each check opens its own store, as another process would: a
		// store caches tokens it has seen (models.TokenCacheTTL), so a
		// revocation by the CLI reaches running servers only after that.
		authenticate := func(secret string) (models.APIToken, error) {
			return openTestStore(t, dbURL).AuthenticateToken(ctx, secret)
		}
		tok, err := authenticate(secret)
		if err != nil || tok.Name != "refund-workers" || tok.Role != models.RoleWorker {
			t.Fatalf("AuthenticateToken = %+v, %v", tok, err)
		}

		r = runCLI(t, vars, "", "token", "create", "--name", "ops", "--role", "admin")
		other := strings.TrimSpace(r.stdout)

		r = runCLI(t, vars, "", "token", "list")
		if r.code != 0 {
			t.Fatalf("token list exited %d", r.code)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 3 {
			t.Fatalf("token list has %d lines, want header and 2 tokens", len(lines))
		}
		wantContains(t, "list header", lines[0], "ID", "NAME", "ROLE", "CREATED", "LAST USED", "REVOKED")
		wantContains(t, "list", r.stdout, tok.ID, "refund-workers", "worker", "ops", "admin")
		if strings.Contains(r.stdout, secret) {
			t.Fatalf("token list shows a secret")
		}

		// Revoke by name, then the other by id.
		r = runCLI(t, vars, "", "token", "revoke", "refund-workers")
		if r.code != 0 || !strings.Contains(r.stdout, "token refund-workers (id "+tok.ID+") is revoked since ") {
			t.Fatalf("revoke by name: %d %q", r.code, r.stdout)
		}
		if _, err := authenticate(secret); !errors.Is(err, models.ErrUnauthorized) {
			t.Fatalf("revoked token still authenticates: %v", err)
		}
		if _, err := authenticate(other); err != nil {
			t.Fatalf("the other token stopped working: %v", err)
		}
		r = runCLI(t, vars, "", "token", "list")
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.Contains(l, tok.ID) && strings.HasSuffix(strings.TrimSpace(l), "-") {
				t.Errorf("revoked token has no revoked time: %q", l)
			}
		}
		ts, _ := openTestStore(t, dbURL).ListTokens(ctx)
		for _, x := range ts {
			if x.Name == "ops" {
				if r := runCLI(t, vars, "", "token", "revoke", x.ID); r.code != 0 {
					t.Fatalf("revoke by id exited %d", r.code)
				}
			}
		}
		if _, err := authenticate(other); err == nil {
			t.Fatalf("token revoked by id still authenticates")
		}

		r = runCLI(t, vars, "", "token", "revoke", "no-such-token")
		if r.code == 0 || !strings.Contains(r.stderr, "not found") {
			t.Fatalf("revoking an unknown token: %d %q", r.code, r.stderr)
		}
	})
}

func TestTokenCreateValidation(t *testing.T) {
	dbURL := migratedURL(t, "sqlite:"+t.TempDir()+"/v.db")
	r := runCLI(t, nil, "", "token", "create", "--database-url", dbURL, "--name", "bad name!", "--role", "superuser")
	if r.code != 1 || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q", r.code, r.stdout)
	}
	// Every offending field, each on its own line.
	wantContains(t, "stderr", r.stderr, "\n  name: ", "\n  role: must be one of controller, worker, admin")
	s := openTestStore(t, dbURL)
	if ts, _ := s.ListTokens(context.Background()); len(ts) != 0 {
		t.Fatalf("an invalid token was stored: %+v", ts)
	}
}
