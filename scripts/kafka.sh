#!/usr/bin/env bash
# kafka.sh: fetch, start and stop a single-node Apache Kafka broker (KRaft,
# broker and controller in one JVM) for keepstate's integration tests.
#
#   scripts/kafka.sh fetch        download the broker jars with Maven into the cache
#   scripts/kafka.sh check        exit 0 when java is installed and the jars are cached
#   scripts/kafka.sh libs         print the cached jar folder
#   scripts/kafka.sh start DIR    format DIR, start a broker, print 127.0.0.1:PORT
#   scripts/kafka.sh stop DIR     stop the broker started in DIR
#   scripts/kafka.sh cluster-start DIR [N]  format and start N (default 3) KRaft
#                                 nodes (broker+controller each) in DIR/node-1..N,
#                                 print their bootstrap servers, comma separated
#   scripts/kafka.sh node-start DIR/node-I  start a stopped cluster node again
#   scripts/kafka.sh cluster-stop DIR       stop every node of the cluster in DIR
#
# The jars come from Maven's default central repository through
# `mvn dependency:copy-dependencies` on a generated pom; they are cached in
# ${XDG_CACHE_HOME:-~/.cache}/keepstate/kafka-VERSION/libs and fetched once.
#
# Environment:
#   KEEPSTATE_KAFKA_VERSION   Kafka version (default below)
#   KEEPSTATE_KAFKA_CACHE     cache root (default ${XDG_CACHE_HOME:-~/.cache}/keepstate)
#   KEEPSTATE_KAFKA_HEAP      broker heap (default 512m; cluster nodes 320m)
#   KEEPSTATE_KAFKA_OWNER_PID when set by `start`, the broker is stopped once
#                             this process has exited (a test binary that died)
set -euo pipefail

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"

KAFKA_VERSION="${KEEPSTATE_KAFKA_VERSION:-4.1.1}"
# log4j-slf4j-impl binds Kafka's slf4j 1.7 logging to the log4j2 core that
# kafka_2.13 already depends on; without it the broker logs nothing.
LOG4J_VERSION="2.24.3"
DEP_PLUGIN_VERSION="3.8.1"
CACHE_ROOT="${KEEPSTATE_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/keepstate}"
LIBS="$CACHE_ROOT/kafka-$KAFKA_VERSION/libs"
HEAP="${KEEPSTATE_KAFKA_HEAP:-512m}"
START_DEADLINE=60

die() {
	echo "kafka.sh: $*" >&2
	exit 1
}

