#!/usr/bin/env bash
# bench-e2e.sh: keepstate's end-to-end benchmark matrix with one command
# (`make bench-e2e`): `keepstate bench` for each workload and each store, on
# the in-process broker (or BROKERS), every phase (fill, run, kill -9
# restart, full restore), every movie checked exact. Prints one table per
# combination; exits non-zero if any check fails.
#
#   scripts/bench-e2e.sh                        Zipf 62k and uniform 1M movies, clover and redis
#   WORKLOADS=zipf STORES=clover scripts/bench-e2e.sh
#
# Environment:
#   WORKLOADS   space-separated: zipf uniform          (default both)
#   STORES      space-separated: clover redis          (default both)
#   RATINGS     ratings of the run phase               (default 1000000)
#   ZIPF_MOVIES movies of the Zipf workload            (default 62000)
#   UNIFORM_MOVIES movies of the uniform workload      (default 1000000)
#   PHASES      keepstate bench --phases               (default fill,run,restart,restore)
#   BROKERS     a running Kafka (default: in-process kfake)
#   REDIS_URL   a running Redis (default: a redis-server started here, on a free port)
#   KEEPSTATE   keepstate binary (default: built into bin/keepstate)
#   BENCH_ARGS  extra `keepstate bench` flags (e.g. --json, --child-arg=--commit-interval=500ms)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
WORKLOADS="${WORKLOADS:-zipf uniform}"
STORES="${STORES:-clover redis}"
RATINGS="${RATINGS:-1000000}"
ZIPF_MOVIES="${ZIPF_MOVIES:-62000}"
UNIFORM_MOVIES="${UNIFORM_MOVIES:-1000000}"
PHASES="${PHASES:-fill,run,restart,restore}"

if [[ -z "${KEEPSTATE:-}" ]]; then
	CGO_ENABLED=0 go build -o bin/keepstate ./cmd/keepstate
	KEEPSTATE=bin/keepstate
fi

redis_pid=""
scratch="$(mktemp -d "${TMPDIR:-/tmp}/keepstate-bench-e2e.XXXXXX")"
cleanup() {
	if [[ -n "$redis_pid" ]]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
	rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ " $STORES " == *" redis "* && -z "${REDIS_URL:-}" ]]; then
	command -v redis-server >/dev/null || { echo "bench-e2e: redis-server not found (install it, set REDIS_URL, or STORES=clover)" >&2; exit 2; }
	port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$scratch" >"$scratch/redis.log" 2>&1 &
	redis_pid=$!
	for _ in $(seq 100); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	REDIS_URL="redis://127.0.0.1:$port/0"
fi

broker_args=()
[[ -n "${BROKERS:-}" ]] && broker_args=(--brokers "$BROKERS")
status=0
for w in $WORKLOADS; do
	case "$w" in
	zipf) movies="$ZIPF_MOVIES" ;;
	uniform) movies="$UNIFORM_MOVIES" ;;
	*) echo "bench-e2e: unknown workload $w (zipf or uniform)" >&2; exit 2 ;;
	esac
	for s in $STORES; do
		echo
		echo "== keepstate bench --$w --movies $movies --ratings $RATINGS --store $s"
		# shellcheck disable=SC2086
		if ! "$KEEPSTATE" bench "--$w" --movies "$movies" --ratings "$RATINGS" --store "$s" \
			--redis-url "${REDIS_URL:-redis://localhost:6379/0}" --phases "$PHASES" "${broker_args[@]}" ${BENCH_ARGS:-}; then
			status=1
		fi
	done
done
exit "$status"
