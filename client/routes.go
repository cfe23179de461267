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
