#!/usr/bin/env bash
# scripts/kafka.sh: run a real Apache Kafka (KRaft) broker from Maven Central's
# jars, without Docker, for the integration and end-to-end tests.
#
#   scripts/kafka.sh [--nodes 1|3] [--keep] up|down|status|bootstrap
#
#   up         fetch the jars (once, cached), format storage, start the node(s)
#              in the background, wait until every client port answers a Kafka
#              ApiVersions request, print the bootstrap address. Idempotent: a
#              cluster that is already up is left alone, and of a cluster that
#              is partly up (a node killed by a fault test) only the missing
#              nodes are started, on their data.
#   down       SIGTERM (controlled shutdown), wait, SIGKILL stragglers, then
#              delete the data dirs so the next `up` starts clean; `--keep`
#              keeps them (the next `up` reuses them).
#   status     print running / not running; exit 0 when every node runs.
#   bootstrap  print the bootstrap address (comma-separated host:port).
#
# Fault injection: node N's pid is in $KAFKA_RUN_DIR/node-N/kafka.pid; send it
# SIGKILL, SIGSTOP/SIGCONT or SIGTERM, then `up` (with the same --nodes)
# restarts what is missing.
#
# Kafka version: scripts/kafka/pom.xml (4.2.0, log4j 2.25.3, slf4j 1.7.36).
#
# Environment (defaults in brackets):
#   KAFKA_NODES          1 or 3 [1]; same as --nodes
#   KAFKA_PORT           single-node client port [9092]; controller is
#                        KAFKA_CONTROLLER_PORT [KAFKA_PORT+1]. Three nodes use
#                        19092/29092/39092, controllers 19093/29093/39093.
#   KAFKA_RUN_DIR        configs, data, logs, pid files [$HOME/.cache/processor-kafka/run]
#   KAFKA_CACHE_DIR      jar cache [${XDG_CACHE_HOME:-$HOME/.cache}/processor-kafka]
#   KAFKA_HEAP_OPTS      [-Xms256m -Xmx512m]
#   KAFKA_JVM_OPTS       extra broker JVM flags []
#   KAFKA_START_TIMEOUT  seconds to wait for readiness [180]
#   KAFKA_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL [30]
#   JAVA_HOME            java to use [java on PATH]; Kafka 4 needs Java 17+
#
# Secure listeners (opt-in, single node only; the PLAINTEXT listener on
# KAFKA_PORT stays, for the broker itself and plaintext clients). Each port
# set adds its listener on 127.0.0.1:
#   KAFKA_SASL_PORT      SASL_PLAINTEXT with SCRAM-SHA-512 []
#   KAFKA_SSL_PORT       SSL with client authentication required (mTLS) []
#   KAFKA_SASL_SSL_PORT  SASL_SSL: TLS (no client certificate) + SCRAM-SHA-512 []
#   KAFKA_SECURE_DIR     directory of the PEM files of the TLS listeners:
#                        ca.pem (CA certificates: the trust store, which
#                        verifies client certificates) and broker.pem (the
#                        broker's unencrypted PKCS #8 private key and its
#                        certificate chain); required with an SSL port []
#   KAFKA_SCRAM_USER     SCRAM-SHA-512 user created when the storage is
#                        formatted (StorageTool format --add-scram) [processor]
#   KAFKA_SCRAM_PASSWORD its password, of [A-Za-z0-9._-]; required with a SASL
#                        port. For test credentials only: it is on the
#                        StorageTool command line []
# No authorizer runs: every authenticated client may do everything.
#
# Settings are those of a single-node KRaft test broker: RF 1 for the
# internal topics (the default RF 3 never lets the group or transaction
# coordinator come up on one node), small internal topics (5 partitions) for a
# fast start, group.initial.rebalance.delay.ms=0, 6 s KIP-848 session timeout,
# 1 s transaction-abort sweep and cleaner backoff, auto.create.topics.enable=false (the processor
# creates its topics and tests create theirs with kadm: a typo must fail, not
# silently create a topic).
#
# Measured on the 2-core dev machine (Java 17, Kafka 4.2.0; wall time of the
# command, other builds sharing the cores at load average 1-8):
#   cold `up`, single node (empty Maven repo and jar cache; downloads the
#     Maven plugin and 53 jars, 44 MB):          13.6 s (load ~1), 20.8 s (load ~8)
#   warm `up`, single node (jar cache present):   5.5-10.6 s (StorageTool ~2.5 s,
#     broker JVM to "Kafka Server started" ~4-7 s); 99 s once at load 12
#   warm `up`, three nodes:                       20.7-21.4 s
#   `down` (SIGTERM, controlled shutdown):        1.7-2.5 s single node, 7.7 s three nodes
#   KAFKA_JVM_OPTS=-XX:TieredStopAtLevel=1 (C1 only) starts ~25% faster
#   (4.7 s) but lowers the broker's steady-state speed, so it is not the default.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pom="$here/kafka/pom.xml"

