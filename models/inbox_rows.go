package models

import (
	"context"
	"fmt"
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

// inboxRowsDrift counts the rows of inbox_rows that differ from the
// sessions in human hands (PostgreSQL; 0 on SQLite, which has no copy).
// One statement reads both sides, so from one snapshot.
func (s *Store) inboxRowsDrift(ctx context.Context) (int64, error) {
	if s.Dialect != Postgres {
		return 0, nil
	}
	var drift int64
	if err := s.DB.WithContext(ctx).Raw(inboxRowsDriftSQL).Scan(&drift).Error; err != nil {
		return 0, fmt.Errorf("check inbox rows: %w", err)
	}
	return drift, nil
}

// RepairInboxRows checks inbox_rows against the sessions in human hands and,
// when they differ, rebuilds it (rebuildTables). It returns how many rows
// were wrong.
func (s *Store) RepairInboxRows(ctx context.Context) (int64, error) {
	drift, err := s.inboxRowsDrift(ctx)
	if err != nil || drift == 0 {
		return 0, err
	}
	err = s.rebuildTables(ctx, []string{"inbox_rows"},
		`INSERT INTO inbox_rows (`+inboxRowColumns+`) SELECT `+inboxRowColumns+` FROM sessions WHERE `+inboxWhere)
	if err != nil {
		return 0, fmt.Errorf("repair inbox rows: %w", err)
	}
	s.Logger.Warn("inbox search rows rebuilt from the sessions", "rows_wrong", drift)
	return drift, nil
}
