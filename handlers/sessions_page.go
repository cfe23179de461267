package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// SessionsPageSize is how many sessions one page of the list shows.
const SessionsPageSize = 50

// SessionsPage serves GET /console/sessions: sessions most recently updated
// first, filtered by ?status= and ?ticket= (exact ticket_ref), or only the
// stalled ones with ?stalled=1, searched by ?q= (words of goal, ticket and
// notes), paged by the ?after= cursor. It lists through models.ListSessions,
// the function behind GET /api/v1/sessions, so the console and the API find
// the same sessions.
func SessionsPage(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		d := views.SessionsData{
			Status: models.Status(strings.TrimSpace(c.QueryParam("status"))),
			Ticket: strings.TrimSpace(c.QueryParam("ticket")),
			Q:      strings.TrimSpace(c.QueryParam("q")),
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
		q := models.SessionQuery{TicketRef: d.Ticket, Q: d.Q, Cursor: d.After, Limit: SessionsPageSize, Stalled: d.Stalled}
		if d.Status != "" {
			q.Statuses = []models.Status{d.Status}
		}
		ctx := c.Request().Context()
		page, err := s.ListSessions(ctx, q)
		status := http.StatusOK
		var ve *models.ValidationError
		switch {
		case errors.As(err, &ve):
			// A search the list cannot run (no word, too long, a cursor
			// from elsewhere) is shown next to the search box.
			d.Errors, status = ve.Fields, http.StatusUnprocessableEntity
		case err != nil:
			return fmt.Errorf("sessions page: %w", err)
		}
		d.Sessions, d.NextAfter = page.Sessions, page.NextCursor
		// Bounded counts ("1,000+"): the chips cost the same however many
		// sessions there are.
		if d.Counts, err = s.CountByStatusCapped(ctx); err != nil {
			return fmt.Errorf("sessions page: %w", err)
		}
		if d.StalledCount, err = s.CountStalledCapped(ctx); err != nil {
			return fmt.Errorf("sessions page: %w", err)
		}
		// "All matching" is the list's own filter; the stalled view has no
		// bulk filter, so there only ticked rows can be acted on.
		var bf *models.BulkFilter
		if !d.Stalled {
			bf = &models.BulkFilter{Status: string(d.Status), TicketRef: d.Ticket, Q: d.Q}
		}
		if d.Bulk, err = NewBulkForm(ctx, s, CurrentUser(c), c.Request().URL.RequestURI(), bf); err != nil {
			return err
		}
		return Render(c, status, views.SessionsPage(d))
	}
}
