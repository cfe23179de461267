package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
)

// The tests of this module need no server: they stub one with httptest.
// The client's tests against the real server, validated against the
// OpenAPI document, are in the server module (clienttest/).

func TestRetriesGiveUp(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		w.Write([]byte("<html>bad gateway</html>"))
	}))
	defer srv.Close()
	c := client.New(srv.URL, "tpk_x", client.WithRetries(3), client.WithBackoff(time.Millisecond, 2*time.Millisecond))
	_, err := c.CreateSession(context.Background(), client.CreateSessionInput{Goal: "x"})
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != http.StatusBadGateway || !strings.Contains(p.Detail, "bad gateway") {
		t.Fatalf("err = %v; want a 502 *Problem", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 4 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] || keys[3] != keys[0] {
		t.Fatalf("attempt keys = %v; want 4 attempts with one key", keys)
	}
}

func TestEventPayloadForms(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`{"a":1}`, `"{\"a\":1}"`} {
		var e client.Event
		if err := json.Unmarshal([]byte(`{"seq":1,"payload":`+raw+`}`), &e); err != nil {
			t.Fatal(err)
		}
		var v struct{ A int }
		if err := e.DecodePayload(&v); err != nil || v.A != 1 {
			t.Fatalf("payload %s = %+v, %v", raw, v, err)
		}
	}
}
