// Package bench holds the processor's end-to-end performance benchmarks
// (bench_test.go): raw read_committed consume throughput of the input topic
// (the ceiling), the built processor's throughput in exactly-once and
// at-least-once mode as a ratio of that ceiling, and the end-to-end alert
// latency at half the measured exactly-once throughput. They run the built
// binary against a real Kafka broker named by KAFKA_BOOTSTRAP:
//
//	KAFKA_BOOTSTRAP=127.0.0.1:9192 go test -run x -bench . -benchtime 1x -timeout 20m ./test/bench/
//
// Without KAFKA_BOOTSTRAP every benchmark fails (never skips). The method,
// the figures measured so far and their analysis are in docs/BENCHMARKS.md.
//
// The package has no tests: `go test ./...` only compiles it.
package bench
