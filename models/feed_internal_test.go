package models

import "strings"

// FeedPendingPostgres is the sequencer's scan for events to number, as a
// query of their ids, for the plan test (bound is a literal).
func FeedPendingPostgres(bound string) string {
	return `SELECT e.id ` + strings.ReplaceAll(feedPendingPostgres, "$2", bound)
}
