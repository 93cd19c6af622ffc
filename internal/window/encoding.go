package window

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/vibeline/processor/internal/codec"
)

// Binary encoding of a partition's window state, format version 2.
//
// Package state stores these bytes opaquely. A key of the rule is persisted
// as several entries, so that a commit rewrites what changed, not all the
// key holds (an hour of remembered ids, minutes of events):
//
//   - its key entry (EncodeKey, LoadKey): how many events and ids its
//     buckets hold, and its open incidents;
//   - its bucket entries (EncodeBucket, LoadBucket, named by BucketRef):
//     per time bucket of Config.EventBucketMs, its kept events with ts in
//     the bucket (kind EventsBucket); per time bucket of
//     Config.DedupBucketMs, its remembered ids with ts in the bucket (kind
//     DedupBucket). A key has an entry for each bucket that holds
//     something, and none for the others.
//
// The partition has one meta entry (EncodeMeta). The first byte of each
// value is its format version; a reader rejects versions it does not know
// with an error wrapping ErrUnknownVersion (the state is then rebuilt by
// replay, never guessed at). The names of the entries are the caller's
// (package pipeline, docs/ARCHITECTURE.md): the key entry is named by the
// key, a bucket entry by its kind, bucket and key, in a name space of its
// own.
//
// Primitive types (those of package codec, which reads and writes them):
//
//	u8       one byte
//	u64be    8 bytes, big-endian
//	u64le    8 bytes, little-endian
//	uvarint  unsigned LEB128 (encoding/binary.AppendUvarint), minimal length
//	varint   zig-zag signed LEB128 (encoding/binary.AppendVarint), minimal length
//	string   uvarint byte length, then the UTF-8 bytes
//
// Key entry (EncodeKey), version 2; the key itself is not repeated:
//
//	u8       version = 2
//	uvarint  event bucket length, ms   the writer's Config.EventBucketMs (resolved), >= 1
//	uvarint  dedup bucket length, ms   the writer's Config.DedupBucketMs (resolved), >= 1
//	uvarint  E, number of kept events  (the sum over the key's events buckets)
//	uvarint  M, number of remembered event ids (the sum over its dedup buckets)
//	uvarint  K, number of open incidents
//	K x incident, by start, disjoint (start > previous end):
//	  string   alert_id
//	  uvarint  revision         last emitted revision number
//	  varint   start
//	  varint   end              >= start
//	  uvarint  count            applied events with ts in [start, end]
//	  uvarint  pruned           those of them no longer among the kept events
//	  uvarint  V, evidence length (= the rule's Threshold N)
//	  V x event:
//	    varint   ts               event time, ms since the Unix epoch
//	    string   event_id
//	    string   sensor_id
//	    u64le    value            IEEE-754 bits of the float64
//	    varint   partition        input partition of the record
//	    varint   offset           input offset of the record
//
// Nothing may follow, and E + M + K > 0 (a key with no state has no
// entries at all). The key entry is marked dirty with every bucket entry
// of the key (its counts may have changed), so a commit that writes a
// bucket rewrites it too; it is small: N events per open incident.
// Bucket lengths other than this partition's are refused
// as ErrUnknownVersion: they are part of the format (they follow from the
// rule's L, S and H, so they change only with a build that changes their
// definition, which must then bring a new version).
//
// Events bucket entry (EncodeBucket, kind EventsBucket), version 2:
//
//	u8       version = 2
//	uvarint  n >= 1
//	n x event, strictly increasing by (ts, event_id), every ts in the bucket:
//	  varint ts (the first event) or uvarint ts - previous ts (the others)
//	  then event_id, sensor_id, value, partition, offset as in an incident
//
// Dedup bucket entry (kind DedupBucket), version 2:
//
//	u8       version = 2
//	uvarint  m >= 1
//	m x entry, strictly increasing by (ts, event_id), every ts in the bucket:
//	  varint ts (the first entry) or uvarint ts - previous ts (the others)
//	  string   event_id         distinct across all the key's dedup buckets
//
// A bucket's number is floor(ts / length) (ts < 0 included). Nothing may
// follow; a ts that would pass math.MaxInt64 is refused.
//
// Loading: LoadKey and LoadBucket read entries in any order (a changelog
// replay, a store's iteration) and check what each determines alone;
// FinishLoad then checks every key they named as a whole and installs it:
// the counts E and M equal what its buckets hold (so a lost bucket entry is
// found), every event and id lies in its bucket, no id is in two buckets,
// and every incident is consistent with the kept events:
//
//   - the evidence is N events strictly increasing by (ts, event_id),
//     spanning <= S, the first at ts == start, the last at ts <= end;
//   - a kept event has ts == end (an open incident's last events are never
//     pruned);
//   - the evidence events not before the first kept event are kept: either
//     all of them, and then they are the N kept events from the first with
//     ts == start and pruned is 0; or the first j >= 1 were pruned (their ts
//     below the first kept event's ts, as pruning cuts by ts), the other
//     N - j are the first N - j kept events, and pruned >= j (only the first
//     incident can have pruned events);
//   - count = pruned + the number of kept events with ts in [start, end].
//
// Pruning (gc.go) removes events older than W - L - S even inside an open
// incident, so an incident stores its evidence and counts its pruned
// events; the kept events are a suffix of all applied events of the key.
//
// Format version 1 (the builds before bucket entries) held a key's whole
// state in its key entry:
//
//	u8       version = 1
//	uvarint  E; E x event (as an incident's evidence event), strictly increasing by (ts, event_id)
//	uvarint  M; M x entry: varint ts | string event_id, strictly increasing by (ts, event_id), ids distinct
//	uvarint  K; K x incident as in version 2
//
// LoadKey still reads it (with the same checks; a key with such a value
// and bucket entries is corrupt), and FinishLoad marks a key loaded from
// it dirty, its key entry and every bucket entry, so that the next persist
// rewrites it in version 2: the new key entry replaces the version-1 value
// under the same name. A reader of version 1 refuses version 2 key entries
// as an unknown version.
//
// Partition meta value (EncodeMeta), version 1 (unchanged):
//
//	u8       version = 1
//	u64be    watermark          two's complement int64; NoWatermark = math.MinInt64
//
// Exactly 9 bytes. Prune deadlines and the partition-wide incident index
// are not stored: FinishLoad rebuilds them.
const (
	keyVersion       = 2 // key and bucket entries
	legacyKeyVersion = 1 // a key's whole state in its key entry
	metaVersion      = 1
)

