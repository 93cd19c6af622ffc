#!/usr/bin/env bash
# scripts/registry.sh: run a real schema registry with a Confluent-compatible
# API, without Docker, for the Avro tests (test/registry) and local runs:
# Apicurio Registry 3 (io.apicurio:apicurio-registry-app, its published
# `all` tar.gz: a Quarkus fast-jar) from Maven Central. It needs Java 21+;
# on a machine without one it falls back to Apicurio Registry 2.6.13.Final
# (the same artifact, a Quarkus legacy jar), which runs on Java 17.
#
#   scripts/registry.sh [--keep] up|down|status|url
#
#   up      fetch the registry (once, cached), start it in the background on
#           127.0.0.1, wait until its Confluent API answers, print the API's
#           base URL (the last line of output). Idempotent: a registry that
#           runs is left alone. Schemas live in an H2 file database in the
#           run dir, so a registry stopped with `down --keep` comes back with
#           the same schemas and ids.
#   down    SIGTERM, wait, SIGKILL if needed, then delete the database so the
#           next `up` starts empty; `--keep` keeps it.
#   status  print running / not running; exit 0 when it runs and answers.
#   url     print the base URL of the Confluent API:
#           http://127.0.0.1:PORT/apis/ccompat/v7 (Apicurio 3), or
#           http://127.0.0.1:PORT/apis/ccompat/v6 (the 2.6 fallback)
#
# Environment (defaults in brackets):
#   REGISTRY_PORT           HTTP port of the API [8081]
#   REGISTRY_MGMT_PORT      Quarkus management port (health, metrics)
#                           [REGISTRY_PORT+1]; bound to 127.0.0.1 too
#   REGISTRY_RUN_DIR        database, logs, pid file [$HOME/.cache/processor-registry/run]
#   REGISTRY_CACHE_DIR      download cache [${XDG_CACHE_HOME:-$HOME/.cache}/processor-registry]
#   REGISTRY_VERSION        Apicurio Registry version [3.3.3 when a Java 21+ is
#                           found, else 2.6.13.Final]; a 3.x (Java 21+, API
#                           /apis/ccompat/v7) or 2.6.x (Java 17+, /apis/ccompat/v6)
#   REGISTRY_JAVA           java to use [the first of $JAVA_HOME/bin/java, java
#                           on PATH, the newest /usr/lib/jvm/*/bin/java that
#                           the version needs (21+ for 3.x, 17+ for 2.x)]
#   REGISTRY_HEAP_OPTS      [-Xms64m -Xmx384m]
#   REGISTRY_JVM_OPTS       [-XX:TieredStopAtLevel=1 -XX:+UseSerialGC]: C1 only
#                           starts ~40% faster; a test registry does little work
#   REGISTRY_START_TIMEOUT  seconds to wait for readiness [180]
#   REGISTRY_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL [20]
#
# Measured on the 2-core dev machine (Temurin 25, Apicurio 3.3.3):
#   cold `up` (tar.gz already in ~/.m2; unpack 168 MB): see docs/AVRO.md
#   warm `up`: 4.5-7.5 s (Quarkus "started in" 3.9-6.9 s); `down`: < 1 s
set -euo pipefail

keep=0
cmd=""
while [ $# -gt 0 ]; do
	case "$1" in
	--keep) keep=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	up | down | status | url)
		[ -z "$cmd" ] || { echo "registry.sh: one command at a time" >&2; exit 2; }
		cmd=$1; shift ;;
	*) echo "registry.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
done
[ -n "$cmd" ] || { echo "usage: registry.sh [--keep] up|down|status|url" >&2; exit 2; }

# The default version and its fallback for machines without Java 21+.
default_version=3.3.3
fallback_version=2.6.13.Final
version=${REGISTRY_VERSION:-}
port=${REGISTRY_PORT:-8081}
mgmt_port=${REGISTRY_MGMT_PORT:-$((port + 1))}
run_dir=${REGISTRY_RUN_DIR:-$HOME/.cache/processor-registry/run}
cache_root=${REGISTRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/processor-registry}
heap=${REGISTRY_HEAP_OPTS:--Xms64m -Xmx384m}
jvm_opts=${REGISTRY_JVM_OPTS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}
start_timeout=${REGISTRY_START_TIMEOUT:-180}
stop_timeout=${REGISTRY_STOP_TIMEOUT:-20}
api_path=/apis/ccompat/v7

