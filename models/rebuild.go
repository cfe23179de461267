package models

import (
	"context"
	"fmt"
	"strings"
)

// rebuildTables replaces every row of tables with what inserts write, in
// one write transaction: the repair of a table that triggers keep beside
// the sessions or review items (inbox_counts, review_counts, sla_counts,
// waiting_counts, inbox_rows), for anything that wrote those with the triggers off.
//
// On PostgreSQL the tables are first taken in EXCLUSIVE mode: the triggers'
// writes wait behind the lock, and the lock waits for every transaction
// that already changed a row, so the inserts (statements that start after
// it) see every change that committed and none is in flight. Writes that
// leave the tables alone are not held up.
func (s *Store) rebuildTables(ctx context.Context, tables []string, inserts ...string) error {
	return s.Write(ctx, func(tx *Tx) error {
		if s.Dialect == Postgres {
			tx.Later(failWith("lock %s", strings.Join(tables, ", ")), `LOCK TABLE `+strings.Join(tables, ", ")+` IN EXCLUSIVE MODE`)
		}
		for _, t := range tables {
			tx.Later(failWith("clear %s", t), `DELETE FROM `+t)
		}
		for _, q := range inserts[:len(inserts)-1] {
			tx.Later(failWith("rebuild %s", strings.Join(tables, ", ")), q)
		}
		_, err := tx.Exec(inserts[len(inserts)-1])
		return err
	})
}

// derivedTable is a table that PostgreSQL triggers keep from the sessions
// (SQLite has none of them): what it holds, for messages; the statement
// that counts its rows that differ from the sessions (from one snapshot);
// and the insert that rebuilds it.
type derivedTable struct {
	name, what string
	driftSQL   string
	rebuildSQL string
}

// drift counts the rows of t that differ from the sessions, for verify and
// repair (0 on SQLite).
func (s *Store) drift(ctx context.Context, t derivedTable) (int64, error) {
	if s.Dialect != Postgres {
		return 0, nil
	}
	var n int64
	if err := s.DB.WithContext(ctx).Raw(t.driftSQL).Scan(&n).Error; err != nil {
		return 0, fmt.Errorf("check %s: %w", t.what, err)
	}
	return n, nil
}

// repair checks t against the sessions and, when they differ (something
// wrote sessions with the triggers disabled), rebuilds it (rebuildTables).
// It returns how many rows were wrong.
func (s *Store) repair(ctx context.Context, t derivedTable) (int64, error) {
	n, err := s.drift(ctx, t)
	if err != nil || n == 0 {
		return 0, err
	}
	if err := s.rebuildTables(ctx, []string{t.name}, t.rebuildSQL); err != nil {
		return 0, fmt.Errorf("repair %s: %w", t.what, err)
	}
	s.Logger.Warn(t.what+" rebuilt from the sessions", "rows_wrong", n)
	return n, nil
}
