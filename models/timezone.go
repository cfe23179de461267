package models

import (
	"context"
	"fmt"
	"strings"
	"time"

	// The container image carries no zoneinfo; the time zone a user saves
	// must resolve wherever the server runs.
	_ "time/tzdata"
)

const maxTimeZoneLen = 64

// ValidateTimeZone checks an IANA time zone name ("Europe/Berlin"); ""
// clears the setting.
func ValidateTimeZone(tz string) error {
	if tz == "" {
		return nil
	}
	v := &ValidationError{}
	if len(tz) > maxTimeZoneLen {
		v.Add("time_zone", "must be at most %d characters", maxTimeZoneLen)
		return v
	}
	if _, err := time.LoadLocation(tz); err != nil || strings.EqualFold(tz, "local") {
		v.Add("time_zone", "must be a time zone name such as Europe/Berlin or America/New_York")
		return v
	}
	return nil
}

// SetTimeZone saves the user's time zone: the console shows times in the
// browser's zone, and in this one where no script runs.
func (s *Store) SetTimeZone(ctx context.Context, userID, tz string) error {
	tz = strings.TrimSpace(tz)
	if err := ValidateTimeZone(tz); err != nil {
		return err
	}
	res := s.DB.WithContext(ctx).Model(&User{}).Where("id = ?", userID).
		Updates(map[string]any{"time_zone": tz, "updated_at": NewUTCTime(s.now())})
	if res.Error != nil {
		return fmt.Errorf("user %s: set time zone: %w", userID, res.Error)
	}
	if res.RowsAffected == 0 {
		return &NotFoundError{Kind: "user", ID: userID}
	}
	return nil
}

// Location is the user's saved time zone, UTC when none is saved.
func (u User) Location() *time.Location {
	if u.TimeZone == "" {
		return time.UTC
	}
	loc, err := time.LoadLocation(u.TimeZone)
	if err != nil {
		return time.UTC
	}
	return loc
}
