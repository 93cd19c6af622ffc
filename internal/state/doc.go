// Package state owns the processor's local, durable window state: one Pebble
// store per rule namespace, split into per-input-partition key spaces, the
// changelog checkpoint of each partition, and the restore of a partition
// from its compacted changelog topic.
//
// Invariants:
//   - The local store is never ahead of Kafka: a Batch is committed to
//     Pebble only after the Kafka transaction that carried the same changes
//     to the changelog committed, and it carries the partition's changelog
//     position (checkpoint) in the same atomic write (goka's rule).
//   - A partition's state plus its checkpoint is always a consistent prefix
//     of the changelog, so restore reads from the checkpoint forward.
//   - A missing, corrupt or foreign-format store is wiped and rebuilt from
//     the changelog, never an error the operator has to fix by hand.
//
// The package never talks to Kafka itself: restore reads the changelog
// through the ChangelogReader interface, implemented by package consume.
// The bytes of a key's state are opaque here (package window owns that
// encoding); the key layout is specified in docs/ARCHITECTURE.md.
package state
