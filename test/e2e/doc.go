// Package e2e proves the processor's exactly-once claims (SPEC.md sections
// 3 to 5) on a real Apache Kafka broker, by running the built processor
// binary as separate OS processes, killing them with SIGKILL, deleting their
// state directories and moving partitions between them, and comparing what
// they committed, read with read_committed, with the reference: the same
// pipeline applied to the same input log in one pass (package pipeline).
//
// The broker comes from package harness (KAFKA_BOOTSTRAP, a running
// scripts/kafka.sh broker, or one the harness starts); without one every
// test fails. Nothing here skips.
//
// Every test uses its own topics and consumer groups (unique names), and
// deletes the topics the processor created when it ends, so the tests can
// share one broker.
package e2e
