// Package delivery holds the integration tests of alert delivery
// (`processor deliver`, internal/deliver) against franz-go's in-process
// Kafka cluster (kfake, listening on 127.0.0.1) and real HTTP receivers
// started by the tests:
//
//   - outage_test.go: a receiver answers 503, then refuses connections,
//     then recovers: every revision arrives exactly once at a receiver that
//     honours Idempotency-Key, in order per machine; aborted alerts never.
//   - slow_test.go: a receiver that holds every request unanswered (the
//     delivery stage stuck, its buffers full): the core processor still
//     processes and commits the whole input and the same alerts as without
//     the stage, while the stage delivers nothing and its lag is the whole
//     alerts topic. Nothing is timed; BenchmarkSlowReceiver measures the
//     core's throughput with and without a busy stage (200 ms receiver).
//   - reject_test.go: a receiver rejecting one alert with 422: its
//     revisions are in the delivery DLQ with the reason, all others
//     delivered.
//   - kill_test.go: the built binary, `processor deliver`, is killed with
//     SIGKILL in the middle of an outage and restarted: nothing is lost,
//     duplicates are only repeats of an Idempotency-Key.
//   - rebalance_test.go: a second member joins mid-delivery, the first
//     stops: revoke and stop commit what they finished, no repeats.
//   - cli_test.go: `processor deliver` configuration: defaults, inherited
//     keys, environment overrides, errors naming key, value and what is
//     valid, exit code 2.
//   - alertmanager_test.go: a real Prometheus Alertmanager
//     (/usr/bin/prometheus-alertmanager, Debian package
//     prometheus-alertmanager) receives an open then a closed revision: the
//     alert appears with its labels and annotations, then resolves. Without
//     the binary the test fails (it never skips).
//
// The 5-minute outage in virtual time is in internal/deliver
// (TestOutageFiveMinutesVirtualTime, testing/synctest). TestMain fails the
// run if goroutines of internal/deliver outlive the tests.
package delivery
