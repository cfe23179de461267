// Package web assembles the server: configuration, Echo, middleware, routes
// and background loops.
package web

import (
	"context"
	"errors"
	"net/http"

	"github.com/taskpilots/handoff/models"
)

// Config configures the server. (Stub: being filled in.)
type Config struct {
	Addr string
}

// NewServer returns the HTTP handler of the whole product.
func NewServer(s *models.Store, cfg Config) (http.Handler, error) {
	return nil, errors.New("web: not implemented yet")
}

// Serve runs the server until ctx is done.
func Serve(ctx context.Context, s *models.Store, cfg Config) error {
	return errors.New("web: not implemented yet")
}
