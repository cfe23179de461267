package client

import (
	"context"
	"net/http"
	"time"
)

// ExpiredLease is one lease that ExpireLeases expired.
type ExpiredLease struct {
	DelegationID string `json:"delegation_id"`
	SessionID    string `json:"session_id"`
	Attempt      int    `json:"attempt"`
	Worker       string `json:"worker"`
}

// ExpireLeasesResult is what ExpireLeases did: of Leased live leases of the
// queue, Expired were expired and queued again as their next attempt.
type ExpireLeasesResult struct {
	Queue   string         `json:"queue"`
	Share   float64        `json:"share"`
	Leased  int            `json:"leased"`
	Expired []ExpiredLease `json:"expired"`
	At      time.Time      `json:"at"`
}

// ExpireLeases expires share (in (0, 1]) of the queue's live leases at once,
// a fault injection for recovery drills (POST
// /api/v1/queues/{queue}/expire-leases; admin tokens only): the server
// records each expiry as the rescuer does and queues the step again, and the
// workers that held them are fenced.
func (c *Client) ExpireLeases(ctx context.Context, queue string, share float64, opts ...CallOption) (ExpireLeasesResult, error) {
	var out ExpireLeasesResult
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/queues/" + esc(queue) + "/expire-leases",
		body: map[string]float64{"share": share}, out: &out}, opts)
	return out, err
}
