package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// MetricsOptions selects the product metrics: Window is 24h (default), 7d
// or 30d; Queue narrows them to one queue.
type MetricsOptions struct {
	Window string
	Queue  string
}

// MetricSet is one set of product metrics, by name (handoff_success,
// rework, recovery, state_conflicts, escalation_clarity, prompt_cache), each
// an object of figures; decode the ones you need.
type MetricSet map[string]json.RawMessage

// Stalled counts the sessions left open with a next_step that has no route.
type Stalled struct {
	Sessions int            `json:"sessions"`
	ByStep   map[string]int `json:"by_step"`
}

// ProductMetrics are the product metrics over a window, overall and per
// queue (GET /api/v1/metrics).
type ProductMetrics struct {
	Window  string               `json:"window"`
	From    time.Time            `json:"from"`
	To      time.Time            `json:"to"`
	Overall MetricSet            `json:"overall"`
	Queues  map[string]MetricSet `json:"queues"`
	Stalled *Stalled             `json:"stalled,omitempty"`
}

// Metrics returns the product metrics (controller, worker or admin).
func (c *Client) Metrics(ctx context.Context, o MetricsOptions) (ProductMetrics, error) {
	q := url.Values{}
	if o.Window != "" {
		q.Set("window", o.Window)
	}
	if o.Queue != "" {
		q.Set("queue", o.Queue)
	}
	var out ProductMetrics
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/metrics", query: q, out: &out}, nil)
	return out, err
}

// OpenAPI returns the server's OpenAPI document (public: no token needed),
// the contract this client follows.
func (c *Client) OpenAPI(ctx context.Context) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/openapi.json", out: &out}, nil)
	return out, err
}
