package window

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/vibeline/processor/internal/codec"
)

// Binary encoding of a partition's window state, format version 1.
//
// Package state stores these bytes opaquely: one value per key (EncodeKey)
// and one per partition (EncodeMeta). The first byte of each is the format
// version; a reader rejects versions it does not know with an error wrapping
// ErrUnknownVersion (the state is then rebuilt by replay, never guessed at).
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
// Key value (EncodeKey), the state of one key of one rule in one input
// partition; the key itself is not repeated (it is the storage key):
//
//	u8       version = 1
//	uvarint  E, number of kept applied events
//	E x event, strictly increasing by (ts, event_id):
//	  varint   ts               event time, ms since the Unix epoch
//	  string   event_id
//	  string   sensor_id
//	  u64le    value            IEEE-754 bits of the float64
//	  varint   partition        input partition of the record
//	  varint   offset           input offset of the record
//	uvarint  M, number of remembered event ids (dedup)
//	M x entry, strictly increasing by (ts, event_id), event_ids distinct:
//	  varint   ts               remembered event time
//	  string   event_id
//	uvarint  K, number of open incidents
//	K x incident, by start, disjoint (start > previous end):
//	  string   alert_id
//	  uvarint  revision         last emitted revision number
//	  varint   start
//	  varint   end              >= start
//	  uvarint  count            applied events with ts in [start, end]
//	  uvarint  pruned           those of them no longer among the kept events
//	  uvarint  V, evidence length (= the rule's Threshold N)
//	  V x event                 same layout as above
//
// Nothing may follow. Pruning (gc.go) removes events older than W - L - S
// even inside an open incident, so an incident stores its evidence and
// counts its pruned events; the kept events are a suffix of all applied
// events of the key. On load, every incident is checked for what that still
// determines:
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
// Partition meta value (EncodeMeta):
//
//	u8       version = 1
//	u64be    watermark          two's complement int64; NoWatermark = math.MinInt64
//
// Exactly 9 bytes. Prune deadlines and the partition-wide incident index
// are not stored: LoadKey rebuilds them.
const formatVersion = 1

// ErrUnknownVersion is wrapped by LoadKey and LoadMeta when the first byte
// is not a format version this package reads.
var ErrUnknownVersion = errors.New("unknown state format version")

// ErrCorrupt is wrapped by LoadKey and LoadMeta for bytes that are not a
// valid encoding of a known version.
var ErrCorrupt = errors.New("corrupt state")

// EncodeKey returns the encoding of key's state, or nil when the key has no
// state (never had any, or was deleted by garbage collection).
func (p *Partition) EncodeKey(key string) []byte {
	ks := p.keys[key]
	if ks == nil {
		return nil
	}
	size := 16
	for i := range ks.events {
		size += 32 + len(ks.events[i].EventID) + len(ks.events[i].SensorID)
	}
	for _, e := range ks.seenBy {
		size += 12 + len(e.id)
	}
	b := make([]byte, 0, size)
	b = append(b, formatVersion)
	b = codec.AppendUvarint(b, uint64(len(ks.events)))
	for i := range ks.events {
		b = appendEvent(b, &ks.events[i])
	}
	b = codec.AppendUvarint(b, uint64(len(ks.seenBy)))
	for _, e := range ks.seenBy {
		b = codec.AppendVarint(b, e.ts)
		b = codec.AppendString(b, e.id)
	}
	b = codec.AppendUvarint(b, uint64(len(ks.open)))
	for _, inc := range ks.open {
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

// EncodeMeta returns the encoding of the partition meta (the watermark).
func (p *Partition) EncodeMeta() []byte {
	b := make([]byte, 9)
	b[0] = formatVersion
	binary.BigEndian.PutUint64(b[1:], uint64(p.wm))
	return b
}

// LoadMeta restores the partition meta from EncodeMeta's bytes. It does not
// mark anything dirty.
func (p *Partition) LoadMeta(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("window: load meta: %w: empty", ErrCorrupt)
	}
	if data[0] != formatVersion {
		return fmt.Errorf("window: load meta: %w %d", ErrUnknownVersion, data[0])
	}
	if len(data) != 9 {
		return fmt.Errorf("window: load meta: %w: %d bytes, want 9", ErrCorrupt, len(data))
	}
	p.wm = int64(binary.BigEndian.Uint64(data[1:]))
	return nil
}

// LoadKey restores key's state from EncodeKey's bytes, replacing any state
// the key had, and rebuilds the partition-wide indexes (open incidents by
// end, prune deadlines). It does not mark anything dirty. On error the
// partition is unchanged.
func (p *Partition) LoadKey(key string, data []byte) error {
	ks, err := p.decodeKey(key, data)
	if err != nil {
		return fmt.Errorf("window: load key %q: %w", key, err)
	}
	if old := p.keys[key]; old != nil {
		for _, inc := range old.open {
			p.open.remove(inc)
		}
		p.nEvents -= len(old.events)
		p.nDedup -= len(old.seenBy)
		if old.dirty {
			ks.dirty = true // still listed in dirtyKeys
		}
	}
	p.keys[key] = ks
	for _, inc := range ks.open {
		p.open.push(inc)
	}
	p.nEvents += len(ks.events)
	p.nDedup += len(ks.seenBy)
	p.reschedule(ks)
	return nil
}

func appendEvent(b []byte, e *Evidence) []byte {
	b = codec.AppendVarint(b, e.TS)
	b = codec.AppendString(b, e.EventID)
	b = codec.AppendString(b, e.SensorID)
	b = codec.AppendFloat64(b, e.Value)
	b = codec.AppendVarint(b, int64(e.Partition))
	return codec.AppendVarint(b, e.Offset)
}

func readEvent(r *codec.Reader) Evidence {
	return Evidence{
		TS:        r.Varint("ts"),
		EventID:   r.String("event_id"),
		SensorID:  r.String("sensor_id"),
		Value:     r.Float64("value"),
		Partition: r.Int32("partition"),
		Offset:    r.Varint("offset"),
	}
}

const minEventBytes = 1 + 1 + 1 + 8 + 1 + 1

func (p *Partition) decodeKey(key string, data []byte) (*keyState, error) {
	r := codec.NewReader(data, ErrCorrupt)
	if err := r.Version(formatVersion, ErrUnknownVersion); err != nil {
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

	n, s := p.cfg.Threshold, p.cfg.SizeMs
	for range r.Count("incident", 7) {
		inc := &incident{ks: ks, hidx: -1}
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
			inc.evidence[i] = readEvent(&r)
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
		case len(ks.open) > 0 && inc.start <= ks.open[len(ks.open)-1].end:
			r.Fail("incident %q not after the previous one", inc.alertID)
		case count > math.MaxInt || pruned > count:
			r.Fail("incident %q count %d, pruned %d", inc.alertID, count, pruned)
		}
		if r.Err() != nil {
			break
		}
		inc.rev = int(rev)
		if err := ks.checkIncident(inc.evidence, inc.start, inc.end, int(pruned), n, s); err != "" {
			r.Fail("incident %q %s", inc.alertID, err)
			break
		}
		if c := uint64(ks.upperBound(inc.end)-ks.lowerBound(inc.start)) + pruned; c != count {
			r.Fail("incident %q count %d, pruned %d + kept events in range say %d", inc.alertID, count, pruned, c)
			break
		}
		inc.count, inc.pruned = int(count), int(pruned)
		ks.open = append(ks.open, inc)
	}
	if err := r.Finish(); err != nil {
		return nil, err
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
