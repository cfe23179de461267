#!/usr/bin/env bash
# bench-pages.sh measures every console page and API read at two database
# sizes in one sitting (10 k and 1 M events by default, both built with
# `taskpilots bench seed` through the real write path) and prints p50/p95/p99
# for each, with the ratio of the large database's p95 to the small one's,
# once per client count: as many clients as cores (latency) and 8 (queuing:
# 8 clients on 2 cores mostly measure each other's wait); then verify's
# events/s over each database with one worker and one per core.
# Goals (README): inbox and session page p95 < 50 ms at 1 M events, and no
# page more than 1.3× slower at 1 M than at 10 k.
#
#   scripts/bench-pages.sh
#   SMALL=1000:10000 LARGE=100000:1000000 CLIENTS="2 8" REQUESTS=200 scripts/bench-pages.sh
#
# Environment:
#   PGURL     server URL without database (default postgres://postgres@127.0.0.1:5432)
#   SMALL     sessions:events of the small database (default 1000:10000)
#   LARGE     sessions:events of the large database (default 100000:1000000)
#   CLIENTS   client counts, each measured on both databases (default: the
#             number of cores, then 8)
#   ONLY      measure only the pages whose name contains this text (or one
#             of several, comma-separated: ONLY=inbox,session,review)
#   KEEP=1    keep both databases (bench_pages_small, bench_pages_large) and
#             reuse them next time instead of seeding again
#   SMALL_DB, LARGE_DB  measure these databases instead (implies KEEP=1:
#             seeded only when empty, never dropped)
set -euo pipefail
cd "$(dirname "$0")/.."
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432}
SMALL=${SMALL:-1000:10000}
LARGE=${LARGE:-100000:1000000}
CLIENTS=${CLIENTS:-"$(nproc) 8"}
ONLY=${ONLY:-}
REQUESTS=${REQUESTS:-200}
[ -n "${SMALL_DB:-}${LARGE_DB:-}" ] && KEEP=1
SMALL_DB=${SMALL_DB:-bench_pages_small}
LARGE_DB=${LARGE_DB:-bench_pages_large}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/taskpilots" ./cmd/taskpilots

for size in small large; do
	spec=$SMALL db=$SMALL_DB
	[ "$size" = large ] && spec=$LARGE db=$LARGE_DB
	url="$PGURL/$db?sslmode=disable"
	if [ "${KEEP:-}" = 1 ] && psql "$PGURL/$db" -Atc 'SELECT 1 FROM sessions LIMIT 1' >/dev/null 2>&1; then
		echo "reusing $db" >&2
	else
		psql "$PGURL/postgres" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
		"$work/taskpilots" bench seed --database-url "$url" --sessions "${spec%%:*}" --events "${spec##*:}" >&2
		psql "$url" -qc 'VACUUM ANALYZE'
		# What serve's index upkeep does within ten minutes of such a load:
		# the seed churns sessions through the partial indexes (at 1 M
		# events the stalled-sessions index held 5,072 entries in 3,528
		# pages, and its bounded count read 536 of them).
		"$work/taskpilots" reindex --database-url "$url" >&2
	fi
done
# Both sizes and every client count in one sitting, the sizes alternated.
for c in $CLIENTS; do
	for db in "$SMALL_DB" "$LARGE_DB"; do
		size=small; [ "$db" = "$LARGE_DB" ] && size=large
		"$work/taskpilots" bench pages --database-url "$PGURL/$db?sslmode=disable" --clients "$c" \
			--requests "$REQUESTS" --only "$ONLY" --json > "$work/$size-$c.json"
	done
done
# verify over each whole database, one worker and one per core (how
# checking scales with cores), in the same sitting.
for db in "$SMALL_DB" "$LARGE_DB"; do
	for w in 1 "$(nproc)"; do
		"$work/taskpilots" verify --database-url "$PGURL/$db?sslmode=disable" --quiet --json --workers "$w" |
			tail -n 1 > "$work/verify-$db-$w.json"
	done
done
if [ "${KEEP:-}" != 1 ]; then
	psql "$PGURL/postgres" -qc "DROP DATABASE $SMALL_DB" -qc "DROP DATABASE $LARGE_DB"
fi


for c in $CLIENTS; do
python3 - "$work/small-$c.json" "$work/large-$c.json" <<'PY'
import json, sys
small, large = (json.load(open(p)) for p in sys.argv[1:3])
print(f"pages: {small['dialect']}, {small['events']:,} vs {large['events']:,} events, {small['clients']} clients")
print(f"{'page':<28}{'p50':>8}{'p95':>8}{'p99':>8}  |{'p50':>8}{'p95':>8}{'p99':>8}  {'p95 ratio':>9}")
worst = 0
for a, b in zip(small["pages"], large["pages"]):
    r = b["p95_ms"] / a["p95_ms"] if a["p95_ms"] else float("inf")
    worst = max(worst, r)
    print(f"{a['page']:<28}{a['p50_ms']:8.1f}{a['p95_ms']:8.1f}{a['p99_ms']:8.1f}  |{b['p50_ms']:8.1f}{b['p95_ms']:8.1f}{b['p99_ms']:8.1f}  {r:9.2f}")
print(json.dumps({"small": small, "large": large, "worst_p95_ratio": round(worst, 2)}))
PY
done
echo "verify: events checked per second (hash chain, replay, projection)"
printf '%-22s%10s%12s%14s\n' database events workers events/s
for db in "$SMALL_DB" "$LARGE_DB"; do
	for w in 1 "$(nproc)"; do
		python3 - "$work/verify-$db-$w.json" "$db" "$w" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rate = r["events"] / (r["elapsed_ms"] / 1000) if r["elapsed_ms"] else 0
print(f"{sys.argv[2]:<22}{r['events']:>10,}{sys.argv[3]:>12}{rate:>14,.0f}" + ("" if r["ok"] else "  PROBLEMS"))
PY
	done
done
