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
// An htmx request (the live refresh) gets the list and the tabs.
func ConsoleWaiting(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		after := strings.TrimSpace(c.QueryParam("after"))
		page, err := s.WaitingOnInput(ctx, after, models.DefaultInboxLimit)
		if err != nil {
			return err
		}
		d := views.WaitingData{After: after, Page: page, Now: s.Now().UTC()}
		if d.Tabs, err = s.InboxTabs(ctx); err != nil {
			return err
		}
		if isHTMX(c) {
			return Render(c, http.StatusOK, views.WaitingFragment(d))
		}
		return Render(c, http.StatusOK, views.WaitingPage(d))
	}
}

// ConsoleStalled serves GET /console/inbox/stalled: the stalled sessions
// (open, waiting on a step without a route), most recently updated first,
// through models.ListSessions like the sessions list's ?stalled=1. An htmx
// request (the live refresh) gets the list and the tabs.
func ConsoleStalled(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		after := strings.TrimSpace(c.QueryParam("after"))
		page, err := s.ListSessions(ctx, models.SessionQuery{Stalled: true, Cursor: after, Limit: models.DefaultInboxLimit})
		if err != nil {
			return err
		}
		d := views.StalledData{After: after, Page: page, Now: s.Now().UTC()}
		if d.Tabs, err = s.InboxTabs(ctx); err != nil {
			return err
		}
		if isHTMX(c) {
			return Render(c, http.StatusOK, views.StalledFragment(d))
		}
		return Render(c, http.StatusOK, views.StalledPage(d))
	}
}
