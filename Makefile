# keepstate: build, lint and test. `make test` is what CI runs (.ci/run).
#
#   make build        static binary in bin/keepstate
#   make deps         install test dependencies (scripts/install-test-deps.sh)
#   make lint         gofmt, go vet, staticcheck, go mod tidy -diff (also in MODULES)
#   make unit         all tests with -race (Kafka tests on the in-process kfake; also MODULES),
#                     then the few built only without it (NORACE_RUN)
#   make integration  TestIntegration*/TestE2E* on one real Apache Kafka broker (without
#                     -race: the unit run already races the same tests on kfake)
#   make integration-cluster  TestCluster* on a three-node Apache Kafka KRaft cluster
#                     (broker faults: kills, pauses, rolling restart; logs STALL lines)
#   make fuzz         short fuzz runs: Avro rating decoder, API query and id parsing
#   make test         deps + lint + unit + fuzz + integration + integration-cluster
#   make bench        benchmarks
#   make bench-e2e    end-to-end `keepstate bench`: Zipf and uniform, clover and redis (scripts/bench-e2e.sh)
#   make bench-compare  keepstate vs goka vs Kafka Streams on one Apache Kafka broker (scripts/bench-compare.sh)
#   make bench-groupchange  scale-out, rolling restart, scale-in, lost nodes: keepstate vs Kafka Streams
#                     with standbys (scripts/bench-compare.sh groupchange, compare/groupchange)
#   make demo         everything in one process (kfake, srfake, clover, API on :7001)
#   make image        docker image, when a docker engine answers
#
# PKGS narrows the packages of the main module, e.g. make lint unit PKGS=./internal/testkit/...
# MODULES are modules of their own in this tree (./... stops at their go.mod)
# that lint and unit cover too: deploytest, the tests of k8s/, docker-compose
# and the Dockerfile, which need kustomize (kept out of the main module). A
# narrowed PKGS leaves them out; only them: make lint unit PKGS= MODULES=deploytest
# (compare/goka is not one: scripts/bench-compare.sh builds it.)

SHELL := /bin/bash
GO ?= go
PKGS ?= ./...
MODULES ?= $(if $(filter ./...,$(PKGS)),deploytest)
# gofmt takes directories: ./internal/testkit/... -> ./internal/testkit
GOFMT_DIRS = $(patsubst %/...,%,$(PKGS))
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck
# Timeouts make a hung test fail instead of eating CI's budget (CI: 2 cores).
# The app package's -race run alone took 12-19 min in fresh-clone CI runs.
UNIT_TIMEOUT ?= 30m
INTEGRATION_TIMEOUT ?= 20m
INTEGRATION_RUN ?= Integration|E2E
CLUSTER_TIMEOUT ?= 15m
CLUSTER_RUN ?= ^TestCluster
CLUSTER_PKGS ?= $(shell grep -rlE --include='*_test.go' '^func TestCluster' . | grep -vE '^\./(compare|deploytest)/' | xargs -r -n1 dirname | sort -u | sed 's|$$|/|')
# Tests built only without -race (//go:build !race: a fault that makes a
# dependency race with itself); unit runs them in a second pass.
NORACE_PKGS ?= $(if $(filter ./...,$(PKGS)),./app/ ./engine/)
NORACE_RUN ?= ^(TestBrokerOutageExact|TestUnitStaticMembership)$$
# Only the packages that have such tests (compiling the others with -race
# for nothing costs CI minutes, and their "no tests to run" lines hide the
# real results).
# compare/ and deploytest/ are modules of their own.
INTEGRATION_PKGS ?= $(shell grep -rlE --include='*_test.go' '^func Test(Integration|E2E)' . | grep -vE '^\./(compare|deploytest)/' | xargs -r -n1 dirname | sort -u | sed 's|$$|/|')
# A count, not a duration: with a duration Go's fuzz coordinator can report
# its own deadline as a failure ("context deadline exceeded", no crasher;
# golang/go#75804, unfixed in Go 1.26). 50000 runs took 10-15 s here.
FUZZ_TIME ?= 50000x
BENCH_TIME ?= 1s
BENCH_TIMEOUT ?= 15m
IMAGE ?= keepstate:dev

.PHONY: all build deps lint unit integration integration-cluster fuzz test bench bench-e2e bench-compare bench-groupchange demo image clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -o bin/keepstate ./cmd/keepstate

deps:
	scripts/install-test-deps.sh

