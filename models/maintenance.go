package models

import (
	"context"
	"errors"
	"fmt"
)

// MaintenanceReport counts what one maintenance pass did.
type MaintenanceReport struct {
	Rescued int
	// Joined counts joins recorded (timed out, or caught up after a missed
	// child-done hook); Resumed, snoozes ended; SLABreaches, breaches recorded.
	Joined      int
	Resumed     int
	SLABreaches int
	// ReviewItems counts decided escalations added to the review queue
	// that the write path had not added (decisions of an older binary).
	ReviewItems int
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
	var errs []error
	r.Joined, err = s.MaintainJoins(ctx, 200)
	errs = append(errs, err)
	r.Resumed, err = s.ResumeSnoozed(ctx, 200)
	errs = append(errs, err)
	r.SLABreaches, err = s.RecordSLABreaches(ctx, 200)
	errs = append(errs, err)
	// The write path queues every decision for review; this catches up
	// decisions an older binary wrote without (it filled the queue on page
	// load). Cheap: it reads from its watermark.
	r.ReviewItems, err = s.SyncReviewItems(ctx, s.Reviews)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return r, fmt.Errorf("maintain: %w", err)
	}
	return r, nil
}
