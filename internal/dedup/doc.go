// Package dedup owns the event-id deduplication of SPEC.md section 4 step 3
// for the aggregating windows (package aggwindow), whose Partition leaves
// deduplication to its caller: the set of remembered (key, event_id) pairs
// of one rule over one input partition, its garbage collection by the
// partition watermark, and the binary encoding of that set, one value per
// key, which a store keeps as opaque bytes.
//
// # Semantics
//
// They are those of package window (Partition.qualifying and remember), so
// that a sliding and an aggregating rule count the same records as
// duplicates. With W the partition watermark before the record and H the
// dedup horizon in milliseconds:
//
//   - A qualifying event is a duplicate when an earlier event with the same
//     key AND the same event_id was remembered and that remembered ts is
//     >= W - H. The same event_id under another key is not a duplicate
//     (package window keeps one id set per key; SPEC: "the same event_id
//     was seen before for the same key").
//   - A duplicate changes nothing: the remembered ts stays the first one
//     (a redelivery with another ts neither refreshes nor moves it).
//   - Every event that is not a duplicate is remembered with its ts,
//     replacing an expired entry of the same id — also a too-late one
//     (step 3 comes before the lateness check of step 4).
//   - An id is remembered while its ts >= W - H. W never decreases, so an
//     entry with ts < W - H can never make anything a duplicate again:
//     Advance forgets it, and Seen does not store an event whose ts is
//     already below W - H (package window stores it and forgets it at its
//     next prune; the verdicts are the same). A Set with buckets
//     (NewBucketed) forgets a bucket's ids together, once all of them
//     have expired (W - H at or past the bucket's end): until then it
//     holds and persists the ones that expired in it (Stats counts them),
//     and counts none of them as remembered (keepThr in set.go).
//
// All arithmetic with W saturates: at NoWatermark (minus infinity) nothing
// expires, and a ts within H of math.MaxInt64 never does.
//
// # What a caller does per record
//
// The Set holds its own copy of W, which the caller keeps equal to the
// partition watermark of its aggwindow.Partition:
//
//	// after decoding and validation (step 1), for a record ev:
//	q := filter(ev)                                 // step 2
//	dup := q && set.Seen(ev.Key, ev.EventID, ev.TS) // step 3, W before ev
//	res := part.Process(ev, q && !dup)              // steps 4 to 7
//	set.Advance(part.Watermark())                   // step 6 for the set
//	// count the record as Duplicate when dup, else by res.Outcome
//
// and likewise Advance(part.Watermark()) after every part.Advance. What
// matters is that W is current when Seen runs; Advance costs O(1) when
// nothing expires, so calling it after every record is the simple way.
// Seen accepts any int64 ts; a record that aggwindow would refuse as
// OutOfRange (ts outside [aggwindow.MinTS, aggwindow.MaxTS], which changes
// nothing, not even the watermark) should be refused before Seen, or it is
// remembered.
//
// # Persistence
//
// A view persists its ids on its own (Dirty and EncodeKey, or with
// NewBucketed DirtyBuckets and EncodeBucket), or together with the other
// views of its store (StoreDirtyBuckets, EncodeShared and LoadShared,
// shared.go: one value per key and bucket for all of them, the union of
// what the views' ClearDirty clears). On its own:
//
// Dirty lists the keys whose value changed since ClearDirty (a non-duplicate
// remembered, ids expired, the key deleted). At commit the caller writes
// EncodeKey(key) for each, a nil value meaning "delete the key" (a
// tombstone), exactly like package window. The watermark is not part of
// this package's state: the aggregating partition persists it. To restore,
// call New, LoadKey for every stored key and Advance(restored W), in either
// order: LoadKey forgets at once what has expired at the current W and marks
// the key dirty if it did.
//
// # Key value format, version 1
//
// One value per key; the key itself is the storage key and is not repeated.
// Primitive types:
//
//	u8       one byte
//	uvarint  unsigned LEB128 (encoding/binary.AppendUvarint), minimal length
//	varint   zig-zag signed LEB128 (encoding/binary.AppendVarint), minimal length
//	string   uvarint byte length, then that many bytes (the event_id, as given)
//
// Layout:
//
//	u8       version = 1
//	uvarint  M, number of remembered event ids, >= 1
//	varint   ts[0]                  event time of the first id, ms since the epoch
//	string   id[0]
//	(M-1) x:
//	  uvarint  ts[i] - ts[i-1]      >= 0, and ts[i] must not exceed MaxInt64
//	  string   id[i]
//
// The entries are strictly increasing by (ts, event_id) (bytewise string
// order, so a delta of 0 requires id[i] > id[i-1]) and the event_ids are
// distinct. Nothing may follow. A key with no remembered id has no value:
// EncodeKey returns nil and LoadKey rejects empty data. Every state has
// exactly one encoding, so a decoded value re-encodes to the same bytes.
//
// Example: ids "a" at ts 1000 and "b" at ts 1003 encode as the 9 bytes
//
//	01        version 1
//	02        M = 2
//	d0 0f     varint 1000 (zig-zag 2000)
//	01 61     "a"
//	03        delta 3
//	01 62     "b"
//
// LoadKey rejects, with an error wrapping ErrUnknownVersion, a first byte
// other than 1, and with one wrapping ErrCorrupt anything else that does
// not follow this layout (never panicking, and allocating no more than the
// input's size suggests). The caller then rebuilds the state by replay,
// never guesses.
//
// # Shared bucket value format, version 2
//
// The views of one store can persist their ids together (EncodeShared,
// shared.go): one value per (key, bucket) for all of them, each remembered
// (ts, event_id) written once with the views that remember it. Views are
// named by the caller (the rules' "<id>.v<version>"); a loader maps the
// names to its views and skips names it does not have.
//
//	u8       version = 2
//	uvarint  V, number of view names, 1..64
//	V x string  name             non-empty, strictly increasing (bytewise)
//	uvarint  M, number of entries, >= 1
//	varint   ts[0]
//	string   id[0]
//	uvarint  views[0]            bit k set: name k remembers the entry
//	(M-1) x:
//	  uvarint  ts[i] - ts[i-1]   >= 0
//	  string   id[i]
//	  uvarint  views[i]
//
// Entries are strictly increasing by (ts, event_id); an event_id may occur
// more than once (views that remembered it first at different ts) but a
// view remembers an event_id at most once; every views value is a
// non-empty subset of the V names and every name is in some views value.
// Every ts lies in the bucket that names the value. A view's ids are not
// written once the whole bucket expired for it (W - H of the view at or
// past the bucket's end; as EncodeBucket); before that, they all are, also
// those that expired already, which the loader then holds as expired.
// Nothing may follow; one encoding per state (the names sorted, the bits
// following them).
//
// Example: "a" at ts 1000 remembered by views x and y, "b" at 1003 by y:
//
//	02 02 01 78 01 79   version 2, 2 names: "x", "y"
//	02                  M = 2
//	d0 0f 01 61 03      ts 1000, "a", views {x, y}
//	03 01 62 02         delta 3, "b", views {y}
//
// # Costs
//
// A Set is a view of a store, which the Sets of several rules over one
// input partition can share (Set.NewView): the store holds each remembered
// (key, event_id, ts) once, with the views that remember it as a bit mask,
// so a record costs one hash lookup for all of them. Each view keeps the
// semantics above exactly (its own W, its own verdicts, its own persisted
// entries); an entry is dropped once it has expired for every view (at the
// slowest view's W - H), and a view ignores, and forgets at its next
// encounter, entries that expired for it while a slower view keeps them.
//
// The store indexes its entries in one hash table (open addressing) from
// a 64-bit hash of (key, event_id) to ts (a hit is confirmed against the
// key's entries, so no verdict rests on a hash; the rare pair whose hash
// collides with another's is kept in a second map by its strings), and per
// key a slice sorted by (ts, event_id). An entry that is dropped is not
// deleted from the table: its slot's ts is below the store's W - H (with
// buckets the start of its bucket, keepThr), which makes it stale, passed over by lookups and reused by
// inserts, and the table drops its stale slots when it is rebuilt (once
// live and stale slots fill 3/4 of it; in place unless the live ones need
// a larger table or allow a smaller one), so an expiry costs no access to
// the table. Seen costs one table lookup for a new id; it appends to its
// key's slice when it arrives in ts order for its key (an insert, O(ids of
// the key), when it does not) and is queued in O(log keys) when it becomes
// its key's oldest id. The other views of a record find the entry the
// first one remembered without a lookup. Each key with ids is queued in a
// min-heap at its deadline — the smallest W at which its oldest id expires
// — so Advance costs O(1) when nothing is due (plus O(views) when the last
// of the slowest views moves, to find the slowest again) and O(log keys +
// expired ids) per due key otherwise. With buckets the deadline is that of
// the oldest id's whole bucket, so a key is pruned once per bucket (a
// bucket's worth of ids at a time), not at almost every record, and its
// oldest bucket is tombstoned once instead of rewritten at every commit
// while W - H moves through it. The buckets that changed are listed once
// per store, each with the mask of the views that changed it since their
// ClearDirty: a record's views find its bucket in its key's cache of two
// (no lookup) or with one map lookup for all of them, where a map per
// view took a map insert per view. A view's ClearDirty takes its bit out
// of every listed bucket (O(listed buckets)) and drops the buckets no
// view marks once they are half the list, so the list holds at most twice
// what the views marked since their clears. Nothing scans all keys or ids, and a
// rebuild of the table, which scans it, follows at least a quarter of its
// size in inserts (or an eighth in expiries, to shrink it). Memory is
// O(ids with ts >= W - H) plus bounded slack: with buckets up to one
// bucket's worth per key of ids that expired (keepThr), a key's slice (which grows
// by doubling) reuses its expired front and is rebuilt smaller once at
// most an eighth of its peak is left, the table is rebuilt smaller once
// less than an eighth of it is live, a key with no ids is deleted, and the
// heap holds about one entry per key (a key whose oldest id moved earlier
// leaves a stale entry until it comes due). Seen keeps the key and event
// id strings it is given (no copy): they must not alias a reused buffer.
//
// # What it must never do
//
// It must never import anything but the standard library and
// internal/codec (no Kafka client, Pebble, Prometheus or logger), never read
// the wall clock (package time is not imported), never start goroutines and
// never keep package-level mutable state. A Set is not safe for concurrent
// use: the goroutine that owns an input partition owns its Set.
// internal/arch's TestPurePackages enforces the imports.
package dedup
