package handlers

import (
	"errors"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// listSessionsParams are the query parameters of GET /sessions. Any other is
// a 422 naming it, so that a misspelt filter cannot silently list everything.
// A new filter adds its name here and its field in bindSessionQuery.
var listSessionsParams = []string{"status", "queue", "ticket_ref", "parent_id", "q", "updated_after", "limit", "cursor", "stalled"}

// sessionListItem is one session of a listing, without its state.
type sessionListItem struct {
	SessionID    string         `json:"session_id"`
	TicketRef    string         `json:"ticket_ref"`
	Goal         string         `json:"goal"`
	Status       models.Status  `json:"status"`
	Priority     int            `json:"priority"`
	StateVersion int64          `json:"state_version"`
	Queue        string         `json:"queue"`
	CurrentStep  string         `json:"current_step"`
	Assignee     string         `json:"assignee"`
	UpdatedAt    models.UTCTime `json:"updated_at"`
}

type sessionList struct {
	Sessions []sessionListItem `json:"sessions"`
	// NextCursor is null on the last page.
	NextCursor *string `json:"next_cursor"`
}

// listSessions serves GET /sessions: filters, word search and keyset pages,
// newest updated_at first.
func (a *API) listSessions(c echo.Context) error {
	q, err := bindSessionQuery(c)
	if err != nil {
		return err
	}
	page, err := a.Store.ListSessions(c.Request().Context(), q)
	if err != nil {
		return err
	}
	out := sessionList{Sessions: make([]sessionListItem, 0, len(page.Sessions))}
	for _, r := range page.Sessions {
		out.Sessions = append(out.Sessions, sessionListItem{
			SessionID: r.ID, TicketRef: r.TicketRef, Goal: r.Goal, Status: r.Status, Priority: r.Priority,
			StateVersion: r.StateVersion, Queue: r.Queue, CurrentStep: r.CurrentStep, Assignee: r.Assignee,
			UpdatedAt: r.UpdatedAt,
		})
	}
	if page.NextCursor != "" {
		out.NextCursor = &page.NextCursor
	}
	return c.JSON(http.StatusOK, out)
}

// bindSessionQuery reads the query string into a models.SessionQuery and
// reports every offending parameter at once: unknown or repeated parameters,
// a limit or time that does not parse, and what SessionQuery.Validate finds.
func bindSessionQuery(c echo.Context) (models.SessionQuery, error) {
	v := &models.ValidationError{}
	params := c.QueryParams()
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		switch {
		case !slices.Contains(listSessionsParams, name):
			v.Add(name, "is not a filter of this listing; known: %s", strings.Join(listSessionsParams, ", "))
		case name != "status" && len(params[name]) > 1:
			v.Add(name, "must be given at most once")
		}
	}
	q := models.SessionQuery{
		Queue:     strings.TrimSpace(c.QueryParam("queue")),
		TicketRef: strings.TrimSpace(c.QueryParam("ticket_ref")),
		ParentID:  strings.TrimSpace(c.QueryParam("parent_id")),
		Q:         strings.TrimSpace(c.QueryParam("q")),
		Cursor:    strings.TrimSpace(c.QueryParam("cursor")),
		Limit:     int(queryInt(c, "limit", models.DefaultSessionsLimit, 1, models.MaxSessionsLimit, v)),
	}
	// status=a,b and status=a&status=b both mean "a or b".
	for _, list := range params["status"] {
		for _, st := range strings.Split(list, ",") {
			if st = strings.TrimSpace(st); st != "" {
				q.Statuses = append(q.Statuses, models.Status(st))
			}
		}
	}
	switch st := strings.TrimSpace(c.QueryParam("stalled")); st {
	case "", "false", "0":
	case "true", "1":
		q.Stalled = true
	default:
		v.Add("stalled", "must be true or false")
	}
	if s := strings.TrimSpace(c.QueryParam("updated_after")); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			v.Add("updated_after", "must be an RFC 3339 time, e.g. 2026-11-30T09:00:00Z")
		}
		q.UpdatedAfter = t
	}
	var ve *models.ValidationError
	if err := q.Validate(); errors.As(err, &ve) {
		for _, f := range ve.Fields {
			// The handler already named a limit that did not parse.
			if !slices.ContainsFunc(v.Fields, func(g models.FieldError) bool { return g.Field == f.Field }) {
				v.Fields = append(v.Fields, f)
			}
		}
	}
	return q, v.Err()
}
