package handlers_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestWebhooksAPI: register (secret shown once, whsec_ + 32 bytes), list
// without secrets, the delivery log, rotation, redeliver, delete; bad input
// is a 422 naming each field and writes nothing; other roles get 403.
func TestWebhooksAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)

		// Bad input: every field named, nothing written.
		p := wantProblem(t, e.post(e.admin, "/webhooks", map[string]any{
			"url": "ftp://example.com/x", "types": []string{"session.escalated", "session.exploded"},
		}), http.StatusUnprocessableEntity)
		wantFields(t, p, "url", "types[1]")
		p = wantProblem(t, e.post(e.admin, "/webhooks", map[string]any{"url": "https://x.test/", "colour": "red"}), http.StatusUnprocessableEntity)
		wantFields(t, p, "colour")
		p = wantProblem(t, e.post(e.admin, "/webhooks", map[string]any{"types": "session.escalated"}), http.StatusUnprocessableEntity)
		if f := fieldsOf(p); len(f) == 0 || !strings.HasPrefix(f[0], "types") {
			t.Errorf("types as a string: fields %v", f)
		}
		wantProblem(t, e.post(e.admin, "/webhooks", "not json"), http.StatusBadRequest)
		var list struct {
			Webhooks []map[string]any `json:"webhooks"`
		}
		wantStatus(t, e.get(e.admin, "/webhooks"), http.StatusOK).Decode(t, &list)
		if len(list.Webhooks) != 0 {
			t.Fatalf("bad input wrote %v", list.Webhooks)
		}

		// Other roles.
		wantProblem(t, e.post(e.controller, "/webhooks", map[string]any{"url": "https://x.test/"}), http.StatusForbidden)
		wantProblem(t, e.get(e.worker, "/webhooks"), http.StatusForbidden)

		var created struct{ ID, Secret string }
		r := wantStatus(t, e.post(e.admin, "/webhooks", map[string]any{
			"url": "https://receiver.test/hooks", "types": []string{"session.escalated"}, "description": "escalations to the on-call bot",
		}), http.StatusCreated)
		r.Decode(t, &created)
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(created.Secret, "whsec_"))
		if !strings.HasPrefix(created.ID, "whk_") || !strings.HasPrefix(created.Secret, "whsec_") || err != nil || len(key) < 24 || len(key) > 32 {
			t.Fatalf("created %+v (key %d bytes, %v)", created, len(key), err)
		}
		wantStatus(t, e.get(e.admin, "/webhooks"), http.StatusOK).Decode(t, &list)
		if len(list.Webhooks) != 1 || list.Webhooks[0]["id"] != created.ID || list.Webhooks[0]["url"] != "https://receiver.test/hooks" {
			t.Fatalf("list = %v", list.Webhooks)
		}
		if raw := string(e.get(e.admin, "/webhooks").Body); strings.Contains(raw, "whsec_") || strings.Contains(raw, "secret\"") {
			t.Fatalf("the listing shows a secret: %s", raw)
		}

		// The delivery log.
		id := storetest.Session(t.Context(), t, s, nil)
		v := int64(1)
		if _, err := s.Transition(t.Context(), id, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "x"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SequenceFeed(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.EnqueueWebhookDeliveries(t.Context(), 100); err != nil {
			t.Fatal(err)
		}
		var dl struct {
			Deliveries []map[string]any `json:"deliveries"`
		}
		wantStatus(t, e.get(e.admin, "/webhooks/"+created.ID+"/deliveries?limit=10"), http.StatusOK).Decode(t, &dl)
		if len(dl.Deliveries) != 1 {
			t.Fatalf("deliveries = %v", dl.Deliveries)
		}
		for _, k := range []string{"event_id", "attempt", "status_code", "error", "delivered_at", "next_attempt_at"} {
			if _, ok := dl.Deliveries[0][k]; !ok {
				t.Errorf("delivery lacks %q: %v", k, dl.Deliveries[0])
			}
		}
		evID, _ := dl.Deliveries[0]["event_id"].(string)
		wantFields(t, wantProblem(t, e.get(e.admin, "/webhooks/"+created.ID+"/deliveries?limit=0"), http.StatusUnprocessableEntity), "limit")
		wantFields(t, wantProblem(t, e.get(e.admin, "/webhooks/"+created.ID+"/deliveries?limit=x"), http.StatusUnprocessableEntity), "limit")
		wantProblem(t, e.get(e.admin, "/webhooks/whk_missing/deliveries"), http.StatusNotFound)

		wantStatus(t, e.post(e.admin, "/webhooks/"+created.ID+"/deliveries/"+evID+"/redeliver", map[string]any{}), http.StatusAccepted)
		wantProblem(t, e.post(e.admin, "/webhooks/"+created.ID+"/deliveries/evt_missing/redeliver", map[string]any{}), http.StatusNotFound)

		var rot struct {
			ID, Secret          string
			OldSecretSignsUntil string `json:"old_secret_signs_until"`
		}
		wantStatus(t, e.post(e.admin, "/webhooks/"+created.ID+"/rotate-secret", map[string]any{}), http.StatusOK).Decode(t, &rot)
		if rot.Secret == created.Secret || !strings.HasPrefix(rot.Secret, "whsec_") || rot.OldSecretSignsUntil == "" {
			t.Fatalf("rotated = %+v", rot)
		}
		wantProblem(t, e.post(e.admin, "/webhooks/whk_missing/rotate-secret", map[string]any{}), http.StatusNotFound)

		wantStatus(t, e.do(apiReq{method: http.MethodDelete, path: "/webhooks/" + created.ID, token: e.admin}), http.StatusNoContent)
		wantProblem(t, e.do(apiReq{method: http.MethodDelete, path: "/webhooks/" + created.ID, token: e.admin}), http.StatusNotFound)
		wantProblem(t, e.get(e.admin, "/webhooks/"+created.ID+"/deliveries"), http.StatusNotFound)
	})
}

