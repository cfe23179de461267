package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// addNote serves POST /sessions/{id}/notes: a controller's (or an admin's)
// note on a session, in any status. Notes never conflict, so no version is
// required; the note reaches the escalation package and the next packet.
func (a *API) addNote(c echo.Context) error {
	var in models.NoteRequest
	key, err := bind(c, &in, func() error { return in.Validate() })
	if err != nil {
		return err
	}
	out, err := a.Store.AddNoteAs(c.Request().Context(), c.Param("id"), actor(c), key, in)
	if err != nil {
		return err
	}
	return writeOutcome(c, http.StatusOK, out, written(out))
}
