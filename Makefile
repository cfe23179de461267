# TaskPilots Handoff. `make test` is THE test command; `make help` lists the rest.
SHELL := /bin/bash
GO    ?= go

# Build and test with the toolchain go.mod names (go1.26.10: standard-library
# fixes, one of them reachable through Range headers on /static/), fetched
# from the module proxy when the installed Go is older, even where the
# environment says GOTOOLCHAIN=local.
export GOTOOLCHAIN := auto

# -trimpath keeps the checkout's directory out of every build, so the build
# cache's keys no longer depend on where the clone lives: a fresh clone (CI's)
# reuses what any earlier clone on the machine compiled, instead of compiling
# every package of this module again with and without -race (175 s of CPU
# for the race builds and 47 s for the plain ones, 4 December). Exported, so
# that the tests' own `go build` of the binary shares the cache too.
export GOFLAGS := -trimpath $(filter-out -trimpath,$(GOFLAGS))

# Packages whose tests exercise concurrency (leases, long polls, the HTTP
# server, the worker client against the server) run under the race detector,
# and only there: the race run is the same tests with a detector on, so
# running them once more without it found nothing the race run would miss
# and cost about three minutes of CI. Two kinds of their tests run without the
# detector instead (PLAIN_ONLY), and only there:
#   - the query-plan tests at scale and the index upkeep's bloat test: they
#     check what PostgreSQL plans or stores for one statement at a time over
#     up to a million rows, single-threaded, where the detector has nothing
#     to find and would only slow the building of their tables;
#   - the rapid property tests (named *Property*; scripts/check.sh holds
#     every rapid.Check test to that name): random command sequences run
#     one at a time, which the detector would only slow several times over;
#   - three single-goroutine tests that walk many combinations or long
#     histories, on SQLite the slowest of the race run (33, 23 and 16 s
#     each under the detector): every inbox filter and chip against its
#     rows, the latest state's cost at 10,000 events, packet budgets.
# In the race run storetest.Each runs on PostgreSQL only
# (TASKPILOTS_TEST_DIALECTS=postgres), and a run without the detector beside
# it runs the SQLite subtests (and, once more, the tests that are not Each's):
# our concurrent code is the same on both dialects, while the pure-Go SQLite
# under the detector was a third of the race run's time.
# cmd/ is left out of the race run: its tests run the same code paths
# through the CLI, and -race on the pure-Go SQLite driver is slow on two
# cores. So is ./handlers, but for its long polls and feed (RACE_HANDLERS),
# the only handler tests with goroutines of their own: a handler serves one
# request on the request's goroutine, and what is shared between requests
# lives in ./models and ./web, which run under the detector. The whole
# package under -race took 225 s of CI for those few tests.
RACE_PKGS ?= ./models ./web ./clienttest
RACE_HANDLERS ?= LongPoll|Feed
# LATE_PKGS run without the detector beside the race run, after the SQLite
# subtests, instead of in the first run: the first run keeps both cores busy
# with the CLI, browser and plan tests, while the SQLite lane of the second
# finished in 85 s of the race run's 214 s (CI, 2 December). ./handlers
# mostly waits on the database (81 s alone, 18 s of CPU).
LATE_PKGS ?= ./handlers
PLAIN_ONLY ?= Plans|AtScale|ScalesOnPostgres|ScaleOnPostgres|BatchPlan|ReadTheBacklog|TestIndexUpkeep|Property|TestInboxCountsAgreeWithRows|TestLatestStateCost|TestPacketBudget

# The Go client is its own module (client/go.mod, standard library only):
# ./... at the root does not reach it, so test-go runs its tests there too.
# Its tests against the real server live in the root module (clienttest/).
CLIENT_DIR := client

# Stamped into `taskpilots version`; empty means "read the VCS revision".
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS := $(if $(VERSION),-X main.version=$(VERSION))

.PHONY: help build run test test-go test-race generate check bench fuzz pg pg-stop clean tools npm-deps py-deps

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

build: ## build bin/taskpilots
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/taskpilots ./cmd/taskpilots

run: ## start the console with demo data on ./data/taskpilots.db
	$(GO) run ./cmd/taskpilots serve

