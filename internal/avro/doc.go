// Package avro owns the Avro formats of the processor (docs/AVRO.md): input
// events in the Confluent wire format (magic byte 0, 4-byte big-endian
// schema id, Avro body) with writer schemas from a Confluent-compatible
// schema registry or a local .avsc file, and alert revisions in the same
// wire format under the alerts topic's subject.
//
// # Layout
//
//   - wire.go: the wire-format header (ParseHeader, AppendHeader).
//   - Client: the registry's REST API (GET /schemas/ids/{id}, POST
//     /subjects/{subject}/versions), a bounded timeout per request, basic
//     auth, and every failure classified: ErrSchemaNotFound (permanent) or
//     ErrRegistryUnavailable (transient) or a permanent refusal.
//   - Registry: a cache of writer schemas by id in front of a Client. The
//     I/O happens only in Prepare/Resolve, called by the consume loop
//     before it decodes a batch; Schema reads the cache only.
//   - Decoder: event.Decoder for Avro values. It resolves each writer schema
//     against the reader schema schemas/event.avsc (hamba's Avro schema
//     resolution) and yields event.Fields of the same kinds as JSON, so
//     event.Validator applies the contract's rules once for both codecs.
//     LocalSource and NewBareDecoder serve sources without a registry.
//   - AlertEncoder / AlertDecoder: alert revisions as schemas/alert.avsc.
//   - Metrics: the registry's collectors, on an injected Registerer.
//
// # Invariants
//
//   - Decode does no I/O, reads no clock and never panics (a panic in the
//     third-party decoder is recovered into decode_error); FuzzDecode holds
//     it to that. Its result depends only on the value and the schemas the
//     Source holds for the value's id.
//   - A registry fault never becomes a dead letter: the only errors of
//     Decode that are dead-letter reasons are decode_error (the bytes) and
//     schema_unknown (the registry answered that the id does not exist, or
//     its schema cannot be read as an event).
//   - Hamba decodes only bodies that checkBody accepted, so decoding time
//     is linear in the value's size whatever its bytes claim.
//   - Schemas are parsed with a schema cache of their own (never hamba's
//     package-level one) and codecs use a hamba configuration of their own:
//     no package-level state.
//
// # Must never
//
// This package must never dead-letter, pause or retry by itself (the
// consume loop decides), import a Kafka client, or log per record.
package avro
