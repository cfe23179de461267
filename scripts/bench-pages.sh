#!/usr/bin/env bash
# bench-pages.sh measures every console page and API read at two database
# sizes in one sitting (10 k and 1 M events by default, both built with
# `taskpilots bench seed` through the real write path) and prints p50/p95/p99
# for each, with the ratio of the large database's p95 to the small one's.
# Goals (README): inbox and session page p95 < 50 ms at 1 M events, and no
# page more than 1.3× slower at 1 M than at 10 k.
#
#   scripts/bench-pages.sh
#   SMALL=1000:10000 LARGE=100000:1000000 CLIENTS=8 REQUESTS=200 scripts/bench-pages.sh
#
# Environment:
#   PGURL     server URL without database (default postgres://postgres@127.0.0.1:5432)
#   SMALL     sessions:events of the small database (default 1000:10000)
#   LARGE     sessions:events of the large database (default 100000:1000000)
#   KEEP=1    keep both databases (bench_pages_small, bench_pages_large) and
#             reuse them next time instead of seeding again
set -euo pipefail
cd "$(dirname "$0")/.."
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432}
SMALL=${SMALL:-1000:10000}
LARGE=${LARGE:-100000:1000000}
CLIENTS=${CLIENTS:-8}
REQUESTS=${REQUESTS:-200}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/taskpilots" ./cmd/taskpilots

for size in small large; do
	spec=$SMALL; [ "$size" = large ] && spec=$LARGE
	db=bench_pages_$size
	url="$PGURL/$db?sslmode=disable"
	if [ "${KEEP:-}" = 1 ] && psql "$PGURL/$db" -Atc 'SELECT 1 FROM sessions LIMIT 1' >/dev/null 2>&1; then
		echo "reusing $db" >&2
	else
		psql "$PGURL/postgres" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
		"$work/taskpilots" bench seed --database-url "$url" --sessions "${spec%%:*}" --events "${spec##*:}" >&2
		psql "$url" -qc 'VACUUM ANALYZE'
	fi
	"$work/taskpilots" bench pages --database-url "$url" --clients "$CLIENTS" --requests "$REQUESTS" --json > "$work/$size.json"
	[ "${KEEP:-}" = 1 ] || psql "$PGURL/postgres" -qc "DROP DATABASE $db"
done

python3 - "$work/small.json" "$work/large.json" <<'PY'
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
