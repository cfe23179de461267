package models

import (
	"context"
	"fmt"
	"sort"
)

// The inbox's facet counts are maintained, not computed: inbox_counts holds
// the number of sessions in human hands per (status, queue, priority,
// reason code, assignee), kept by the triggers of migration 00029 in every
// transaction that writes sessions. The inbox reads those few hundred rows
// instead of grouping the backlog (inboxFacetSQL). What follows checks them
// against the sessions and rebuilds them, for verify and reproject, and for
// anything that wrote sessions with the triggers disabled (a bulk load
// under session_replication_role = replica).

// InboxCountKey is one combination of the columns inbox_counts counts by.
type InboxCountKey struct {
	Status     Status
	Queue      string
	Priority   int
	ReasonCode ReasonCode
	Assignee   string
}

// InboxCountDrift is a combination whose stored count differs from the
// sessions that have it.
type InboxCountDrift struct {
	InboxCountKey
	Stored, Actual int64
}

const inboxCountColumns = "status, queue, priority, reason_code, assignee"

// inboxCountsExact groups the sessions in human hands as inbox_counts counts
// them: a read of the backlog through sessions_inbox_idx, for verify and
// repair, never for a page (migration 00029 dropped the index that made it
// index-only, which only this read would still use).
const inboxCountsExact = `SELECT ` + inboxCountColumns + `, count(*) AS n FROM sessions WHERE ` + inboxWhere +
	` GROUP BY ` + inboxCountColumns

// VerifyInboxCounts compares inbox_counts with the sessions in human hands
// and returns every combination that differs, sorted; none when they agree.
// Both sides are read by one statement, so from one snapshot, and a
// concurrent writer cannot make them disagree.
func (s *Store) VerifyInboxCounts(ctx context.Context) ([]InboxCountDrift, error) {
	var rows []struct {
		InboxCountKey
		Stored int
		N      int64
	}
	err := s.DB.WithContext(ctx).Raw(`SELECT 0 AS stored, x.* FROM (` + inboxCountsExact + `) AS x
UNION ALL
SELECT 1, ` + inboxCountColumns + `, n FROM inbox_counts WHERE n <> 0`).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("verify inbox counts: %w", err)
	}
	got := map[InboxCountKey]*InboxCountDrift{}
	for _, r := range rows {
		d := got[r.InboxCountKey]
		if d == nil {
			d = &InboxCountDrift{InboxCountKey: r.InboxCountKey}
			got[r.InboxCountKey] = d
		}
		if r.Stored == 1 {
			d.Stored = r.N
		} else {
			d.Actual = r.N
		}
	}
	var out []InboxCountDrift
	for _, d := range got {
		if d.Stored != d.Actual {
			out = append(out, *d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return inboxCountKeyLess(out[i].InboxCountKey, out[j].InboxCountKey) })
	return out, nil
}

func inboxCountKeyLess(a, b InboxCountKey) bool {
	switch {
	case a.Status != b.Status:
		return a.Status < b.Status
	case a.Queue != b.Queue:
		return a.Queue < b.Queue
	case a.Priority != b.Priority:
		return a.Priority < b.Priority
	case a.ReasonCode != b.ReasonCode:
		return a.ReasonCode < b.ReasonCode
	}
	return a.Assignee < b.Assignee
}

// RepairInboxCounts rebuilds inbox_counts from the sessions in one write
// transaction (rebuildTables) and returns the combinations that were wrong
// (none when the triggers kept them). It also drops the rows whose count
// fell to zero.
func (s *Store) RepairInboxCounts(ctx context.Context) ([]InboxCountDrift, error) {
	drift, err := s.VerifyInboxCounts(ctx)
	if err != nil || len(drift) == 0 {
		if err == nil {
			err = s.pruneInboxCounts(ctx)
		}
		return drift, err
	}
	err = s.rebuildTables(ctx, []string{"inbox_counts"}, `INSERT INTO inbox_counts (`+inboxCountColumns+`, n) `+inboxCountsExact)
	if err != nil {
		return nil, fmt.Errorf("repair inbox counts: %w", err)
	}
	s.Logger.Warn("inbox counts rebuilt from the sessions", "combinations_wrong", len(drift))
	return drift, nil
}

// pruneInboxCounts drops the counter rows that fell to zero, so that the
// table keeps the size of the combinations in use (a counter row of an
// assignee who left stays at zero until then). A writer that brings one
// back to one waits for the delete and inserts it again.
func (s *Store) pruneInboxCounts(ctx context.Context) error {
	if err := s.DB.WithContext(ctx).Exec(`DELETE FROM inbox_counts WHERE n = 0`).Error; err != nil {
		return fmt.Errorf("prune inbox counts: %w", err)
	}
	return nil
}
