package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ListSessionsOptions filters and pages ListSessions. Zero values mean "any".
type ListSessionsOptions struct {
	// Statuses keeps sessions in any of these statuses.
	Statuses []string
	// Queue keeps sessions last delegated to this queue.
	Queue string
	// TicketRef keeps the sessions of this ticket (exact match).
	TicketRef string
	// ParentID keeps the child sessions of this session.
	ParentID string
	// Q searches words of the goal, the ticket_ref and the human notes:
	// every whitespace-separated term must match, as whole words in order
	// ("T-1182", "refund", "damaged blender").
	Q string
	// UpdatedAfter keeps sessions updated strictly after this time.
	UpdatedAfter time.Time
	// Limit is the page size, 1–500; 0 leaves the server's default (50).
	Limit int
	// Cursor continues from a previous page (SessionList.NextCursor).
	Cursor string
	// Stalled keeps only stalled sessions: left open with a next_step that
	// has no route (use with Statuses: open).
	Stalled bool
}

func (o ListSessionsOptions) query() url.Values {
	q := url.Values{}
	if len(o.Statuses) > 0 {
		q.Set("status", strings.Join(o.Statuses, ","))
	}
	for name, v := range map[string]string{"queue": o.Queue, "ticket_ref": o.TicketRef, "parent_id": o.ParentID, "q": o.Q, "cursor": o.Cursor} {
		if v != "" {
			q.Set(name, v)
		}
	}
	if !o.UpdatedAfter.IsZero() {
		q.Set("updated_after", o.UpdatedAfter.UTC().Format(time.RFC3339Nano))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Stalled {
		q.Set("stalled", "true")
	}
	return q
}

// SessionSummary is one session of a listing, without its state.
type SessionSummary struct {
	SessionID    string    `json:"session_id"`
	TicketRef    string    `json:"ticket_ref"`
	Goal         string    `json:"goal"`
	Status       string    `json:"status"`
	Priority     int       `json:"priority"`
	StateVersion int64     `json:"state_version"`
	Queue        string    `json:"queue"`
	CurrentStep  string    `json:"current_step"`
	Assignee     string    `json:"assignee"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// SessionList is one page of sessions, most recently updated first.
type SessionList struct {
	Sessions []SessionSummary `json:"sessions"`
	// NextCursor continues the listing (ListSessionsOptions.Cursor); empty
	// on the last page.
	NextCursor string `json:"next_cursor"`
}

// ListSessions returns one page of the sessions matching o (controller,
// worker, admin). Bad options (an unknown status, a limit outside 1–500, a
// cursor from elsewhere) are a *ValidationError naming them.
func (c *Client) ListSessions(ctx context.Context, o ListSessionsOptions) (SessionList, error) {
	var out SessionList
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/sessions", query: o.query(), out: &out}, nil)
	return out, err
}

// AllSessions iterates over every session matching o, page after page,
// starting at o.Cursor. It stops at the first error, which it yields with a
// zero SessionSummary.
//
//	for s, err := range c.AllSessions(ctx, client.ListSessionsOptions{Q: "T-1182"}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(s.SessionID, s.Status)
//	}
//
// A session written while the iteration runs moves to the front of the
// order and is not seen again; every session not written meanwhile is seen
// once.
func (c *Client) AllSessions(ctx context.Context, o ListSessionsOptions) iter.Seq2[SessionSummary, error] {
	return func(yield func(SessionSummary, error) bool) {
		for {
			page, err := c.ListSessions(ctx, o)
			if err != nil {
				yield(SessionSummary{}, err)
				return
			}
			for _, s := range page.Sessions {
				if !yield(s, nil) {
					return
				}
			}
			if page.NextCursor == "" || len(page.Sessions) == 0 {
				return
			}
			o.Cursor = page.NextCursor
		}
	}
}