// ErrUnknownVersion is wrapped by the Load methods and FinishLoad when the
// first byte is not a format version this package reads (or a key entry
// names other bucket lengths than the partition's).
var ErrUnknownVersion = errors.New("unknown state format version")

// ErrCorrupt is wrapped by the Load methods and FinishLoad for bytes that
// are not a valid encoding of a known version, or entries of a key that do
// not make a valid state together.
var ErrCorrupt = errors.New("corrupt state")

// EncodeKey returns the key entry of key (version 2), or nil when the key
// has no state (never had any, or was deleted by garbage collection).
func (p *Partition) EncodeKey(key string) []byte {
	ks := p.keys[key]
	if ks == nil {
		return nil
	}
	size := 1 + 5*binary.MaxVarintLen64
	for _, inc := range ks.open {
		size += 40 + len(inc.alertID)
		for i := range inc.evidence {
			size += 32 + len(inc.evidence[i].EventID) + len(inc.evidence[i].SensorID)
		}
	}
	b := make([]byte, 0, size)
	b = append(b, keyVersion)
	b = codec.AppendUvarint(b, uint64(p.evB))
	b = codec.AppendUvarint(b, uint64(p.ddB))
	b = codec.AppendUvarint(b, uint64(len(ks.events)))
	b = codec.AppendUvarint(b, uint64(len(ks.seenBy)))
	return appendIncidents(b, ks.open)
}

