// Package secure proves end to end, on a real Apache Kafka broker, that the
// processor binary connects through the kafka.tls.* and kafka.sasl.*
// configuration (internal/kafkasec): over a SASL_PLAINTEXT listener with
// SCRAM-SHA-512 (password from PROCESSOR_KAFKA_SASL_PASSWORD and from
// kafka.sasl.password_file), over an SSL listener that requires a client
// certificate, and over SASL_SSL; that a wrong password or a missing client
// certificate stops start-up with a clear error and a non-zero exit; and
// that the password appears in no output.
//
// The test starts its own single-node broker with scripts/kafka.sh (secure
// listeners on free ports, SCRAM credentials created at format time,
// certificates generated in a temporary directory) in its own run
// directory, beside any broker the other suites use, and stops it when it
// ends. It never skips: without Java and Maven, or when the broker cannot
// start, it fails.
package secure
