package handlers

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// feedParams are the query parameters of GET /events; any other is a 422,
// so that a misspelt filter is not silently ignored (and everything read).
var feedParams = []string{"after", "types", "queue", "session_id", "limit", "wait_seconds"}

// feedPage is the answer of GET /events.
type feedPage struct {
	Events     []models.FeedEvent `json:"events"`
	NextCursor string             `json:"next_cursor"`
}

// listFeed serves GET /events: the event feed, as a long poll when
// wait_seconds > 0 (models/feed.go explains why a reader following
// next_cursor sees every committed event exactly once).
func (a *API) listFeed(c echo.Context) error {
	v := &models.ValidationError{}
	params := c.QueryParams()
	var unknown []string
	for name := range params {
		if !slices.Contains(feedParams, name) {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	for _, name := range unknown {
		v.Add(name, "is not a parameter of this route (want %s)", strings.Join(feedParams, ", "))
	}
	for _, name := range feedParams {
		if len(params[name]) > 1 && name != "types" {
			v.Add(name, "must be given once")
		}
	}
	limit := queryInt(c, "limit", models.DefaultFeedLimit, 1, models.MaxFeedLimit, v)
	wait := queryInt(c, "wait_seconds", 0, 0, models.MaxWaitSeconds, v)
	q := models.FeedQuery{
		After: c.QueryParam("after"), Queue: c.QueryParam("queue"), SessionID: c.QueryParam("session_id"),
		Limit: int(limit), Reader: readerOf(c),
	}
	// types=a,b (or types=a&types=b).
	for _, list := range params["types"] {
		for _, t := range strings.Split(list, ",") {
			if t = strings.TrimSpace(t); t != "" {
				q.Types = append(q.Types, models.EventType(t))
			}
		}
	}
	var ve *models.ValidationError
	if errors.As(q.Validate(), &ve) {
		v.Fields = append(v.Fields, ve.Fields...)
	}
	if err := v.Err(); err != nil {
		return err
	}
	ctx := c.Request().Context()
	page, err := a.Store.WaitFeed(ctx, q, time.Duration(wait)*time.Second)
	if err != nil && ctx.Err() != nil && page.NextCursor != "" {
		// The caller hung up or the server is stopping during the wait: an
		// empty page with a valid cursor, so that a client still there polls
		// again from the same place.
		err = nil
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, feedPage{Events: page.Events, NextCursor: page.NextCursor})
}
