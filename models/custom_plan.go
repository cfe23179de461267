package models

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
)

// customPlan returns db with its statements planned for their arguments
// every time on PostgreSQL.
//
// Why: the store's statements are prepared once per connection, and after
// five executions PostgreSQL may switch a prepared statement to its
// generic plan, one made without the parameters' values, when the custom
// plans so far cost as much on average. For a time range the generic plan
// assumes a fixed share of the table (0.5 %, 5,000 of a million events),
// so a read of the few minutes at a metrics window's end became a parallel
// plan: starting its two workers took 50-130 ms on a 2-core machine,
// for a range with no row in it, where the custom plan takes 0.5 ms. A few
// busy spans among a connection's first five are enough to tip it, and the
// connection keeps the generic plan from then on. pgx's exec mode sends
// the statement unnamed, bound and planned with the values, in one round
// trip, at the cost of planning it each time (a millisecond or two).
func (s *Store) customPlan(db *gorm.DB) *gorm.DB {
	if s.Dialect != Postgres {
		return db
	}
	tx := db.WithContext(db.Statement.Context) // a statement of its own
	tx.Statement.ConnPool = execModePool{tx.Statement.ConnPool}
	return tx
}

// execModePool runs the queries of a pool (or transaction) in pgx's exec
// mode: the mode travels as the first argument, which pgx takes as an
// option.
type execModePool struct{ gorm.ConnPool }

func (p execModePool) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return p.ConnPool.QueryContext(ctx, q, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (p execModePool) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return p.ConnPool.QueryRowContext(ctx, q, append([]any{pgx.QueryExecModeExec}, args...)...)
}
