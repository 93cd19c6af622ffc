// Package consume owns the running processor: the consumer-group member
// that owns input partitions, restores each assigned partition's state from
// the changelog before consuming it, runs every record through the event
// contract and the window logic, produces alerts, dead letters, late records
// and changelog writes, and hands each batch to package txn to commit or
// abort.
//
// Invariants:
//   - Run's goroutine owns all partition state. It hands each poll's
//     records of a partition to a worker goroutine that runs after that
//     partition's previous one (at most GOMAXPROCS at once) and polls on;
//     before a batch ends it waits for all of them (drain): a partition's
//     state is never touched by two goroutines at a time, and a key's
//     outputs come in offset order. Rebalance callbacks run only between
//     batches (BlockRebalanceOnPoll), and the restore callback installs a
//     partition before any of its records is polled.
//   - In-memory state is the committed state plus the open batch's changes;
//     on an abort it is thrown away and reloaded from the local store, which
//     holds exactly the committed state.
//   - Every input record is counted as exactly one of processed, filtered,
//     duplicate, dead_lettered or too_late, in the same transaction as its
//     offset (the accounting record "a" of the changelog).
//   - No changelog record's value exceeds 512 KiB: a longer state entry is
//     written as chunks plus a manifest in the same transaction, its
//     unused chunks deleted with it, and joined when loaded (chunk.go).
//   - Decisions depend only on the log; the wall clock only paces commits
//     and the retries of an unavailable schema registry.
//   - The records of an Avro source are decoded only after their writer
//     schemas are cached (avro.Registry.Prepare). A partition whose
//     schemas the registry cannot give now is held: paused, and the open
//     batch aborted so that nothing past its committed offset commits; the
//     gate's retrier goroutine, owned by Run, asks the registry again with
//     backoff, and the loop resumes the partition once it answered
//     (docs/AVRO.md, "Registry outage").
//
// It must not reach into the window package's internals: it calls
// Process, Sweep and the persistence hooks.
package consume
