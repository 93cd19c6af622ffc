// Package kafkasec owns the security settings of every Kafka client the
// processor creates: TLS (a CA, an optional client certificate, the server
// name) and SASL (SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN), configured under
// the kafka: key of the processor configuration.
//
// Invariants:
//   - A password is held as a [Secret], whose every textual form (fmt verbs,
//     JSON, YAML, encoding.TextMarshaler, slog) is "***": printing or logging
//     a Config never reveals it. Only [SASL.ResolvePassword] returns it, for
//     the client's authentication.
//   - Validate names the key, the value and what is valid for every
//     problem, and reads the files (CA, client certificate and key, password
//     file) so that a bad file fails start-up, not the first connection. No
//     error carries a file's contents.
//
// It must never import the Kafka client: internal/config embeds Config and
// may not depend on franz-go (internal/arch). The franz-go options a Config
// yields are built by the subpackage kgosec.
package kafkasec
