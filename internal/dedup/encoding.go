package dedup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/vibeline/processor/internal/codec"
)

// formatVersion is the first byte of every key value (format in doc.go).
const formatVersion = 1

// ErrUnknownVersion is wrapped by LoadKey when the first byte is not a
// format version this package reads.
var ErrUnknownVersion = errors.New("unknown dedup state format version")

// ErrCorrupt is wrapped by LoadKey for bytes that are not a valid encoding
// of a known version.
var ErrCorrupt = errors.New("corrupt dedup state")

// minEntryBytes is the smallest encoded entry: a one-byte (u)varint and an
// empty string's one-byte length.
const minEntryBytes = 2

// EncodeKey returns the encoding of key's remembered ids (format in
// doc.go), or nil when the key has none (never had any, or all expired):
// the caller then deletes the key from its store. It writes exactly the
// ids with ts >= W - H; a Set with buckets persists with EncodeBucket or
// EncodeShared (its Dirty lists a key only when a bucket of it changes).
func (s *Set) EncodeKey(key string) []byte {
	ks := s.st.keys[key]
	if ks == nil || ks.live() == 0 {
		return nil
	}
	return encodeEntries(ks.byTS[ks.head:], s.bit, subSat(s.wm, s.st.h))
}

// encodeEntries encodes the entries of es (sorted by (ts, id)) that a view
// of mask remembers with ts >= thr, or returns nil when there is none.
func encodeEntries(es []entry, mask uint64, thr int64) []byte {
	n, size := 0, 1+2*binary.MaxVarintLen64
	for _, e := range es {
		if e.mask&mask != 0 && e.ts >= thr {
			n++
			size += 3 + len(e.id)
		}
	}
	if n == 0 {
		return nil
	}
	b := make([]byte, 0, size)
	b = append(b, formatVersion)
	b = codec.AppendUvarint(b, uint64(n))
	var prev int64
	first := true
	for _, e := range es {
		if e.mask&mask == 0 || e.ts < thr {
			continue
		}
		if first {
			b = codec.AppendVarint(b, e.ts)
			first = false
		} else {
			// Exact: 0 <= ts - prev < 2^64, computed mod 2^64.
			b = codec.AppendUvarint(b, uint64(e.ts)-uint64(prev))
		}
		prev = e.ts
		b = codec.AppendString(b, e.id)
	}
	return b
}

// LoadKey restores key's remembered ids from EncodeKey's bytes, replacing
// any the key had. Ids that have expired at the current watermark are
// forgotten at once (and the key is then marked dirty, deleted if none is
// left); otherwise LoadKey marks nothing dirty. On error the set is
// unchanged.
func (s *Set) LoadKey(key string, data []byte) error {
	es, err := decodeKey(data)
	if err != nil {
		return fmt.Errorf("dedup: load key %q: %w", key, err)
	}
	st := s.st
	if ks := st.keys[key]; ks != nil {
		// Replace what this view remembered of the key, marking nothing
		// dirty.
		for i := ks.live() - 1; i >= 0; i-- {
			if ks.byTS[ks.head+i].mask&s.bit != 0 && st.unmark(ks, ks.head+i, s) {
				break
			}
		}
	}
	s.load(key, es)
	return nil
}

// load adds es, (ts, id) pairs sorted and new to this view for key, to the
// view, then forgets at once what has expired at the current watermark
// (with buckets: what lies in buckets that have expired whole, keepThr).
func (s *Set) load(key string, es []entry) {
	st := s.st
	ks := st.keys[key]
	if ks == nil {
		ks = st.newKey(strings.Clone(key))
		st.keys[ks.key] = ks
	}
	for _, e := range es {
		e.mask = s.bit
		st.remember(ks, e, st.pairHash(ks, e.id))
	}
	s.nIDs += len(es)
	// What expired for this view goes now (as Seen would forget it), and
	// what expired for every view with it.
	thr := st.keepThr(s.wm)
	for i := ks.live() - 1; i >= 0; i-- {
		if e := ks.byTS[ks.head+i]; e.ts < thr && e.mask&s.bit != 0 {
			if st.forget(ks, ks.head+i, s) {
				return
			}
		}
	}
	st.prune(ks)
}

// readEntry reads entry i of an encoded value: its ts (entry 0's as a
// varint, every other's as the uvarint delta to es[i-1]'s, which must not
// overflow) and event_id. Errors are left in r.
func readEntry(r *codec.Reader, es []entry, i int) entry {
	var e entry
	if i == 0 {
		e.ts = r.Varint("ts")
	} else {
		prev := es[i-1].ts
		delta := r.Uvarint("ts delta")
		// MaxInt64 - prev is in [0, 2^64), exact mod 2^64.
		if r.Err() == nil && delta > uint64(math.MaxInt64)-uint64(prev) {
			r.Fail("entry %d: ts overflows int64", i)
		}
		e.ts = prev + int64(delta)
	}
	e.id = r.String("event_id")
	return e
}

// decodeKey parses a key value and checks every rule of the format. It
// returns the entries in order.
func decodeKey(data []byte) ([]entry, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty (a key without ids has no value)", ErrCorrupt)
	}
	r := codec.NewReader(data, ErrCorrupt)
	if err := r.Version(formatVersion, ErrUnknownVersion); err != nil {
		return nil, err
	}
	m := r.Count("id", minEntryBytes)
	switch {
	case r.Err() != nil:
		return nil, r.Err()
	case m == 0:
		return nil, fmt.Errorf("%w: no ids (a key without ids has no value)", ErrCorrupt)
	}
	es := make([]entry, 0, m)
	ids := make(map[string]struct{}, m)
	for i := range m {
		e := readEntry(&r, es, i)
		if r.Err() != nil {
			break
		}
		if i > 0 && cmpEntry(es[i-1], e) >= 0 {
			r.Fail("entry %d not after entry %d by (ts, event_id)", i, i-1)
			break
		}
		if _, dup := ids[e.id]; dup {
			r.Fail("event_id %q repeated", e.id)
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