// appendIncidents appends K and the incidents (the same in both versions).
func appendIncidents(b []byte, open []*incident) []byte {
	b = codec.AppendUvarint(b, uint64(len(open)))
	for _, inc := range open {
		b = codec.AppendString(b, inc.alertID)
		b = codec.AppendUvarint(b, uint64(inc.rev))
		b = codec.AppendVarint(b, inc.start)
		b = codec.AppendVarint(b, inc.end)
		b = codec.AppendUvarint(b, uint64(inc.count))
		b = codec.AppendUvarint(b, uint64(inc.pruned))
		b = codec.AppendUvarint(b, uint64(len(inc.evidence)))
		for i := range inc.evidence {
			b = appendEvent(b, &inc.evidence[i])
		}
	}
	return b
}

// EncodeBucket returns the bucket entry r (version 2), or nil when the
// bucket holds nothing.
func (p *Partition) EncodeBucket(r BucketRef) []byte {
	ks := p.keys[r.Key]
	if ks == nil {
		return nil
	}
	switch r.Kind {
	case EventsBucket:
		evs := ks.events
		i, j := bucketRange(len(evs), func(k int) int64 { return floorDiv(evs[k].TS, p.evB) }, r.Bucket)
		if i == j {
			return nil
		}
		size := 1 + binary.MaxVarintLen64
		for k := i; k < j; k++ {
			size += 32 + len(evs[k].EventID) + len(evs[k].SensorID)
		}
		b := make([]byte, 0, size)
		b = append(b, keyVersion)
		b = codec.AppendUvarint(b, uint64(j-i))
		for k := i; k < j; k++ {
			b = appendTS(b, evs[k].TS, evs[max(k-1, i)].TS, k == i)
			b = appendEventBody(b, &evs[k])
		}
		return b
	case DedupBucket:
		es := ks.seenBy
		i, j := bucketRange(len(es), func(k int) int64 { return floorDiv(es[k].ts, p.ddB) }, r.Bucket)
		if i == j {
			return nil
		}
		size := 1 + binary.MaxVarintLen64
		for k := i; k < j; k++ {
			size += 12 + len(es[k].id)
		}
		b := make([]byte, 0, size)
		b = append(b, keyVersion)
		b = codec.AppendUvarint(b, uint64(j-i))
		for k := i; k < j; k++ {
			b = appendTS(b, es[k].ts, es[max(k-1, i)].ts, k == i)
			b = codec.AppendString(b, es[k].id)
		}
		return b
	}
	return nil
}

// bucketRange returns the range [i, j) of the n items, sorted by ts, whose
// bucket (bucketOf, non-decreasing) is b.
func bucketRange(n int, bucketOf func(int) int64, b int64) (int, int) {
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bucketOf(m) < b {
			lo = m + 1
		} else {
			hi = m
		}
	}
	j := lo
	for j < n && bucketOf(j) == b {
		j++
	}
	return lo, j
}

// appendTS appends ts as a varint (first) or as the uvarint difference
// from prev (exact: 0 <= ts - prev < 2^64, computed mod 2^64).
func appendTS(b []byte, ts, prev int64, first bool) []byte {
	if first {
		return codec.AppendVarint(b, ts)
	}
	return codec.AppendUvarint(b, uint64(ts)-uint64(prev))
}

// readTS reads what appendTS wrote.
func readTS(r *codec.Reader, prev int64, first bool) int64 {
	if first {
		return r.Varint("ts")
	}
	delta := r.Uvarint("ts delta")
	// MaxInt64 - prev is in [0, 2^64), exact mod 2^64.
	if r.Err() == nil && delta > uint64(math.MaxInt64)-uint64(prev) {
		r.Fail("ts after %d overflows int64", prev)
		return 0
	}
	return prev + int64(delta)
}