lint:
	@unformatted="$$(gofmt -l $(GOFMT_DIRS) $(MODULES) </dev/null | sort -u)"; \
	if [[ -n "$$unformatted" ]]; then \
		echo "gofmt: these files are not formatted (run gofmt -w):"; echo "$$unformatted"; exit 1; \
	fi
	@command -v $(STATICCHECK) >/dev/null || { echo "lint: no staticcheck at $(STATICCHECK): run make deps (it installs the pinned version)" >&2; exit 1; }
	$(if $(PKGS),$(GO) vet $(PKGS))
	$(if $(PKGS),$(STATICCHECK) $(PKGS))
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@set -e; for m in $(MODULES); do \
		echo "cd $$m && $(GO) vet ./... && $(STATICCHECK) ./... && $(GO) mod tidy -diff"; \
		(cd "$$m" && $(GO) vet ./... && $(STATICCHECK) ./...); \
		(cd "$$m" && $(GO) mod tidy -diff) || { echo "$$m: go.mod/go.sum are not tidy: run go mod tidy in $$m"; exit 1; }; \
	done

unit:
	$(if $(PKGS),$(GO) test -race -count=1 -timeout $(UNIT_TIMEOUT) -skip '$(CLUSTER_RUN)' $(PKGS))
	$(if $(NORACE_PKGS),$(GO) test -count=1 -timeout $(UNIT_TIMEOUT) -run '$(NORACE_RUN)' $(NORACE_PKGS))
	@set -e; for m in $(MODULES); do \
		echo "cd $$m && $(GO) test -race -count=1 -timeout $(UNIT_TIMEOUT) ./..."; \
		(cd "$$m" && $(GO) test -race -count=1 -timeout $(UNIT_TIMEOUT) ./...); \
	done

# One broker serves the whole run; the trap stops it even when tests fail,
# and the script stops it by itself should this shell be killed.
integration:
	@set -euo pipefail; \
	if ! why="$$(scripts/kafka.sh check 2>&1)"; then \
		if [[ "$${KEEPSTATE_REQUIRE_SERVICES:-}" == 1 ]]; then \
			echo "integration: $$why" >&2; exit 1; \
		fi; \
		echo "integration: skipped: $$why" >&2; exit 0; \
	fi; \
	dir="$$(mktemp -d "$${TMPDIR:-/tmp}/keepstate-it-kafka.XXXXXX")"; \
	trap 'scripts/kafka.sh stop "$$dir"; rm -rf "$$dir"' EXIT; \
	trap 'exit 130' INT TERM; \
	start=$$SECONDS; \
	brokers="$$(KEEPSTATE_KAFKA_OWNER_PID=$$$$ scripts/kafka.sh start "$$dir")"; \
	echo "integration: Apache Kafka at $$brokers (started in $$((SECONDS - start))s)"; \
	KEEPSTATE_TEST_KAFKA=real KEEPSTATE_KAFKA_BROKERS="$$brokers" \
		$(GO) test -count=1 -timeout $(INTEGRATION_TIMEOUT) -run '$(INTEGRATION_RUN)' $(if $(filter ./...,$(PKGS)),$(INTEGRATION_PKGS),$(PKGS))

# The test process starts the cluster (testkit.RealKafkaCluster) once and
# shares it between the tests; its TestMain stops it, and the script stops
# it by itself should the process die. Without -race: an outage makes
# sarama's transactional producer race with itself (see brokeroutage_test.go).
integration-cluster:
	@set -euo pipefail; \
	if ! why="$$(scripts/kafka.sh check 2>&1)"; then \
		if [[ "$${KEEPSTATE_REQUIRE_SERVICES:-}" == 1 ]]; then \
			echo "integration-cluster: $$why" >&2; exit 1; \
		fi; \
		echo "integration-cluster: skipped: $$why" >&2; exit 0; \
	fi; \
	KEEPSTATE_TEST_KAFKA_CLUSTER=1 \
		$(GO) test -count=1 -timeout $(CLUSTER_TIMEOUT) -run '$(CLUSTER_RUN)' $(if $(filter ./...,$(PKGS)),$(CLUSTER_PKGS),$(PKGS))

fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzDecodeRating -fuzztime=$(FUZZ_TIME) -timeout 3m ./avro
	$(GO) test -run='^$$' -fuzz=FuzzParseQuery -fuzztime=$(FUZZ_TIME) -timeout 3m ./web

test: deps lint unit fuzz integration integration-cluster

bench:
	$(GO) test -run='^$$' -bench=. -benchtime=$(BENCH_TIME) -timeout $(BENCH_TIMEOUT) $(PKGS)

# Not part of `make test`: minutes of full-machine load each.
bench-e2e:
	scripts/bench-e2e.sh

bench-compare:
	scripts/bench-compare.sh

bench-groupchange:
	scripts/bench-compare.sh groupchange

demo:
	$(GO) run ./cmd/keepstate demo

image:
	@if docker info >/dev/null 2>&1; then \
		docker build -t $(IMAGE) . ; \
	else \
		echo "image: no docker engine answers (docker info failed): start dockerd, or build the image where docker runs" >&2; \
		exit 1; \
	fi

clean:
	rm -rf bin
