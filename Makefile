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

# deploy/helm is a module of its own (the Helm chart's tests and generator):
# Helm's and Kubernetes's dependencies stay out of lockscope's go.mod.
HELM_MOD := deploy/helm

.PHONY: test deps generate check-generated tidy vet staticcheck unit fuzz compose demo bench soak

test: deps check-generated tidy vet staticcheck unit fuzz compose

# Installs the programs the tests run (redis-server, promtool, prometheus,
# amtool, chromium, docker-compose, node, npm) when one is missing, and the
# accessibility checkers in tools/a11y (npm ci).
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
	@cd $(HELM_MOD) && $(GO) mod tidy -diff || (echo "$(HELM_MOD)/go.mod is not tidy: run 'go mod tidy' there and commit" && exit 1)

vet:
	$(GO) vet ./...
	cd $(HELM_MOD) && $(GO) vet ./...

# The nested module runs the main module's staticcheck binary.
staticcheck:
	$(GO) tool staticcheck ./...
	sc=$$($(GO) tool -n staticcheck) && cd $(HELM_MOD) && $$sc ./...

unit:
	$(GO) test -race -count=1 -timeout 25m ./...
	cd $(HELM_MOD) && $(GO) test -race -count=1 -timeout 10m ./...

# Every fuzz target, bounded by counts (corpus regressions also run in 'unit').
# Targets are found by grep: listing them with 'go test -list' would build
# every package's tests once more.
fuzz:
	@set -e; for file in $$(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do \
	  for f in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
	    v=FUZZCOUNT_$$f; n=$${!v:-$(FUZZCOUNT)}; \
	    echo "fuzz $$(dirname $$file) $$f $$n"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$$n ./$$(dirname $$file); \
	  done; \
	done

compose:
	docker-compose -f docker-compose.yml config -q

demo:
	$(GO) run ./cmd/lockscope demo

bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./...

# The documented 10-minute soak (BENCHMARKS.md "Soak"); the suite runs a 30 s version.
soak:
	LOCKSCOPE_SOAK_DURATION=10m LOCKSCOPE_SOAK_RATE=34000 LOCKSCOPE_SOAK_CONCURRENCY=3000 LOCKSCOPE_SOAK_MAX_KEYS=200000 \
	  $(GO) test -count=1 -run '^TestSoak$$' -v -timeout 20m ./test/reliability/
