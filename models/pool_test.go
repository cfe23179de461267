package models_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
)

func TestFitPool(t *testing.T) {
	t.Parallel()
	pg := models.ServerConns{MaxConnections: 100, Reserved: 3}
	for _, c := range []struct {
		name                      string
		replicas, requested, want int
		size                      int
		fails                     bool
	}{
		{name: "default, one replica", replicas: 1, size: 20},
		{name: "default, four replicas", replicas: 4, size: 20},
		// 92 usable after the headroom, 23 per replica minus the listener.
		{name: "default shrinks for eight replicas", replicas: 8, size: 10},
		{name: "bench 64 workers wants 128", replicas: 1, want: 128, size: 91},
		{name: "requested fits", replicas: 2, requested: 40, size: 40},
		{name: "requested exactly fills", replicas: 1, requested: 96, size: 96},
		{name: "requested too big", replicas: 1, requested: 97, fails: true},
		{name: "requested times replicas too big", replicas: 3, requested: 40, fails: true},
		{name: "no share left", replicas: 60, fails: true},
	} {
		size, err := models.FitPool(pg, c.replicas, c.requested, c.want)
		if c.fails {
			var fit *models.PoolFitError
			if !errors.As(err, &fit) {
				t.Errorf("%s: size %d, err %v; want a PoolFitError", c.name, size, err)
			}
			continue
		}
		if err != nil || size != c.size {
			t.Errorf("%s: size %d, err %v; want %d", c.name, size, err, c.size)
		}
	}
	_, err := models.FitPool(pg, 3, 40, 0)
	for _, want := range []string{"40 connections × 3 replica(s)", "needs 123", "allows 97", "max_connections 100", "superuser_reserved_connections 3"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}

// TestOpenRefusesAPoolTheServerCannotHold opens the test server with a pool
// larger than its max_connections: Open names both numbers and opens no
// pool; a derived pool fits.
func TestOpenRefusesAPoolTheServerCannotHold(t *testing.T) {
	url := os.Getenv("TASKPILOTS_TEST_DATABASE_URL")
	if url == "" {
		t.Skip("TASKPILOTS_TEST_DATABASE_URL not set")
	}
	t.Parallel()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	_, err := models.Open(ctx, url, models.OpenOpts{Logger: quiet, MaxOpenConns: 100000})
	var fit *models.PoolFitError
	if !errors.As(err, &fit) || fit.Server.MaxConnections < 1 || !strings.Contains(err.Error(), "max_connections") {
		t.Fatalf("open with 100000 connections: %v", err)
	}
	s, err := models.Open(ctx, url, models.OpenOpts{Logger: quiet, WantConns: 100000, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := s.PoolSize(); (n+1)*2 > fit.Server.Available() || n < 2 {
		t.Fatalf("derived pool %d for 2 replicas; server allows %d", n, fit.Server.Available())
	}
}
