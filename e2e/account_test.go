package e2e

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestFirstAdminChangesPassword: in a real browser, the generated first
// admin signs in, is held on the account page until they choose their own
// password, and then reaches the page they asked for. Every form post
// carries the login's own CSRF token, rotated at sign-in.
func TestFirstAdminChangesPassword(t *testing.T) {
	e := newEnv(t)
	email, generated, ok, err := e.s.EnsureAdmin(context.Background())
	if err != nil || !ok {
		t.Fatalf("EnsureAdmin: %v %v", ok, err)
	}
	ctx := tab(t)
	const chosen = "violet staple orbit 42"
	var loc, notice, user string
	run(t, ctx,
		chromedp.Navigate(e.base+"/console/sessions"),
		chromedp.WaitVisible(`[data-testid="login-form"]`),
		chromedp.SetValue(`#email`, email),
		chromedp.SetValue(`#password`, generated),
		chromedp.Submit(`[data-testid="login-form"]`),
		chromedp.WaitVisible(`[data-testid="must-change"]`),
		chromedp.Text(`[data-testid="must-change"]`, &notice),
		// Another console page sends the admin back here.
		chromedp.Navigate(e.base+"/console/admin/users"),
		chromedp.WaitVisible(`[data-testid="password-form"]`),
		chromedp.Location(&loc),
	)
	if !strings.Contains(notice, "Choose a new password") || !strings.Contains(loc, "/console/account/password") {
		t.Fatalf("held on %s with notice %q", loc, notice)
	}
	if path := os.Getenv("TASKPILOTS_E2E_SCREENSHOT"); path != "" {
		var png []byte
		run(t, ctx, chromedp.FullScreenshot(&png, 100))
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, ctx,
		chromedp.SetValue(`#current_password`, generated),
		chromedp.SetValue(`#new_password`, chosen),
		chromedp.SetValue(`#confirm_password`, chosen),
		chromedp.Submit(`[data-testid="password-form"]`),
		chromedp.WaitVisible(`[data-testid="users-table"]`),
		chromedp.Text(`[data-testid="current-user"]`, &user),
		chromedp.Location(&loc),
	)
	if !strings.HasSuffix(loc, "/console/admin/users") || user != "Admin" {
		t.Fatalf("after the change: at %s as %q", loc, user)
	}
	if u, err := e.s.Authenticate(context.Background(), email, chosen); err != nil || u.MustChangePassword {
		t.Fatalf("chosen password: %+v %v", u, err)
	}
}
