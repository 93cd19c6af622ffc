// Package harness gives the end-to-end tests a real Apache Kafka broker and
// the helpers to drive it: topics with unique names, a read_committed reader
// that stops at the end of the log, and the processor binary built once per
// test binary.
//
// It owns how a test finds a broker (see [Bootstrap]), in this order:
//
//  1. KAFKA_BOOTSTRAP (comma-separated host:port), as scripts/test.sh and
//     .ci/run set it;
//  2. a broker already listening on 127.0.0.1:9092 (scripts/kafka.sh up);
//  3. scripts/kafka.sh up, run by the harness itself (needs java and mvn; the
//     broker is left running for the next test binary: stop it with
//     scripts/kafka.sh down);
//  4. testcontainers-go's Kafka module, where a Docker engine is reachable.
//
// Invariants: the harness never skips a test. Without a broker every test
// that asks for one fails with a message that says how to get one, so a CI
// run without Kafka cannot pass by running nothing. scripts/test.sh exports
// E2E_REQUIRE_BROKER=1 under CI=true: then only the broker it started and
// named in KAFKA_BOOTSTRAP is used (no listener found on 9092, no
// container), so CI proves the claims against the project's own broker.
// Topics are created per test with unique names and deleted in t.Cleanup, so
// tests may run in parallel against one shared broker.
//
// It must never mock Kafka or fall back to the in-process kfake cluster:
// the end-to-end suite exists to prove behaviour on the real broker.
package harness
