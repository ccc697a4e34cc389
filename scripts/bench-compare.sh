#!/usr/bin/env bash
# bench-compare.sh: end-to-end throughput of keepstate (clover, redis), goka
# and Kafka Streams (at-least-once, exactly_once_v2) on ONE Apache Kafka
# broker, interleaved, medians of a few runs, every movie checked exact
# (`make bench-compare`). Starts the broker with scripts/kafka.sh and a
# redis-server on a free port, builds keepstate, compare/goka and
# compare/kstreams, then runs compare/throughput. Every argument is passed
# to compare/throughput; see `go run ./compare/throughput -h`.
#
#   scripts/bench-compare.sh                              1M Zipf ratings over 62k movies, 3 runs
#   scripts/bench-compare.sh --uniform --movies 1000000   the uniform workload
#   scripts/bench-compare.sh --runs 1 --systems keepstate-clover,kstreams-alos
#   scripts/bench-compare.sh --markdown docs/benchmarks.md
#   scripts/bench-compare.sh groupchange --movies 600000  the group changes side by side
#                                         (compare/groupchange: keepstate and Kafka Streams)
#
# Environment:
#   REDIS_URL   a running Redis (default: a redis-server started here)
#   BROKERS     a running Kafka (default: one started here with scripts/kafka.sh)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
driver=throughput
if [[ "${1:-}" == groupchange ]]; then
	driver=groupchange
	shift
fi
scratch="$(mktemp -d "${TMPDIR:-/tmp}/keepstate-bench-compare.XXXXXX")"
redis_pid=""
kafka_started=""
cleanup() {
	if [[ -n "$redis_pid" ]]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
	if [[ -n "$kafka_started" ]]; then scripts/kafka.sh stop "$scratch/kafka" || true; fi
	rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench-compare: building keepstate, compare/goka, compare/kstreams ..." >&2
CGO_ENABLED=0 go build -o bin/keepstate ./cmd/keepstate
go build -o "$scratch/$driver" "./compare/$driver"
[[ "$driver" == groupchange ]] || (cd compare/goka && go build -o bin/goka-compare .)
(cd compare/kstreams && { mvn -B -q -o package -DskipTests >/dev/null 2>&1 || mvn -B -q clean package -DskipTests; })

if [[ -z "${BROKERS:-}" ]]; then
	why="$(scripts/kafka.sh check 2>&1)" || { echo "bench-compare: $why" >&2; exit 2; }
	mkdir -p "$scratch/kafka"
	BROKERS="$(KEEPSTATE_KAFKA_OWNER_PID=$$ scripts/kafka.sh start "$scratch/kafka")"
	kafka_started=1
	echo "bench-compare: Apache Kafka at $BROKERS" >&2
fi
if [[ "$driver" == groupchange ]]; then
	"$scratch/groupchange" --brokers "$BROKERS" --keepstate-bin bin/keepstate \
		--kstreams-jar compare/kstreams/target/kstreams-ratings-1.jar "$@"
	exit
fi
if [[ -z "${REDIS_URL:-}" ]]; then
	command -v redis-server >/dev/null || { echo "bench-compare: redis-server not found (install it or set REDIS_URL)" >&2; exit 2; }
	port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$scratch" >"$scratch/redis.log" 2>&1 &
	redis_pid=$!
	for _ in $(seq 100); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	REDIS_URL="redis://127.0.0.1:$port/0"
fi

"$scratch/throughput" --brokers "$BROKERS" --redis-url "$REDIS_URL" \
	--keepstate-bin bin/keepstate --goka-bin compare/goka/bin/goka-compare \
	--kstreams-jar compare/kstreams/target/kstreams-ratings-1.jar "$@"
