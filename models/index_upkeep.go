package models

import (
	"context"
	"fmt"
	"time"
)

// Index upkeep: every session write moves updated_at, which four B-tree
// indexes of sessions are keyed on, so each write adds an entry to each of
// them at their right edge and leaves the old one behind. Vacuum removes the
// dead entries, but PostgreSQL frees a B-tree page only once it is entirely
// empty and never merges half-empty ones, so those indexes settle at about
// one live entry per ten writes: measured at 1 M events with autovacuum on,
// 483 MB of indexes on sessions against 48 MB rebuilt (README, "Storage").
// No fillfactor or vacuum setting changes that; a rebuild does. So, as
// GitLab's database reindexing does for its bloated B-trees, the server
// rebuilds an index of sessions with REINDEX INDEX CONCURRENTLY (writes go
// on meanwhile) when its size is well over what its live entries need.
//
// What they need is estimated from the planner's own statistics, which
// (auto)analyze keeps: the index's reltuples entries of the average width of
// its columns (pg_stats), each with an 8-byte tuple header and a 4-byte line
// pointer, at the 90% leaf fill of a B-tree build. That errs on the small
// side for multi-column keys (alignment padding), which is why the threshold
// is a factor (IndexUpkeepOpts.MaxBloat) and not a tolerance.

// IndexUpkeepOpts tunes UpkeepIndexes; zero values take the defaults.
type IndexUpkeepOpts struct {
	// MaxBloat rebuilds an index whose size exceeds this many times its
	// estimated live size (default 3).
	MaxBloat float64
	// MinBytes leaves indexes smaller than this alone (default 8 MiB):
	// a small index costs nothing to scan, bloated or not.
	MinBytes int64
	// DryRun reports what would be dropped and rebuilt, and changes nothing.
	DryRun bool
	// Analyze refreshes the statistics of sessions first (ANALYZE), for a
	// database that autovacuum has not analyzed since it was loaded; an
	// index of a table never analyzed is not judged.
	Analyze bool
	// Counters tunes the rewrite of bloated counter tables (see
	// counter_upkeep.go), which the same call does after the indexes.
	Counters CounterUpkeepOpts
}

// DefaultIndexUpkeepEvery is how often serve looks: the check is one catalog
// query, and at full write speed an updated_at index can triple in well
// under an hour.
const DefaultIndexUpkeepEvery = 10 * time.Minute

func (o IndexUpkeepOpts) withDefaults() IndexUpkeepOpts {
	if o.MaxBloat <= 0 {
		o.MaxBloat = 3
	}
	if o.MinBytes <= 0 {
		o.MinBytes = 8 << 20
	}
	return o
}

// IndexSize is one index of sessions as UpkeepIndexes saw it.
type IndexSize struct {
	Name string `json:"name"`
	// Bytes is the index's size; Estimate what its live entries need.
	Bytes    int64 `json:"bytes"`
	Estimate int64 `json:"estimate"`
	// After is its size after the rebuild (0 when not rebuilt).
	After int64 `json:"after,omitempty"`
}

// IndexUpkeepReport is what one UpkeepIndexes call did.
type IndexUpkeepReport struct {
	// Checked lists every B-tree index of sessions with its size and
	// estimate; Rebuilt the ones rebuilt (with After set).
	Checked []IndexSize `json:"checked"`
	Rebuilt []IndexSize `json:"rebuilt"`
	// Bloated lists the indexes over the threshold (rebuilt unless DryRun).
	Bloated []IndexSize `json:"bloated"`
	// Leftovers names the invalid leftovers of an interrupted rebuild, and
	// Dropped those that were dropped (all of them unless DryRun).
	Leftovers []string `json:"leftovers,omitempty"`
	Dropped   []string `json:"dropped,omitempty"`
	// Tables lists every counter table with its pages and the pages its
	// rows need; TablesBloated those over the threshold, TablesRewritten
	// those rewritten (with After set), and TablesBusy those whose lock was
	// not granted in time, left for the next round.
	Tables          []TableSize `json:"tables"`
	TablesBloated   []TableSize `json:"tables_bloated"`
	TablesRewritten []TableSize `json:"tables_rewritten"`
	TablesBusy      []string    `json:"tables_busy,omitempty"`
	// Skipped is true when another replica held the upkeep lock.
	Skipped bool `json:"skipped,omitempty"`
}

// indexSizesSQL lists the valid B-tree indexes of sessions in the current
// schema with their size, entry count and the summed average width of their
// key columns; an index on an expression has no per-column statistics and
// a NULL width, and is left out.
const indexSizesSQL = `SELECT c.relname AS name, pg_relation_size(c.oid) AS bytes, c.reltuples::bigint AS entries,
  (SELECT sum(st.avg_width) FROM pg_attribute a
     JOIN pg_attribute ta ON ta.attrelid = i.indrelid AND ta.attnum = i.indkey[a.attnum - 1]
     JOIN pg_stats st ON st.schemaname = n.nspname AND st.tablename = 'sessions' AND st.attname = ta.attname
    WHERE a.attrelid = c.oid AND a.attnum > 0 AND a.attnum <= i.indnatts
   HAVING count(*) = i.indnatts)::bigint AS width
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_am am ON am.oid = c.relam AND am.amname = 'btree'
WHERE i.indrelid = to_regclass('sessions') AND i.indisvalid AND 0 <> ALL (i.indkey::int2[])
ORDER BY c.relname`

