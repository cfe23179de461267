package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// provideInput serves POST /sessions/{id}/input: the answer to a session
// waiting in awaiting_input, optionally delegating the next step in the same
// transaction.
func (a *API) provideInput(c echo.Context) error {
	var in models.InputInput
	key, err := bind(c, &in, func() error { return in.Validate() })
	if err != nil {
		return err
	}
	out, err := a.Store.ProvideInput(c.Request().Context(), c.Param("id"), actor(c), key, in)
	if err != nil {
		return err
	}
	return writeOutcome(c, http.StatusOK, out, written(out))
}
