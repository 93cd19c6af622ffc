#!/usr/bin/env bash
# scripts/test.sh: the project's test command.
#
#   gofmt check, go vet, go build, unit + integration tests with -race, then
#   every fuzz target for a few seconds, then
#   the end-to-end suite (./test/e2e/..., no -race: it drives the built
#   binary) against a real Kafka broker, and ./test/secure/... (TLS and
#   SASL/SCRAM end to end, on a broker of its own that it starts and stops).
#
# Broker: KAFKA_BOOTSTRAP if set; else a broker that scripts/kafka.sh already
# runs (left running); else this script starts one with scripts/kafka.sh up
# (in the background, while vet and build run) and stops it on exit.
# With CI=true, E2E_REQUIRE_BROKER=1 is exported: the e2e suite never skips.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

phase_start=$SECONDS
phase() { # phase NAME: announce NAME and start its clock
	echo
	echo "==> $1"
	phase_start=$SECONDS
}
took() { echo "--- $1: $((SECONDS - phase_start))s"; }

# ---- broker --------------------------------------------------------------------

started_broker=0
broker_pid=""
broker_log=$(mktemp)
cleanup() {
	local rc=$?
	if [ -n "$broker_pid" ]; then wait "$broker_pid" 2>/dev/null || true; fi
	if [ "$started_broker" = 1 ]; then
		echo
		echo "==> stopping the broker this script started"
		scripts/kafka.sh down || true
	fi
	rm -f "$broker_log"
	exit "$rc"
}
trap cleanup EXIT

if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
	if scripts/kafka.sh status >/dev/null 2>&1; then
		KAFKA_BOOTSTRAP=$(scripts/kafka.sh bootstrap)
		echo "==> using the running local broker at $KAFKA_BOOTSTRAP (left running)"
	else
		echo "==> starting a local broker in the background (scripts/kafka.sh up)"
		started_broker=1
		scripts/kafka.sh up >"$broker_log" 2>&1 &
		broker_pid=$!
	fi
fi

wait_broker() {
	[ -n "$broker_pid" ] || return 0
	phase "waiting for the broker"
	if ! wait "$broker_pid"; then
		broker_pid=""
		cat "$broker_log"
		echo "FAIL: scripts/kafka.sh up failed (output above)" >&2
		exit 1
	fi
	broker_pid=""
	KAFKA_BOOTSTRAP=$(tail -n 1 "$broker_log")
	took "broker start"
}

if [ "${CI:-}" = true ]; then export E2E_REQUIRE_BROKER=1; fi

# ---- static checks and build ---------------------------------------------------

phase "gofmt"
unformatted=$(find . -name '*.go' -not -path './.git/*' -not -path '*/testdata/*' -print0 | xargs -0 -r gofmt -l)
if [ -n "$unformatted" ]; then
	echo "FAIL: gofmt would reformat these files (run gofmt -w):" >&2
	echo "$unformatted" >&2
	exit 1
fi
took gofmt

phase "go vet ./..."
go vet ./...
took vet

phase "go build ./..."
go build ./...
took build

# ---- tests ---------------------------------------------------------------------

wait_broker
export KAFKA_BOOTSTRAP
echo "KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP"

phase "unit + integration tests (-race)"
mapfile -t pkgs < <(go list ./... | grep -v -e /test/e2e -e /test/secure -e /test/delivery || true)
if [ "${#pkgs[@]}" -gt 0 ]; then
	go test -race -count=1 -timeout 15m "${pkgs[@]}"
else
	echo "no packages outside test/e2e"
fi
took "unit + integration tests"

phase "fuzzing (each target briefly; FUZZTIME, default 50000x)"
# Every fuzz target runs a bounded number of executions; a crasher fails the
# run and is saved under the package's testdata/fuzz for a regression seed.
# A count, not a duration: with -fuzztime 5s Go's fuzzing coordinator can
# race its own deadline on a loaded machine and fail with "context deadline
# exceeded" having found nothing (a known go test flake).
fuzztime=${FUZZTIME:-50000x}
while read -r pkg target; do
	echo "--- $pkg $target"
	go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "./$pkg"
done < <(grep -rlE '^func Fuzz' --include='*_test.go' internal |
	while read -r f; do
		grep -oE '^func Fuzz[A-Za-z0-9_]*' "$f" | sed "s|^func |$(dirname "$f") |"
	done | sort -u)
took "fuzzing"

phase "end-to-end tests"
go test -count=1 -timeout 20m -v ./test/e2e/...
# Separately from the unit tests: it once held a timed test that the other
# packages' tests on the same two cores disturbed. That throughput
# comparison is now BenchmarkSlowReceiver (run only with -bench); its tests
# assert no timing, only generous deadlines.
go test -race -count=1 -timeout 10m ./test/delivery/...
# After the e2e suite, not beside it: its own broker JVM and processors would
# share the two cores with the e2e suite's timing-sensitive tests.
go test -count=1 -timeout 10m -v ./test/secure/...
took "end-to-end tests"

echo
echo "scripts/test.sh: all checks passed"