// TestWebhooksAPIIdempotent: the four webhook writes take an
// Idempotency-Key like every other write. A repeat with the same key and
// body replays the first answer (the create's secret included: the key is
// the caller's own), marked Idempotent-Replayed: true, and writes nothing; the key with another body is the
// 422 every write gives, and writes nothing either.
func TestWebhooksAPIIdempotent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		body := map[string]any{"url": "https://receiver.test/hooks", "types": []string{"session.escalated"}}
		first := wantReplayed(t, wantStatus(t, e.post(e.admin, "/webhooks", body, "Idempotency-Key", "wh-1"), http.StatusCreated), false)
		var created struct{ ID, Secret string }
		first.Decode(t, &created)
		noWrites(t, s, func() {
			again := wantReplayed(t, wantStatus(t, e.post(e.admin, "/webhooks", body, "Idempotency-Key", "wh-1"), http.StatusCreated), true)
			if !bytes.Equal(again.Body, first.Body) {
				t.Fatalf("repeat %s, first %s", again.Body, first.Body)
			}
			p := wantProblem(t, e.post(e.admin, "/webhooks", map[string]any{"url": "https://other.test/"}, "Idempotency-Key", "wh-1"), http.StatusUnprocessableEntity)
			wantFields(t, p, "Idempotency-Key")
		})
		if n := countRows(t, s, "webhooks", "1 = 1"); n != 1 {
			t.Fatalf("%d webhooks after a repeated create, want 1", n)
		}

		// A delivery to redeliver.
		id := storetest.Session(t.Context(), t, s, nil)
		v := int64(1)
		if _, err := s.Transition(t.Context(), id, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "x"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SequenceFeed(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.EnqueueWebhookDeliveries(t.Context(), 100); err != nil {
			t.Fatal(err)
		}
		var evID string
		if err := s.DB.Table("webhook_deliveries").Where("webhook_id = ?", created.ID).Limit(1).Pluck("event_id", &evID).Error; err != nil || evID == "" {
			t.Fatalf("no delivery: %v", err)
		}
		redeliver := "/webhooks/" + created.ID + "/deliveries/" + evID + "/redeliver"
		wantReplayed(t, wantStatus(t, e.post(e.admin, redeliver, map[string]any{}, "Idempotency-Key", "re-1"), http.StatusAccepted), false)
		noWrites(t, s, func() {
			wantReplayed(t, wantStatus(t, e.post(e.admin, redeliver, map[string]any{}, "Idempotency-Key", "re-1"), http.StatusAccepted), true)
			p := wantProblem(t, e.post(e.admin, "/webhooks/"+created.ID+"/deliveries/evt_other/redeliver", map[string]any{}, "Idempotency-Key", "re-1"), http.StatusUnprocessableEntity)
			wantFields(t, p, "Idempotency-Key")
		})

		rot := wantReplayed(t, wantStatus(t, e.post(e.admin, "/webhooks/"+created.ID+"/rotate-secret", map[string]any{}, "Idempotency-Key", "rot-1"), http.StatusOK), false)
		noWrites(t, s, func() {
			again := wantReplayed(t, wantStatus(t, e.post(e.admin, "/webhooks/"+created.ID+"/rotate-secret", map[string]any{}, "Idempotency-Key", "rot-1"), http.StatusOK), true)
			if !bytes.Equal(again.Body, rot.Body) {
				t.Fatalf("repeat %s, first %s", again.Body, rot.Body)
			}
			wantProblem(t, e.post(e.admin, "/webhooks/whk_other/rotate-secret", map[string]any{}, "Idempotency-Key", "rot-1"), http.StatusUnprocessableEntity)
		})

		wantReplayed(t, wantStatus(t, e.del(e.admin, "/webhooks/"+created.ID, "Idempotency-Key", "del-1"), http.StatusNoContent), false)
		noWrites(t, s, func() {
			wantReplayed(t, wantStatus(t, e.del(e.admin, "/webhooks/"+created.ID, "Idempotency-Key", "del-1"), http.StatusNoContent), true)
			wantProblem(t, e.del(e.admin, "/webhooks/whk_other", "Idempotency-Key", "del-1"), http.StatusUnprocessableEntity)
		})
		wantProblem(t, e.del(e.admin, "/webhooks/"+created.ID), http.StatusNotFound)

		// Each write is audited once: create, redeliver, rotate, delete.
		if n := countRows(t, s, "admin_audit", "target_kind = ?", "webhook"); n != 4 {
			t.Fatalf("%d webhook changes audited, want 4", n)
		}
	})
}

// wantReplayed checks that r carries Idempotent-Replayed: true exactly when
// it is the stored answer to a repeat.
func wantReplayed(t *testing.T, r apiResponse, replayed bool) apiResponse {
	t.Helper()
	if got := r.Header.Get("Idempotent-Replayed"); (got == "true") != replayed || (got != "" && got != "true") {
		t.Fatalf("Idempotent-Replayed %q on %s; want it set: %v", got, r.Body, replayed)
	}
	return r
}
