#!/usr/bin/env bash
# install-test-deps.sh: install what keepstate's tests need, skipping what is
# already there (fast when nothing is missing):
#   - Debian packages: redis-server, kafkacat (kcat), chromium (page tests of
#     the dashboard), a JDK and Maven (for the Apache Kafka test broker);
#   - staticcheck (go install, pinned);
#   - the Apache Kafka broker jars (scripts/kafka.sh fetch).
# Without root it prints what to install instead of installing it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

STATICCHECK_VERSION="0.7.0"

say() { echo "install-test-deps: $*" >&2; }

# binary -> Debian package that provides it.
declare -A PACKAGE_OF=(
	[redis-server]=redis-server
	[kcat]=kafkacat
	[chromium]=chromium
	[java]=openjdk-17-jdk-headless
	[mvn]=maven
)

missing=()
for bin in redis-server kcat chromium java mvn; do
	if ! command -v "$bin" >/dev/null 2>&1; then
		missing+=("${PACKAGE_OF[$bin]}")
	fi
done

if ((${#missing[@]} > 0)); then
	if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		say "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	else
		say "missing Debian packages: ${missing[*]}"
		say "install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}"
		say "(tests that need them are skipped, or fail when KEEPSTATE_REQUIRE_SERVICES=1)"
	fi
fi

gobin="$(go env GOBIN)"
[[ -n "$gobin" ]] || gobin="$(go env GOPATH)/bin"
if ! "$gobin/staticcheck" -version 2>/dev/null | grep -q "$STATICCHECK_VERSION"; then
	say "installing staticcheck $STATICCHECK_VERSION"
	go install "honnef.co/go/tools/cmd/staticcheck@v$STATICCHECK_VERSION"
fi

if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then
	scripts/kafka.sh fetch >/dev/null
elif ! scripts/kafka.sh check >/dev/null 2>&1; then
	say "cannot fetch the Apache Kafka jars without java and mvn; integration tests on the real broker will not run"
fi
