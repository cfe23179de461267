package models

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Counter-table upkeep: the maintained counts (inbox_counts, sla_counts,
// waiting_counts, review_counts, review_reviewer_counts) are a few hundred
// rows or fewer that every
// inbox, metrics or review-queue view reads whole, and that the writing
// transactions update all the time. Each update writes a new row version;
// it stays on its page (a HOT update) only while that page has room, and a
// page gets room back only once no open snapshot can see the old versions.
// While a long transaction holds its snapshot (a bulk load, a backup, a
// long report) the new versions go to new pages, and vacuum later empties
// the old ones but cannot give back pages between live rows. Measured after
// seeding 1 M events: inbox_counts held 400 rows on 169 pages, sla_counts
// 120 rows on 51 pages, review_counts 1 row on 32 pages, and every inbox
// view read them all; a VACUUM FULL of the three took the inbox's p50 from
// 9.7 to 8.7 ms, the queue filter's from 6.7 to 5.9 and the waiting view's
// from 4.5 to 3.9 (one client, same run).
//
// So index upkeep also rewrites a counter table that has grown past
// CounterUpkeepOpts.MaxBloat times its live rows' pages. The rewrite
// (VACUUM FULL) holds an ACCESS EXCLUSIVE lock on the table while it copies
// the rows into new files and syncs them, about 40 ms for 400 rows on a
// 2-core test machine, during which the writers whose triggers update that
// table wait. It waits for the lock at
// most LockWait (lock_timeout): when writers keep the table busy that long,
// the table is reported busy and left for the next round, and waiting
// writers queue behind the request for no longer than that.

// counterTables are the tables counter upkeep looks after.
var counterTables = []string{"inbox_counts", "sla_counts", "waiting_counts", "review_counts", "review_reviewer_counts"}

// CounterUpkeepOpts tunes the counter-table part of UpkeepIndexes.
type CounterUpkeepOpts struct {
	// MaxBloat rewrites a table with more than this many times the pages
	// its live rows need (default 4).
	MaxBloat float64
	// MinPages leaves tables of at most this many pages alone (default 8):
	// a table that small costs nothing to read.
	MinPages int64
	// LockWait bounds the wait for the table's lock, in milliseconds
	// (default 200).
	LockWait int
}

func (o CounterUpkeepOpts) withDefaults() CounterUpkeepOpts {
	if o.MaxBloat <= 0 {
		o.MaxBloat = 4
	}
	if o.MinPages <= 0 {
		o.MinPages = 8
	}
	if o.LockWait <= 0 {
		o.LockWait = 200
	}
	return o
}

// TableSize is one counter table as upkeep saw it.
type TableSize struct {
	Name string `json:"name"`
	// Rows are its live rows, Pages its pages, Needs the pages those rows
	// need, After its pages after the rewrite (0 when not rewritten).
	Rows  int64 `json:"rows"`
	Pages int64 `json:"pages"`
	Needs int64 `json:"needs"`
	After int64 `json:"after,omitempty"`
	// Took is how long the rewrite ran, lock wait included: at most that
	// long, the table's writers waited.
	Took time.Duration `json:"took_ns,omitempty"`
}

// counterSizeSQL measures a counter table: its live rows, the bytes they
// take (pg_column_size of the row plus a 24-byte header and a 4-byte line
// pointer each) and its pages. It reads the table whole, which is the
// point: the tables are small unless bloated, and a few hundred pages once
// every upkeep round is what every view of the inbox reads.
const counterSizeSQL = `SELECT count(*), coalesce(sum(pg_column_size(t.*) + 28), 0)::bigint,
  pg_relation_size('%[1]s'::regclass) / current_setting('block_size')::bigint FROM %[1]s t`

// counterPagesNeeded is the pages rows of bytes in all take, at 90% fill
// (some room for HOT updates) of 8 kB pages less the page header.
func counterPagesNeeded(bytes int64) int64 {
	const usable = (8192 - 24) * 9 / 10
	return max(1, (bytes+usable-1)/usable)
}

// upkeepCounters checks every counter table on conn and rewrites the
// bloated ones, unless dry; it runs inside UpkeepIndexes' advisory lock and
// records what it saw and did in rep's Tables* fields.
func upkeepCounters(ctx context.Context, conn *pgxpool.Conn, o CounterUpkeepOpts, dry bool, rep *IndexUpkeepReport) error {
	o = o.withDefaults()
	for _, name := range counterTables {
		ts := TableSize{Name: name}
		var bytes int64
		if err := conn.QueryRow(ctx, fmt.Sprintf(counterSizeSQL, name)).Scan(&ts.Rows, &bytes, &ts.Pages); err != nil {
			return fmt.Errorf("counter upkeep: size of %s: %w", name, err)
		}
		ts.Needs = counterPagesNeeded(bytes)
		rep.Tables = append(rep.Tables, ts)
		if ts.Pages <= o.MinPages || float64(ts.Pages) <= o.MaxBloat*float64(ts.Needs) {
			continue
		}
		rep.TablesBloated = append(rep.TablesBloated, ts)
		if dry {
			continue
		}
		start := time.Now()
		ok, err := rewriteCounterTable(ctx, conn, name, o.LockWait)
		ts.Took = time.Since(start)
		if err != nil {
			return err
		}
		if !ok {
			rep.TablesBusy = append(rep.TablesBusy, name)
			continue
		}
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT pg_relation_size('%s'::regclass) / current_setting('block_size')::bigint", name)).Scan(&ts.After); err != nil {
			return fmt.Errorf("counter upkeep: size of %s: %w", name, err)
		}
		rep.TablesRewritten = append(rep.TablesRewritten, ts)
	}
	return nil
}

// rewriteCounterTable runs VACUUM FULL on name with lock_timeout set to
// lockWait milliseconds for that statement's session only. It reports false
// (and no error) when the lock was not granted in time.
func rewriteCounterTable(ctx context.Context, conn *pgxpool.Conn, name string, lockWait int) (bool, error) {
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", lockWait)); err != nil {
		return false, fmt.Errorf("counter upkeep: %w", err)
	}
	_, verr := conn.Exec(ctx, "VACUUM (FULL) "+quoteIdent(name))
	// Back to the server's setting before the connection returns to the
	// pool; a connection that cannot be reset is closed instead.
	if _, err := conn.Exec(context.WithoutCancel(ctx), "RESET lock_timeout"); err != nil {
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
		if verr == nil {
			return false, fmt.Errorf("counter upkeep: reset lock_timeout: %w", err)
		}
	}
	var pgErr *pgconn.PgError
	if errors.As(verr, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return false, nil
	}
	if verr != nil {
		return false, fmt.Errorf("counter upkeep: rewrite %s: %w", name, verr)
	}
	return true, nil
}