usage() {
	sed -n '2,14p' "$SELF" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

have_libs() {
	[[ -f "$LIBS/.complete" ]]
}

cmd_fetch() {
	if have_libs; then
		echo "$LIBS"
		return 0
	fi
	command -v mvn >/dev/null 2>&1 || die "mvn not found: install Maven (apt-get install -y maven)"
	command -v java >/dev/null 2>&1 || die "java not found: install a JDK 17+ (apt-get install -y openjdk-17-jdk-headless)"
	local work
	work="$(mktemp -d "${TMPDIR:-/tmp}/keepstate-kafka-fetch.XXXXXX")"
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" EXIT
	cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.keepstate</groupId>
  <artifactId>kafka-broker-fetch</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>$DEP_PLUGIN_VERSION</version>
      </plugin>
    </plugins>
  </build>
</project>
EOF
	echo "kafka.sh: fetching Apache Kafka $KAFKA_VERSION broker jars with Maven" >&2
	if ! mvn -B -q -f "$work/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$work/libs" >"$work/mvn.log" 2>&1; then
		cat "$work/mvn.log" >&2
		die "mvn dependency:copy-dependencies failed"
	fi
	[[ -f "$work/libs/kafka_2.13-$KAFKA_VERSION.jar" ]] || die "maven did not deliver kafka_2.13-$KAFKA_VERSION.jar"
	touch "$work/libs/.complete"
	mkdir -p "$(dirname "$LIBS")"
	# Another fetch may have finished first; its copy is as good as ours.
	if ! mv -T "$work/libs" "$LIBS" 2>/dev/null && ! have_libs; then
		die "cannot move the jars to $LIBS"
	fi
	echo "$LIBS"
}

cmd_check() {
	command -v java >/dev/null 2>&1 || die "java not found: install a JDK 17+ (apt-get install -y openjdk-17-jdk-headless)"
	have_libs || die "Kafka $KAFKA_VERSION jars are not in $LIBS: run scripts/kafka.sh fetch (needs java and mvn)"
}

# free_port prints a TCP port on 127.0.0.1 that nothing listens on. It picks
# below the usual ephemeral range so outgoing connections do not take it.
free_port() {
	local p i
	for i in $(seq 1 200); do
		p=$((20000 + RANDOM % 12000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	die "no free port found"
}

port_open() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

write_config() {
	local dir="$1" port="$2" cport="$3"
	cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=3
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
num.network.threads=2
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=16777216
log.cleaner.backoff.ms=1000
EOF
	cat >"$dir/log4j2.properties" <<EOF
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
EOF
}

java_opts() {
	local dir="$1"
	echo "-Xmx$HEAP -Xms64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true" \
		"-Dlog4j2.configurationFile=$dir/log4j2.properties"
}

# pid_alive reports whether process $1 runs (a zombie does not count).
pid_alive() {
	kill -0 "$1" 2>/dev/null || return 1
	local state
	state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)"
	[[ "$state" != "Z" ]]
}

# start_once tries one start on fresh ports. It returns 0 when the broker is
# up, 3 when it died because a port was taken (try again), 1 otherwise.
start_once() {
	local dir="$1" port cport pid deadline
	port="$(free_port)"
	cport="$(free_port)"
	[[ "$port" != "$cport" ]] || return 3
	write_config "$dir" "$port" "$cport"
	rm -rf "$dir/data"
	# A base64url id can start with '-', which the tool's argument parser
	# takes for an option (1 run in 64 failed that way); Kafka's own
	# Uuid.randomUuid skips such ids, and so do we.
	local cluster_id=-
	while [[ "$cluster_id" == -* ]]; do
		cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
	done
	# shellcheck disable=SC2046
	if ! java $(java_opts "$dir") -cp "$LIBS/*" kafka.tools.StorageTool format \
		-t "$cluster_id" -c "$dir/server.properties" >"$dir/format.log" 2>&1; then
		cat "$dir/format.log" >&2
		return 1
	fi
	# setsid and closed std streams: the broker outlives this script and does
	# not hold the caller's pipes open.
	rm -f "$dir/pid"
	# shellcheck disable=SC2016
	setsid bash -c 'echo $$ >"$1/pid"; shift; exec "$@"' _ "$dir" \
		java $(java_opts "$dir") -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" \
		</dev/null >"$dir/kafka.log" 2>&1 &
	for _ in $(seq 1 50); do
		[[ -s "$dir/pid" ]] && break
		sleep 0.05
	done
	pid="$(cat "$dir/pid")"
	echo "$port" >"$dir/port"
	deadline=$((SECONDS + START_DEADLINE))
	while ((SECONDS < deadline)); do
		if ! pid_alive "$pid"; then
			if grep -q "Address already in use" "$dir/kafka.log"; then
				return 3
			fi
			echo "kafka.sh: broker exited during start; last lines of $dir/kafka.log:" >&2
			tail -n 30 "$dir/kafka.log" >&2
			return 1
		fi
		if grep -q "Kafka Server started" "$dir/kafka.log" && port_open "$port"; then
			return 0
		fi
		sleep 0.2
	done
	echo "kafka.sh: broker not ready after ${START_DEADLINE}s; last lines of $dir/kafka.log:" >&2
	tail -n 30 "$dir/kafka.log" >&2
	kill -9 "$pid" 2>/dev/null || true
	return 1
}

# watch_owner stops the broker once the owner process has gone, so a test
# binary killed by a timeout does not leave a broker behind.
watch_owner() {
	local dir="$1" owner="$2" pid
	pid="$(cat "$dir/pid")"
	(
		while pid_alive "$owner" && pid_alive "$pid"; do
			sleep 1
		done
		if pid_alive "$pid"; then
			bash "$SELF" stop "$dir" >/dev/null 2>&1 || true
		fi
	) </dev/null >/dev/null 2>&1 &
	disown
}

cmd_start() {
	local dir="${1:-}"
	[[ -n "$dir" ]] || usage
	cmd_check
	mkdir -p "$dir"
	dir="$(cd "$dir" && pwd)"
	if [[ -f "$dir/pid" ]] && pid_alive "$(cat "$dir/pid")"; then
		die "a broker already runs from $dir (pid $(cat "$dir/pid"))"
	fi
	local try rc
	for try in 1 2 3; do
		rc=0
		start_once "$dir" || rc=$?
		case "$rc" in
		0)
			if [[ -n "${KEEPSTATE_KAFKA_OWNER_PID:-}" ]]; then
				watch_owner "$dir" "$KEEPSTATE_KAFKA_OWNER_PID"
			fi
			echo "127.0.0.1:$(cat "$dir/port")"
			return 0
			;;
		3) echo "kafka.sh: port taken, retrying ($try)" >&2 ;;
		*) die "broker did not start (log: $dir/kafka.log)" ;;
		esac
	done
	die "broker did not start: ports kept being taken"
}