log() { echo "registry.sh: $*" >&2; }
die() { log "$*"; exit 1; }

case "$port$mgmt_port" in *[!0-9]*) die "REGISTRY_PORT and REGISTRY_MGMT_PORT must be numbers" ;; esac

# set_version VERSION: the layout and needs of an Apicurio Registry version.
set_version() {
	version=$1
	cache_dir=$cache_root/$version
	app="$cache_dir/app"
	case "$version" in
	3.*) min_java=21 launcher=quarkus-run.jar api_path=/apis/ccompat/v7 ;;
	2.6.*) min_java=17 launcher=apicurio-registry-app-$version-runner.jar api_path=/apis/ccompat/v6 ;;
	*) die "REGISTRY_VERSION=$version: want an Apicurio Registry 3.x or 2.6.x version" ;;
	esac
}

# ---- state of a running registry ---------------------------------------------
# $run_dir/registry.env records the ports that `up` started, so that
# down/status/url work without repeating REGISTRY_PORT.

load_running() {
	if [ -f "$run_dir/registry.env" ]; then
		# shellcheck disable=SC1091
		. "$run_dir/registry.env"
		# shellcheck disable=SC2153 # PORT, MGMT_PORT, VERSION come from registry.env
		port=$PORT mgmt_port=$MGMT_PORT
		set_version "${VERSION:-$default_version}"
	fi
}

api_url() { echo "http://127.0.0.1:$port$api_path"; }

registry_pid() { # prints the pid if the registry of this run dir is alive
	local f="$run_dir/registry.pid" pid
	[ -f "$f" ] || return 1
	pid=$(cat "$f")
	kill -0 "$pid" 2>/dev/null || return 1
	grep -qa -e quarkus-run.jar -e 'apicurio-registry-app-.*-runner.jar' "/proc/$pid/cmdline" 2>/dev/null || return 1
	echo "$pid"
}

# probe PORT: the Confluent API answers GET /subjects with HTTP 200 (bash's
# /dev/tcp: no curl needed).
# shellcheck disable=SC2016 # the inner script expands its own $0 and $1
probe() {
	timeout 5 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
		printf "GET %s/subjects HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n\r\n" "$1" >&3
		IFS= read -r status <&3
		case "$status" in "HTTP/1."?" 200"*) exit 0 ;; esac
		exit 1
	' "$1" "$api_path" 2>/dev/null
}

# shellcheck disable=SC2016
port_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null; }

# ---- java ----------------------------------------------------------------------

java_major() { # java_major JAVA: prints the feature version (17, 21, 25)
	"$1" -XshowSettings:properties -version 2>&1 |
		sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p' | head -n 1
}

