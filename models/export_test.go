package models

import (
	"context"
	"time"
)

// LaterChecked lets the external tests queue a statement judged in Go.
func (t *Tx) LaterChecked(check func(rows int64, err error) error, query string, args ...any) {
	t.laterChecked(check, query, args...)
}

// SetInboxFacetRows sets the inbox sessions the facet counts read in one
// pass before they fall back to one bounded count per option.
func (s *Store) SetInboxFacetRows(n int) { s.inboxFacetRows = n }

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

// ReadInRecovery asks the read handle of ctx's reader whether it is a
// standby: which server a routed read reached.
func (s *Store) ReadInRecovery(ctx context.Context) (bool, error) {
	var b bool
	err := s.read(ctx).Raw(`SELECT pg_is_in_recovery()`).Scan(&b).Error
	return b, err
}

// ClaimStatements are the claim statements with their arguments for queue
// at now (single and a batch of 10), for the plan tests.
func (s *Store) ClaimStatements(queue string, now UTCTime) map[string][2]any {
	return map[string][2]any{
		"single": {s.claimSQL(), s.claimArgs(queue, "lt_x", "w", now)},
		"batch":  {claimBatchSQL, pgClaimArgs(true, queue, "{a,b,c,d,e,f,g,h,i,j}", "w", now, 10)},
	}
}

// MetricFoldQueries are the fold's reads of the event log, by name.
var MetricFoldQueries = map[string]string{"sessions": foldSessionsSQL, "events": foldEventsSQL}

// SetFoldChunkSize sets how many sessions one statement of the metrics
// fold reads (0: the default).
func (s *Store) SetFoldChunkSize(n int) { s.foldChunkOverride = n }

// ApplyOwned is the replay loop's Apply, which may change its input.
var ApplyOwned = applyOwned

// QueuedWrites is how many writes wait for the next group (group commit).
func (s *Store) QueuedWrites() int {
	s.groups.mu.Lock()
	defer s.groups.mu.Unlock()
	return len(s.groups.queue)
}

// ReviewRollupQueries are the SQL statements a review statistics request
// runs, by name, with the number of their parameters.
var ReviewRollupQueries = map[string]string{
	"probe": reviewScoresInSQL, "score days": reviewScoreDaysSQL, "pair days": reviewPairDaysSQL,
	"item days": reviewItemDaysSQL, "edge items": reviewEdgeItemsSQL,
}

// VerifySessionsSQL is verify's statement listing a batch of sessions with
// their states ($1 the keyset bound, $2 the ids or NULL).
var VerifySessionsSQL = verifySessionsSQL

// SearchDocumentSQL is the word search's document expression on PostgreSQL
// (what migration 00033's trigger stores in sessions.search_doc).
const SearchDocumentSQL = searchDocumentSQL

// metrics (batched windows): the reads of several windows of one request,
// each a UNION ALL of the one-window statement, by name, for n windows.
func MetricRollupUnions(n int) map[string]string {
	ws := make([]int, n)
	for i := range ws {
		ws[i] = i
	}
	return map[string]string{
		"sums": unionByWindow(rollupSumsSQL, ws), "sessions": unionByWindow(rollupSessionsSQL, ws),
		"edge sessions": unionByWindow(rollupEdgeSessionsSQL, ws), "rejections": unionByWindow(rejectionsSQL, ws),
		"span sessions": unionByWindow(spanSessionsSQL, ws),
	}
}

// IndexUpkeepLockKey is the advisory lock UpkeepIndexes takes for schema.
func IndexUpkeepLockKey(schema string) int64 { return indexUpkeepLockKey(schema) }

// MetricsFoldedSpans are the spans of [from, to) that a metrics request
// folds from the event log, given the rollups in the database now.
func (s *Store) MetricsFoldedSpans(ctx context.Context, from, to time.Time) ([][2]time.Time, error) {
	st, ok, err := readRollupState(s.read(ctx))
	if err != nil {
		return nil, err
	}
	var out [][2]time.Time
	for _, sp := range planWindow(NewUTCTime(from), NewUTCTime(to), st, ok).spans {
		out = append(out, [2]time.Time{sp[0].Time, sp[1].Time})
	}
	return out, nil
}

// SetRollupHook makes RunMaintenance's metric rollups call hook after each
// pass.
func (s *Store) SetRollupHook(hook func(MetricRollupPass, error)) { s.rollupHook = hook }

// MetricRollupLockSQL takes the advisory lock of the current schema's metric
// rollup passes (for the rest of the transaction).
const MetricRollupLockSQL = metricRollupLockSQL

// SetMetricsPlanHook runs hook in every metrics request after it has read
// the rollup state and planned its windows, before its other reads.
func (s *Store) SetMetricsPlanHook(hook func()) { s.metricsPlanHook = hook }

// DecodeTargets make a new value (a pointer) of each type decodeJSON
// decodes stored JSON into: every payload type Apply reads, State and any.
var DecodeTargets = []func() any{
	func() any { return new(SessionCreatedPayload) }, func() any { return new(PausePayload) },
	func() any { return new(EscalatePayload) }, func() any { return new(ReasonPayload) },
	func() any { return new(DelegationPayload) }, func() any { return new(LeasePayload) },
	func() any { return new(ExpiredPayload) }, func() any { return new(ResultPayload) },
	func() any { return new(InputPayload) }, func() any { return new(HumanPayload) },
	func() any { return new(HumanDelegationPayload) }, func() any { return new(ChildrenPayload) },
	func() any { return new(JoinPayload) }, func() any { return new(RiskResolvedPayload) },
	func() any { return new(State) }, func() any { return new(any) },
}

// DecodeBoth decodes b into two new values of newV with decodeJSON's fast
// decoder and with its definition (encoding/json alone), and returns both,
// whether the fast one succeeded and encoding/json's error.
func DecodeBoth(b []byte, newV func() any) (fast, std any, fastOK bool, stdErr error) {
	fast, std = newV(), newV()
	return fast, std, decodeFast(b, fast), decodeStd(b, std)
}
