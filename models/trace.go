package models

import (
	"context"
	"regexp"
	"strings"
)

// W3C Trace Context (https://www.w3.org/TR/trace-context/).
//
// An API request may carry traceparent (and tracestate); the server keeps
// them with every event the request causes (events.traceparent and
// events.tracestate) and with a delegation it creates, and hands the
// delegation's to the worker with its lease, so that one trace crosses the
// queue: the worker's result request carries it (or a child of it) and the
// result's events record it. Trace context is metadata: it is not part of
// an event's hash (ComputeHash), so it changes no chain, and old events,
// which have none, verify as before.

// TraceContext is a request's validated traceparent and tracestate.
type TraceContext struct {
	Traceparent string
	Tracestate  string
}

// IsZero reports whether there is no trace context.
func (t TraceContext) IsZero() bool { return t.Traceparent == "" }

type traceKey struct{}

// WithTrace returns ctx carrying the trace context t (a zero t changes
// nothing).
func WithTrace(ctx context.Context, t TraceContext) context.Context {
	if t.IsZero() {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, t)
}

// TraceFrom returns the trace context ctx carries, if any.
func TraceFrom(ctx context.Context) TraceContext {
	if ctx == nil {
		return TraceContext{}
	}
	t, _ := ctx.Value(traceKey{}).(TraceContext)
	return t
}

// traceparentPattern is version-trace_id-parent_id-flags, lowercase hex;
// a future version may append more fields after a '-'.
var traceparentPattern = regexp.MustCompile(`^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$`)

// ParseTraceparent validates a traceparent header as the W3C
// recommendation says a receiver must, and returns it (for a version
// newer than 00, its first four fields) or "" when it is invalid, which
// the caller then ignores: version ff, an all-zero trace or parent id,
// uppercase hex, a wrong length, or anything after the flags in version
// 00 make it invalid.
func ParseTraceparent(h string) string {
	h = strings.TrimSpace(h)
	m := traceparentPattern.FindStringSubmatch(h)
	if m == nil {
		return ""
	}
	version, traceID, parentID, flags, rest := m[1], m[2], m[3], m[4], m[5]
	switch {
	case version == "ff":
		return ""
	case version == "00" && rest != "":
		return ""
	case traceID == strings.Repeat("0", 32), parentID == strings.Repeat("0", 16):
		return ""
	}
	return version + "-" + traceID + "-" + parentID + "-" + flags
}

// MaxTracestateBytes is the most of tracestate kept (the recommendation's
// 512, at which a vendor may truncate).
const MaxTracestateBytes = 512

var tracestateMember = regexp.MustCompile(`^([a-z0-9][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$`)

// ParseTracestate validates a tracestate header (a list of up to 32
// key=value members) and returns it normalised (members trimmed, empty
// ones dropped), or "" when it is invalid or too long.
func ParseTracestate(h string) string {
	if strings.TrimSpace(h) == "" {
		return ""
	}
	var out []string
	seen := map[string]bool{}
	for _, m := range strings.Split(h, ",") {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue
		}
		if !tracestateMember.MatchString(m) {
			return ""
		}
		k, _, _ := strings.Cut(m, "=")
		if seen[k] {
			return ""
		}
		seen[k] = true
		out = append(out, m)
	}
	if len(out) == 0 || len(out) > 32 {
		return ""
	}
	s := strings.Join(out, ",")
	if len(s) > MaxTracestateBytes {
		return ""
	}
	return s
}

// ParseTrace returns the trace context of a request's traceparent and
// tracestate headers: none when traceparent is invalid (tracestate is then
// ignored too, as the recommendation says), no tracestate when only it is
// invalid.
func ParseTrace(traceparent, tracestate string) TraceContext {
	tp := ParseTraceparent(traceparent)
	if tp == "" {
		return TraceContext{}
	}
	return TraceContext{Traceparent: tp, Tracestate: ParseTracestate(tracestate)}
}
