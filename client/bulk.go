package client

import (
	"context"
	"net/http"
)

// Bulk actions: POST /api/v1/sessions/bulk.
const (
	BulkCancel   = "cancel"
	BulkPause    = "pause"
	BulkResume   = "resume"
	BulkEscalate = "escalate"
)

// MaxBulkSessions is the most sessions one bulk may name or match.
const MaxBulkSessions = 500

// BulkFilter selects sessions as the same parameters of ListSessions do;
// name at least one. Status may list several, comma-separated.
type BulkFilter struct {
	Status    string `json:"status,omitempty"`
	Queue     string `json:"queue,omitempty"`
	TicketRef string `json:"ticket_ref,omitempty"`
	Q         string `json:"q,omitempty"`
}

// BulkInput is one bulk: an action and either SessionIDs (1 to 500) or a
// Filter, never both.
type BulkInput struct {
	Action     string      `json:"action"`
	SessionIDs []string    `json:"session_ids,omitempty"`
	Filter     *BulkFilter `json:"filter,omitempty"`
	Reason     string      `json:"reason,omitempty"`
	// DryRun reports what would happen and writes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// BulkSkip is a session the bulk left unchanged, and why.
type BulkSkip struct {
	SessionID string `json:"session_id"`
	Detail    string `json:"detail"`
}

// BulkResult is what a bulk did: Matched sessions selected, each either in
// Applied (on a dry run: would be applied) or in Skipped.
type BulkResult struct {
	Applied []string   `json:"applied"`
	Skipped []BulkSkip `json:"skipped"`
	Matched int        `json:"matched"`
}

// Bulk cancels, pauses, resumes or escalates many sessions at once
// (controller). Each session is its own transition: one that cannot take the
// action is skipped with the reason, the others are applied. Like every
// write it carries an Idempotency-Key, so a retry gets the first answer back
// and acts on nothing again.
func (c *Client) Bulk(ctx context.Context, in BulkInput, opts ...CallOption) (BulkResult, error) {
	var out BulkResult
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/sessions/bulk", body: in, out: &out}, opts)
	return out, err
}
