package handlers

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// AdminLog serves GET /console/admin/audit: every admin action, newest
// first, with its before and after (?before= pages).
func AdminLog(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		d := views.AdminLogData{Before: strings.TrimSpace(c.QueryParam("before"))}
		var err error
		if d.Page, err = s.ListAdminAudit(ctx, models.AdminAuditOpts{Before: d.Before}); err != nil {
			return err
		}
		actors := make([]string, 0, len(d.Page.Rows))
		for _, r := range d.Page.Rows {
			actors = append(actors, r.Actor)
		}
		if d.Names, err = s.DisplayNames(ctx, actors...); err != nil {
			return fmt.Errorf("admin log: %w", err)
		}
		return Render(c, http.StatusOK, views.AdminLogPage(d))
	}
}
