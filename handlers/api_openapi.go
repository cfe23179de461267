package handlers

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPIDocument is the OpenAPI 3 description of this API. It is written by
// hand, next to the handlers, and a test checks that it documents exactly
// the routes Register serves.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns the embedded OpenAPI document.
func OpenAPIDocument() []byte { return openAPIDocument }

// openAPI serves GET /openapi.json. It is public: clients read it to learn
// how to authenticate.
func (a *API) openAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPIDocument)
}
