package handlers

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/views"
)

// ErrCSRF is the answer to a state-changing request without a valid CSRF
// token (or sent from another site).
var ErrCSRF = echo.NewHTTPError(http.StatusForbidden,
	"This form has expired or was sent from another site. Reload the page and try again.")

// ErrorHandler is the one place errors become responses. API clients
// (paths under /api/, or Accept: application/json) get problem+json;
// browsers get a calm HTML page. Server errors are logged with their detail,
// which is never shown.
func ErrorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		status := StatusFor(err)
		r := c.Request()
		switch {
		case r.Context().Err() != nil:
			// The client went away (or the server is shutting down): the
			// failure is the cancellation, not a fault to report.
			log.Debug("request abandoned", "err", err, "method", r.Method, "path", r.URL.Path)
		case status >= 500:
			log.Error("request failed", "err", err, "status", status, "method", r.Method,
				"path", r.URL.Path, "request_id", RequestID(c))
		default:
			log.Debug("request refused", "err", err, "status", status, "method", r.Method, "path", r.URL.Path)
		}
		if c.Response().Committed {
			return
		}
		var werr error
		switch {
		case r.Method == http.MethodHead:
			werr = c.NoContent(status)
		case WantsJSON(r):
			werr = WriteProblem(c, err)
		default:
			werr = Render(c, status, views.ErrorPage(errorPage(err, status)))
		}
		if werr != nil {
			log.Error("write error response", "err", werr, "path", r.URL.Path)
		}
	}
}

// WantsJSON reports whether a request is from an API client rather than a
// browser: API paths, or an Accept header asking for JSON and not HTML.
func WantsJSON(r *http.Request) bool {
	if strings.HasPrefix(r.URL.Path, "/api/") {
		return true
	}
	accept := r.Header.Get(echo.HeaderAccept)
	return strings.Contains(accept, "json") && !strings.Contains(accept, "text/html")
}

// errorPage words an error for people.
func errorPage(err error, status int) views.ErrorData {
	d := views.ErrorData{Status: status, Title: http.StatusText(status)}
	switch status {
	case http.StatusNotFound:
		d.Title = "Page not found"
		d.Message = "There is nothing at this address. It may have moved, or the link may be mistyped."
	case http.StatusForbidden:
		d.Title = "Not allowed"
		d.Message = "You do not have access to this page."
	case http.StatusMethodNotAllowed:
		d.Message = "This address does not accept that kind of request."
	case http.StatusRequestEntityTooLarge:
		d.Title = "Too large"
		d.Message = "What you sent is larger than the server accepts."
	case http.StatusTooManyRequests:
		d.Title = "Too many requests"
		d.Message = "Wait a moment, then try again."
	case http.StatusServiceUnavailable:
		d.Title = "Temporarily unavailable"
		d.Message = "The service cannot answer right now. Try again in a moment."
	default:
		if status >= 500 {
			d.Title = "Something went wrong"
			d.Message = "The server could not complete the request. It has been logged; try again in a moment."
		} else {
			d.Message = "The request could not be completed."
		}
	}
	// Deliberate 4xx messages (echo.NewHTTPError with a sentence, domain
	// errors such as an unknown session) are worded for people: show them.
	if status < 500 {
		var he *echo.HTTPError
		if !errors.As(err, &he) || he.Message != http.StatusText(status) {
			if detail := ProblemFor(err).Detail; detail != "" && detail != http.StatusText(status) {
				d.Message = detail
			}
		}
	}
	return d
}