cmd_stop() {
	local dir="${1:-}"
	[[ -n "$dir" ]] || usage
	local pid i
	# The pid file may vanish at any moment (the owner watchdog stops the
	# broker and removes it): no file means already stopped.
	pid="$(cat "$dir/pid" 2>/dev/null)" || return 0
	if pid_alive "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		# A single-node broker shuts down in a few seconds; the data is
		# throwaway, so do not wait long before killing it.
		for i in $(seq 1 100); do
			pid_alive "$pid" || break
			sleep 0.1
		done
		if pid_alive "$pid"; then
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$dir/pid"
}

# write_node_config writes the server.properties of cluster node id in dir:
# every node is broker and controller, the voters are all nodes.
write_node_config() {
	local dir="$1" id="$2" port="$3" cport="$4" voters="$5" n="$6"
	local rf=$((n < 3 ? n : 3)) isr=$((n < 3 ? 1 : 2))
	write_config "$dir" "$port" "$cport"
	sed -i -e "s/^node.id=.*/node.id=$id/" \
		-e "s/^controller.quorum.voters=.*/controller.quorum.voters=$voters/" \
		-e "s/^default.replication.factor=.*/default.replication.factor=$rf/" \
		-e "s/^min.insync.replicas=.*/min.insync.replicas=$isr/" \
		-e "s/^offsets.topic.replication.factor=.*/offsets.topic.replication.factor=$rf/" \
		-e "s/^transaction.state.log.replication.factor=.*/transaction.state.log.replication.factor=$rf/" \
		-e "s/^transaction.state.log.min.isr=.*/transaction.state.log.min.isr=$isr/" \
		-e "s/^share.coordinator.state.topic.replication.factor=.*/share.coordinator.state.topic.replication.factor=$rf/" \
		-e "s/^share.coordinator.state.topic.min.isr=.*/share.coordinator.state.topic.min.isr=$isr/" \
		-e "s/^num.io.threads=.*/num.io.threads=1/" \
		"$dir/server.properties"
	# Kafka's failure detection (a killed node is fenced after
	# broker.session.timeout.ms, 9 s by default) stays at its default, so
	# that the stalls measured on this cluster are those of a production one.
	echo "unclean.leader.election.enable=false" >>"$dir/server.properties"
	echo "$port" >"$dir/port"
}

# node_launch starts the node configured (and formatted) in dir and waits
# until it serves: 0 when up, 3 when a port was taken, 1 otherwise.
node_launch() {
	local dir="$1" port pid deadline started
	port="$(cat "$dir/port")"
	rm -f "$dir/pid"
	touch "$dir/kafka.log"
	started="$(grep -c "Kafka Server started" "$dir/kafka.log" || true)"
	# shellcheck disable=SC2016,SC2046
	setsid bash -c 'echo $$ >"$1/pid"; shift; exec "$@"' _ "$dir" \
		java $(java_opts "$dir") -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" \
		</dev/null >>"$dir/kafka.log" 2>&1 &
	for _ in $(seq 1 50); do
		[[ -s "$dir/pid" ]] && break
		sleep 0.05
	done
	pid="$(cat "$dir/pid")"
	deadline=$((SECONDS + START_DEADLINE))
	while ((SECONDS < deadline)); do
		if ! pid_alive "$pid"; then
			if tail -n 50 "$dir/kafka.log" | grep -q "Address already in use"; then
				return 3
			fi
			echo "kafka.sh: node exited during start; last lines of $dir/kafka.log:" >&2
			tail -n 30 "$dir/kafka.log" >&2
			return 1
		fi
		if (($(grep -c "Kafka Server started" "$dir/kafka.log" || true) > started)) && port_open "$port"; then
			if [[ -n "${KEEPSTATE_KAFKA_OWNER_PID:-}" ]]; then
				watch_owner "$dir" "$KEEPSTATE_KAFKA_OWNER_PID"
			fi
			return 0
		fi
		sleep 0.2
	done
	echo "kafka.sh: node not ready after ${START_DEADLINE}s; last lines of $dir/kafka.log:" >&2
	tail -n 30 "$dir/kafka.log" >&2
	kill -9 "$pid" 2>/dev/null || true
	return 1
}

