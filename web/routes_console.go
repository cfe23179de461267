package web

import (
	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
)

// consoleRoutes registers the support console: the agent's inbox, the
// session page and its takeover forms. Every user may read a session page
// (reviewers and admins arrive there from the sessions list); the inbox and
// the forms are for agents and admins, and the takeover commands check the
// role again.
func consoleRoutes(e *echo.Echo, s *models.Store) {
	agents := handlers.RequireUser(models.RoleAgent)
	e.GET("/console", handlers.ConsoleInbox(s), agents)
	e.GET("/console/inbox", handlers.ConsoleInbox(s), agents)
	e.GET("/console/inbox/waiting", handlers.ConsoleWaiting(s), agents)
	e.GET("/console/inbox/stalled", handlers.ConsoleStalled(s), agents)
	e.GET("/console/sessions/:id", handlers.ConsoleSession(s), handlers.RequireUser())
	// Bulk actions: the roles the policy lets take some bulk
	// action; models.Bulk judges each session.
	e.POST("/console/sessions/bulk", handlers.ConsoleBulk(s), handlers.RequireUser(models.BulkRoles()...))
	e.GET("/console/sessions/:id/changes", handlers.ConsoleSessionChanges(s), handlers.RequireUser())
	for _, a := range handlers.ConsoleActions() {
		// The roles the takeover policy lets take the action on some
		// session; the command checks the session's state.
		e.POST("/console/sessions/:id/"+string(a), handlers.ConsoleAction(s, a), handlers.RequireUser(models.ActionRoles(a)...))
	}
}
