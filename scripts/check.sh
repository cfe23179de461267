#!/usr/bin/env bash
# check.sh runs the static checks that CI runs before the tests:
#   1. templ: regenerate the *_templ.go files and fail if any changed, appeared
#      or lost its .templ source (generated files are committed);
#   2. the TypeScript client's generated types match handlers/openapi.json
#      (npm run check-generated in client/typescript);
#   3. gofmt -l on every Go file that git tracks or would track;
#   4. go vet ./..., in the root module and in the client module (client/ has
#      its own go.mod, which ./... does not cross); vet also holds the client
#      to the standard library of its low go line;
#   5. staticcheck ./... (honnef.co/go/tools, pinned in go.mod as a go tool),
#      root and client modules. A rare false positive is silenced where it
#      occurs with a //lint:ignore CHECK reason comment, never by turning a
#      check off.
# Under CI=true it also fails on any *_templ.go that `git status` shows as
# changed or untracked, since the clone must contain the generated code.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fail=0
step() { printf -- '--- %s\n' "$*"; }

step "templ generate (freshness)"
snapshot() {
	find . -name '*_templ.go' -not -path './.pgtest/*' -not -path './node_modules/*' -type f -print0 |
		sort -z | xargs -0 -r sha256sum
}
before=$(snapshot)
if ! out=$(go tool templ generate 2>&1); then
	echo "$out"
	echo "templ generate failed"
	exit 1
fi
after=$(snapshot)
if [ "$before" != "$after" ]; then
	echo "generated templ code is stale; run 'make generate' and commit the result:"
	{ diff <(echo "$before") <(echo "$after") || true; } | sed -n 's/^[<>] [0-9a-f]*  /  /p' | sort -u
	fail=1
fi
while IFS= read -r -d '' gen; do
	if [ ! -f "${gen%_templ.go}.templ" ]; then
		echo "orphaned generated file (its .templ is gone): $gen"
		fail=1
	fi
done < <(find . -name '*_templ.go' -not -path './.pgtest/*' -not -path './node_modules/*' -type f -print0)
if [ "${CI:-}" = true ] && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	dirty=$(git status --porcelain -- '*_templ.go')
	if [ -n "$dirty" ]; then
		echo "generated templ code differs from the commit (regenerate and commit it):"
		echo "$dirty"
		fail=1
	fi
fi
echo "templ files: $(find . -name '*.templ' -not -path './node_modules/*' | wc -l)"

step "TypeScript client types (freshness)"
# client/typescript/src/schema.ts is generated from handlers/openapi.json by
# openapi-typescript (pinned in its package-lock.json) and committed.
if [ ! -x client/typescript/node_modules/.bin/openapi-typescript ]; then
	(cd client/typescript && npm ci --no-audit --no-fund >/dev/null) || { echo "npm ci in client/typescript failed"; fail=1; }
fi
if [ -x client/typescript/node_modules/.bin/openapi-typescript ]; then
	(cd client/typescript && npm run --silent check-generated) || fail=1
fi

step "gofmt -l"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	mapfile -d '' gofiles < <(git ls-files -z -co --exclude-standard -- '*.go')
else
	mapfile -d '' gofiles < <(find . -name '*.go' -not -path './.pgtest/*' -print0)
fi
unformatted=$(gofmt -l "${gofiles[@]}")
if [ -n "$unformatted" ]; then
	echo "not gofmt'ed (run gofmt -w):"
	echo "$unformatted"
	fail=1
fi

step "go vet ./..."
go vet ./... || fail=1

step "client module: standard library only, go vet ./..."
# The client is fetched alone by outside programs: it must not pull the
# server's dependency graph. A require line in its go.mod would.
if grep -qE '^\s*require' client/go.mod; then
	echo "client/go.mod requires modules; the client uses the standard library only"
	fail=1
fi
(cd client && go vet ./...) || fail=1

step "staticcheck ./... (root module, then the client module)"
go tool staticcheck ./... || fail=1
# The client module has no tool line of its own; run the root module's
# staticcheck binary inside it.
staticcheck_bin=$(go tool -n staticcheck)
(cd client && "$staticcheck_bin" ./...) || fail=1

if [ "$fail" != 0 ]; then
	echo "check: FAILED"
	exit 1
fi
echo "check: ok"