# cluster_once formats and starts n nodes on fresh ports (like start_once).
# The nodes start together: none reports itself started before a majority
# of the voters runs.
cluster_once() {
	local dir="$1" n="$2" i voters="" cluster_id=- ports=() cports=()
	for i in $(seq 1 "$n"); do
		ports+=("$(free_port)")
		cports+=("$(free_port)")
		voters+="${voters:+,}$i@127.0.0.1:${cports[$((i - 1))]}"
	done
	while [[ "$cluster_id" == -* ]]; do
		cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
	done
	for i in $(seq 1 "$n"); do
		local nd="$dir/node-$i"
		rm -rf "$nd"
		mkdir -p "$nd"
		write_node_config "$nd" "$i" "${ports[$((i - 1))]}" "${cports[$((i - 1))]}" "$voters" "$n"
		# shellcheck disable=SC2046
		if ! java $(java_opts "$nd") -cp "$LIBS/*" kafka.tools.StorageTool format \
			-t "$cluster_id" -c "$nd/server.properties" >"$nd/format.log" 2>&1; then
			cat "$nd/format.log" >&2
			return 1
		fi
	done
	local pids=() rc=0 r
	for i in $(seq 1 "$n"); do
		node_launch "$dir/node-$i" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		r=0
		wait "${pids[$i]}" || r=$?
		if ((r == 3)); then
			rc=3
		elif ((r != 0 && rc == 0)); then
			rc=1
		fi
	done
	if ((rc != 0)); then
		cmd_cluster_stop "$dir"
	fi
	return "$rc"
}

cmd_cluster_start() {
	local dir="${1:-}" n="${2:-3}"
	[[ -n "$dir" ]] || usage
	cmd_check
	HEAP="${KEEPSTATE_KAFKA_HEAP:-320m}"
	mkdir -p "$dir"
	dir="$(cd "$dir" && pwd)"
	local try rc i out=""
	for try in 1 2 3; do
		rc=0
		cluster_once "$dir" "$n" || rc=$?
		case "$rc" in
		0)
			for i in $(seq 1 "$n"); do
				out+="${out:+,}127.0.0.1:$(cat "$dir/node-$i/port")"
			done
			echo "$out"
			return 0
			;;
		3) echo "kafka.sh: port taken, retrying ($try)" >&2 ;;
		*) die "cluster did not start (logs: $dir/node-*/kafka.log)" ;;
		esac
	done
	die "cluster did not start: ports kept being taken"
}

cmd_node_start() {
	local dir="${1:-}"
	[[ -n "$dir" && -f "$dir/server.properties" ]] || die "node-start: $dir is not a cluster node directory"
	cmd_check
	HEAP="${KEEPSTATE_KAFKA_HEAP:-320m}"
	if [[ -f "$dir/pid" ]] && pid_alive "$(cat "$dir/pid")"; then
		die "the node in $dir already runs (pid $(cat "$dir/pid"))"
	fi
	node_launch "$dir" || die "the node in $dir did not start (log: $dir/kafka.log)"
	echo "127.0.0.1:$(cat "$dir/port")"
}

cmd_cluster_stop() {
	local dir="${1:-}" nd
	[[ -n "$dir" ]] || usage
	for nd in "$dir"/node-*; do
		[[ -d "$nd" ]] || continue
		# A paused (SIGSTOP) node does not act on SIGTERM.
		if [[ -f "$nd/pid" ]]; then
			kill -CONT "$(cat "$nd/pid")" 2>/dev/null || true
		fi
		cmd_stop "$nd" &
	done
	wait
}

case "${1:-}" in
fetch) cmd_fetch ;;
check) cmd_check ;;
libs)
	cmd_check
	echo "$LIBS"
	;;
start) cmd_start "${2:-}" ;;
stop) cmd_stop "${2:-}" ;;
cluster-start) cmd_cluster_start "${2:-}" "${3:-3}" ;;
node-start) cmd_node_start "${2:-}" ;;
cluster-stop) cmd_cluster_stop "${2:-}" ;;
*) usage ;;
esac