// EncodeMeta returns the encoding of the partition meta (the watermark).
func (p *Partition) EncodeMeta() []byte {
	b := make([]byte, 9)
	b[0] = metaVersion
	binary.BigEndian.PutUint64(b[1:], uint64(p.wm))
	return b
}

// LoadMeta restores the partition meta from EncodeMeta's bytes. It does not
// mark anything dirty.
func (p *Partition) LoadMeta(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("window: load meta: %w: empty", ErrCorrupt)
	}
	if data[0] != metaVersion {
		return fmt.Errorf("window: load meta: %w %d", ErrUnknownVersion, data[0])
	}
	if len(data) != 9 {
		return fmt.Errorf("window: load meta: %w: %d bytes, want 9", ErrCorrupt, len(data))
	}
	p.wm = int64(binary.BigEndian.Uint64(data[1:]))
	return nil
}

// pendingKey is what LoadKey and LoadBucket read of one key, until
// FinishLoad.
type pendingKey struct {
	legacy *keyState // a version-1 key entry, checked
	head   *keyHead  // a version-2 key entry
	events map[int64][]Evidence
	dedup  map[int64][]seenEntry
}

// keyHead is a decoded version-2 key entry.
type keyHead struct {
	nEvents, nDedup uint64
	open            []*incident // not linked to a keyState yet
}

func (p *Partition) pendingOf(key string) *pendingKey {
	if p.pending == nil {
		p.pending = map[string]*pendingKey{}
	}
	pk := p.pending[key]
	if pk == nil {
		pk = &pendingKey{}
		p.pending[key] = pk
	}
	return pk
}

// LoadKey reads key's key entry (version 2, or a version-1 value holding
// the key's whole state). Like LoadBucket it only stages the entry:
// FinishLoad installs every key whose entries were loaded, replacing any
// state the key had. Loading an entry again replaces what was staged for
// it. On error nothing is staged.
func (p *Partition) LoadKey(key string, data []byte) error {
	var err error
	pk := &pendingKey{}
	if len(data) > 0 && data[0] == legacyKeyVersion {
		pk.legacy, err = p.decodeLegacyKey(key, data)
	} else {
		pk.head, err = p.decodeHead(data)
	}
	if err != nil {
		return fmt.Errorf("window: load key %q: %w", key, err)
	}
	cur := p.pendingOf(key)
	cur.legacy, cur.head = pk.legacy, pk.head
	return nil
}

// LoadBucket reads one bucket entry of r.Key (staged until FinishLoad, as
// LoadKey's). On error nothing is staged.
func (p *Partition) LoadBucket(r BucketRef, data []byte) error {
	switch r.Kind {
	case EventsBucket:
		evs, err := decodeEvents(data)
		if err != nil {
			return fmt.Errorf("window: load key %q events bucket %d: %w", r.Key, r.Bucket, err)
		}
		pk := p.pendingOf(r.Key)
		if pk.events == nil {
			pk.events = map[int64][]Evidence{}
		}
		pk.events[r.Bucket] = evs
	case DedupBucket:
		es, err := decodeDedup(data)
		if err != nil {
			return fmt.Errorf("window: load key %q dedup bucket %d: %w", r.Key, r.Bucket, err)
		}
		pk := p.pendingOf(r.Key)
		if pk.dedup == nil {
			pk.dedup = map[int64][]seenEntry{}
		}
		pk.dedup[r.Bucket] = es
	default:
		return fmt.Errorf("window: load key %q: %w: bucket entry of unknown kind %q", r.Key, ErrCorrupt, r.Kind)
	}
	return nil
}

