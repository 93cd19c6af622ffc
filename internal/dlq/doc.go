// Package dlq owns the operator tooling of the dead-letter topic
// (topics.dlq): reading it (Inspect: counts by reason, by source partition
// and by rule version, time spans, samples) and re-injecting chosen dead
// letters into
// the topic they came from after the cause was fixed (Replay), exactly
// once.
//
// A dead letter is the original record (key, value, headers) plus the
// headers the processor appends: error.reason, error.detail, dlq.rules
// (the rule versions it is the letter of; absent on letters of older
// processors) and source.topic/partition/offset/timestamp
// (docs/ARCHITECTURE.md, "Dead-letter record"). A replayed record is the
// original record again: key, value, record timestamp (source.timestamp)
// and original headers, without the processor's error.*, dlq.rules and
// source.* headers, produced to the source partition, plus:
//
//	dlq.replayed=1
//	dlq.replayed.from=<dlq topic>/<partition>@<offset>   the dead letter it came from
//	dlq.original.topic, dlq.original.partition,
//	dlq.original.offset, dlq.original.timestamp          where the record was first consumed
//
// The processor treats a replayed record like any other; if it is still
// bad, it goes to the dead-letter topic again, its dlq.* headers included,
// so a dead letter tells whether it was replayed before and from where. A
// record replayed a second time keeps its first dlq.original.* headers and
// gets a new dlq.replayed.from.
//
// Invariants of Replay:
//   - Exactly once per dead letter and replay group: the replays of a batch
//     of dead letters and the group's DLQ offsets after that batch are
//     committed in one Kafka transaction (franz-go's GroupTransactSession,
//     KIP-447), with a stable transactional id derived from the group, so a
//     re-run, a crash, an abort or a zombie never injects a record twice.
//   - The group's committed position means "examined": dead letters that the
//     selection does not choose are skipped, and their offsets committed in
//     the same transactions. A re-run continues where the last one stopped.
//   - A run ends at the DLQ's last stable offsets as listed when it starts;
//     later dead letters (replays failing again among them) wait for the
//     next run, so a run always terminates.
//   - Nothing is produced outside a transaction, and nothing at all by
//     Inspect or a dry run.
//
// It must never change what the processor does with a record: replays are
// ordinary input records that carry extra headers.
package dlq
