package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// FeedOptions selects a page of the event feed (GET /api/v1/events).
type FeedOptions struct {
	// After is a NextCursor from an earlier page; "" starts at the oldest
	// retained event and FeedNow at the end of the feed.
	After string
	// Types keeps only events of these types (e.g. "result.completed").
	Types []string
	// Queue keeps only events of sessions whose current queue it is;
	// SessionID only the events of one session.
	Queue     string
	SessionID string
	// Limit is the page size, 1 to 1000 (0: the server's default, 100).
	Limit int
	// WaitSeconds, 0 to 30, makes the call a long poll: with nothing new
	// it waits up to this long for a matching event. Follow uses 25 when
	// it is 0.
	WaitSeconds int
	// OnCursor, if set, is called by Follow with the cursor after each
	// page's events were handled: store it to resume there after a
	// restart (FeedOptions.After). Feed ignores it.
	OnCursor func(cursor string)
}

// FeedNow, as FeedOptions.After, starts at the end of the feed.
const FeedNow = "now"

// FeedEvent is one committed event as the feed tells it.
type FeedEvent struct {
	EventID      string `json:"event_id"`
	SessionID    string `json:"session_id"`
	Seq          int64  `json:"seq"`
	Type         string `json:"type"`
	Actor        string `json:"actor"`
	VersionAfter int64  `json:"version_after"`
	// Payload is the event's payload as JSON; see DecodePayload.
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`
}

// DecodePayload decodes the event's payload into v.
func (e FeedEvent) DecodePayload(v any) error { return Event{Payload: e.Payload}.DecodePayload(v) }

// FeedPage is a page of the feed. Continue with NextCursor as
// FeedOptions.After, also when Events is empty.
type FeedPage struct {
	Events     []FeedEvent `json:"events"`
	NextCursor string      `json:"next_cursor"`
}

// Feed reads one page of the event feed (controller, admin): the committed
// events after opts.After that match its filters, in feed order. A reader
// that keeps passing NextCursor back sees every committed event exactly
// once, each session's in seq order.
func (c *Client) Feed(ctx context.Context, opts FeedOptions) (FeedPage, error) {
	q := url.Values{}
	if opts.After != "" {
		q.Set("after", opts.After)
	}
	if len(opts.Types) > 0 {
		q.Set("types", strings.Join(opts.Types, ","))
	}
	if opts.Queue != "" {
		q.Set("queue", opts.Queue)
	}
	if opts.SessionID != "" {
		q.Set("session_id", opts.SessionID)
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.WaitSeconds > 0 {
		q.Set("wait_seconds", strconv.Itoa(opts.WaitSeconds))
	}
	var out FeedPage
	err := c.do(ctx, request{
		method: http.MethodGet, path: "/api/v1/events", query: q, out: &out,
		wait: time.Duration(opts.WaitSeconds) * time.Second,
	}, nil)
	return out, err
}

// Follow reads the feed from opts.After on, with long polls, and calls fn
// with each event in order, until ctx is done (it then returns nil) or fn or
// a request fails (it returns that error; requests are retried first, as
// every call of the Client is). After each page it calls opts.OnCursor, if
// set, with the cursor to resume from.
func (c *Client) Follow(ctx context.Context, opts FeedOptions, fn func(FeedEvent) error) error {
	if opts.WaitSeconds == 0 {
		opts.WaitSeconds = 25
	}
	for {
		page, err := c.Feed(ctx, opts)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range page.Events {
			if err := fn(e); err != nil {
				return err
			}
		}
		if page.NextCursor == "" {
			return errors.New("GET /api/v1/events: the answer has no next_cursor")
		}
		opts.After = page.NextCursor
		if opts.OnCursor != nil {
			opts.OnCursor(page.NextCursor)
		}
	}
}