# ---- options -----------------------------------------------------------------

nodes=${KAFKA_NODES:-1}
keep=0
cmd=""
while [ $# -gt 0 ]; do
	case "$1" in
	--nodes) nodes=${2:?--nodes needs 1 or 3}; shift 2 ;;
	--nodes=*) nodes=${1#--nodes=}; shift ;;
	--keep) keep=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	up | down | status | bootstrap)
		[ -z "$cmd" ] || { echo "kafka.sh: one command at a time" >&2; exit 2; }
		cmd=$1; shift ;;
	*) echo "kafka.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
done
[ -n "$cmd" ] || { echo "usage: kafka.sh [--nodes 1|3] [--keep] up|down|status|bootstrap" >&2; exit 2; }
case "$nodes" in 1 | 3) ;; *) echo "kafka.sh: --nodes must be 1 or 3, not '$nodes'" >&2; exit 2 ;; esac

kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")
cache_dir=${KAFKA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/processor-kafka}/$kafka_version
libs="$cache_dir/libs"
run_dir=${KAFKA_RUN_DIR:-$HOME/.cache/processor-kafka/run}
java=${JAVA_HOME:+$JAVA_HOME/bin/}java
heap=${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}
jvm_opts=${KAFKA_JVM_OPTS:-}
start_timeout=${KAFKA_START_TIMEOUT:-180}
stop_timeout=${KAFKA_STOP_TIMEOUT:-30}
sasl_port=${KAFKA_SASL_PORT:-}
ssl_port=${KAFKA_SSL_PORT:-}
sasl_ssl_port=${KAFKA_SASL_SSL_PORT:-}
secure_dir=${KAFKA_SECURE_DIR:-}
scram_user=${KAFKA_SCRAM_USER:-processor}
scram_password=${KAFKA_SCRAM_PASSWORD:-}

