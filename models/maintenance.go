package models

import (
	"context"
	"fmt"
)

// MaintenanceReport counts what one maintenance pass did.
type MaintenanceReport struct {
	Rescued int
}

// Maintain runs one pass of the periodic background work: rescuing expired
// leases (and, as they are added, timers). Every part is safe to run from
// several server processes at once.
func (s *Store) Maintain(ctx context.Context) (MaintenanceReport, error) {
	var r MaintenanceReport
	n, err := s.RescueExpired(ctx, 200)
	r.Rescued = n
	if err != nil {
		return r, fmt.Errorf("maintain: %w", err)
	}
	return r, nil
}
