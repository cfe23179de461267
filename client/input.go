package client

import (
	"context"
	"net/http"
)

// InputInput answers a session waiting in awaiting_input
// (POST /api/v1/sessions/{id}/input). Answer or Facts is required.
type InputInput struct {
	ExpectedVersion int64          `json:"expected_version"`
	Answer          string         `json:"answer,omitempty"`
	Facts           map[string]any `json:"facts,omitempty"`
	// Delegate, when set, queues the next step in the same transaction as
	// the answer; the session answers queued instead of open.
	Delegate *InputDelegate `json:"delegate,omitempty"`
}

// InputDelegate is the next step an answer delegates. Zero MaxAttempts and
// LeaseSeconds leave the server's defaults (3 and 30).
type InputDelegate struct {
	Queue        string `json:"queue"`
	Step         string `json:"step"`
	Instructions string `json:"instructions,omitempty"`
	MaxAttempts  int    `json:"max_attempts,omitempty"`
	LeaseSeconds int    `json:"lease_seconds,omitempty"`
	// AvailableAt (RFC 3339) or DelaySeconds schedule the step for later.
	AvailableAt  string `json:"available_at,omitempty"`
	DelaySeconds int    `json:"delay_seconds,omitempty"`
}

// ProvideInput answers the open questions of a session in awaiting_input
// (controller). A session that is not awaiting input, or an invalid body,
// is a *ValidationError (422); a stale ExpectedVersion is a *ConflictError
// (409) carrying the current version.
func (c *Client) ProvideInput(ctx context.Context, sessionID string, in InputInput, opts ...CallOption) (Outcome, error) {
	var out Outcome
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/sessions/" + esc(sessionID) + "/input", body: in, out: &out}, opts)
	return out, err
}