test: tools npm-deps py-deps ## all tests on real PostgreSQL and SQLite, then -race on $(RACE_PKGS)
	scripts/test-postgres.sh $(MAKE) --no-print-directory test-go

# Chromium for the browser tests, Node.js and npm for the webhook and
# TypeScript client tests: installed from Debian when missing and we are root,
# else a clear error before any test runs.
tools: ## check for (as root: install) Chromium, Node.js and npm, which the tests run
	scripts/test-tools.sh

# The webhook tests check our signatures with an independent implementation,
# the standardwebhooks npm package, pinned in $(WEBHOOKS_VERIFY)'s
# package-lock.json; npm ci runs again only when the lock file changes.
WEBHOOKS_VERIFY := web/testdata/webhooks-verify
# The TypeScript client (client/typescript) builds with tsc, regenerates its
# types with openapi-typescript and sends with openapi-fetch, all pinned in
# its package-lock.json; cmd/taskpilots/sdk_test.go runs its suite (and the
# Python client's, in $(PY_VENV)) against a real server.
TS_CLIENT := client/typescript
npm-deps: $(WEBHOOKS_VERIFY)/node_modules/.package-lock.json $(TS_CLIENT)/node_modules/.package-lock.json ## install the npm packages (webhook verifier, TypeScript client tooling)
$(WEBHOOKS_VERIFY)/node_modules/.package-lock.json: $(WEBHOOKS_VERIFY)/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node.js) is required: the webhook tests verify signatures with the standardwebhooks npm package" >&2; exit 1; }
	cd $(WEBHOOKS_VERIFY) && npm ci --no-audit --no-fund
$(TS_CLIENT)/node_modules/.package-lock.json: $(TS_CLIENT)/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node.js) is required: the TypeScript client is built and tested with npm packages" >&2; exit 1; }
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund

# The Python client's virtual environment: Debian's python3-venv and
# python3-httpx (apt-get when root, else a clear error), the package installed
# editable from client/python without PyPI; rebuilt when pyproject.toml or the
# script changes.
PY_VENV := client/python/.venv
py-deps: $(PY_VENV)/.installed ## make the Python client's venv (client/python/.venv) from Debian's httpx, offline
$(PY_VENV)/.installed: client/python/pyproject.toml scripts/python-venv.sh
	scripts/python-venv.sh

# test-go expects TASKPILOTS_TEST_DATABASE_URL to answer; `make test` sees to it.
# -timeout: cmd/taskpilots (the CLI, the drill, every SDK's suite against a
# real server) takes about two minutes on a quiet machine; the default ten
# minutes per package is too tight on a loaded one.
test-go:
	@set -u; race=$$($(GO) list $(RACE_PKGS) $(LATE_PKGS)); plain=$$($(GO) list ./... | grep -vxF "$$race"); \
	out=$$(mktemp -d); rc=0; \
	echo "go test (no -race): every package but $(RACE_PKGS) $(LATE_PKGS), and the former's $(PLAIN_ONLY) tests, side by side"; \
	$(GO) test -count=1 -timeout 30m $$plain >$$out/plain.log 2>&1 & p1=$$!; \
	$(GO) test -count=1 -timeout 30m -run '$(PLAIN_ONLY)' $(RACE_PKGS) >$$out/plans.log 2>&1 & p2=$$!; \
	wait $$p1 || rc=1; wait $$p2 || rc=1; cat $$out/plain.log $$out/plans.log; rm -rf $$out; exit $$rc
	cd $(CLIENT_DIR) && $(GO) test -count=1 ./...
	@set -u; out=$$(mktemp -d); rc=0; \
	echo "go test -race: $(RACE_PKGS) but $(PLAIN_ONLY), storetest.Each on PostgreSQL; beside it their SQLite subtests, then $(LATE_PKGS), without -race"; \
	TASKPILOTS_TEST_DIALECTS=postgres $(GO) test -race -count=1 -timeout 30m -skip '$(PLAIN_ONLY)' $(RACE_PKGS) >$$out/race.log 2>&1 & p1=$$!; \
	{ TASKPILOTS_TEST_DIALECTS=sqlite $(GO) test -count=1 -timeout 30m -skip '$(PLAIN_ONLY)' $(RACE_PKGS); r=$$?; \
	  $(GO) test -count=1 -timeout 30m $(LATE_PKGS) || r=1; exit $$r; } >$$out/sqlite.log 2>&1 & p2=$$!; \
	wait $$p1 || rc=1; wait $$p2 || rc=1; cat $$out/race.log $$out/sqlite.log; rm -rf $$out; exit $$rc
	TASKPILOTS_TEST_DIALECTS=postgres $(GO) test -race -count=1 -run '$(RACE_HANDLERS)' ./handlers
	cd $(CLIENT_DIR) && $(GO) test -race -count=1 ./...

