// Package e2e drives the support console in a real headless Chromium against
// the whole server (web.NewServer on a real listener) and PostgreSQL.
//
// One browser process serves the whole package; each test gets its own
// browser contexts (separate cookies), so tests stay isolated and fast.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// chromiumPath is the browser the suite runs: TASKPILOTS_CHROMIUM, else
// chromium or chromium-browser on PATH (what scripts/test-tools.sh finds or
// installs), else Debian's /usr/bin/chromium, named in the error.
func chromiumPath() string {
	if p := os.Getenv("TASKPILOTS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return "/usr/bin/chromium"
}

var (
	browserOnce sync.Once
	browserCtx  context.Context
	browserErr  error
)

// browser returns the package's one browser, started on first use. A missing
// Chromium fails the test with instructions; it never skips, so that CI
// cannot pass without running these tests.
func browser(t *testing.T) context.Context {
	t.Helper()
	browserOnce.Do(func() {
		path := chromiumPath()
		if _, err := os.Stat(path); err != nil {
			browserErr = fmt.Errorf("chromium not found at %s (%v): install it (`apt-get install -y chromium`) or set TASKPILOTS_CHROMIUM", path, err)
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path),
			chromedp.NoSandbox,
			chromedp.Flag("headless", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-gpu", true),
			chromedp.Flag("disable-dev-shm-usage", true),
		)
		alloc, _ := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, _ := chromedp.NewContext(alloc)
		// The first Run starts the browser; it must not carry a timeout, or
		// the browser would die with that context.
		if err := chromedp.Run(ctx); err != nil {
			browserErr = fmt.Errorf("start chromium at %s: %w", path, err)
			return
		}
		browserCtx = ctx
	})
	if browserErr != nil {
		t.Fatal(browserErr)
	}
	return browserCtx
}

// tab opens a tab in a fresh browser context (its own cookies) with a
// 30-second deadline, and fails the test if the page raises a JavaScript
// dialog.
//
// The browser context and its window are created by hand: current Chromium
// refuses a plain new tab in a context that has no window yet, which is what
// chromedp.WithNewBrowserContext asks for.
func tab(t *testing.T) context.Context {
	t.Helper()
	return tabWithin(t, 30*time.Second)
}

// tabWithin is tab with another deadline, for tests that visit every page.
func tabWithin(t *testing.T, deadline time.Duration) context.Context {
	t.Helper()
	b := browser(t)
	var (
		bc  cdp.BrowserContextID
		tid target.ID
	)
	err := chromedp.Run(b, chromedp.ActionFunc(func(ctx context.Context) error {
		exec := cdp.WithExecutor(ctx, chromedp.FromContext(ctx).Browser)
		var err error
		if bc, err = target.CreateBrowserContext().WithDisposeOnDetach(true).Do(exec); err != nil {
			return err
		}
		tid, err = target.CreateTarget("about:blank").WithBrowserContextID(bc).WithNewWindow(true).Do(exec)
		return err
	}))
	if err != nil {
		t.Fatalf("open a browser context: %v", err)
	}
	t.Cleanup(func() {
		_ = chromedp.Run(b, chromedp.ActionFunc(func(ctx context.Context) error {
			return target.DisposeBrowserContext(bc).Do(cdp.WithExecutor(ctx, chromedp.FromContext(ctx).Browser))
		}))
	})
	ctx, cancel := chromedp.NewContext(b, chromedp.WithTargetID(tid))
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, deadline)
	t.Cleanup(cancelT)
	chromedp.ListenTarget(ctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			t.Errorf("the page opened a %s dialog: %q", d.Type, d.Message)
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(false)) }()
		}
	})
	return ctx
}

// env is the product on a fresh PostgreSQL schema behind a real listener.
type env struct {
	s    *models.Store
	base string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := storetest.New(t, models.Postgres)
	h, err := web.NewServer(s, web.Config{Logger: slog.New(slog.DiscardHandler), SessionKey: "e2e-session-key-0123456789abcdefghijklmnop"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{s: s, base: srv.URL}
}

const password = "correct horse battery"

func (e *env) user(t *testing.T, name string, role models.Role) models.User {
	t.Helper()
	email := strings.ToLower(strings.ReplaceAll(name, " ", ".")) + "@example.com"
	u, err := e.s.CreateUser(context.Background(), models.CreateUserInput{Email: email, Name: name, Role: role, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// login signs u in through the login form, starting from path (which
// redirects to the login page and back).
func (e *env) login(t *testing.T, ctx context.Context, u models.User, path string) {
	t.Helper()
	run(t, ctx,
		chromedp.Navigate(e.base+path),
		chromedp.WaitVisible(`[data-testid="login-form"]`),
		// Typing is slow in the browser; what the login form does with the
		// values is what is tested here, not the keystrokes.
		chromedp.SetValue(`#email`, u.Email),
		chromedp.SetValue(`#password`, password),
		chromedp.Submit(`[data-testid="login-form"]`),
		chromedp.WaitVisible(`[data-testid="current-user"]`),
	)
}

func run(t *testing.T, ctx context.Context, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		var loc, body string
		_ = chromedp.Run(ctx, chromedp.Location(&loc), chromedp.Text("main", &body, chromedp.ByQuery, chromedp.AtLeast(0)))
		t.Fatalf("browser: %v\nat %s\n%s", err, loc, body)
	}
}

// workerEscalated creates a session that a worker escalated with evidence,
// through the real write path; it returns the id (version 4).
func (e *env) workerEscalated(t *testing.T, ev []models.Evidence) string {
	t.Helper()
	ctx := context.Background()
	id, did := storetest.Delegated(ctx, t, e.s, "refunds")
	l, err := e.s.Claim(ctx, "refunds", "w-1", "token:worker", "")
	if err != nil || l == nil {
		t.Fatalf("lease: %v %v", l, err)
	}
	_, err = e.s.SubmitResult(ctx, did, "token:worker", "", models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: id, Step: "check-eligibility", ResultType: "escalated",
		Output: json.RawMessage(`{"eligible": "unclear"}`), Evidence: ev, NextStep: "issue-refund",
		Question: "Is a refund over 200 EUR allowed for this customer?",
	})
	if err != nil {
		t.Fatalf("escalated result: %v", err)
	}
	return id
}

func (e *env) state(t *testing.T, id string) models.State {
	t.Helper()
	row, err := e.s.GetSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := row.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return st
}
