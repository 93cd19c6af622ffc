// Package aggwindow owns the event-time state machine of an aggregating
// rule over one input partition: tumbling, hopping and session windows per
// key, their aggregates (count, sum, avg, min, max over the event value),
// the partition watermark, lateness, and the alert revisions they cause. It
// also owns the binary encoding of that state (encoding.go), which a store
// keeps as opaque bytes. It is the windowed counterpart of package window,
// which owns the record-aligned sliding incidents of SPEC.md section 4.
//
// The package is pure and deterministic: a Partition is a function of the
// sequence of calls made on it. Time is data (int64 milliseconds since the
// Unix epoch, taken from the events); the wall clock is never read.
//
// # Windows (event time, per key, as in Kafka Streams and Flink)
//
//   - Tumbling(size): the windows [k*size, (k+1)*size) for every integer k,
//     aligned to the epoch. An event at ts belongs to exactly one.
//   - Hopping(size, advance), advance <= size: the windows
//     [k*advance, k*advance+size), aligned to the epoch. An event belongs to
//     the ceil(size/advance) or floor(size/advance) windows that contain it.
//     Tumbling is hopping with advance = size.
//   - Session(gap): each event opens the interval [ts, ts+gap); a session is
//     a maximal set of events whose intervals overlap, i.e. sorted by ts,
//     consecutive events are less than gap apart (strictly: two events
//     exactly gap apart are in different sessions; Kafka Streams and Flink
//     merge them, this package keeps every window half-open). A session
//     covers [first ts, last ts + gap). A late event can extend a session
//     backwards, or bridge two sessions and merge them.
//
// All windows are half-open [start, end): a window holds the events with
// start <= ts < end (sessions: start <= ts <= last, end = last + gap).
//
// # Aggregates and firing
//
// A window aggregates the value of its events: count, sum, avg (= sum /
// count), min or max. Sums are exact: they are kept as non-overlapping
// float64 partials (Shewchuk's algorithm, as in Python's math.fsum) and
// rounded once when read, so a sum and an average depend only on the set
// of events, never on their arrival order. Values are scaled by 2^-64 while
// summed so that no intermediate sum can overflow; a sum whose magnitude
// exceeds the float64 range reads as ±Inf.
//
// The caller supplies the threshold predicate Fires(agg, count), a pure
// function (package rules compiles it from the rule's threshold expression).
// A window FIRES the first time Fires holds after an event was applied to
// it. Revisions, per window (one window = one alert):
//
//   - Open (revision 0) when it fires. A window that never fires emits
//     nothing, ever.
//   - Updated (revision+1) when an applied event changes the aggregate of a
//     fired window (sessions: or its start) and Fires still holds afterwards.
//     A change after which Fires is false emits nothing (the final state is
//     reported at close); a change of count alone (for example a max that
//     did not move) emits nothing. Hopping windows sharing an event emit in
//     order of start.
//   - Merged (revision+1, final): when an event merges sessions of which
//     two or more had fired, the one with the earliest start survives and
//     gets Updated with the union, then each other one gets Merged with
//     MergedInto = the survivor's id, in order of start, carrying its own
//     last state. A merged session that had not fired is absorbed silently;
//     if no merged session had fired and the union satisfies Fires, the
//     union opens a new alert.
//   - Closed (revision+1, final) when W - L >= end: no event that can still
//     be applied belongs to the window. Only fired windows emit Closed,
//     with the final aggregate; a window that never fired is dropped. Closes
//     are emitted in order of (end, alert_id).
//
// # Watermark and lateness
//
// The partition watermark W starts at NoWatermark (minus infinity), never
// decreases, and is moved by Process to max(W, ts - D) for every record
// passed in (qualifying or not), exactly like package window. Advance moves
// it further on the caller's request (end of input, an idle partition, or a
// watermark strategy computed outside). With W the watermark before a
// record, a qualifying event with ts < W - L is TooLate and changes no
// window; one with W - L <= ts < W is applied and the revisions it causes
// are marked Late. Because closing needs W - L >= end and an applied event
// has ts >= W - L, a closed (or dropped) window can never receive another
// event, and a session can never merge with one.
//
// # Alert identity
//
// Config.AlertID(key, start) names a window's alert when it opens. start is
// the window start for tumbling and hopping windows (so ids depend only on
// the key and the window, not on arrival order), and the session start at
// the moment the session fired for sessions (a later backwards extension or
// merge does not rename it). Per key these are unique: no two alerts of a
// key can open with the same start. The function should include the rule
// id and version (package alerts hashes them).
//
// # Evidence
//
// Each window keeps up to Config.EvidenceLimit of its events as evidence,
// chosen by a total order that makes the choice independent of arrival
// order: for count, sum and avg the earliest by (ts, event_id); for min the
// smallest values, for max the largest, ties by (ts, event_id).
//
// # What it does not do
//
// Deduplication is the caller's job (the caller dedups by event_id before
// calling Process, and passes a duplicate with qualifies = false so that it
// still moves the watermark; see Partition.Process). Filtering is the
// caller's job (it passes the filter's verdict). Garbage collection is
// closing: a window is removed when it closes, a key when it has no window
// left, so the state holds only the windows that can still change.
// Tumbling and hopping windows keep their evidence in panes they share
// (panes.go), each removed when the last window containing it closes;
// that changes what is stored and persisted (encoding.go), not what is
// emitted.
//
// # What it must never do
//
// It must never import anything but the standard library and
// internal/codec (no Kafka client, Pebble, Prometheus or logger), never read
// the wall clock (package time is not imported), never start goroutines and
// never keep package-level state. A Partition is not safe for concurrent use:
// the goroutine that owns an input partition owns its Partition.
// internal/arch's TestPurePackages enforces the imports.
package aggwindow
