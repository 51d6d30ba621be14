# One command runs the whole suite: make test
GO ?= go
FUZZTIME ?= 10s

.PHONY: test generate check-generated vet unit fuzz compose demo bench soak

test: check-generated vet unit fuzz compose

generate:
	$(GO) tool templ generate

# Generated files are committed; CI fails if templ would change them.
check-generated:
	$(GO) tool templ generate
	@git diff --exit-code -- '*_templ.go' || (echo "templ generate changed files: run 'make generate' and commit" && exit 1)
	@test -z "$$(git status --porcelain -- '*_templ.go')" || (git status --porcelain -- '*_templ.go'; echo "untracked generated files: commit them" && exit 1)

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 25m ./...

# Short fuzzing budget for every fuzz target (corpus regressions also run in 'unit').
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg; \
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
	  $(GO) test -count=1 -run '^TestSoak$$' -v -timeout 20m ./internal/reliability/
