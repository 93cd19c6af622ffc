// Package deliver owns alert delivery: the `processor deliver` consumer
// group that reads the alerts topic read_committed and hands every alert
// revision, in order per machine, to the configured sinks (a generic HTTP
// webhook, Prometheus Alertmanager), with retries, a circuit breaker per
// sink and a delivery dead-letter topic. It runs beside the core processor,
// in its own consumer group, so a slow or dead receiver backs up only this
// stage (its lag grows), never the processor.
//
// # Guarantees
//
// At least once to every sink: the offset of an alerts-topic record is
// committed only after every sink has accepted it or it was dead-lettered
// for that sink (written to the delivery DLQ topic, acknowledged by Kafka).
// A crash or a rebalance therefore repeats at most the revisions that were
// not yet committed. Every delivery carries the idempotency key
// "<alert_id>-<revision>" (header Idempotency-Key; an annotation for
// Alertmanager), so a receiver that remembers keys makes delivery
// effectively once.
//
// # Invariants
//
//   - Records of one alerts-topic partition (which holds every revision of
//     its machines, in order) are handed to a sink strictly in offset order:
//     one lane per (partition, sink) handles its head record until it was
//     accepted or dead-lettered, then the next. Lanes of different sinks and
//     of different partitions proceed independently.
//   - The committed offset of a partition is one past the highest record
//     that every lane of that partition has finished; it never covers a
//     record some sink has neither accepted nor dead-lettered. Commits happen
//     only between polls (kgo.BlockRebalanceOnPoll) and in the revoke
//     callback after the partition's lanes stopped, so they never cover
//     records of partitions this member no longer owns.
//   - A partition buffers at most Config.MaxBuffered records; beyond that its
//     fetching is paused until the slowest lane has drained half of them.
//   - A transient failure that opened (or kept open) a sink's breaker does
//     not count against the record's retry bound: an outage makes lanes
//     wait, it never dead-letters alerts (see Config.Validate: the breaker
//     trips before a record can exhaust its attempts).
//   - With Avro alert values (Options.Decode = NewAvroDecoder), a schema
//     registry that cannot answer makes the lane wait on its head record and
//     retry the decode with the retry backoff; it never dead-letters. Only a
//     value that is not an alert (not the wire format, an unknown schema id,
//     a schema that is not an alert's, a malformed body) is undecodable.
//   - Time comes from the injected clock (Options.Now, Options.After); tests
//     run the retry and breaker logic in virtual time (testing/synctest).
//
// # Must never
//
// It must never write to the alerts topic or take part in the processor's
// transactions, never log a webhook secret, and never depend on the window
// logic: it reads alerts through their documented formats: JSON (leniently,
// ignoring unknown members, as the format asks of consumers) or Avro
// (schemas/alert.avsc, any compatible writer schema). A webhook always
// receives alert JSON.
package deliver
