package models

import (
	"context"
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