// FinishLoad checks every key whose entries LoadKey and LoadBucket staged
// and installs it, replacing any state it had, and rebuilds the
// partition-wide indexes (open incidents by end, prune deadlines). It
// marks dirty only the keys loaded from a version-1 value, their key entry
// and all their bucket entries, so that the next persist rewrites them in
// version 2. On error nothing is installed and the staged entries are
// dropped.
func (p *Partition) FinishLoad() error {
	pending := p.pending
	p.pending = nil
	keys := slices.Sorted(maps.Keys(pending))
	built := make([]*keyState, 0, len(keys))
	for _, key := range keys {
		ks, err := p.assemble(key, pending[key])
		if err != nil {
			return fmt.Errorf("window: load key %q: %w", key, err)
		}
		built = append(built, ks)
	}
	for _, ks := range built {
		p.install(ks)
		if pending[ks.key].legacy != nil {
			p.markDirty(ks)
			p.markAllBuckets(ks)
		}
	}
	return nil
}

// install makes ks the state of its key.
func (p *Partition) install(ks *keyState) {
	if old := p.keys[ks.key]; old != nil {
		for _, inc := range old.open {
			p.open.remove(inc)
		}
		p.nEvents -= len(old.events)
		p.nDedup -= len(old.seenBy)
		if old.dirty {
			ks.dirty = true // still listed in dirtyKeys
		}
		if old.dirtyGen == p.gen {
			ks.dirtyB, ks.dirtyGen = slices.Clone(old.dirtyB), p.gen // still to be written
		}
	}
	p.keys[ks.key] = ks
	for _, inc := range ks.open {
		p.open.push(inc)
	}
	p.nEvents += len(ks.events)
	p.nDedup += len(ks.seenBy)
	p.reschedule(ks)
}

// assemble checks the staged entries of key as a whole and returns its
// state.
func (p *Partition) assemble(key string, pk *pendingKey) (*keyState, error) {
	if pk.legacy != nil {
		if len(pk.events)+len(pk.dedup) > 0 {
			return nil, fmt.Errorf("%w: a format version 1 value and bucket entries", ErrCorrupt)
		}
		return pk.legacy, nil
	}
	h := pk.head
	if h == nil {
		return nil, fmt.Errorf("%w: bucket entries without a key entry", ErrCorrupt)
	}
	ks := &keyState{key: key}
	n := 0
	for _, evs := range pk.events {
		n += len(evs)
	}
	if uint64(n) != h.nEvents {
		return nil, fmt.Errorf("%w: the key entry counts %d events, its buckets hold %d", ErrCorrupt, h.nEvents, n)
	}
	if n > 0 {
		ks.events = make([]Evidence, 0, n)
		for _, b := range slices.Sorted(maps.Keys(pk.events)) {
			for _, e := range pk.events[b] {
				if floorDiv(e.TS, p.evB) != b {
					return nil, fmt.Errorf("%w: events bucket %d holds ts %d (bucket %d)", ErrCorrupt, b, e.TS, floorDiv(e.TS, p.evB))
				}
			}
			ks.events = append(ks.events, pk.events[b]...)
		}
	}
	m := 0
	for _, es := range pk.dedup {
		m += len(es)
	}
	if uint64(m) != h.nDedup {
		return nil, fmt.Errorf("%w: the key entry counts %d remembered ids, its buckets hold %d", ErrCorrupt, h.nDedup, m)
	}
	ks.seen = make(map[string]int64, m)
	if m > 0 {
		ks.seenBy = make([]seenEntry, 0, m)
		for _, b := range slices.Sorted(maps.Keys(pk.dedup)) {
			for _, e := range pk.dedup[b] {
				if floorDiv(e.ts, p.ddB) != b {
					return nil, fmt.Errorf("%w: dedup bucket %d holds ts %d (bucket %d)", ErrCorrupt, b, e.ts, floorDiv(e.ts, p.ddB))
				}
				if _, dup := ks.seen[e.id]; dup {
					return nil, fmt.Errorf("%w: dedup event_id %q in two buckets", ErrCorrupt, e.id)
				}
				ks.seen[e.id] = e.ts
			}
			ks.seenBy = append(ks.seenBy, pk.dedup[b]...)
		}
	}
	ks.open = h.open
	for _, inc := range ks.open {
		inc.ks = ks
	}
	if msg := ks.checkOpen(p.cfg.Threshold, p.cfg.SizeMs); msg != "" {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, msg)
	}
	return ks, nil
}

