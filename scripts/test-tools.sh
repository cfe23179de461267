#!/usr/bin/env bash
# test-tools.sh makes sure the programs the tests run are installed:
#   - Chromium, which the browser tests (e2e/) drive through chromedp:
#     TASKPILOTS_CHROMIUM when set, else chromium or chromium-browser on PATH;
#   - Node.js and npm, for the webhook signature tests (the standardwebhooks
#     npm package) and the TypeScript client's build and suite.
# What is missing is installed from Debian with apt-get when we are root;
# otherwise the script says what to install and fails, so that `make test`
# stops before minutes of tests that would fail for want of a browser.
# (PostgreSQL is scripts/test-postgres.sh's business, Python's
# scripts/python-venv.sh's.)
set -euo pipefail
# shellcheck source=scripts/apt-missing.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt-missing.sh"

missing=()
if [ -n "${TASKPILOTS_CHROMIUM:-}" ]; then
	[ -x "$TASKPILOTS_CHROMIUM" ] || {
		echo "TASKPILOTS_CHROMIUM=$TASKPILOTS_CHROMIUM is not an executable file" >&2
		exit 1
	}
elif ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
	missing+=(chromium)
fi
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)

apt_install_missing "the tests" \
	"(chromium runs the browser tests, or set TASKPILOTS_CHROMIUM; node and npm the webhook and TypeScript client tests)" \
	${missing[@]+"${missing[@]}"}

browser=${TASKPILOTS_CHROMIUM:-$(command -v chromium || command -v chromium-browser)}
echo "tools: $("$browser" --version 2>/dev/null || echo "$browser"), node $(node --version), npm $(npm --version)"
