package models

import (
	"context"
)

// The inbox's word search reads inbox_rows on PostgreSQL (migration 00034):
// a copy of the inbox columns and the search document of every session in
// human hands, kept by triggers in every transaction that writes sessions,
// so that the matches of a search sit on a few hundred dense pages rather
// than one heap page of sessions each. What follows checks the copy
// against the sessions and rebuilds it, for verify and migrate up, and for
// anything that wrote sessions with the triggers disabled.

// inboxRowColumns are the columns inbox_rows copies from sessions.
const inboxRowColumns = inboxColumns + ", search_doc"

// inboxRowsDriftSQL counts the rows on either side that the other lacks or
// holds differently: sessions in human hands not copied as they are, and
// copies of no such session.
const inboxRowsDriftSQL = `SELECT count(*) FROM (
(SELECT ` + inboxRowColumns + ` FROM sessions WHERE ` + inboxWhere + ` EXCEPT ALL SELECT ` + inboxRowColumns + ` FROM inbox_rows)
UNION ALL
(SELECT ` + inboxRowColumns + ` FROM inbox_rows EXCEPT ALL SELECT ` + inboxRowColumns + ` FROM sessions WHERE ` + inboxWhere + `)) AS d`

// inboxRowsTable is inbox_rows as a derivedTable: the copy of the sessions
// in human hands.
var inboxRowsTable = derivedTable{name: "inbox_rows", what: "inbox search rows", driftSQL: inboxRowsDriftSQL,
	rebuildSQL: `INSERT INTO inbox_rows (` + inboxRowColumns + `) SELECT ` + inboxRowColumns + ` FROM sessions WHERE ` + inboxWhere}

// RepairInboxRows checks inbox_rows against the sessions in human hands and,
// when they differ, rebuilds it. It returns how many rows were wrong.
func (s *Store) RepairInboxRows(ctx context.Context) (int64, error) {
	return s.repair(ctx, inboxRowsTable)
}
