#!/usr/bin/env bash
# test-postgres.sh makes sure a PostgreSQL server answers for the tests.
#
#   scripts/test-postgres.sh COMMAND [ARGS...]   run COMMAND with TASKPILOTS_TEST_DATABASE_URL set
#   scripts/test-postgres.sh                     print an `export TASKPILOTS_TEST_DATABASE_URL=…` line
#   scripts/test-postgres.sh --stop              stop the throwaway cluster
#
# It first tries $TASKPILOTS_TEST_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/test?sslmode=disable). When nothing
# answers there, it starts a throwaway cluster from Debian's postgresql
# package in ./.pgtest (installing the package first when it is missing and we
# are root), on a free port from 55432 up, with trust authentication and a
# database named test. A cluster it started for a COMMAND is stopped when the
# command ends; its files are kept so the next start is quick.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEFAULT_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
URL=${TASKPILOTS_TEST_DATABASE_URL:-$DEFAULT_URL}
PGTEST_DIR=${TASKPILOTS_PGTEST_DIR:-$ROOT/.pgtest}

say() { echo "test-postgres: $*" >&2; }
die() { say "$*"; exit 1; }

is_root() { [ "$(id -u)" = 0 ]; }

# answers URL: true when a query on URL succeeds (so the database exists too).
answers() {
	local url=$1
	if command -v psql >/dev/null 2>&1; then
		PGCONNECT_TIMEOUT=3 psql "$url" -XtAqc 'SELECT 1' >/dev/null 2>&1
		return
	fi
	if command -v pg_isready >/dev/null 2>&1; then
		pg_isready -q -t 3 -d "$url"
		return
	fi
	# Last resort without client tools: is anything listening on host:port?
	local hostport host port
	hostport=${url#*://}
	hostport=${hostport#*@}
	hostport=${hostport%%/*}
	host=${hostport%:*}
	port=${hostport##*:}
	[ "$port" = "$hostport" ] && port=5432
	(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
}

# pg_bindir prints the directory of the newest installed initdb.
pg_bindir() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -V -r); do
		if [ -x "$d/initdb" ]; then
			echo "$d"
			return 0
		fi
	done
	if command -v initdb >/dev/null 2>&1; then
		dirname "$(readlink -f "$(command -v initdb)")"
		return 0
	fi
	return 1
}

# as_pg runs a command as the cluster's owner: initdb and postgres refuse root.
as_pg() {
	if is_root; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

cluster_paths() {
	DATA=$PGTEST_DIR/data
	SOCK=$PGTEST_DIR/sock
	LOG=$PGTEST_DIR/postgres.log
	# A unix socket path must fit in 107 bytes.
	if [ $((${#SOCK} + 20)) -gt 100 ]; then
		SOCK=/tmp/taskpilots-pgtest-sock-$(id -u)
	fi
}

# fallback_dir is where root keeps the cluster when the postgres user cannot
# reach the work tree.
fallback_dir() { echo "/tmp/taskpilots-pgtest-$(echo "$ROOT" | cksum | cut -d' ' -f1)"; }

stop_cluster() {
	if [ ! -d "$PGTEST_DIR/data" ] && [ -d "$(fallback_dir)/data" ]; then
		PGTEST_DIR=$(fallback_dir)
	fi
	cluster_paths
	local bin
	bin=$(pg_bindir) || return 0
	if [ -f "$DATA/postmaster.pid" ]; then
		say "stopping the throwaway cluster in $DATA"
		as_pg "$bin/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null || true
	fi
}

start_cluster() {
	local bin
	if ! bin=$(pg_bindir); then
		if is_root; then
			say "PostgreSQL is not installed; installing Debian's postgresql package"
			export DEBIAN_FRONTEND=noninteractive
			apt-get update -qq >&2
			apt-get install -y -qq postgresql >&2
			# The package may start its own cluster on the default port.
			if answers "$URL"; then
				STARTED=0
				return 0
			fi
			bin=$(pg_bindir) || die "initdb still missing after installing postgresql"
		else
			die "no PostgreSQL answers at $URL and initdb is not installed; install Debian's postgresql package (as root: apt-get install -y postgresql) or set TASKPILOTS_TEST_DATABASE_URL"
		fi
	fi
	cluster_paths
	if is_root; then
		id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
		mkdir -p "$PGTEST_DIR"
		chown postgres: "$PGTEST_DIR"
		if ! runuser -u postgres -- test -w "$PGTEST_DIR"; then
			# A parent directory (say /root) is closed to the postgres user:
			# keep the cluster where it can reach it instead.
			PGTEST_DIR=$(fallback_dir)
			mkdir -p "$PGTEST_DIR"
			chown postgres: "$PGTEST_DIR"
			cluster_paths
			say "$ROOT is not reachable by the postgres user; using $PGTEST_DIR"
		fi
	else
		mkdir -p "$PGTEST_DIR"
	fi
	mkdir -p "$SOCK"
	is_root && chown postgres: "$SOCK"

	local version
	version=$("$bin/initdb" --version | sed 's/[^0-9]*\([0-9]*\).*/\1/')
	if [ -f "$DATA/PG_VERSION" ] && [ "$(cat "$DATA/PG_VERSION")" != "$version" ]; then
		say "discarding a cluster made by PostgreSQL $(cat "$DATA/PG_VERSION")"
		rm -rf "$DATA"
	fi

	# A cluster left running by an earlier `scripts/test-postgres.sh` is reused.
	if [ -f "$DATA/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
		local port
		port=$(sed -n 4p "$DATA/postmaster.pid")
		URL="postgres://postgres@127.0.0.1:$port/test?sslmode=disable"
		if answers "$URL"; then
			say "reusing the running throwaway cluster on port $port"
			STARTED=0
			return 0
		fi
	fi

	if [ ! -f "$DATA/PG_VERSION" ]; then
		say "creating a throwaway cluster in $DATA (PostgreSQL $version)"
		rm -rf "$DATA"
		as_pg "$bin/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --locale=C >"$PGTEST_DIR/initdb.log" 2>&1 ||
			{ cat "$PGTEST_DIR/initdb.log" >&2; die "initdb failed"; }
	fi

	local port=55432
	while ! port_free "$port"; do
		port=$((port + 1))
		[ "$port" -gt 55532 ] && die "no free port in 55432-55532"
	done
	say "starting it on 127.0.0.1:$port"
	# Durability is pointless for a throwaway cluster; speed is not.
	if ! as_pg "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
		-o "-p $port -k $SOCK -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
		start >/dev/null; then
		tail -n 30 "$LOG" >&2 || true
		die "the throwaway cluster did not start"
	fi
	STARTED=1
	if ! as_pg "$bin/psql" -h "$SOCK" -p "$port" -U postgres -XtAqc "SELECT 1 FROM pg_database WHERE datname = 'test'" postgres | grep -q 1; then
		as_pg "$bin/createdb" -h "$SOCK" -p "$port" -U postgres test
	fi
	URL="postgres://postgres@127.0.0.1:$port/test?sslmode=disable"
	answers "$URL" || die "the throwaway cluster does not answer at $URL"
}

if [ "${1:-}" = "--stop" ]; then
	stop_cluster
	exit 0
fi

STARTED=0
if answers "$URL"; then
	say "using PostgreSQL at ${URL%%\?*}"
else
	say "nothing answers at ${URL%%\?*}"
	start_cluster
fi
export TASKPILOTS_TEST_DATABASE_URL=$URL

# vacuum_catalogs clears the dead catalog rows earlier runs left in the test
# database. Every test creates and drops a schema of its own (40-odd tables
# with their indexes and triggers), and a cluster whose autovacuum is off (the
# shared one here) keeps every dead row: one full run left 813,158 dead rows
# in pg_attribute beside 3,170 live ones, and a run of inbox tests took 5.7 s
# on those catalogs against 5.0 s once they were vacuumed. A plain VACUUM
# neither blocks nor waits for the DDL of tests already running (SKIP_LOCKED);
# a role that may not vacuum the catalogs gets warnings, never a failure.
vacuum_catalogs() {
	command -v psql >/dev/null 2>&1 || return 0
	psql "$URL" -XqA -c 'VACUUM (SKIP_LOCKED) pg_catalog.pg_attribute, pg_catalog.pg_class, pg_catalog.pg_depend,
		pg_catalog.pg_type, pg_catalog.pg_index, pg_catalog.pg_constraint, pg_catalog.pg_trigger,
		pg_catalog.pg_attrdef, pg_catalog.pg_proc, pg_catalog.pg_rewrite, pg_catalog.pg_statistic' >/dev/null 2>&1 ||
		say "could not vacuum the test database's catalogs (tests run on, maybe slower)"
}
vacuum_catalogs

if [ $# -eq 0 ]; then
	printf 'export TASKPILOTS_TEST_DATABASE_URL=%q\n' "$URL"
	[ "$STARTED" = 1 ] && say "the cluster keeps running; stop it with scripts/test-postgres.sh --stop"
	exit 0
fi

if [ "$STARTED" = 1 ]; then
	trap stop_cluster EXIT
	"$@"
else
	exec "$@"
fi
