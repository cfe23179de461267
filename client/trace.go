package client

import "context"

// W3C Trace Context. A context made with WithTraceparent makes every
// request sent under it carry the traceparent (and tracestate) headers; the
// server stores a valid traceparent with the events the request causes and
// hands a delegation's to the worker in its lease (Lease.Traceparent). The
// Worker sends the lease's traceparent with its heartbeats and result, so
// one trace crosses the queue. The client checks nothing: the server
// ignores an invalid header.

type traceKey struct{}

type traceHeaders struct{ parent, state string }

// WithTraceparent returns ctx carrying a W3C traceparent and, optionally,
// tracestate ("" for none) for the requests sent under it. An empty
// traceparent returns ctx as it is.
func WithTraceparent(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, traceHeaders{traceparent, tracestate})
}

// Traceparent returns the traceparent and tracestate ctx carries, if any.
func Traceparent(ctx context.Context) (traceparent, tracestate string) {
	t, _ := ctx.Value(traceKey{}).(traceHeaders)
	return t.parent, t.state
}