test-race: npm-deps ## only the -race run (storetest.Each on PostgreSQL only, as in make test)
	TASKPILOTS_TEST_DIALECTS=postgres scripts/test-postgres.sh $(GO) test -race -count=1 -skip '$(PLAIN_ONLY)' $(RACE_PKGS)
	TASKPILOTS_TEST_DIALECTS=postgres scripts/test-postgres.sh $(GO) test -race -count=1 -run '$(RACE_HANDLERS)' ./handlers
	cd $(CLIENT_DIR) && $(GO) test -race -count=1 ./...

generate: ## regenerate templ components (commit the *_templ.go files)
	$(GO) tool templ generate

check: ## templ and TypeScript-client freshness, gofmt -l, go vet (what CI checks before testing)
	scripts/check.sh

# Each fuzz test in turn; new findings land in the package's
# testdata/fuzz/<Name>/ (commit them with the fix). Each budget is an
# execution count (-fuzztime Nx) of about 5 s on a quiet 2-core machine, not
# a duration: with a duration, Go 1.26's fuzz coordinator can report a clean
# run as "context deadline exceeded" when the machine is loaded at the
# deadline (go.dev/issue/75804, fixed in Go 1.27). FUZZTIME=30s (or 50000x)
# overrides every budget.
FUZZTIME ?=
fuzz-one = $(GO) test -run '^$$' -fuzz '^$(1)$$' -fuzztime $(or $(FUZZTIME),$(2)) ./$(3)/
fuzz: ## run each fuzz test for about 5 s (FUZZTIME overrides): result contract, Apply, hash input, payload decoding, console forms, login form, CSRF token
	$(call fuzz-one,FuzzResultContract,25000x,models)
	$(call fuzz-one,FuzzApply,1000x,models)
	$(call fuzz-one,FuzzHashInput,5000x,models)
	$(call fuzz-one,FuzzDecodeJSON,15000x,models)
	$(call fuzz-one,FuzzConsoleForm,3500x,handlers)
	$(call fuzz-one,FuzzLoginForm,3000x,handlers)
	$(call fuzz-one,FuzzCSRFToken,4000x,handlers)

bench: ## Go benchmarks of models, scripts/bench.sh (TaskPilots vs pgbench), scripts/bench-pages.sh (page latency at 10 k and 1 M events); BLOAT=1 adds scripts/bench-bloat.sh
	scripts/test-postgres.sh bash -c '$(GO) test -run "^$$" -bench . -benchmem ./models/ && \
		if [ -x scripts/bench.sh ]; then PGURL=$${PGURL:-$${TASKPILOTS_TEST_DATABASE_URL%/*}} scripts/bench.sh; \
		else echo "scripts/bench.sh not present; skipped"; fi && \
		PGURL=$${PGURL:-$${TASKPILOTS_TEST_DATABASE_URL%/*}} scripts/bench-pages.sh'
	if [ "$${BLOAT:-}" = 1 ]; then scripts/bench-bloat.sh; fi

pg: ## start (or find) a PostgreSQL for tests and print its URL
	@scripts/test-postgres.sh

pg-stop: ## stop the throwaway test cluster
	@scripts/test-postgres.sh --stop

clean: ## remove build output and the throwaway cluster
	-scripts/test-postgres.sh --stop
	rm -rf bin .pgtest $(PY_VENV)
