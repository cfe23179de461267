package handlers_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

func TestHealthz(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready"} {
			p := b.get(path)
			if p.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d %s", path, p.StatusCode, p.Body)
			}
			var body map[string]string
			if err := json.Unmarshal([]byte(p.Body), &body); err != nil || body["status"] != want {
				t.Fatalf("%s: body %s (%v)", path, p.Body, err)
			}
		}
	})
}

func TestReadyzUnmigrated(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			s, err := models.Open(context.Background(), storetest.NewURL(t, d), models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			b := newBrowser(t, s, web.Config{})
			if p := b.get("/healthz"); p.StatusCode != http.StatusOK {
				t.Fatalf("/healthz on an unmigrated database: %d (the process is up)", p.StatusCode)
			}
			p := b.get("/readyz")
			if p.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503: %s", p.StatusCode, p.Body)
			}
			if ct := p.Header.Get("Content-Type"); ct != handlers.ProblemContentType {
				t.Fatalf("content type %q", ct)
			}
			var prob handlers.Problem
			if err := json.Unmarshal([]byte(p.Body), &prob); err != nil {
				t.Fatal(err)
			}
			if prob.Status != 503 || !strings.Contains(prob.Detail, "pending migrations") {
				t.Fatalf("problem %+v does not name the reason", prob)
			}
		})
	}
}

func TestReadyzDatabaseDown(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		p := b.get("/readyz")
		if p.StatusCode != http.StatusServiceUnavailable || !strings.Contains(p.Body, "database unreachable") {
			t.Fatalf("closed database: %d %s", p.StatusCode, p.Body)
		}
	})
}
