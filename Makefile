# One command runs the whole suite: make test
GO ?= go
SHELL := bash

# Fuzzing is bounded by executions, never by wall-clock: Go 1.26's fuzz
# coordinator can fail a duration-bounded run with "context deadline
# exceeded" on a loaded machine (golang/go#75804). FUZZCOUNT applies to every
# fuzz target; FUZZCOUNT_<Target> overrides it for a slow one. The whole step
# takes about a minute on 2 cores.
FUZZCOUNT ?= 200000x
export FUZZCOUNT_FuzzClass ?= 100000x
export FUZZCOUNT_FuzzKeyThroughDashboard ?= 3000x

# The modules besides the root one (the server: collector, dashboard, the
# binary). The library is modules of its own so that an application that
# imports it pulls go-redis and nothing of the server's (docs/development.md):
# event (the wire schema and class names), lock, each extra/ adapter, and
# the test kit they share. deploy/helm keeps Helm's and Kubernetes's
# dependencies out of every other go.mod. Each step below runs in each.
HELM_MOD := deploy/helm
MODULES := event internal/testkit lock extra/redsyncscope extra/redislockscope extra/lockotel $(HELM_MOD)

.PHONY: screenshots test deps generate check-generated tidy vet staticcheck tests unit unit-root unit-modules fuzz compose demo bench soak

# The checks run one after another; then the tests of the root module, those
# of the other modules and the fuzz targets run side by side (tests, make
# -j3), each one's output held until it is done (--output-sync). The root
# module's tests are the long pole (test/reliability some 460-590 s under
# -race). On a quiet 2-core machine .ci/run took 18.5-20 minutes with the
# three one after another and test/reliability last, 12-13.6 side by side
# (docs/development.md, "Where the suite's time goes").
test: deps check-generated tidy vet staticcheck
	@$(MAKE) --no-print-directory -j3 --output-sync=target tests
	@$(MAKE) --no-print-directory compose

tests: unit fuzz

# Installs the programs the tests run (redis-server, promtool, prometheus,
# amtool, chromium, docker-compose, node, npm) when one is missing, and the
# accessibility checkers in tools/a11y, the other libraries' lock clients in
# tools/foreign and the Node package's dependencies in clients/node (npm ci).
deps:
	@bash scripts/deps.sh

generate:
	$(GO) tool templ generate
	cd $(HELM_MOD) && $(GO) generate ./...

# Generated files are committed; CI fails if templ would change them.
check-generated:
	$(GO) tool templ generate
	@git diff --exit-code -- '*_templ.go' || (echo "templ generate changed files: run 'make generate' and commit" && exit 1)
	@test -z "$$(git status --porcelain -- '*_templ.go')" || (git status --porcelain -- '*_templ.go'; echo "untracked generated files: commit them" && exit 1)

tidy:
	@$(GO) mod tidy -diff || (echo "go.mod/go.sum are not tidy: run 'go mod tidy' and commit" && exit 1)
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) mod tidy -diff) || (echo "$$m/go.mod is not tidy: run 'go mod tidy' there and commit" && exit 1); done

vet:
	$(GO) vet ./...
	@set -e; for m in $(MODULES); do echo "vet $$m"; (cd $$m && $(GO) vet ./...); done

# The nested modules run the main module's staticcheck binary.
staticcheck:
	$(GO) tool staticcheck ./...
	@set -e; sc=$$($(GO) tool -n staticcheck); for m in $(MODULES); do echo "staticcheck $$m"; (cd $$m && $$sc ./...); done

unit: unit-root unit-modules

# test/reliability is named first: go test starts packages in the order
# given, and its end-to-end tests, one after another, make the longest
# package by far, which named last (as ./... orders it) ran alone at the end.
unit-root:
	$(GO) test -race -count=1 -timeout 25m ./test/reliability/ ./...

unit-modules:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) test -race -count=1 -timeout 10m ./...); done

# Every fuzz target, bounded by counts (corpus regressions also run in 'unit').
# Targets are found by grep: listing them with 'go test -list' would build
# every package's tests once more.
# Each runs from its package's module (the nearest go.mod above it).
fuzz:
	@set -e; for file in $$(grep -rl --include='*_test.go' --exclude-dir=node_modules '^func Fuzz' . | sort); do \
	  dir=$$(dirname $$file); mod=$$dir; while [ ! -f $$mod/go.mod ]; do mod=$$(dirname $$mod); done; \
	  for f in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
	    v=FUZZCOUNT_$$f; n=$${!v:-$(FUZZCOUNT)}; \
	    echo "fuzz $$dir $$f $$n"; rel=$${dir#$$mod}; (cd $$mod && $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$$n .$$rel); \
	  done; \
	done

# The stack has no default operator password: it is checked with one set
# (any of 12 characters or more), and checked to refuse to start without it
# (with an empty --env-file, so that a developer's .env cannot hide that).
compose:
	LOCKSCOPE_OPERATOR_PASSWORD=compose-config-check docker-compose --env-file scripts/compose-check.env -f docker-compose.yml config -q
	@if env -u LOCKSCOPE_OPERATOR_PASSWORD docker-compose --env-file scripts/compose-check.env -f docker-compose.yml config -q >/dev/null 2>&1; then \
	  echo "docker-compose.yml starts without LOCKSCOPE_OPERATOR_PASSWORD: it must refuse"; exit 1; fi

# Refreshes the screenshots in docs/ from the browser tests, and lockscope
# top's captures (docs/top*.txt, the copy in docs/reference.md) from its terminal test
# (a test run leaves them alone).
screenshots:
	LOCKSCOPE_UPDATE_SCREENSHOTS=1 $(GO) test -count=1 -run 'TestEndToEndBrowser|TestOwnerPageBrowser|TestPagesAtEveryWidth|TestForeignLocksInBrowser' ./dashboard/
	LOCKSCOPE_UPDATE_SCREENSHOTS=1 $(GO) test -count=1 -run '^TestTopShowsTheLivePicture$$' ./cmd/lockscope/

demo:
	$(GO) run ./cmd/lockscope demo

bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./...

# The documented 10-minute soak (BENCHMARKS.md "Soak"); the suite runs a 30 s version.
soak:
	LOCKSCOPE_SOAK_DURATION=10m LOCKSCOPE_SOAK_RATE=34000 LOCKSCOPE_SOAK_CONCURRENCY=3000 LOCKSCOPE_SOAK_MAX_KEYS=200000 \
	  $(GO) test -count=1 -run '^TestSoak$$' -v -timeout 20m ./test/reliability/
