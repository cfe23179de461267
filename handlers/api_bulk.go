package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// bulkSessions serves POST /sessions/bulk: one session control (cancel,
// pause, resume, escalate) on up to models.MaxBulkSessions sessions, named
// by id or by a listing filter. Each session is its own command (see
// models.Store.Bulk); the answer lists what was applied and what was skipped
// and why. An Idempotency-Key replays the whole answer.
func (a *API) bulkSessions(c echo.Context) error {
	tok, _ := c.Get(tokenKey).(models.APIToken)
	by := models.BulkBy{Token: &tok}
	var in models.BulkInput
	key, err := bind(c, &in, func() error { return in.Validate(by) })
	if err != nil {
		return err
	}
	res, err := a.Store.Bulk(c.Request().Context(), by, key, in)
	if err != nil {
		return err
	}
	if res.Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	return c.JSON(http.StatusOK, res)
}
