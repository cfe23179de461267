package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/views"
)

// APIDocsPath is where the rendered API reference is served.
const APIDocsPath = "/api/docs"

// APIDocsCSP is the Content-Security-Policy of the API reference alone.
// Redoc (static/redoc.standalone.js) styles its components by inserting
// <style> elements at run time, which style-src 'self' would block, and runs
// its search index in a worker it starts from a blob: URL. So this page, and
// only this page, allows inline styles and blob: workers; scripts stay
// 'self' only (no inline script, no eval) as everywhere else, and nothing
// loads from another origin.
const APIDocsCSP = "default-src 'self'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'; object-src 'none'; " +
	"style-src 'self' 'unsafe-inline'; worker-src 'self' blob:; img-src 'self' data:"

// APIDocs serves GET /api/docs: the API reference, rendered in the browser
// from the OpenAPI document the API serves. Public, like the document.
func APIDocs(c echo.Context) error {
	c.Response().Header().Set("Content-Security-Policy", APIDocsCSP)
	return Render(c, http.StatusOK, views.APIDocs("/api/v1/openapi.json"))
}
