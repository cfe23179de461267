-- bench-bloat.sql: on-disk sizes of the session tables, one row per
-- relation (scripts/bench-bloat.sh reads it). Columns: table, part (heap,
-- toast, index, forks, total), relation, bytes. "toast" is the TOAST table
-- with its index and forks; "forks" is the heap's free space and visibility
-- maps; "total" is pg_total_relation_size, the sum of the others.
\pset format unaligned
\pset fieldsep '\t'
\pset tuples_only on
WITH t AS (
    SELECT c.oid, c.relname, c.reltoastrelid
    FROM pg_class c
    WHERE c.relnamespace = current_schema()::regnamespace
      AND c.relname IN ('sessions', 'session_states')
)
SELECT relname, 'heap', relname, pg_relation_size(oid) FROM t
UNION ALL
SELECT relname, 'toast', reltoastrelid::regclass::text,
       CASE WHEN reltoastrelid = 0 THEN 0 ELSE pg_total_relation_size(reltoastrelid) END FROM t
UNION ALL
SELECT t.relname, 'index', i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)
FROM t JOIN pg_index i ON i.indrelid = t.oid
UNION ALL
SELECT relname, 'forks', relname,
       pg_table_size(oid) - pg_relation_size(oid)
       - CASE WHEN reltoastrelid = 0 THEN 0 ELSE pg_total_relation_size(reltoastrelid) END FROM t
UNION ALL
SELECT relname, 'indexes', relname, pg_indexes_size(oid) FROM t
UNION ALL
SELECT relname, 'total', relname, pg_total_relation_size(oid) FROM t
UNION ALL
-- The old yardstick (README before this measurement): the sum of the rows'
-- pg_column_size, which counts no index, no page or tuple header.
SELECT 'sessions', 'column_size', 'sessions', (SELECT sum(pg_column_size(s.*))::bigint FROM sessions s)
UNION ALL
SELECT 'session_states', 'column_size', 'session_states', (SELECT sum(pg_column_size(s.*))::bigint FROM session_states s)
UNION ALL
SELECT relname, 'rows', relname, n_live_tup FROM pg_stat_user_tables WHERE relid IN (SELECT oid FROM t)
UNION ALL
SELECT relname, 'dead_rows', relname, n_dead_tup FROM pg_stat_user_tables WHERE relid IN (SELECT oid FROM t)
UNION ALL
SELECT relname, 'updates', relname, n_tup_upd FROM pg_stat_user_tables WHERE relid IN (SELECT oid FROM t)
UNION ALL
SELECT relname, 'hot_updates', relname, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid IN (SELECT oid FROM t)
UNION ALL
SELECT relname, 'autovacuums', relname, autovacuum_count FROM pg_stat_user_tables WHERE relid IN (SELECT oid FROM t)
ORDER BY 1, 2, 3;