log() { echo "kafka.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# client_port N / controller_port N: ports of node N for the chosen layout.
client_port() {
	if [ "$nodes" = 1 ]; then echo "${KAFKA_PORT:-9092}"; else echo "$1"9092; fi
}
controller_port() {
	if [ "$nodes" = 1 ]; then echo "${KAFKA_CONTROLLER_PORT:-$((${KAFKA_PORT:-9092} + 1))}"; else echo "$1"9093; fi
}
# secure_ports: the opt-in secure listener ports (none by default).
secure_ports() { echo "$sasl_port" "$ssl_port" "$sasl_ssl_port"; }

# check_secure: the secure settings are usable (called by up).
check_secure() {
	[ -n "$sasl_port$ssl_port$sasl_ssl_port" ] || return 0
	[ "$nodes" = 1 ] || die "secure listeners (KAFKA_SASL_PORT, KAFKA_SSL_PORT, KAFKA_SASL_SSL_PORT) need a single node"
	if [ -n "$sasl_port$sasl_ssl_port" ]; then
		[[ "$scram_user" =~ ^[A-Za-z0-9._-]+$ ]] || die "KAFKA_SCRAM_USER must be of [A-Za-z0-9._-]"
		[[ "$scram_password" =~ ^[A-Za-z0-9._-]+$ ]] || die "KAFKA_SCRAM_PASSWORD (of [A-Za-z0-9._-]) is required with a SASL port"
	fi
	if [ -n "$ssl_port$sasl_ssl_port" ]; then
		[ -n "$secure_dir" ] || die "KAFKA_SECURE_DIR (with ca.pem and broker.pem) is required with an SSL port"
		secure_dir=$(cd "$secure_dir" && pwd) || die "KAFKA_SECURE_DIR=$secure_dir is not a directory"
		local f
		for f in ca.pem broker.pem; do
			[ -r "$secure_dir/$f" ] || die "KAFKA_SECURE_DIR has no readable $f"
		done
	fi
}

bootstrap_addr() {
	local i out=""
	for i in $(seq 1 "$nodes"); do out+="${out:+,}127.0.0.1:$(client_port "$i")"; done
	echo "$out"
}

# ---- state of a running cluster ----------------------------------------------
# $run_dir/cluster.env records the layout that `up` started (NODES, ports,
# BOOTSTRAP), so down/status/bootstrap work without repeating --nodes or
# KAFKA_PORT.

load_running_layout() {
	if [ -f "$run_dir/cluster.env" ]; then
		# shellcheck disable=SC1091
		. "$run_dir/cluster.env"
		# shellcheck disable=SC2153 # NODES comes from cluster.env
		nodes=$NODES
	fi
}

save_layout() {
	printf 'NODES=%s\nKAFKA_PORT=%s\nKAFKA_CONTROLLER_PORT=%s\nBOOTSTRAP=%s\n' \
		"$nodes" "$(client_port 1)" "$(controller_port 1)" "$(bootstrap_addr)" >"$run_dir/cluster.env"
}

node_pid() { # prints the pid of node N if it is alive (and still a broker)
	local f="$run_dir/node-$1/kafka.pid" pid
	[ -f "$f" ] || return 1
	pid=$(cat "$f")
	kill -0 "$pid" 2>/dev/null || return 1
	grep -qa kafka.Kafka "/proc/$pid/cmdline" 2>/dev/null || return 1
	echo "$pid"
}

running_count() {
	local i n=0
	for i in $(seq 1 "$nodes"); do node_pid "$i" >/dev/null && n=$((n + 1)); done
	echo "$n"
}

# ---- readiness probe ---------------------------------------------------------
# Sends a Kafka ApiVersions v0 request (api key 18, correlation id 1, client
# id "probe") over bash's /dev/tcp and checks the response's correlation id and
# error code 0. The client port opens only once the broker is unfenced, and an
# answer proves the request handlers run; no JVM start needed.

# shellcheck disable=SC2016 # the inner script expands its own $0
probe() { # probe PORT
	timeout 5 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
		printf "\x00\x00\x00\x0f\x00\x12\x00\x00\x00\x00\x00\x01\x00\x05probe" >&3
		resp=$(head -c 10 <&3 | od -An -tx1 | tr -d " \n")
		[ "${resp:8:12}" = "000000010000" ]
	' "$1" 2>/dev/null
}

# shellcheck disable=SC2016
port_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null; }

# ---- jars --------------------------------------------------------------------

