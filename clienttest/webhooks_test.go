package clienttest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// TestWebhooksClient: an admin client registers a webhook, a receiver
// verifies deliveries with client.VerifyWebhook, and the log, rotation,
// redelivery and deletion work through the client.
func TestWebhooksClient(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ts := newTestServer(t, s, nil)
		adminTok, _, err := s.CreateToken(ctx, "test-admin", models.RoleAdmin)
		if err != nil {
			t.Fatal(err)
		}
		admin := client.New(ts.url, adminTok)

		var (
			mu       sync.Mutex
			secret   string
			verified = map[string]bool{}
			bad      []error
		)
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			defer mu.Unlock()
			if err := client.VerifyWebhook(secret, r.Header, body); err != nil {
				bad = append(bad, err)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			verified[r.Header.Get("webhook-id")] = true
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(recv.Close)

		if _, err := admin.CreateWebhook(ctx, client.WebhookInput{URL: "nope"}); err == nil {
			t.Fatal("a bad URL was accepted")
		} else {
			var ve *client.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("bad URL: %v", err)
			}
			if _, ok := ve.Field("url"); !ok {
				t.Fatalf("bad URL: the problem does not name url: %v", err)
			}
		}
		if _, err := ts.controller.CreateWebhook(ctx, client.WebhookInput{URL: recv.URL}); err == nil {
			t.Fatal("a controller registered a webhook")
		}
		in := client.WebhookInput{URL: recv.URL, Types: []string{"session.created"}, Description: "test"}
		created, err := admin.CreateWebhook(ctx, in, client.WithIdempotencyKey("hook-1"))
		if err != nil {
			t.Fatal(err)
		}
		// A repeat with the key replays the first answer, secret included,
		// and registers nothing more (the listing below has one webhook).
		if again, err := admin.CreateWebhook(ctx, in, client.WithIdempotencyKey("hook-1")); err != nil || again != created {
			t.Fatalf("repeated create = %+v, %v; first %+v", again, err, created)
		}
		mu.Lock()
		secret = created.Secret
		mu.Unlock()
		hooks, err := admin.Webhooks(ctx)
		if err != nil || len(hooks) != 1 || hooks[0].ID != created.ID || hooks[0].Types[0] != "session.created" {
			t.Fatalf("webhooks = %+v, %v", hooks, err)
		}

		storetest.Session(ctx, t, s, nil)
		d := &web.Dispatcher{Store: s, Log: slog.New(slog.DiscardHandler)}
		pass := func() {
			t.Helper()
			if _, err := s.SequenceFeed(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Pass(ctx); err != nil {
				t.Fatal(err)
			}
		}
		pass()
		ds, err := admin.WebhookDeliveries(ctx, created.ID, 10)
		if err != nil || len(ds) != 1 || ds[0].Status != "delivered" || ds[0].StatusCode == nil || *ds[0].StatusCode != 204 || !verified[ds[0].EventID] {
			t.Fatalf("deliveries = %+v, %v (bad signatures: %v)", ds, err, bad)
		}

		// Rotation: the receiver switches to the new secret at once; the
		// old signature rides along during the grace.
		rot, err := admin.RotateWebhookSecret(ctx, created.ID, client.WithIdempotencyKey("rot-1"))
		if err != nil || rot.Secret == created.Secret || time.Until(rot.OldSecretSignsUntil) < 23*time.Hour {
			t.Fatalf("rotate = %+v, %v", rot, err)
		}
		if again, err := admin.RotateWebhookSecret(ctx, created.ID, client.WithIdempotencyKey("rot-1")); err != nil || again.Secret != rot.Secret {
			t.Fatalf("repeated rotate = %+v, %v; first %+v", again, err, rot)
		}
		mu.Lock()
		secret = rot.Secret
		verified = map[string]bool{}
		mu.Unlock()
		if err := admin.RedeliverWebhook(ctx, created.ID, ds[0].EventID); err != nil {
			t.Fatal(err)
		}
		pass()
		mu.Lock()
		ok := verified[ds[0].EventID]
		mu.Unlock()
		if !ok || len(bad) != 0 {
			t.Fatalf("redelivery with the new secret not verified (bad: %v)", bad)
		}
		if err := admin.DeleteWebhook(ctx, created.ID); err != nil {
			t.Fatal(err)
		}
		if err := admin.DeleteWebhook(ctx, created.ID); err == nil {
			t.Fatal("second delete succeeded")
		}
	})
}

// TestVerifyWebhook checks the standard-library verifier against the
// server's signer (the Standard Webhooks Go library) and its refusals.
func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	secret, other := models.NewWebhookSecret(), models.NewWebhookSecret()
	body := []byte(`{"event_id":"evt_1","seq":1}`)
	header := func(at time.Time, secrets ...string) http.Header {
		sig, err := models.SignWebhook(secrets, "evt_1", at, body)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set("webhook-id", "evt_1")
		h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
		h.Set("webhook-signature", sig)
		return h
	}
	now := time.Now()
	if err := client.VerifyWebhook(secret, header(now, secret), body); err != nil {
		t.Fatalf("valid delivery: %v", err)
	}
	if err := client.VerifyWebhook(secret, header(now, other, secret), body); err != nil {
		t.Fatalf("second of two signatures: %v", err)
	}
	if err := client.VerifyWebhook(secret, header(now, other), body); !errors.Is(err, client.ErrWebhookSignature) {
		t.Errorf("wrong secret: %v", err)
	}
	if err := client.VerifyWebhook(secret, header(now, secret), []byte(strings.Replace(string(body), "1", "2", 1))); !errors.Is(err, client.ErrWebhookSignature) {
		t.Errorf("tampered body: %v", err)
	}
	if err := client.VerifyWebhook(secret, header(now.Add(-10*time.Minute), secret), body); !errors.Is(err, client.ErrWebhookTimestamp) {
		t.Errorf("old timestamp: %v", err)
	}
	h := header(now, secret)
	h.Del("webhook-id")
	if err := client.VerifyWebhook(secret, h, body); !errors.Is(err, client.ErrWebhookHeaders) {
		t.Errorf("missing id: %v", err)
	}
	if err := client.VerifyWebhook("not base64!", header(now, secret), body); err == nil {
		t.Errorf("bad secret accepted")
	}
}
