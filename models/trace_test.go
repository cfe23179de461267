package models_test

import (
	"testing"

	"github.com/taskpilots/handoff/models"
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
