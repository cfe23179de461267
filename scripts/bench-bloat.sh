#!/usr/bin/env bash
# bench-bloat.sh measures how much the session tables (sessions and
# session_states: heap, TOAST, indexes) grow beyond their live data under
# the product's own write path, on a throwaway PostgreSQL cluster of its own
# with the server's default settings (autovacuum on), never on a shared one.
#
#   scripts/bench-bloat.sh                       10,000 sessions, 100,000 events
#   SESSIONS=100000 EVENTS=1000000 scripts/bench-bloat.sh
#
# Steps: initdb + start a cluster on a free port from 55990; `taskpilots bench
# seed`; wait until autovacuum has nothing left to do on the two tables
# (SETTLE seconds at most); measure ("settled"); run one plain VACUUM, as
# autovacuum's next pass would, and measure again ("vacuumed"); copy the
# database (CREATE DATABASE … TEMPLATE) and VACUUM FULL both tables there,
# which rewrites heap, TOAST and every index from the live rows alone with
# the same fillfactor ("compact"); then the same at fillfactor 100
# ("packed": the live rows with no reserved room); finally `taskpilots
# reindex` in the seeded database, the index upkeep a running server does
# every ten minutes ("reindexed"). Prints one
# table and one line of JSON; the bloat factor is actual ÷ compact, the
# target (README, "Storage") total under 2× compact once the server's index
# upkeep has run (the reindexed stage). The cluster is
# stopped and deleted at the end unless KEEP=1. Takes about 2–6 minutes at
# the default size, 15–20 at 1 M events on 2 shared cores.
#
# Environment:
#   SESSIONS, EVENTS  seed size (default 10000, 100000)
#   SEED_ARGS         more flags for bench seed (e.g. "--workers 64 --conns 10")
#   SETTLE            seconds to wait for autovacuum to go quiet (default 300)
#   PGBIN             PostgreSQL binaries (default: newest /usr/lib/postgresql/*/bin)
#   PG_OPTS           more server settings, e.g. "-c autovacuum=off"
#   KEEP=1            keep the cluster running and print where it is
set -euo pipefail
cd "$(dirname "$0")/.."
SESSIONS=${SESSIONS:-10000}
EVENTS=${EVENTS:-100000}
SETTLE=${SETTLE:-300}
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -V -r | head -n1)}
[ -x "$PGBIN/initdb" ] || { echo "bench-bloat: no initdb in '$PGBIN'; install postgresql or set PGBIN" >&2; exit 1; }

