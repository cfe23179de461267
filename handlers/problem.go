// Package handlers holds thin Echo handlers: bind, authorize, call models,
// render a view or JSON. No SQL and no business rules live here.
package handlers

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// Problem is an RFC 9457 problem+json body, as the API reference specifies (handlers/openapi.json).
type Problem struct {
	Type           string              `json:"type"`
	Title          string              `json:"title"`
	Status         int                 `json:"status"`
	Detail         string              `json:"detail"`
	Errors         []models.FieldError `json:"errors"`
	CurrentVersion *int64              `json:"current_version,omitempty"`
}

// ProblemContentType is the media type of error bodies.
const ProblemContentType = "application/problem+json"

var codeStatus = map[models.Code]int{
	models.EINVALID:     http.StatusUnprocessableEntity,
	models.EILLEGAL:     http.StatusUnprocessableEntity,
	models.EIDEMPOTENCY: http.StatusUnprocessableEntity,
	models.ECONFLICT:    http.StatusConflict,
	models.ENOTFOUND:    http.StatusNotFound,
	models.EUNAUTH:      http.StatusUnauthorized,
	models.EFORBIDDEN:   http.StatusForbidden,
	models.EUNAVAILABLE: http.StatusServiceUnavailable,
}

// StatusFor maps an error to its HTTP status.
func StatusFor(err error) int {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he.Code
	}
	if st, ok := codeStatus[models.ErrorCode(err)]; ok {
		return st
	}
	return http.StatusInternalServerError
}

// ProblemFor builds the problem body for err. Internal errors get a calm,
// generic detail; their cause is logged, not shown.
func ProblemFor(err error) Problem {
	status := StatusFor(err)
	p := Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Errors: []models.FieldError{}}
	var (
		he *echo.HTTPError
		ve *models.ValidationError
	)
	switch {
	case status == http.StatusServiceUnavailable:
		p.Detail = "The database is unavailable for a moment; retry the request (with the same Idempotency-Key)."
	case status >= 500:
		p.Detail = "The server could not complete the request; it has been logged."
	case errors.As(err, &he):
		if m, ok := he.Message.(string); ok {
			p.Detail = m
		} else {
			p.Detail = http.StatusText(status)
		}
	default:
		p.Detail = err.Error()
	}
	if errors.As(err, &ve) {
		p.Errors = ve.Fields
		p.Detail = "The request has invalid fields."
	}
	if models.ErrorCode(err) == models.EIDEMPOTENCY {
		p.Errors = []models.FieldError{{Field: "Idempotency-Key", Message: "was already used with a different request body"}}
	}
	if v, ok := models.CurrentVersion(err); ok {
		p.CurrentVersion = &v
	}
	if code := models.ErrorCode(err); code != models.EINTERNAL && status < 500 {
		p.Type = "https://taskpilots.dev/problems/" + string(code)
	}
	return p
}

// WriteProblem answers err as problem+json.
func WriteProblem(c echo.Context, err error) error {
	p := ProblemFor(err)
	if p.Status == http.StatusServiceUnavailable {
		c.Response().Header().Set("Retry-After", "1")
	}
	return c.Blob(p.Status, ProblemContentType, mustJSON(p))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"encoding failed","errors":[]}`)
	}
	return b
}