fetch_jars() {
	local stamp want
	want=$(sha256sum "$pom" | cut -d' ' -f1)
	stamp="$cache_dir/libs.complete"
	if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$libs" ]; then
		return 0
	fi
	command -v mvn >/dev/null || die "mvn not found: install Maven (apt-get install -y maven)"
	log "fetching Kafka $kafka_version jars from Maven Central into $libs"
	mkdir -p "$cache_dir"
	local tmp="$cache_dir/libs.tmp.$$"
	rm -rf "$tmp"
	(cd "$here/kafka" && mvn -B -q -ntp -Dstyle.color=never \
		org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$tmp") ||
		{ rm -rf "$tmp"; die "mvn copy-dependencies failed (see above)"; }
	ls "$tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || { rm -rf "$tmp"; die "no kafka_2.13 jar in $tmp"; }
	rm -rf "$libs"
	mv "$tmp" "$libs"
	echo "$want" >"$stamp"
	log "$(find "$libs" -name '*.jar' | wc -l) jars, $(du -sh "$libs" | cut -f1)"
}

# ---- configuration -----------------------------------------------------------

new_cluster_id() { # 22 chars of URL-safe base64 of 16 random bytes, not starting with '-'
	local id
	while :; do
		id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
		[ "${id:0:1}" != "-" ] && { echo "$id"; return; }
	done
}

write_server_properties() { # write_server_properties N
	local i=$1 dir="$run_dir/node-$1" voters="" j
	for j in $(seq 1 "$nodes"); do voters+="${voters:+,}$j@127.0.0.1:$(controller_port "$j")"; done
	local rf=1 isr=1
	[ "$nodes" = 3 ] && rf=3 isr=2
	# Opt-in secure listeners, named after their protocols.
	local extra="" extra_map="" proto port
	for proto in SASL_PLAINTEXT:$sasl_port SSL:$ssl_port SASL_SSL:$sasl_ssl_port; do
		port=${proto#*:} proto=${proto%%:*}
		[ -n "$port" ] || continue
		extra+=",$proto://127.0.0.1:$port"
		extra_map+=",$proto:$proto"
	done
	cat >"$dir/server.properties" <<EOF
# Written by scripts/kafka.sh; rewritten on every up.
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(client_port "$i"),CONTROLLER://127.0.0.1:$(controller_port "$i")$extra
advertised.listeners=PLAINTEXT://127.0.0.1:$(client_port "$i")$extra
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT$extra_map
log.dirs=$dir/data

# Topics: the processor and the tests create theirs explicitly.
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr

# Internal topics sized for the cluster; few partitions for a fast start.
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr

# Groups: no initial delay; short KIP-848 session/heartbeat for tests that kill
# consumers; classic groups may use session timeouts down to 6 s (the default).
group.initial.rebalance.delay.ms=0
group.consumer.session.timeout.ms=6000
group.consumer.min.session.timeout.ms=6000
group.consumer.heartbeat.interval.ms=2000
group.consumer.min.heartbeat.interval.ms=1000
group.min.session.timeout.ms=6000

# Transactions: transaction.max.timeout.ms stays 15 min (default). A timed-out
# transaction of a dead producer is aborted within 1 s of its timeout (default
# sweep every 10 s).
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000

# Compaction: a 16 MB cleaner buffer instead of 128 MB (small machine), and
# the cleaner looks for work every second instead of every 15 s so tests can
# watch a compacted topic shrink.
log.cleaner.dedupe.buffer.size=16777216
log.cleaner.backoff.ms=1000
EOF
	if [ -n "$sasl_port$sasl_ssl_port" ]; then
		cat >>"$dir/server.properties" <<EOF

# SCRAM-SHA-512 on the SASL listeners; the credentials are created when the
# storage is formatted (--add-scram). The login module takes no options: the
# broker does not authenticate to itself over SASL.
sasl.enabled.mechanisms=SCRAM-SHA-512
EOF
		for proto in sasl_plaintext:$sasl_port sasl_ssl:$sasl_ssl_port; do
			[ -n "${proto#*:}" ] || continue
			echo "listener.name.${proto%%:*}.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;" >>"$dir/server.properties"
		done
	fi
	if [ -n "$ssl_port$sasl_ssl_port" ]; then
		cat >>"$dir/server.properties" <<EOF

# TLS from PEM files: the key store holds the broker's key and certificate
# chain, the trust store the CA certificates. The SSL listener requires a
# client certificate; SASL_SSL clients authenticate with SCRAM instead.
ssl.keystore.type=PEM
ssl.keystore.location=$secure_dir/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$secure_dir/ca.pem
listener.name.ssl.ssl.client.auth=required
EOF
	fi
	if [ "$nodes" = 3 ]; then
		cat >>"$dir/server.properties" <<EOF

# Three nodes on one machine: detect a dead broker in 4 s.
broker.session.timeout.ms=4000
broker.heartbeat.interval.ms=1000
EOF
	fi

	# log4j2: everything at INFO to logs/server.log (the state-change and
	# request loggers stay quiet, as in Kafka's own config).
	cat >"$dir/log4j2.properties" <<EOF
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $dir/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = info
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.statechange.name = state.change.logger
logger.statechange.level = warn
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
EOF
}

# ---- commands ----------------------------------------------------------------

cmd_up() {
	fetch_jars
	command -v "$java" >/dev/null || die "java not found: install a JDK 17+ (apt-get install -y default-jdk-headless)"

	# A cluster of this layout may be up, or partly up (a node killed by a
	# fault test): start only the nodes that do not run.
	local want=$nodes want_port=${KAFKA_PORT:-} want_cport=${KAFKA_CONTROLLER_PORT:-} alive=0
	if [ -f "$run_dir/cluster.env" ]; then
		load_running_layout
		alive=$(running_count)
		if [ "$alive" -gt 0 ] && [ "$nodes" != "$want" ]; then
			die "a $nodes-node cluster is running; run 'scripts/kafka.sh down' first"
		fi
		if [ "$alive" = 0 ]; then
			# Nothing runs: the ports asked for now apply. Stale data of
			# another layout cannot be reused.
			KAFKA_PORT=$want_port KAFKA_CONTROLLER_PORT=$want_cport
			[ -n "$KAFKA_PORT" ] || unset KAFKA_PORT
			[ -n "$KAFKA_CONTROLLER_PORT" ] || unset KAFKA_CONTROLLER_PORT
			if [ "$nodes" != "$want" ]; then
				rm -rf "$run_dir"/node-* "$run_dir/cluster.id" "$run_dir/cluster.env"
				nodes=$want
			fi
		fi
	fi
	if [ "$alive" = "$nodes" ]; then
		log "already running"
		bootstrap_addr
		return 0
	fi

	check_secure
	local i port todo=()
	for i in $(seq 1 "$nodes"); do
		node_pid "$i" >/dev/null && continue
		todo+=("$i")
		for port in $(client_port "$i") $(controller_port "$i") $(secure_ports); do
			port_open "$port" && die "port $port on 127.0.0.1 is taken by another process (not a broker of $run_dir)"
		done
	done

	mkdir -p "$run_dir"
	local cluster_id
	if [ -f "$run_dir/cluster.id" ] && [ -d "$run_dir/node-1/data" ]; then
		cluster_id=$(cat "$run_dir/cluster.id")
		[ "$alive" -gt 0 ] || log "reusing the data in $run_dir (kept by 'down --keep' or left by a crash)"
	else
		rm -rf "$run_dir"/node-*
		cluster_id=$(new_cluster_id)
		echo "$cluster_id" >"$run_dir/cluster.id"
	fi
	save_layout

	# Format the storage of nodes that have none (in parallel: a JVM each).
	local pids=() fmt=() scram=()
	if [ -n "$sasl_port$sasl_ssl_port" ]; then
		scram=(--add-scram "SCRAM-SHA-512=[name=$scram_user,password=$scram_password]")
	fi
	for i in "${todo[@]}"; do
		mkdir -p "$run_dir/node-$i/data" "$run_dir/node-$i/logs"
		write_server_properties "$i"
		[ -f "$run_dir/node-$i/data/meta.properties" ] && continue
		"$java" -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$libs/*" \
			kafka.tools.StorageTool format -t "$cluster_id" \
			-c "$run_dir/node-$i/server.properties" --ignore-formatted "${scram[@]}" \
			>"$run_dir/node-$i/logs/format.log" 2>&1 &
		pids+=($!)
		fmt+=("$i")
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || {
			cat "$run_dir/node-${fmt[$i]}/logs/format.log" >&2
			die "formatting node ${fmt[$i]} failed"
		}
	done

	# Start each node in its own session, detached from our stdout/stderr
	# (a caller such as `go test` waits for its pipes to close) and from the
	# lock's file descriptor 9.
	for i in "${todo[@]}"; do
		local dir="$run_dir/node-$i"
		# shellcheck disable=SC2086 # heap and jvm_opts are lists of JVM flags
		setsid "$java" $heap $jvm_opts -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
			-Dlog4j2.configurationFile="$dir/log4j2.properties" -Dkafka.logs.dir="$dir/logs" \
			-cp "$libs/*" kafka.Kafka "$dir/server.properties" \
			</dev/null >"$dir/logs/stdout.log" 2>&1 9>&- &
		echo $! >"$dir/kafka.pid"
	done

	# Wait until every node answers on its client port.
	local deadline=$((SECONDS + start_timeout)) ready
	while :; do
		ready=0
		for i in $(seq 1 "$nodes"); do
			if ! node_pid "$i" >/dev/null; then
				log "node $i exited during start-up; last lines of its logs:"
				tail -n 30 "$run_dir/node-$i/logs/stdout.log" "$run_dir/node-$i/logs/server.log" >&2 || true
				stop_nodes >/dev/null 2>&1 || true
				die "node $i did not start"
			fi
			probe "$(client_port "$i")" && ready=$((ready + 1))
		done
		if [ "$ready" = "$nodes" ]; then
			# The secure listeners open with the plaintext one; wait for them too.
			for port in $(secure_ports); do port_open "$port" || ready=0; done
		fi
		[ "$ready" = "$nodes" ] && break
		if [ "$SECONDS" -ge "$deadline" ]; then
			for i in $(seq 1 "$nodes"); do
				log "node $i: last lines of $run_dir/node-$i/logs/server.log:"
				tail -n 30 "$run_dir/node-$i/logs/server.log" >&2 || true
			done
			stop_nodes >/dev/null 2>&1 || true
			die "not ready after ${start_timeout}s ($ready of $nodes nodes answer)"
		fi
		sleep 0.5
	done
	log "up: $nodes node(s) (started ${#todo[@]}), Kafka $kafka_version, logs in $run_dir/node-*/logs"
	bootstrap_addr
}

# stop_nodes: SIGTERM all nodes at once (controlled shutdown), wait up to
# stop_timeout, then SIGKILL whatever still runs.
stop_nodes() {
	local i pid pids=()
	for i in $(seq 1 "$nodes"); do
		if pid=$(node_pid "$i"); then
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid")
		fi
	done
	local deadline=$((SECONDS + stop_timeout)) alive
	while :; do
		alive=()
		for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
		[ "${#alive[@]}" = 0 ] && break
		if [ "$SECONDS" -ge "$deadline" ]; then
			log "still running after ${stop_timeout}s, sending SIGKILL to ${alive[*]}"
			kill -KILL "${alive[@]}" 2>/dev/null || true
			sleep 0.5
			break
		fi
		sleep 0.2
	done
	rm -f "$run_dir"/node-*/kafka.pid
}

cmd_down() {
	load_running_layout
	# Nodes of the other layout may also be around (e.g. a crash of one
	# layout, then `up` of another): stop whatever has a pid file.
	local n
	n=$(find "$run_dir" -maxdepth 2 -name kafka.pid 2>/dev/null | wc -l)
	[ "$n" -gt "$nodes" ] && nodes=3
	stop_nodes
	if [ "$keep" = 1 ]; then
		log "down; data kept in $run_dir"
	else
		rm -rf "$run_dir"/node-*/data "$run_dir/cluster.id" "$run_dir/cluster.env"
		log "down; data removed (logs stay in $run_dir/node-*/logs)"
	fi
}

cmd_status() {
	load_running_layout
	local alive
	alive=$(running_count)
	if [ -f "$run_dir/cluster.env" ] && [ "$alive" = "$nodes" ]; then
		echo "running: $nodes node(s) at $(bootstrap_addr)"
		return 0
	fi
	if [ "$alive" -gt 0 ]; then
		echo "not running: only $alive of $nodes nodes are up"
	else
		echo "not running"
	fi
	return 1
}

# up and down take an exclusive lock so that concurrent callers (several test
# binaries starting the broker at once) do not race.
case "$cmd" in
up | down)
	mkdir -p "$run_dir"
	exec 9>"$run_dir/.lock"
	flock -w $((start_timeout + stop_timeout + 600)) 9 || die "could not lock $run_dir/.lock"
	;;
esac

case "$cmd" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
bootstrap) load_running_layout; bootstrap_addr ;;
esac
