package models_test

import (
	"context"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func TestTraceParse(t *testing.T) {
	const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for h, want := range map[string]string{
		ok:       ok,
		" " + ok: ok,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future": "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x":      "",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":        "",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":        "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":        "",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01":        "",
		"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01":         "",
		"": "",
	} {
		if got := models.ParseTraceparent(h); got != want {
			t.Errorf("ParseTraceparent(%q) = %q; want %q", h, got, want)
		}
	}
	for h, want := range map[string]string{
		"congo=t61rcWkgMzE":                 "congo=t61rcWkgMzE",
		"rojo=00f067aa0ba902b7, congo=t61r": "rojo=00f067aa0ba902b7,congo=t61r",
		"a@vendor=x,,b=y":                   "a@vendor=x,b=y",
		"Upper=x":                           "",
		"a=x,a=y":                           "",
		"novalue":                           "",
		"a=x=y":                             "",
	} {
		if got := models.ParseTracestate(h); got != want {
			t.Errorf("ParseTracestate(%q) = %q; want %q", h, got, want)
		}
	}
	if tc := models.ParseTrace("bad", "congo=x"); !tc.IsZero() || tc.Tracestate != "" {
		t.Errorf("tracestate kept without a valid traceparent: %+v", tc)
	}
}

// TestTraceIsNotHashed: the trace context a command's context carries is
// stored on its events, but is not part of the hash: the stored hash is the
// hash of the event without it, and clearing or changing it in the
// database leaves verify clean (events written before it existed have
// none and verify as before).
func TestTraceIsNotHashed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		tc := models.TraceContext{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Tracestate: "congo=t61rcWkgMzE"}
		ctx := models.WithTrace(context.Background(), tc)
		out, err := s.CreateSession(ctx, "test:controller", "", models.CreateSessionInput{Goal: "Refund order 1182"})
		if err != nil {
			t.Fatal(err)
		}
		evs, err := s.ListEvents(context.Background(), out.SessionID, 0, 10)
		if err != nil || len(evs) != 1 {
			t.Fatalf("events = %+v, %v", evs, err)
		}
		ev := evs[0]
		if ev.Traceparent != tc.Traceparent || ev.Tracestate != tc.Tracestate {
			t.Fatalf("event trace context %q %q", ev.Traceparent, ev.Tracestate)
		}
		bare := ev
		bare.Traceparent, bare.Tracestate = "", ""
		if models.ComputeHash(ev) != ev.Hash || models.ComputeHash(bare) != ev.Hash {
			t.Fatal("the trace context changes the event's hash")
		}
		if err := s.DB.Exec(`UPDATE events SET traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', tracestate = ''`).Error; err != nil {
			t.Fatal(err)
		}
		if rep, err := s.Verify(context.Background(), models.VerifyOpts{}); err != nil || !rep.OK() {
			t.Fatalf("verify after changing trace metadata = %+v, %v", rep, err)
		}
	})
}
