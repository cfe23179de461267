package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

func TestErrorsAnswerBrowsersWithHTMLAndClientsWithProblems(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})

		p := b.get("/no/such/page")
		if p.StatusCode != http.StatusNotFound || !strings.HasPrefix(p.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("browser 404: %d %q", p.StatusCode, p.Header.Get("Content-Type"))
		}
		doc := p.Doc(t)
		if doc.Find(`[data-testid="error-page"]`).Length() != 1 || !strings.Contains(doc.Find("h1").Text(), "not found") {
			t.Fatalf("no calm 404 page:\n%s", p.Body)
		}
		if doc.Find(`link[rel="stylesheet"]`).Length() != 1 {
			t.Error("error page without the stylesheet")
		}
		// A failure shows its request id (for a support ticket), the one the
		// response header carries.
		if got, want := squash(doc.Find(`[data-testid="request-id"]`)), p.Header.Get("X-Request-ID"); want == "" || !strings.Contains(got, want) {
			t.Errorf("error page request id = %q, header %q", got, want)
		}

		for _, c := range []struct{ path, accept string }{
			{"/api/v1/no/such/thing", ""},
			{"/no/such/page", "application/json"},
		} {
			p := b.get(c.path, "Accept", c.accept)
			if p.StatusCode != http.StatusNotFound || p.Header.Get("Content-Type") != handlers.ProblemContentType {
				t.Fatalf("%s (Accept %q): %d %q", c.path, c.accept, p.StatusCode, p.Header.Get("Content-Type"))
			}
			var prob handlers.Problem
			if err := json.Unmarshal([]byte(p.Body), &prob); err != nil || prob.Status != 404 || prob.Errors == nil {
				t.Fatalf("problem body %s (%v)", p.Body, err)
			}
		}
	})
}

func TestTrailingSlashRedirects(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		p := b.get("/console/sessions/?status=open")
		if p.StatusCode != http.StatusMovedPermanently || p.Header.Get("Location") != "/console/sessions?status=open" {
			t.Fatalf("%d %q", p.StatusCode, p.Header.Get("Location"))
		}
		// Not an open redirect.
		p = b.get("//evil.example/")
		if loc := p.Header.Get("Location"); strings.HasPrefix(loc, "//") {
			t.Fatalf("open redirect to %q", loc)
		}
	})
}

// TestAbandonedRequestsAreNotFaults: a request whose client went away fails
// with the cancellation (the database driver reports it as unreachable);
// that is not a server fault to log as an error.
func TestAbandonedRequestsAreNotFaults(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	handle := handlers.ErrorHandler(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	e := echo.New()
	fail := fmt.Errorf("append event 2: %w", context.Canceled)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/api/v1/sessions", nil)
	handle(fail, e.NewContext(req, httptest.NewRecorder()))
	if strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "request abandoned") {
		t.Fatalf("abandoned request logged as:\n%s", logs.String())
	}

	logs.Reset()
	req = httptest.NewRequest(http.MethodPost, "/api/v1/sessions", nil)
	handle(fail, e.NewContext(req, httptest.NewRecorder()))
	if !strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a live request's server error was not logged as an error:\n%s", logs.String())
	}
}
