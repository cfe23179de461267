package models

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Code classifies an error so that callers (HTTP, console, CLI) can branch on
// it without string matching.
type Code string

// The error codes.
const (
	EINVALID     Code = "invalid"      // input failed validation (422)
	ECONFLICT    Code = "conflict"     // stale version or lost lease (409)
	ENOTFOUND    Code = "not_found"    // unknown id (404)
	EILLEGAL     Code = "illegal"      // transition not allowed from the current status (422)
	EIDEMPOTENCY Code = "idempotency"  // key reused with another request (422)
	EUNAUTH      Code = "unauthorized" // no or bad credentials (401)
	EFORBIDDEN   Code = "forbidden"    // authenticated but not allowed (403)
	EUNAVAILABLE Code = "unavailable"  // the database cannot be reached right now (503)
	EINTERNAL    Code = "internal"
)

// FieldError names one offending field.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError lists every offending field of a request.
type ValidationError struct {
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return "invalid input: " + strings.Join(parts, "; ")
}

// Add records a problem with a field, once: the NUL check runs both over a
// whole input and inside the shared text validators.
func (e *ValidationError) Add(field, format string, args ...any) {
	fe := FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
	for _, f := range e.Fields {
		if f == fe {
			return
		}
	}
	e.Fields = append(e.Fields, fe)
}

// Err returns e when it holds problems and nil otherwise.
func (e *ValidationError) Err() error {
	if e == nil || len(e.Fields) == 0 {
		return nil
	}
	return e
}

// ConflictError is a command based on a version that is no longer current.
type ConflictError struct {
	SessionID       string
	ExpectedVersion int64
	CurrentVersion  int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("session %s: expected version %d, current version is %d", e.SessionID, e.ExpectedVersion, e.CurrentVersion)
}

// LeaseError is a heartbeat or result from a lease that is no longer held.
type LeaseError struct {
	DelegationID   string
	SessionID      string
	Reason         string // expired, superseded, not_leased
	CurrentVersion int64
}

func (e *LeaseError) Error() string {
	return fmt.Sprintf("delegation %s: lease %s (session %s is at version %d)", e.DelegationID, e.Reason, e.SessionID, e.CurrentVersion)
}

// IllegalTransitionError is an event not allowed from the session's status.
type IllegalTransitionError struct {
	SessionID      string
	From           Status
	Event          EventType
	CurrentVersion int64
}

func (e *IllegalTransitionError) Error() string {
	if e.From == "" {
		return fmt.Sprintf("session %s: %s is not allowed before the session exists", e.SessionID, e.Event)
	}
	return fmt.Sprintf("session %s: %s is not allowed from status %s (version %d)", e.SessionID, e.Event, e.From, e.CurrentVersion)
}

// NotFoundError is an unknown id.
type NotFoundError struct {
	Kind string
	ID   string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %s not found", e.Kind, e.ID) }

// ErrIdempotencyMismatch is an idempotency key reused with a different request.
var ErrIdempotencyMismatch = errors.New("idempotency key was already used with a different request")

// Sentinel errors for authentication.
var (
	ErrUnauthorized = errors.New("missing or invalid credentials")
	ErrForbidden    = errors.New("not allowed for this role")
)

// ErrorCode returns the code of err, EINTERNAL when it has none.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var (
		ve *ValidationError
		ce *ConflictError
		le *LeaseError
		ie *IllegalTransitionError
		ne *NotFoundError
	)
	switch {
	case errors.As(err, &ve):
		return EINVALID
	case errors.As(err, &ce), errors.As(err, &le):
		return ECONFLICT
	case errors.As(err, &ie):
		return EILLEGAL
	case errors.As(err, &ne):
		return ENOTFOUND
	case errors.Is(err, ErrIdempotencyMismatch):
		return EIDEMPOTENCY
	case errors.Is(err, ErrUnauthorized):
		return EUNAUTH
	case errors.Is(err, ErrForbidden):
		return EFORBIDDEN
	case unavailable(err):
		return EUNAVAILABLE
	}
	return EINTERNAL
}

// unavailable reports whether err means the database could not be reached
// or went away (a restart, a failover), as opposed to rejecting the request.
// Callers may retry such requests; with an idempotency key that is safe.
func unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 08: connection exception; 57P01-03: admin shutdown, crash
		// shutdown, cannot connect now.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err) {
		return true
	}
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr)
}

// CurrentVersion returns the session version carried by a conflict or
// illegal-transition error, and whether there was one.
func CurrentVersion(err error) (int64, bool) {
	var (
		ce *ConflictError
		le *LeaseError
		ie *IllegalTransitionError
	)
	switch {
	case errors.As(err, &ce):
		return ce.CurrentVersion, true
	case errors.As(err, &le):
		return le.CurrentVersion, true
	case errors.As(err, &ie):
		return ie.CurrentVersion, true
	}
	return 0, false
}
