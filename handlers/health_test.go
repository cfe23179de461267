package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
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
			// Generic words only: which versions are pending is for the log.
			if prob.Status != 503 || prob.Detail != "migrations pending" {
				t.Fatalf("problem %+v: want the detail \"migrations pending\" and nothing more", prob)
			}
		})
	}
}

// TestReadyzDatabaseDown checks that the anonymous /readyz says only that
// the database is unreachable: the driver's error (which on PostgreSQL names
// the user, database and host) goes to the server's log, not to the client.
func TestReadyzDatabaseDown(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		var logged syncBuffer
		s.Logger = slog.New(slog.NewTextHandler(&logged, nil))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		p := b.get("/readyz")
		var prob handlers.Problem
		if err := json.Unmarshal([]byte(p.Body), &prob); err != nil {
			t.Fatalf("closed database: %d %s", p.StatusCode, p.Body)
		}
		if p.StatusCode != http.StatusServiceUnavailable || prob.Detail != "database unreachable" {
			t.Fatalf("closed database: %d %s, want 503 with the detail \"database unreachable\" only", p.StatusCode, p.Body)
		}
		if !strings.Contains(logged.String(), "closed") {
			t.Fatalf("the driver's error is not in the server log: %q", logged.String())
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
