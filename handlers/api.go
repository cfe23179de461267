package handlers

import (
	"log/slog"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// API serves the JSON API of API.md under /api/v1. (Stub: being filled in.)
type API struct {
	Store *models.Store
	Log   *slog.Logger
}

// Register adds the API routes to g (the /api/v1 group).
func (a *API) Register(g *echo.Group) {}