# find_java MIN: prints a java of at least version MIN: REGISTRY_JAVA (which
# must be), else $JAVA_HOME/bin/java or java on PATH, else the newest
# /usr/lib/jvm/*/bin/java; prints nothing (status 1) when there is none.
find_java() {
	local min=$1 j m best="" best_m=0
	if [ -n "${REGISTRY_JAVA:-}" ]; then
		m=$(java_major "$REGISTRY_JAVA" || true)
		[ "${m:-0}" -ge "$min" ] || return 1
		echo "$REGISTRY_JAVA"
		return
	fi
	for j in ${JAVA_HOME:+"$JAVA_HOME/bin/java"} "$(command -v java || true)"; do
		if [ -z "$j" ] || [ ! -x "$j" ]; then continue; fi
		m=$(java_major "$j" || true)
		if [ "${m:-0}" -ge "$min" ]; then echo "$j"; return; fi
	done
	for j in /usr/lib/jvm/*/bin/java; do
		[ -x "$j" ] || continue
		m=$(java_major "$j" || true)
		if [ "${m:-0}" -ge "$min" ] && [ "$m" -gt "$best_m" ]; then best=$j best_m=$m; fi
	done
	[ -n "$best" ] || return 1
	echo "$best"
}

# choose_version: sets the version (REGISTRY_VERSION, else 3.3.3 with a Java
# 21+, else the 2.6.13.Final fallback with a Java 17+) and java.
choose_version() {
	if [ -n "$version" ]; then
		set_version "$version"
		java=$(find_java "$min_java") ||
			die "Apicurio Registry $version needs Java $min_java+ and none was found${REGISTRY_JAVA:+ (REGISTRY_JAVA=$REGISTRY_JAVA is Java $(java_major "$REGISTRY_JAVA" || echo '?'))}: install one or set REGISTRY_JAVA"
		return
	fi
	set_version "$default_version"
	if java=$(find_java "$min_java"); then return; fi
	set_version "$fallback_version"
	java=$(find_java "$min_java") ||
		die "no Java 21+ (for Apicurio Registry $default_version) nor 17+ (for the $fallback_version fallback) found${REGISTRY_JAVA:+ (REGISTRY_JAVA=$REGISTRY_JAVA is Java $(java_major "$REGISTRY_JAVA" || echo '?'))}: install one (e.g. apt-get install -y openjdk-21-jre-headless) or set REGISTRY_JAVA"
	log "no Java 21+ found: falling back to Apicurio Registry $fallback_version on $("$java" -version 2>&1 | head -n 1) (API $api_path)"
}

# ---- download ----------------------------------------------------------------

fetch() {
	[ -f "$cache_dir/app.complete" ] && [ -f "$app/$launcher" ] && return 0
	command -v mvn >/dev/null || die "mvn not found: install Maven (apt-get install -y maven)"
	log "fetching Apicurio Registry $version (io.apicurio:apicurio-registry-app:$version:tar.gz:all, ~160 MB) from Maven Central into $cache_dir"
	mkdir -p "$cache_dir"
	local tmp="$cache_dir/fetch.tmp.$$"
	rm -rf "$tmp"
	mkdir -p "$tmp/empty"
	# Run outside any project: dependency:copy then works on its own.
	(cd "$tmp/empty" && mvn -B -q -ntp -Dstyle.color=never \
		org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
		-Dartifact="io.apicurio:apicurio-registry-app:$version:tar.gz:all" \
		-DoutputDirectory="$tmp" >&2) || { rm -rf "$tmp"; die "mvn dependency:copy failed (see above)"; }
	mkdir -p "$tmp/app"
	tar -xzf "$tmp/apicurio-registry-app-$version-all.tar.gz" -C "$tmp/app" ||
		{ rm -rf "$tmp"; die "unpacking the registry failed"; }
	[ -f "$tmp/app/$launcher" ] || { rm -rf "$tmp"; die "no $launcher in the registry archive"; }
	rm -rf "$app"
	mv "$tmp/app" "$app"
	rm -rf "$tmp"
	date -u +%FT%TZ >"$cache_dir/app.complete"
	log "unpacked: $(du -sh "$app" | cut -f1) in $app"
}

# ---- commands ----------------------------------------------------------------

cmd_up() {
	local want_port=$port want_mgmt=$mgmt_port want_version=$version pid
	load_running
	if pid=$(registry_pid); then
		if probe "$port"; then
			log "already running (pid $pid)"
			api_url
			return 0
		fi
		die "a registry process (pid $pid) runs but does not answer on port $port; run 'scripts/registry.sh down' first"
	fi
	port=$want_port mgmt_port=$want_mgmt version=$want_version
	local java
	# A database kept by `down --keep` belongs to the version that wrote it.
	if [ -z "$version" ] && [ -f "$run_dir/registry.env" ] && [ -n "$(ls -A "$run_dir/data" 2>/dev/null)" ]; then
		version=$(sed -n 's/^VERSION=//p' "$run_dir/registry.env")
	fi
	choose_version
	fetch
	for p in "$port" "$mgmt_port"; do
		port_open "$p" && die "port $p on 127.0.0.1 is taken by another process (set REGISTRY_PORT / REGISTRY_MGMT_PORT)"
	done
	mkdir -p "$run_dir/data" "$run_dir/logs" "$run_dir/tmp"
	printf 'PORT=%s\nMGMT_PORT=%s\nVERSION=%s\nURL=%s\n' "$port" "$mgmt_port" "$version" "$(api_url)" >"$run_dir/registry.env"
	[ -n "$(ls -A "$run_dir/data")" ] && log "reusing the database in $run_dir/data (kept by 'down --keep' or left by a crash)"

	# Where each version keeps its schemas: H2 in a file under the run dir.
	local storage
	case "$version" in
	3.*)
		storage=(-Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$mgmt_port"
			-Dapicurio.datasource.url="jdbc:h2:file:$run_dir/data/registry"
			-Dapicurio.datasource.jdbc.initial-size=2 -Dapicurio.datasource.jdbc.min-size=2
			-Dapicurio.datasource.jdbc.max-size=20
			-Dapicurio.storage.snapshot.location="$run_dir/tmp") ;;
	*)
		storage=(-Dquarkus.datasource.jdbc.url="jdbc:h2:file:$run_dir/data/registry"
			-Dquarkus.datasource.jdbc.initial-size=2 -Dquarkus.datasource.jdbc.min-size=2
			-Dquarkus.datasource.jdbc.max-size=20) ;;
	esac

	# Its own session, detached from our stdout/stderr (a caller such as
	# `go test` waits for its pipes to close) and from the lock's fd 9.
	# shellcheck disable=SC2086 # heap and jvm_opts are lists of JVM flags
	setsid "$java" $heap $jvm_opts -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
		-Djava.io.tmpdir="$run_dir/tmp" \
		-Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$port" \
		"${storage[@]}" \
		-jar "$app/$launcher" \
		</dev/null >"$run_dir/logs/registry.log" 2>&1 9>&- &
	echo $! >"$run_dir/registry.pid"

	local deadline=$((SECONDS + start_timeout)) start=$SECONDS
	until probe "$port"; do
		if ! registry_pid >/dev/null; then
			log "the registry exited during start-up; last lines of $run_dir/logs/registry.log:"
			tail -n 30 "$run_dir/logs/registry.log" >&2 || true
			rm -f "$run_dir/registry.pid"
			die "registry did not start"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			log "not ready after ${start_timeout}s; last lines of $run_dir/logs/registry.log:"
			tail -n 30 "$run_dir/logs/registry.log" >&2 || true
			stop >/dev/null 2>&1 || true
			die "registry not ready"
		fi
		sleep 0.25
	done
	log "up in $((SECONDS - start))s: Apicurio Registry $version ($("$java" -version 2>&1 | head -n 1)), log $run_dir/logs/registry.log"
	api_url
}

stop() {
	local pid
	pid=$(registry_pid) || { rm -f "$run_dir/registry.pid"; return 0; }
	kill -TERM "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + stop_timeout))
	while kill -0 "$pid" 2>/dev/null; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			log "still running after ${stop_timeout}s, sending SIGKILL to $pid"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.5
			break
		fi
		sleep 0.1
	done
	rm -f "$run_dir/registry.pid"
}

cmd_down() {
	load_running
	stop
	if [ "$keep" = 1 ]; then
		log "down; database kept in $run_dir/data"
	else
		rm -rf "$run_dir/data" "$run_dir/tmp" "$run_dir/registry.env"
		log "down; database removed (logs stay in $run_dir/logs)"
	fi
}

cmd_status() {
	load_running
	local pid
	if pid=$(registry_pid) && probe "$port"; then
		echo "running: pid $pid, $(api_url)"
		return 0
	fi
	if [ -n "${pid:-}" ]; then
		echo "not running: pid $pid does not answer on port $port"
	else
		echo "not running"
	fi
	return 1
}

# up and down take an exclusive lock so that concurrent callers do not race.
case "$cmd" in
up | down)
	mkdir -p "$run_dir"
	exec 9>"$run_dir/.lock"
	flock -w $((start_timeout + stop_timeout + 900)) 9 || die "could not lock $run_dir/.lock"
	;;
esac

case "$cmd" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
url)
	load_running
	[ -f "$run_dir/registry.env" ] || { [ -n "$version" ] && set_version "$version"; } || true
	api_url
	;;
esac
