package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// childrenWritten is the 201 answer of a fan-out.
type childrenWritten struct {
	Children     []models.SpawnedChild `json:"children"`
	SessionID    string                `json:"session_id"`
	Status       models.Status         `json:"status"`
	StateVersion int64                 `json:"state_version"`
}

// children serves POST /sessions/{id}/children: the session fans out into
// child sessions, each with its first step delegated, and waits for them
// under the join contract.
func (a *API) children(c echo.Context) error {
	var in models.SpawnInput
	key, err := bind(c, &in, func() error { return in.Validate() })
	if err != nil {
		return err
	}
	out, err := a.Store.SpawnChildren(c.Request().Context(), c.Param("id"), actor(c), key, in)
	if err != nil {
		return err
	}
	var d models.ChildrenSpawned
	if err := out.DecodeData(&d); err != nil {
		return err
	}
	return writeOutcome(c, http.StatusCreated, out, childrenWritten{
		Children: d.Children, SessionID: out.SessionID, Status: out.Status, StateVersion: out.StateVersion,
	})
}
