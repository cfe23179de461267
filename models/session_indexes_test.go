package models_test

import (
	"context"
	"slices"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// sessionIndexReaders names, for every index of sessions, a query that
// reads it. Every session write (never a HOT update on PostgreSQL: it moves
// updated_at) inserts an entry into each index whose predicate the row
// meets, so an index no query reads is pure cost on the write path.
var sessionIndexReaders = map[string]string{
	"sessions_pkey":                     "every lookup by id",
	"sessions_search_idx":               "ListSessions q= (PostgreSQL; FTS5 on SQLite)",
	"sessions_updated_idx":              "ListSessions, newest first and updated_after",
	"sessions_status_updated_idx":       "ListSessions status=, CountByStatus",
	"sessions_queue_updated_idx":        "ListSessions queue=",
	"sessions_ticket_updated_idx":       "ListSessions ticket_ref=, the audit log by ticket",
	"sessions_parent_updated_idx":       "ListSessions parent_id=, Children, joins",
	"sessions_stalled_idx":              "stalled sessions and the queue gauges",
	"sessions_waiting_step_updated_idx": "ListSessions stalled=, the inbox's Stalled view",
	"sessions_inbox_idx":                "the inbox",
	"sessions_inbox_status_idx":         "the inbox by status",
	"sessions_inbox_assignee_idx":       "the inbox by assignee",
	"sessions_inbox_queue_idx":          "the inbox by queue",
	"sessions_inbox_reason_idx":         "the inbox by reason code",
	"sessions_waiting_input_idx":        "the waiting-on-input view",
	"sessions_resume_at_idx":            "ResumeSnoozed",
	"sessions_join_due_at_idx":          "MaintainJoins (timed out joins)",
	"sessions_waiting_children_idx":     "MaintainJoins (finished joins)",
	"sessions_sla_pending_idx":          "the maintenance probe and RecordSLABreaches (escalations not judged yet)",
	"sessions_child_updated_idx":        "the maintenance probe and the join catch-up (children written since)",
}

// TestSessionIndexesAreRead: sessions has exactly the indexes some query
// reads (sessionIndexReaders). The plan tests (search_test.go,
// routes_test.go, inbox_test.go) check that the queries do use them; this
// one catches an index that stays behind when its query goes, as
// (status, priority, created_at) and (created_at) did until migration 18.
func TestSessionIndexesAreRead(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	var got []string
	if err := s.DB.WithContext(context.Background()).Raw(`SELECT indexname FROM pg_indexes
WHERE schemaname = current_schema() AND tablename = 'sessions' ORDER BY indexname`).Scan(&got).Error; err != nil {
		t.Fatal(err)
	}
	var want []string
	for name := range sessionIndexReaders {
		want = append(want, name)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("indexes of sessions:\n got %v\nwant %v", got, want)
	}
}