func appendEvent(b []byte, e *Evidence) []byte {
	b = codec.AppendVarint(b, e.TS)
	return appendEventBody(b, e)
}

// appendEventBody appends an event but its ts.
func appendEventBody(b []byte, e *Evidence) []byte {
	b = codec.AppendString(b, e.EventID)
	b = codec.AppendString(b, e.SensorID)
	b = codec.AppendFloat64(b, e.Value)
	b = codec.AppendVarint(b, int64(e.Partition))
	return codec.AppendVarint(b, e.Offset)
}

func readEvent(r *codec.Reader) Evidence {
	ts := r.Varint("ts")
	return readEventBody(r, ts)
}

func readEventBody(r *codec.Reader, ts int64) Evidence {
	return Evidence{
		TS:        ts,
		EventID:   r.String("event_id"),
		SensorID:  r.String("sensor_id"),
		Value:     r.Float64("value"),
		Partition: r.Int32("partition"),
		Offset:    r.Varint("offset"),
	}
}

const minEventBytes = 1 + 1 + 1 + 8 + 1 + 1

// decodeHead decodes a version-2 key entry.
func (p *Partition) decodeHead(data []byte) (*keyHead, error) {
	r := codec.NewReader(data, ErrCorrupt)
	if err := r.Version(keyVersion, ErrUnknownVersion); err != nil {
		return nil, err
	}
	evB, ddB := r.Uvarint("event bucket length"), r.Uvarint("dedup bucket length")
	h := &keyHead{nEvents: r.Uvarint("event count"), nDedup: r.Uvarint("dedup count")}
	if r.Err() == nil && (evB != uint64(p.evB) || ddB != uint64(p.ddB)) {
		return nil, fmt.Errorf("%w: written with buckets of %d ms (events) and %d ms (ids), this partition's are %d ms and %d ms",
			ErrUnknownVersion, evB, ddB, p.evB, p.ddB)
	}
	h.open = readIncidents(&r, p.cfg.Threshold)
	if err := r.Finish(); err != nil {
		return nil, err
	}
	switch {
	case h.nEvents > math.MaxInt32*64 || h.nDedup > math.MaxInt32*64:
		return nil, fmt.Errorf("%w: counts %d events and %d ids", ErrCorrupt, h.nEvents, h.nDedup)
	case h.nEvents == 0 && h.nDedup == 0 && len(h.open) == 0:
		return nil, fmt.Errorf("%w: no state (a deleted key has no entries)", ErrCorrupt)
	}
	return h, nil
}

// decodeEvents decodes an events bucket entry; its events are strictly
// increasing by (ts, event_id).
func decodeEvents(data []byte) ([]Evidence, error) {
	r := codec.NewReader(data, ErrCorrupt)
	if err := r.Version(keyVersion, ErrUnknownVersion); err != nil {
		return nil, err
	}
	n := r.Count("event", minEventBytes-1)
	if r.Err() == nil && n == 0 {
		r.Fail("no events (a bucket without events has no entry)")
	}
	evs := make([]Evidence, 0, n)
	for i := range n {
		var prev int64
		if i > 0 {
			prev = evs[i-1].TS
		}
		e := readEventBody(&r, readTS(&r, prev, i == 0))
		if r.Err() != nil {
			break
		}
		if i > 0 && !evLess(&evs[i-1], &e) {
			r.Fail("events not strictly increasing by (ts, event_id) at %d", i)
			break
		}
		evs = append(evs, e)
	}
	if err := r.Finish(); err != nil {
		return nil, err
	}
	return evs, nil
}

