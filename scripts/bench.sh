#!/usr/bin/env bash
# bench.sh compares TaskPilots lifecycles per second with what PostgreSQL
# itself does for the same writes (pgbench running scripts/pgbench-lifecycle.sql),
# with the same client count, the same duration, on the same server.
#
#   scripts/bench.sh                       # 8 clients, 20 s each run
#   CLIENTS=16 DURATION=30 scripts/bench.sh
#
# Environment:
#   PGURL      server URL without database (default postgres://postgres@127.0.0.1:5432)
#   BENCH_DB   scratch database, dropped and recreated (default bench_scratch)
#   CLIENTS    concurrent clients/workers (default 8)
#   DURATION   seconds per run (default 20)
#   ROUNDS     interleaved rounds of the three runs; medians are reported (default 1)
#   CPUPROFILE if set, a directory for CPU profiles of both taskpilots runs
#
# Targets: HTTP ≥ 50 % of pgbench's lifecycles/s, in-process ≥ 80 %.
# pgbench counts one run of the four-commit script as one "transaction", so
# its tps is lifecycles/s (commits/s = 4 × tps); the ratios below are
# ours ÷ pgbench tps, i.e. ours ÷ (pgbench commits/s ÷ 4). The last line of
# the output is one JSON object with the numbers.
set -euo pipefail

cd "$(dirname "$0")/.."
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432}
BENCH_DB=${BENCH_DB:-bench_scratch}
CLIENTS=${CLIENTS:-8}
DURATION=${DURATION:-20}
ROUNDS=${ROUNDS:-1}
DBURL="$PGURL/$BENCH_DB?sslmode=disable"
THREADS=$(( CLIENTS < $(nproc) ? CLIENTS : $(nproc) ))

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== building taskpilots" >&2
go build -o "$work/taskpilots" ./cmd/taskpilots

fresh_db() {
	psql "$PGURL/postgres?sslmode=disable" -qX -v ON_ERROR_STOP=1 \
		-c "DROP DATABASE IF EXISTS $BENCH_DB" -c "CREATE DATABASE $BENCH_DB" >/dev/null
	"$work/taskpilots" migrate up --database-url "$DBURL" >/dev/null
}

# last_json prints the value of key $2 in the JSON object on the last line of file $1.
last_json() {
	tail -n 1 "$1" | sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p"
}

run_pgbench() {
	echo "== pgbench: $CLIENTS clients, ${DURATION}s, scripts/pgbench-lifecycle.sql" >&2
	fresh_db
	psql "$DBURL" -qX -c "VACUUM ANALYZE" >/dev/null
	pgbench -n -M prepared -c "$CLIENTS" -j "$THREADS" -T "$DURATION" -f scripts/pgbench-lifecycle.sql "$DBURL" >"$work/pgbench.out" 2>"$work/pgbench.err" || {
		cat "$work/pgbench.err" >&2
		exit 1
	}
	grep -E "transactions actually processed|failed|latency average|^tps" "$work/pgbench.out" >&2 || true
	local tps
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$work/pgbench.out")
	[ -n "$tps" ] || tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.out" | tail -n 1)
	echo "$tps"
}

run_ours() { # mode round
	local mode=$1 prof=()
	if [ -n "${CPUPROFILE:-}" ]; then
		mkdir -p "$CPUPROFILE"
		prof=(--cpuprofile "$CPUPROFILE/$mode-$2.pprof")
	fi
	echo "== taskpilots bench --mode $mode: $CLIENTS workers, ${DURATION}s" >&2
	fresh_db
	"$work/taskpilots" bench --database-url "$DBURL" --mode "$mode" --workers "$CLIENTS" \
		--duration "${DURATION}s" --json "${prof[@]}" >"$work/$mode.out"
	head -n -1 "$work/$mode.out" >&2
	last_json "$work/$mode.out" lifecycles_per_sec
}

# The three runs are interleaved round by round, so that a machine whose
# load changes (other jobs, CI) disturbs all of them alike; the ratios are
# taken per round and their median reported.
: >"$work/rounds"
for r in $(seq 1 "$ROUNDS"); do
	echo "== round $r of $ROUNDS" >&2
	pg=$(run_pgbench)
	http=$(run_ours http "$r")
	inproc=$(run_ours inproc "$r")
	echo "$pg $http $inproc" >>"$work/rounds"
done

psql "$PGURL/postgres?sslmode=disable" -qX -c "DROP DATABASE IF EXISTS $BENCH_DB" >/dev/null || true

awk -v c="$CLIENTS" -v d="$DURATION" '
function median(a, n,   i, j, t) {
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
	n++; pg[n] = $1; ht[n] = $2; ip[n] = $3; hr[n] = $2 / $1; ir[n] = $3 / $1
	printf "round %d: pgbench %.1f lifecycles/s (%.1f commits/s), http %.1f (ratio %.2f), inproc %.1f (ratio %.2f)\n", n, $1, $1 * 4, $2, $2 / $1, $3, $3 / $1
}
END {
	mpg = median(pg, n); mht = median(ht, n); mip = median(ip, n); mhr = median(hr, n); mir = median(ir, n)
	printf "\n== results (%d clients, %d s per run, %d round(s), PostgreSQL on this machine; medians)\n", c, d, n
	printf "pgbench lifecycle script   %9.1f lifecycles/s  (%.1f commits/s)\n", mpg, mpg * 4
	printf "taskpilots http            %9.1f lifecycles/s  ratio %.2f  (target >= 0.50) %s\n", mht, mhr, (mhr >= 0.5 ? "ok" : "UNDER TARGET")
	printf "taskpilots inproc          %9.1f lifecycles/s  ratio %.2f  (target >= 0.80) %s\n", mip, mir, (mir >= 0.8 ? "ok" : "UNDER TARGET")
	printf "{\"clients\":%d,\"duration_s\":%d,\"rounds\":%d,\"pgbench_tps\":%.3f,\"pgbench_commits_per_sec\":%.3f,\"http_lifecycles_per_sec\":%.3f,\"inproc_lifecycles_per_sec\":%.3f,\"http_ratio\":%.4f,\"inproc_ratio\":%.4f}\n", c, d, n, mpg, mpg * 4, mht, mip, mhr, mir
}' "$work/rounds"