say() { echo "bench-bloat: $*" >&2; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

work=$(mktemp -d /tmp/taskpilots-bloat.XXXXXX)
[ "$(id -u)" = 0 ] && chown postgres: "$work"
DATA=$work/data
port=55990
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
cleanup() {
	if [ "${KEEP:-}" = 1 ]; then
		say "cluster kept: $DATA on port $port (stop: $PGBIN/pg_ctl -D $DATA stop; then rm -rf $work)"
		return
	fi
	as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

say "cluster in $DATA on port $port ($("$PGBIN/postgres" --version))"
as_pg "$PGBIN/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --locale=C >"$work/initdb.log" 2>&1 ||
	{ cat "$work/initdb.log" >&2; exit 1; }
# Default settings (autovacuum on) apart from durability, which a throwaway
# cluster does not need and which does not change sizes.
as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$work/postgres.log" -w -t 60 \
	-o "-p $port -k $work -c listen_addresses=127.0.0.1 -c max_connections=100 -c fsync=off -c synchronous_commit=off -c full_page_writes=off ${PG_OPTS:-}" \
	start >/dev/null
BASE=postgres://postgres@127.0.0.1:$port
q() { psql "$BASE/$1?sslmode=disable" -XqAt -v ON_ERROR_STOP=1 "${@:2}"; }
q postgres -c 'CREATE DATABASE seed'

go build -o "$work/taskpilots" ./cmd/taskpilots
say "seeding $SESSIONS sessions, $EVENTS events"
# shellcheck disable=SC2086
"$work/taskpilots" bench seed --database-url "$BASE/seed?sslmode=disable" \
	--sessions "$SESSIONS" --events "$EVENTS" --progress 30s --json ${SEED_ARGS:-} | tail -n1 >"$work/seed.json"

# settled: no vacuum running in seed and neither table over autovacuum's
# vacuum or insert threshold (defaults: 50 + 20% dead rows, 1000 + 20%
# inserted), two checks in a row.
quiet_sql="SELECT count(*) FROM pg_stat_user_tables t JOIN pg_class c ON c.oid = t.relid
WHERE t.relname IN ('sessions', 'session_states') AND (
  t.n_dead_tup > current_setting('autovacuum_vacuum_threshold')::int
                 + current_setting('autovacuum_vacuum_scale_factor')::float8 * greatest(c.reltuples, 0)
  OR t.n_ins_since_vacuum > current_setting('autovacuum_vacuum_insert_threshold')::int
                 + current_setting('autovacuum_vacuum_insert_scale_factor')::float8 * greatest(c.reltuples, 0))
  OR EXISTS (SELECT 1 FROM pg_stat_progress_vacuum WHERE datname = current_database())"
waited=0 quiet=0
while [ "$waited" -lt "$SETTLE" ]; do
	if [ "$(q seed -c "$quiet_sql")" = 0 ]; then
		quiet=$((quiet + 1))
		[ "$quiet" -ge 2 ] && break
	else
		quiet=0
	fi
	sleep 10
	waited=$((waited + 10))
done
say "autovacuum settled after ${waited}s (limit ${SETTLE}s; quiet checks: $quiet)"
q seed -c 'ANALYZE sessions, session_states'
q seed -f scripts/bench-bloat.sql | sed 's/^/settled\t/' >"$work/sizes.tsv"
q seed -c 'VACUUM sessions, session_states'
q seed -f scripts/bench-bloat.sql | sed 's/^/vacuumed\t/' >>"$work/sizes.tsv"

q postgres -c 'CREATE DATABASE seed_compact TEMPLATE seed STRATEGY FILE_COPY'
q seed_compact -c 'VACUUM FULL sessions' -c 'VACUUM FULL session_states' -c 'ANALYZE sessions, session_states'
q seed_compact -f scripts/bench-bloat.sql | sed 's/^/compact\t/' >>"$work/sizes.tsv"
q seed_compact -c 'ALTER TABLE sessions SET (fillfactor = 100)' -c 'ALTER TABLE session_states SET (fillfactor = 100)' \
	-c 'VACUUM FULL sessions' -c 'VACUUM FULL session_states' -c 'ANALYZE sessions, session_states'
q seed_compact -f scripts/bench-bloat.sql | sed 's/^/packed\t/' >>"$work/sizes.tsv"
# The remedy for index bloat that vacuum cannot undo (README, "Storage"):
# rebuild the indexes without blocking writes.
# What a running server does every --index-upkeep-every: rebuild the
# indexes of sessions that are over 3× what their live entries need.
"$work/taskpilots" reindex --database-url "$BASE/seed?sslmode=disable" >&2
q seed -f scripts/bench-bloat.sql | sed 's/^/reindexed\t/' >>"$work/sizes.tsv"
q seed -XAt -c "SELECT reloptions FROM pg_class WHERE relname IN ('sessions', 'session_states') ORDER BY relname" |
	paste -sd' ' >"$work/reloptions"

python3 - "$work/sizes.tsv" "$work/seed.json" "$(cat "$work/reloptions")" "$("$PGBIN/postgres" --version)" <<'PY'
import json, sys
rows, seed = {}, {}
for line in open(sys.argv[1]):
    stage, table, part, rel, b = line.rstrip("\n").split("\t")
    rows.setdefault(stage, {}).setdefault(table, {}).setdefault(part, {})[rel] = int(b or 0)
try:
    seed = json.load(open(sys.argv[2]))
except Exception:
    pass
def part(stage, table, p):
    return sum(rows[stage][table].get(p, {}).values())
def both(stage, p):
    return part(stage, "sessions", p) + part(stage, "session_states", p)
mb = lambda b: f"{b / 1e6:,.1f}"
stages = ["settled", "vacuumed", "reindexed", "compact", "packed"]
print(f"bloat: {sys.argv[4]}, {seed.get('sessions', '?'):,} sessions, {seed.get('events', '?'):,} events; reloptions {sys.argv[3]}")
print(f"{'MB':<34}" + "".join(f"{s:>10}" for s in stages))
lines = []
for table in ("sessions", "session_states"):
    for p in ("heap", "toast", "indexes", "total"):
        lines.append((f"{table} {p}", [part(s, table, p) for s in stages]))
for p in ("heap", "toast", "indexes", "total"):
    lines.append((f"both {p}", [both(s, p) for s in stages]))
for name, vals in lines:
    print(f"{name:<34}" + "".join(f"{mb(v):>10}" for v in vals))
print("indexes of sessions, MB:")
for rel in sorted(rows["settled"]["sessions"]["index"], key=lambda r: -rows["settled"]["sessions"]["index"][r]):
    print(f"  {rel:<32}" + "".join(f"{mb(rows[s]['sessions']['index'].get(rel, 0)):>10}" for s in stages))
factor = {}
for s in ("settled", "vacuumed", "reindexed"):
    for base in ("compact", "packed"):
        for p in ("heap", "indexes", "total"):
            factor[f"{s}_over_{base}_{p}"] = round(both(s, p) / both(base, p), 2)
live_cols = both("settled", "column_size")
for s in ("settled", "vacuumed", "reindexed"):
    factor[f"{s}_over_column_size_total"] = round(both(s, "total") / live_cols, 2)
print("bloat factor (sessions + session_states):")
for s in ("settled", "vacuumed", "reindexed"):
    print(f"  {s:<9} ÷ compact: heap {factor[s+'_over_compact_heap']}, indexes {factor[s+'_over_compact_indexes']}, total {factor[s+'_over_compact_total']}"
          f"; ÷ packed: total {factor[s+'_over_packed_total']}; ÷ sum of pg_column_size: {factor[s+'_over_column_size_total']}")
for t in ("sessions", "session_states"):
    upd, hot = part("settled", t, "updates"), part("settled", t, "hot_updates")
    print(f"  {t}: {upd:,} updates, {hot / upd * 100 if upd else 0:.0f}% HOT, {part('settled', t, 'autovacuums')} autovacuums before the measurement")
# A running server keeps the indexes where the "reindexed" stage has them
# (its index upkeep runs every --index-upkeep-every); the settled stage is
# the write path with nothing rebuilding them.
target = factor["reindexed_over_compact_total"] < 2
print(f"target (total under 2x compact, with the server's index upkeep): {'met' if target else 'NOT met'}; "
      f"without it: {factor['settled_over_compact_total']}x")
print(json.dumps({"seed": seed, "postgres": sys.argv[4], "reloptions": sys.argv[3], "sizes": rows,
                  "factor": factor, "column_size_bytes": live_cols, "target_met": target}))
PY
