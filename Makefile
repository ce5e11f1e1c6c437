# hushfs: the two entry points are `make demo` (the main job) and `make test`.
# Both install what they need first (scripts/install-deps.sh is idempotent).
GO ?= go
# An execution count, not a duration: a duration races Go's fuzz
# coordinator at the deadline (go.dev/issue/75804, fixed in Go 1.27) and
# fails with "context deadline exceeded" having found nothing.
FUZZTIME ?= 200000x

.PHONY: build deps demo test test-go fuzz-short bench-quick soak-quick conformance vet bench soak clean

build:
	$(GO) build -o bin/hushfs ./cmd/hushfs

deps:
	scripts/install-deps.sh

demo: deps build
	scripts/demo.sh

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

test-go:
	$(GO) test -race -count=1 -timeout 20m ./...

fuzz-short:
	FUZZTIME=$(FUZZTIME) scripts/fuzz-short.sh

# The benchmark suite's short mode asserts the deterministic RPC counts
# (write-back, fixups, no-op build, the everyday workloads' budgets): a
# regression in RPCs fails CI.
bench-quick:
	bench/run --quick

# The soak's short mode (30 s of workloads with faults on): any data
# mismatch, unexpected error or hang fails CI. Then the NFSv4.1 recall
# soak's (25 s: two v4.1 mounts and a local writer on 100 delegated files,
# close-to-open checked), without appends and truncates: with them half the
# 25-s runs meet a client write lost to a local rename the server learns of
# only after it (bench/results/soak-recall-v41.md).
soak-quick:
	bench/run soak --quick
	bench/run soak --quick --recall --recall-ops read,reopen,rewrite,rename,chmod

# The conformance suites, built from their tarballs in a scratch directory:
# pjdfstest whole against hushfs serve and against ganesha, cthon04 (basic,
# general, special, lock) against hushfs serve, pynfs's NFSv4.1 server tests
# against hushfs serve, and pjdfstest and cthon04 (all groups) on a
# vers=4.1 mount of ganesha, all at once. Any failure but the listed expected
# ones (test/conformance/expected_test.go) fails CI; the summary names every
# failure. About 5 minutes.
CONFORMANCE_DIR ?= $(CURDIR)/../shared/conformance

conformance: deps
	HUSHFS_CONFORMANCE=$(abspath $(CONFORMANCE_DIR)) $(GO) test -count=1 -v -parallel 5 -timeout 40m -run TestConformance ./test/conformance/

test: deps vet test-go fuzz-short bench-quick soak-quick conformance

bench: deps build
	bench/run

# The soak: eight workloads at once on one mount through a proxy injecting
# faults, 10 minutes (make soak SOAK_ARGS=--quick: about a minute).
soak: deps
	bench/run soak $(SOAK_ARGS)

clean:
	rm -rf bin
