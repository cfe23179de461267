package handlers

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// SessionsPageSize is how many sessions one page of the list shows.
const SessionsPageSize = 50

// SessionsPage serves GET /console/sessions: sessions newest first, filtered
// by ?status= and ?ticket=, or only the stalled ones with ?stalled=1, paged
// by the ?after= cursor (a session id).
func SessionsPage(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		d := views.SessionsData{
			Status: models.Status(strings.TrimSpace(c.QueryParam("status"))),
			Ticket: strings.TrimSpace(c.QueryParam("ticket")),
			After:  strings.TrimSpace(c.QueryParam("after")),
		}
		if d.Status != "" && !d.Status.Valid() {
			return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("Unknown status %q.", d.Status))
		}
		switch st := c.QueryParam("stalled"); st {
		case "", "0", "false":
		case "1", "true":
			// Stalled sessions are open by definition.
			d.Stalled, d.Status = true, ""
		default:
			return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("stalled must be 1 or 0, not %q.", st))
		}
		opts := models.ListSessionsOpts{TicketRef: d.Ticket, AfterID: d.After, Limit: SessionsPageSize + 1, Stalled: d.Stalled}
		if d.Status != "" {
			opts.Statuses = []models.Status{d.Status}
		}
		ctx := c.Request().Context()
		rows, err := s.ListSessions(ctx, opts)
		if err != nil {
			return fmt.Errorf("sessions page: %w", err)
		}
		// One row beyond the page tells whether there is a next page.
		if len(rows) > SessionsPageSize {
			rows = rows[:SessionsPageSize]
			d.NextAfter = rows[len(rows)-1].ID
		}
		d.Sessions = rows
		if d.Counts, err = s.CountByStatus(ctx); err != nil {
			return fmt.Errorf("sessions page: %w", err)
		}
		stalled, err := s.StalledStats(ctx)
		if err != nil {
			return fmt.Errorf("sessions page: %w", err)
		}
		d.StalledCount = stalled.Sessions
		return Render(c, http.StatusOK, views.SessionsPage(d))
	}
}
