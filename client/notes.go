package client

import (
	"context"
	"net/http"
)

// NoteInput is a note on a session (POST /api/v1/sessions/{id}/notes). Text
// is required; Evidence, when set, needs a claim. Notes never conflict:
// ExpectedVersion, when set, only records the version the note was written
// against.
type NoteInput struct {
	Text            string    `json:"text"`
	Evidence        *Evidence `json:"evidence,omitempty"`
	ExpectedVersion int64     `json:"expected_version,omitempty"`
}

// AddNote records a note on a session in any status (controller). The note
// is shown in the escalation package and reaches the next worker's packet.
func (c *Client) AddNote(ctx context.Context, sessionID string, in NoteInput, opts ...CallOption) (Outcome, error) {
	var out Outcome
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/sessions/" + esc(sessionID) + "/notes", body: in, out: &out}, opts)
	return out, err
}