// decodeDedup decodes a dedup bucket entry; its entries are strictly
// increasing by (ts, event_id) with distinct ids.
func decodeDedup(data []byte) ([]seenEntry, error) {
	r := codec.NewReader(data, ErrCorrupt)
	if err := r.Version(keyVersion, ErrUnknownVersion); err != nil {
		return nil, err
	}
	m := r.Count("dedup", 2)
	if r.Err() == nil && m == 0 {
		r.Fail("no ids (a bucket without ids has no entry)")
	}
	es := make([]seenEntry, 0, m)
	ids := make(map[string]struct{}, m)
	for i := range m {
		var prev int64
		if i > 0 {
			prev = es[i-1].ts
		}
		e := seenEntry{ts: readTS(&r, prev, i == 0)}
		e.id = r.String("dedup event_id")
		if r.Err() != nil {
			break
		}
		if i > 0 && cmpSeen(es[i-1], e) >= 0 {
			r.Fail("dedup entries not strictly increasing by (ts, event_id) at %d", i)
			break
		}
		if _, dup := ids[e.id]; dup {
			r.Fail("dedup event_id %q repeated", e.id)
			break
		}
		ids[e.id] = struct{}{}
		es = append(es, e)
	}
	if err := r.Finish(); err != nil {
		return nil, err
	}
	return es, nil
}

// readIncidents reads K and the open incidents, checking what they
// determine without the key's events.
func readIncidents(r *codec.Reader, n int) []*incident {
	var open []*incident
	for range r.Count("incident", 7) {
		inc := &incident{hidx: -1}
		inc.alertID = r.String("alert_id")
		rev := r.Uvarint("revision")
		inc.start = r.Varint("start")
		inc.end = r.Varint("end")
		count := r.Uvarint("count")
		pruned := r.Uvarint("pruned")
		v := r.Count("evidence", minEventBytes)
		if r.Err() != nil {
			break
		}
		if v != n {
			r.Fail("incident %q has %d evidence events, the threshold is %d", inc.alertID, v, n)
			break
		}
		inc.evidence = make([]Evidence, v)
		for i := range inc.evidence {
			inc.evidence[i] = readEvent(r)
		}
		if r.Err() != nil {
			break
		}
		switch {
		case inc.alertID == "":
			r.Fail("incident with empty alert_id")
		case rev > math.MaxInt32:
			r.Fail("incident %q revision %d out of range", inc.alertID, rev)
		case inc.end < inc.start:
			r.Fail("incident %q end %d before start %d", inc.alertID, inc.end, inc.start)
		case len(open) > 0 && inc.start <= open[len(open)-1].end:
			r.Fail("incident %q not after the previous one", inc.alertID)
		case count > math.MaxInt32*64 || pruned > count:
			r.Fail("incident %q count %d, pruned %d", inc.alertID, count, pruned)
		}
		if r.Err() != nil {
			break
		}
		inc.rev, inc.count, inc.pruned = int(rev), int(count), int(pruned)
		open = append(open, inc)
	}
	return open
}

// checkOpen checks the key's open incidents against its kept events and
// returns what is wrong, or "".
func (ks *keyState) checkOpen(n int, s int64) string {
	for _, inc := range ks.open {
		if err := ks.checkIncident(inc.evidence, inc.start, inc.end, inc.pruned, n, s); err != "" {
			return fmt.Sprintf("incident %q %s", inc.alertID, err)
		}
		if c := uint64(ks.upperBound(inc.end)-ks.lowerBound(inc.start)) + uint64(inc.pruned); c != uint64(inc.count) {
			return fmt.Sprintf("incident %q count %d, pruned %d + kept events in range say %d", inc.alertID, inc.count, inc.pruned, c)
		}
	}
	return ""
}