// leftoverIndexesSQL finds the invalid copies an interrupted REINDEX
// CONCURRENTLY leaves behind (named <index>_ccnew, <index>_ccnew1, …).
const leftoverIndexesSQL = `SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = to_regclass('sessions') AND NOT i.indisvalid AND c.relname ~ '_ccnew[0-9]*$'`

// estimateIndexBytes is the size a freshly built B-tree of entries keys of
// width bytes needs: (MAXALIGN(8 + width) + 4) bytes an entry at 90% fill
// of 8 kB pages, plus the metapage.
func estimateIndexBytes(entries, width int64) int64 {
	per := (8+width+7)/8*8 + 4
	const usable = 8192 - 24 - 16 // page header and B-tree special space
	perPage := max(1, usable*9/10/per)
	return (entries/perPage + 2) * 8192
}

// UpkeepIndexes rebuilds the B-tree indexes of sessions that have grown
// past opts.MaxBloat times their estimated live size, with REINDEX INDEX
// CONCURRENTLY (reads and writes go on), after dropping the invalid
// leftovers of an earlier interrupted rebuild; then it rewrites the counter
// tables that have bloated (upkeepCounters). It runs under an advisory
// lock, so replicas never rebuild at the same time. PostgreSQL only: on
// SQLite it does nothing (its B-trees reuse freed pages; VACUUM rebuilds).
func (s *Store) UpkeepIndexes(ctx context.Context, opts IndexUpkeepOpts) (IndexUpkeepReport, error) {
	var rep IndexUpkeepReport
	if s.Dialect != Postgres || s.pool == nil {
		return rep, nil
	}
	opts = opts.withDefaults()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return rep, fmt.Errorf("index upkeep: %w", err)
	}
	defer conn.Release()
	// Advisory locks are per database; the key names the schema too, so
	// that deployments (and tests) in other schemas of the same database,
	// whose tables are others, do not skip their upkeep for this one.
	var schema string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return rep, fmt.Errorf("index upkeep: schema: %w", err)
	}
	key := indexUpkeepLockKey(schema)
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&got); err != nil {
		return rep, fmt.Errorf("index upkeep: lock: %w", err)
	}
	if !got {
		rep.Skipped = true
		return rep, nil
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx)) // never back to the pool with the lock held
		}
	}()

	rows, err := conn.Query(ctx, leftoverIndexesSQL)
	if err != nil {
		return rep, fmt.Errorf("index upkeep: leftovers: %w", err)
	}
	var leftovers []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return rep, fmt.Errorf("index upkeep: leftovers: %w", err)
		}
		leftovers = append(leftovers, name)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("index upkeep: leftovers: %w", err)
	}
	rep.Leftovers = leftovers
	for _, name := range leftovers {
		if opts.DryRun {
			break
		}
		if _, err := conn.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+quoteIdent(name)); err != nil {
			return rep, fmt.Errorf("index upkeep: drop %s: %w", name, err)
		}
		rep.Dropped = append(rep.Dropped, name)
	}

	if opts.Analyze {
		if _, err := conn.Exec(ctx, "ANALYZE sessions"); err != nil {
			return rep, fmt.Errorf("index upkeep: analyze: %w", err)
		}
	}
	rows, err = conn.Query(ctx, indexSizesSQL)
	if err != nil {
		return rep, fmt.Errorf("index upkeep: sizes: %w", err)
	}
	for rows.Next() {
		var (
			is      IndexSize
			entries int64
			width   *int64
		)
		if err := rows.Scan(&is.Name, &is.Bytes, &entries, &width); err != nil {
			rows.Close()
			return rep, fmt.Errorf("index upkeep: sizes: %w", err)
		}
		if width == nil || entries < 0 {
			continue // not analyzed yet: nothing to judge by
		}
		is.Estimate = estimateIndexBytes(entries, *width)
		rep.Checked = append(rep.Checked, is)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("index upkeep: sizes: %w", err)
	}
	for _, is := range rep.Checked {
		if is.Bytes < opts.MinBytes || float64(is.Bytes) <= opts.MaxBloat*float64(is.Estimate) {
			continue
		}
		rep.Bloated = append(rep.Bloated, is)
		if opts.DryRun {
			continue
		}
		if _, err := conn.Exec(ctx, "REINDEX INDEX CONCURRENTLY "+quoteIdent(is.Name)); err != nil {
			return rep, fmt.Errorf("index upkeep: reindex %s: %w", is.Name, err)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_relation_size(to_regclass($1))", quoteIdent(is.Name)).Scan(&is.After); err != nil {
			return rep, fmt.Errorf("index upkeep: size of %s: %w", is.Name, err)
		}
		rep.Rebuilt = append(rep.Rebuilt, is)
	}
	err = upkeepCounters(ctx, conn, opts.Counters, opts.DryRun, &rep)
	return rep, err
}

// indexUpkeepLockKey is the advisory lock of the upkeep of one schema.
func indexUpkeepLockKey(schema string) int64 {
	return lockKey("taskpilots index upkeep " + schema)
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(name string) string {
	out := make([]byte, 0, len(name)+2)
	out = append(out, '"')
	for i := 0; i < len(name); i++ {
		if name[i] == '"' {
			out = append(out, '"')
		}
		out = append(out, name[i])
	}
	return string(append(out, '"'))
}
