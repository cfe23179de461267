package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// FieldError names one offending field of a request.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Problem is an error answer of the API (application/problem+json). Every
// error the server sends decodes to a *Problem; 409 and 422 come wrapped in
// the more specific *ConflictError and *ValidationError, which unwrap to it.
type Problem struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail"`
	Errors []FieldError `json:"errors"`
	// CurrentVersion is the session's version, when the server said it.
	CurrentVersion *int64 `json:"current_version,omitempty"`
	// Method and Path name the request that failed.
	Method string `json:"-"`
	Path   string `json:"-"`
}

func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %d", p.Method, p.Path, p.Status)
	if p.Title != "" {
		b.WriteString(" " + p.Title)
	}
	if p.Detail != "" {
		b.WriteString(": " + p.Detail)
	}
	for i, f := range p.Errors {
		if i == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(f.Field + ": " + f.Message)
		if i == len(p.Errors)-1 {
			b.WriteString(")")
		}
	}
	return b.String()
}

// Is makes errors.Is(err, ErrConflict) and friends work on any API error.
func (p *Problem) Is(target error) bool {
	s, ok := target.(statusError)
	return ok && int(s) == p.Status
}

// ConflictError is a 409: the command was based on a version that is no
// longer current, or the lease is no longer held. Nothing was written.
type ConflictError struct {
	*Problem
	// CurrentVersion is the session's current state version.
	CurrentVersion int64
}

// Unwrap returns the underlying problem.
func (e *ConflictError) Unwrap() error { return e.Problem }

// ValidationError is a 422: the request broke the contract or asked for an
// illegal transition. Fields lists every offending field. Nothing was written.
type ValidationError struct {
	*Problem
	Fields []FieldError
}

// Unwrap returns the underlying problem.
func (e *ValidationError) Unwrap() error { return e.Problem }

// Field returns the message for a field and whether it was listed.
func (e *ValidationError) Field(name string) (string, bool) {
	for _, f := range e.Fields {
		if f.Field == name {
			return f.Message, true
		}
	}
	return "", false
}

// statusError is a sentinel matching every API error of one status.
type statusError int

func (s statusError) Error() string {
	return fmt.Sprintf("HTTP %d %s", int(s), http.StatusText(int(s)))
}

// Sentinels for errors.Is: errors.Is(err, client.ErrConflict) is true for
// every 409 answer.
var (
	ErrBadRequest   error = statusError(http.StatusBadRequest)
	ErrUnauthorized error = statusError(http.StatusUnauthorized)
	ErrForbidden    error = statusError(http.StatusForbidden)
	ErrNotFound     error = statusError(http.StatusNotFound)
	ErrConflict     error = statusError(http.StatusConflict)
	ErrTooLarge     error = statusError(http.StatusRequestEntityTooLarge)
	ErrInvalid      error = statusError(http.StatusUnprocessableEntity)
)

// IsConflict reports whether err is a 409 (stale version or lost lease).
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsValidation reports whether err is a 422 (contract violation or illegal
// transition).
func IsValidation(err error) bool { return errors.Is(err, ErrInvalid) }

// IsNotFound reports whether err is a 404.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsUnauthorized reports whether err is a 401 (missing or invalid token).
func IsUnauthorized(err error) bool { return errors.Is(err, ErrUnauthorized) }

// IsForbidden reports whether err is a 403 (the token's role may not do this).
func IsForbidden(err error) bool { return errors.Is(err, ErrForbidden) }

// StatusCode returns the HTTP status of an API error, or 0 when err is not one.
func StatusCode(err error) int {
	var p *Problem
	if errors.As(err, &p) {
		return p.Status
	}
	return 0
}

// decodeProblem turns an error answer into the most specific error type.
func decodeProblem(method, path string, status int, body []byte) error {
	p := &Problem{Method: method, Path: path}
	if err := json.Unmarshal(body, p); err != nil || p.Status == 0 {
		// Not problem+json (a proxy's page, say): keep what can be said.
		p = &Problem{Method: method, Path: path, Title: http.StatusText(status), Detail: snippet(body)}
	}
	p.Status = status
	switch status {
	case http.StatusConflict:
		ce := &ConflictError{Problem: p}
		if p.CurrentVersion != nil {
			ce.CurrentVersion = *p.CurrentVersion
		}
		return ce
	case http.StatusUnprocessableEntity:
		return &ValidationError{Problem: p, Fields: p.Errors}
	}
	return p
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
