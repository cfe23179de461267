package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHealthcheck: exit 0 on a 200, 1 on a 503 or no answer, 2 on a bad URL.
func TestHealthcheck(t *testing.T) {
	var notReady atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if notReady.Load() {
			http.Error(w, "database unavailable", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	if r := runCLI(t, nil, "", "healthcheck", "--url", srv.URL+"/readyz"); r.code != 0 || !strings.Contains(r.stdout, "healthy") {
		t.Fatalf("ready server: exit %d, %q", r.code, r.stdout)
	}
	notReady.Store(true)
	if r := runCLI(t, nil, "", "healthcheck", "--url", srv.URL+"/readyz"); r.code != 1 || !strings.Contains(r.stderr, "503") {
		t.Fatalf("503: exit %d, %q", r.code, r.stderr)
	}
	srv.Close()
	if r := runCLI(t, nil, "", "healthcheck", "--url", srv.URL+"/readyz"); r.code != 1 {
		t.Fatalf("no server: exit %d", r.code)
	}
	if r := runCLI(t, nil, "", "healthcheck", "--url", "::nope"); r.code != 2 {
		t.Fatalf("bad URL: exit %d", r.code)
	}
}
