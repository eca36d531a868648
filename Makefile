# trellis-repl — see README.md. Every target starts what it needs itself.
GO ?= go
PKGS := ./...

.PHONY: build test demo bench bench-quick generative soak plants vet fmt-check clean

build:
	$(GO) build -o bin/trellis-repl ./cmd/trellis-repl

# The whole suite against a throwaway PostgreSQL per test binary (or the
# server in TRELLIS_TEST_DSN). Two packages at a time: each binary starts
# its own server and mostly waits on it, so on two cores the root package
# (the longest) runs beside all the others (13m37s one at a time, 7m26s
# two at a time, same machine and commit). deploy/ is its own module
# (Prometheus's rule parser is a large dependency only its test needs), and
# so is examples/migrations (goose and golang-migrate, for its examples).
# The per-binary timeout is a guard against a hang, above the root
# package's ~12 minutes on a slow day (it holds the peer-suite probes).
# Six parallel tests at a time (-parallel; it matters for the root package,
# whose tests are parallel, each on a database of its own, and mostly wait
# on their servers): the root package alone took 739 s at -parallel 4 and
# (before main's issue 26/27 tests) 560 s at 8, on two cores at load
# 12-22, where at 8 a 10 s catalog read of the peer suites once ran out
# (catalogReadTimeout). At that load the other packages, one after another
# in the second slot, take longer than the root package.
#
# The CLI the tests run as a child process (root package, bench,
# generative, internal/scaletest) is built once, here, and passed in
# TRELLIS_TEST_CLI rather than linked by each package (internal/clibuild).
test: fmt-check vet build
	TRELLIS_TEST_CLI=$(CURDIR)/bin/trellis-repl $(GO) test -p 2 -parallel 6 -count=1 -timeout 25m $(PKGS)
	cd deploy && $(GO) test -count=1 ./...
	cd examples/migrations && $(GO) test -count=1 ./...

vet:
	$(GO) vet $(PKGS)
	cd deploy && $(GO) vet ./...
	cd examples/migrations && $(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# A throwaway local PostgreSQL, sample tables, two transforms, a live
# workload with status as it goes, then a proof that targets equal queries.
demo:
	$(GO) run ./cmd/trellis-demo

# The generative suite's fast lane (also part of `make test`): fixed seeds
# plus a few random ones, PostgreSQL as the oracle.
generative:
	$(GO) test -count=1 -timeout 10m -v -run . ./generative/

# Fresh seeds until the time limit (SOAK_ARGS="-duration 30m").
soak:
	$(GO) run ./generative/cmd/soak $(SOAK_ARGS)

# Runs the fast lane once per planted bug and reports the catch rate.
plants:
	$(GO) run ./generative/cmd/plantsweep $(PLANT_ARGS)

# The benchmark suite (docs/performance.md): write tax, latency, keep-up,
# catch-up, build, refresh, many; JSON lines on stdout, a Markdown summary at the
# end (BENCH_ARGS="--scenarios write-tax --rounds 3 --plot out/").
bench:
	$(GO) run ./cmd/trellis-repl bench $(BENCH_ARGS)

# Every scenario at small sizes, correctness only (also part of `make
# test`, as bench.TestQuickSuite).
bench-quick:
	$(GO) run ./cmd/trellis-repl bench --quick $(BENCH_ARGS)

clean:
	rm -rf bin trellis-repl-data
