package handlers

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// ConsoleWaiting serves GET /console/inbox/waiting: the sessions waiting in
// awaiting_input, the longest waiting first, with how long each has waited.
// An htmx request (the live refresh) gets only the list.
func ConsoleWaiting(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		after := strings.TrimSpace(c.QueryParam("after"))
		page, err := s.WaitingOnInput(ctx, after, models.DefaultInboxLimit)
		if err != nil {
			return err
		}
		d := views.WaitingData{After: after, Page: page, Now: s.Now().UTC()}
		if isHTMX(c) {
			return Render(c, http.StatusOK, views.WaitingList(d))
		}
		if d.InboxTotal, err = s.CountInHumanHands(ctx); err != nil {
			return err
		}
		return Render(c, http.StatusOK, views.WaitingPage(d))
	}
}
