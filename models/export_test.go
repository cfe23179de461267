package models

import "context"

// LaterChecked lets the external tests queue a statement judged in Go.
func (t *Tx) LaterChecked(check func(rows int64, err error) error, query string, args ...any) {
	t.laterChecked(check, query, args...)
}

// SetBulkHook runs hook before each session of a bulk is written.
func (s *Store) SetBulkHook(hook func(sessionID string)) { s.bulkHook = hook }

// ProductMetricsFromEvents computes the product metrics by folding the event
// log only, without the rollups (the reference the rollups must match).
func (s *Store) ProductMetricsFromEvents(ctx context.Context, o MetricsOpts) (ProductMetrics, error) {
	return s.productMetrics(ctx, o, false)
}

// MetricRollupQueries are the SQL statements a metrics request runs on the
// rollups, by name.
var MetricRollupQueries = map[string]string{
	"sums": rollupSumsSQL, "sessions": rollupSessionsSQL, "edge sessions": rollupEdgeSessionsSQL,
	"previous hours": prevHoursSQL,
}

// MetricFoldQueries are the fold's reads of the event log, by name.
var MetricFoldQueries = map[string]string{"sessions": foldSessionsSQL, "events": foldEventsSQL}

// SetFoldChunkSize sets how many sessions one statement of the metrics
// fold reads (0: the default).
func (s *Store) SetFoldChunkSize(n int) { s.foldChunkOverride = n }