// decodeLegacyKey decodes and checks a version-1 key entry.
func (p *Partition) decodeLegacyKey(key string, data []byte) (*keyState, error) {
	r := codec.NewReader(data, ErrCorrupt)
	if err := r.Version(legacyKeyVersion, ErrUnknownVersion); err != nil {
		return nil, err
	}
	ks := &keyState{key: key}

	if n := r.Count("event", minEventBytes); n > 0 {
		ks.events = make([]Evidence, 0, n)
		for range n {
			e := readEvent(&r)
			if r.Err() != nil {
				break
			}
			if k := len(ks.events); k > 0 && !evLess(&ks.events[k-1], &e) {
				r.Fail("events not strictly increasing by (ts, event_id) at %d", k)
				break
			}
			ks.events = append(ks.events, e)
		}
	}

	m := r.Count("dedup", 2)
	ks.seen = make(map[string]int64, m)
	if m > 0 {
		ks.seenBy = make([]seenEntry, 0, m)
		for range m {
			e := seenEntry{ts: r.Varint("dedup ts"), id: r.String("dedup event_id")}
			if r.Err() != nil {
				break
			}
			if k := len(ks.seenBy); k > 0 && cmpSeen(ks.seenBy[k-1], e) >= 0 {
				r.Fail("dedup entries not strictly increasing by (ts, event_id) at %d", k)
				break
			}
			if _, dup := ks.seen[e.id]; dup {
				r.Fail("dedup event_id %q repeated", e.id)
				break
			}
			ks.seen[e.id] = e.ts
			ks.seenBy = append(ks.seenBy, e)
		}
	}

	ks.open = readIncidents(&r, p.cfg.Threshold)
	if err := r.Finish(); err != nil {
		return nil, err
	}
	for _, inc := range ks.open {
		inc.ks = ks
	}
	if msg := ks.checkOpen(p.cfg.Threshold, p.cfg.SizeMs); msg != "" {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, msg)
	}
	if ks.empty() {
		return nil, fmt.Errorf("%w: no state (a deleted key has no value)", ErrCorrupt)
	}
	return ks, nil
}

// checkIncident checks an incident's evidence against the kept events (a
// suffix of all applied events of the key, see the format comment) and
// returns what is wrong, or "".
func (ks *keyState) checkIncident(evidence []Evidence, start, end int64, pruned, n int, s int64) string {
	evs := ks.events
	for i := 1; i < n; i++ {
		if !evLess(&evidence[i-1], &evidence[i]) {
			return "evidence not strictly increasing by (ts, event_id)"
		}
	}
	switch {
	case evidence[0].TS != start:
		return "evidence does not begin at start"
	case evidence[n-1].TS > end:
		return "evidence ends after end"
	case !spanWithin(evidence[0].TS, evidence[n-1].TS, s):
		return "evidence spans more than the window"
	}
	if i := ks.upperBound(end); i == 0 || evs[i-1].TS != end {
		return "has no kept event at its end"
	}
	// j = the evidence events before the first kept event (pruned ones).
	j := 0
	for j < n && evLess(&evidence[j], &evs[0]) {
		j++
	}
	if j == 0 {
		first := ks.lowerBound(start)
		if first+n > len(evs) || !slices.EqualFunc(evs[first:first+n], evidence, sameEvidence) {
			return "evidence does not match the events"
		}
		if pruned != 0 {
			return "has pruned events before its kept evidence"
		}
		return ""
	}
	if evidence[j-1].TS >= evs[0].TS || n-j > len(evs) || !slices.EqualFunc(evs[:n-j], evidence[j:], sameEvidence) {
		return "evidence does not continue into the kept events"
	}
	if pruned < j {
		return "counts fewer pruned events than its pruned evidence"
	}
	return ""
}

// sameEvidence compares every field, the value by its bits.
func sameEvidence(a, b Evidence) bool {
	return a.EventID == b.EventID && a.SensorID == b.SensorID && a.TS == b.TS &&
		math.Float64bits(a.Value) == math.Float64bits(b.Value) &&
		a.Partition == b.Partition && a.Offset == b.Offset
}
