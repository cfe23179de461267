// Package demo seeds a realistic customer-support data set through the real
// write path. (Stub: being filled in.)
package demo

import (
	"context"

	"github.com/taskpilots/handoff/models"
)

// Seed creates the demo sessions when the database has none and returns how
// many it created.
func Seed(ctx context.Context, s *models.Store) (int, error) {
	return 0, nil
}
