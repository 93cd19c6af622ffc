// Package window owns the event-time state machine of one rule over one input
// partition: the partition watermark, per-key deduplication, lateness,
// firing sets and incidents, and the alert revisions they cause (SPEC.md
// section 4, steps 2 to 7). It also owns the binary encoding of that state
// (see encoding.go): per key a key entry and entries per time bucket of its
// events and remembered ids, so that a commit rewrites what changed, which
// package state stores as opaque bytes.
//
// The package is pure and deterministic. A Partition is a function of the
// sequence of (Event, qualifies) pairs fed to Process and nothing else: time
// is data (int64 milliseconds since the Unix epoch, taken from the events),
// so a replay of the same log yields the same revisions in the same order.
//
// # Invariants
//
//   - The watermark W starts at NoWatermark (minus infinity) and never
//     decreases. All arithmetic with W saturates, so at NoWatermark nothing is
//     late, too late, prunable or closable.
//   - Per key, the applied events are kept sorted by (ts, event_id) and no two
//     share both; the kept events are a suffix of all applied events (pruning
//     cuts a prefix, open incidents or not). The open incidents of a key are
//     the chains of firing spans that contain applied events, sorted by
//     start, pairwise separated by a gap (next.start > previous.end).
//   - Every open incident's start, end, count and evidence equal what the
//     SPEC's definition computes over all applied events of its key, and its
//     last emitted revision carries its current start and evidence. Its
//     count is its pruned counter (events of [start, end] no longer kept)
//     plus its kept events in [start, end]; its evidence is stored, since
//     its events may have been pruned.
//   - Incidents only grow or merge, never split: inserting an event can only
//     add firing spans (see the proof in incident.go).
//   - A closed incident can never change again: an applied event has
//     ts >= W - L > end + S, so every firing window that contains it starts
//     after the closed incident's end (proof at Partition.closeDue).
//   - Garbage collection (pruning inside Process and Sweep) is invisible: the
//     revisions do not depend on when, or whether, Sweep runs.
//
// # What it must never do
//
// It must never import anything but the standard library and
// internal/codec (no Kafka client, Pebble, Prometheus or logger), never read
// the wall clock (package time is not imported at all), never start
// goroutines and never keep package-level state. A Partition is not safe for
// concurrent use: the one goroutine that owns an input partition owns its
// Partition. internal/arch's TestPurePackages enforces the import rules.
package window
