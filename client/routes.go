package client

import (
	"context"
	"net/http"
	"time"
)

// RouteInput is where completed results naming a step are delegated next.
// Zero LeaseSeconds and MaxAttempts take the server's defaults (30 s, 3).
type RouteInput struct {
	Queue        string `json:"queue"`
	Instructions string `json:"instructions,omitempty"`
	LeaseSeconds int    `json:"lease_seconds,omitempty"`
	MaxAttempts  int    `json:"max_attempts,omitempty"`
}

// Route is a step route as the server stores it.
type Route struct {
	Step         string    `json:"step"`
	Queue        string    `json:"queue"`
	Instructions string    `json:"instructions"`
	LeaseSeconds int       `json:"lease_seconds"`
	MaxAttempts  int       `json:"max_attempts"`
	CreatedBy    string    `json:"created_by"`
	UpdatedBy    string    `json:"updated_by"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// PutRoute creates or replaces the route of step (controller): from then on
// a worker's completed result whose next_step is step is delegated to
// in.Queue in the same transaction, by system:router.
func (c *Client) PutRoute(ctx context.Context, step string, in RouteInput, opts ...CallOption) (Route, error) {
	var out Route
	err := c.do(ctx, request{method: http.MethodPut, path: "/api/v1/routes/" + esc(step), body: in, out: &out}, opts)
	return out, err
}

// GetRoute returns the route of step; IsNotFound(err) when it has none.
func (c *Client) GetRoute(ctx context.Context, step string) (Route, error) {
	var out Route
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/routes/" + esc(step), out: &out}, nil)
	return out, err
}

// Routes lists every route, by step.
func (c *Client) Routes(ctx context.Context) ([]Route, error) {
	var out struct {
		Routes []Route `json:"routes"`
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/routes", out: &out}, nil)
	return out.Routes, err
}

// DeleteRoute removes the route of step (controller); IsNotFound(err) when
// it had none. Retries reuse the idempotency key, so a retried delete does
// not turn into a 404.
func (c *Client) DeleteRoute(ctx context.Context, step string, opts ...CallOption) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/api/v1/routes/" + esc(step)}, opts)
}

// DrainResult is what DrainRoute delegated.
type DrainResult struct {
	Step      string `json:"step"`
	Delegated []struct {
		SessionID    string `json:"session_id"`
		DelegationID string `json:"delegation_id"`
		StateVersion int64  `json:"state_version"`
	} `json:"delegated"`
	// More is true when more sessions wait on the step than limit allowed.
	More bool `json:"more"`
}

// DrainRoute delegates, by the route of step, up to limit (0: the server's
// default of 100) open sessions waiting on step, such as sessions that
// stalled before the route existed (controller).
func (c *Client) DrainRoute(ctx context.Context, step string, limit int, opts ...CallOption) (DrainResult, error) {
	var out DrainResult
	body := map[string]int{}
	if limit > 0 {
		body["limit"] = limit
	}
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/routes/" + esc(step) + "/drain", body: body, out: &out}, opts)
	return out, err
}

// QueueFlowInput is a queue's flow control: nil is no limit. PutQueue
// replaces both.
type QueueFlowInput struct {
	MaxInFlight        *int     `json:"max_in_flight"`
	MaxLeasesPerSecond *float64 `json:"max_leases_per_second"`
}

// QueueFlow is a queue's flow settings with its leased, unexpired count.
type QueueFlow struct {
	Queue              string     `json:"queue"`
	MaxInFlight        *int       `json:"max_in_flight"`
	MaxLeasesPerSecond *float64   `json:"max_leases_per_second"`
	Burst              *float64   `json:"burst"`
	InFlight           int64      `json:"in_flight"`
	UpdatedBy          string     `json:"updated_by,omitempty"`
	UpdatedAt          *time.Time `json:"updated_at,omitempty"`
}

// PutQueue sets a queue's flow control (admin).
func (c *Client) PutQueue(ctx context.Context, queue string, in QueueFlowInput, opts ...CallOption) (QueueFlow, error) {
	var out QueueFlow
	err := c.do(ctx, request{method: http.MethodPut, path: "/api/v1/queues/" + esc(queue), body: in, out: &out}, opts)
	return out, err
}

// GetQueue returns a queue's flow settings and in-flight count.
func (c *Client) GetQueue(ctx context.Context, queue string) (QueueFlow, error) {
	var out QueueFlow
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/queues/" + esc(queue), out: &out}, nil)
	return out, err
}

// Queues lists the queues with flow settings or leases out, by name.
func (c *Client) Queues(ctx context.Context) ([]QueueFlow, error) {
	var out struct {
		Queues []QueueFlow `json:"queues"`
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/queues", out: &out}, nil)
	return out.Queues, err
}
