package dedup

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/vibeline/processor/internal/codec"
)

// Shared persistence. The views of one store (NewView) can persist their
// ids each on its own (EncodeBucket, one entry per view and bucket), or
// together: one entry per (key, bucket) for all of them (EncodeShared),
// each id written once with the views that remember it, named. Rules that
// take every event remember the same ids, so shared persistence writes
// each id once instead of once per rule. The views are named by the
// caller (a rule's id and version): a view that a later configuration no
// longer has is dropped at load, and a new one starts with no ids, so the
// entries stay meaningful while the set of views changes.

// sharedFormatVersion is the first byte of a shared bucket value (doc.go).
const sharedFormatVersion = 2

// StoreDirtyBuckets returns the (key, bucket) entries changed for any view
// of s's store since that view's last ClearDirty (the union of their
// DirtyBuckets), sorted by bucket then key. One whose EncodeShared is nil
// holds nothing any more: the caller writes a tombstone.
func (s *Set) StoreDirtyBuckets() []BucketRef { return s.st.dirtyBuckets(math.MaxUint64) }

func cmpRef(a, b BucketRef) int {
	if c := cmp.Compare(a.Bucket, b.Bucket); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// Shares reports whether s and o are views of one store.
func (s *Set) Shares(o *Set) bool { return s.st == o.st }

// Views returns the views of s's store, in the order they were made.
func (s *Set) Views() []*Set { return slices.Clone(s.st.views) }

// EncodeShared returns the shared encoding (doc.go, shared bucket value)
// of key's ids with ts in the bucket that any view of s's store remembers
// (each view as its EncodeBucket would write them: none of a view's once
// the bucket has expired whole for it, keepThr), or nil when there is
// none. names[i] names the view
// Views()[i]; names must be distinct and non-empty.
func (s *Set) EncodeShared(key string, bucket int64, names []string) []byte {
	st := s.st
	ks := st.keys[key]
	if ks == nil || ks.live() == 0 {
		return nil
	}
	es := ks.byTS[ks.head:]
	lo := st.bucketStart(bucket)
	i, _ := slices.BinarySearchFunc(es, lo, func(e entry, t int64) int { return cmp.Compare(e.ts, t) })
	j := i
	for j < len(es) && s.BucketOf(es[j].ts) == bucket {
		j++
	}
	es = es[i:j]
	// Two passes over the bucket's entries, the same masks each time: the
	// first sizes the value and finds the views named, the second writes.
	var thr [MaxViews]int64 // per slot: a view's ids are written with ts >= thr
	for _, v := range st.views {
		thr[v.slot] = st.keepThr(v.wm)
	}
	live := func(e *entry) uint64 {
		var m uint64
		for b := e.mask; b != 0; b &= b - 1 {
			if slot := bits.TrailingZeros64(b); e.ts >= thr[slot] {
				m |= 1 << slot
			}
		}
		return m
	}
	var used uint64
	n, size := 0, 1+2*binary.MaxVarintLen64
	for k := range es {
		if m := live(&es[k]); m != 0 {
			used |= m
			n++
			size += 2*binary.MaxVarintLen64 + 1 + len(es[k].id)
			// The ids' bytes are small objects allocated one per record
			// among everything else decoding allocates, rarely in the
			// cache by the time their bucket is encoded: their loads
			// start here, together, and the second pass finds them.
			prefetchString(es[k].id)
		}
	}
	if n == 0 {
		return nil
	}
	// The table names the views that remember some id, sorted by name
	// (one encoding per state); idx maps a slot to its table index.
	var table []string
	for b := used; b != 0; b &= b - 1 {
		table = append(table, names[bits.TrailingZeros64(b)])
	}
	slices.Sort(table)
	var idx [MaxViews]uint8
	for b := used; b != 0; b &= b - 1 {
		slot := bits.TrailingZeros64(b)
		k, _ := slices.BinarySearch(table, names[slot])
		idx[slot] = uint8(k)
	}
	for _, name := range table {
		size += binary.MaxVarintLen64 + len(name)
	}
	b := make([]byte, 0, size)
	b = append(b, sharedFormatVersion)
	b = codec.AppendUvarint(b, uint64(len(table)))
	for _, name := range table {
		b = codec.AppendString(b, name)
	}
	b = codec.AppendUvarint(b, uint64(n))
	var prev int64
	first := true
	for k := range es {
		e := &es[k]
		m := live(e)
		if m == 0 {
			continue
		}
		if first {
			b = codec.AppendVarint(b, e.ts)
			first = false
		} else {
			b = codec.AppendUvarint(b, uint64(e.ts)-uint64(prev)) // exact mod 2^64
		}
		prev = e.ts
		b = codec.AppendString(b, e.id)
		var t uint64
		for v := m; v != 0; v &= v - 1 {
			t |= 1 << idx[bits.TrailingZeros64(v)]
		}
		b = codec.AppendUvarint(b, t)
	}
	return b
}

// LoadShared adds the ids of one shared bucket entry (EncodeShared's
// bytes) to the views that byName names, each as LoadBucket would load its
// own entry of the bucket (an id a view already remembers from another
// bucket keeps the later of its two ts; ids whose bucket has expired
// whole for a view are forgotten at once). Views of the entry that byName does not name
// (rules no longer configured) are skipped, and the bucket is then marked
// dirty in s, so that it is rewritten without them (or deleted). Every
// view of byName must share s's store. On error the set is unchanged.
func (s *Set) LoadShared(key string, bucket int64, data []byte, byName map[string]*Set) error {
	table, es, masks, err := decodeShared(data)
	if err != nil {
		return fmt.Errorf("dedup: load shared key %q bucket %d: %w", key, bucket, err)
	}
	for _, e := range es {
		if s.BucketOf(e.ts) != bucket {
			return fmt.Errorf("dedup: load shared key %q bucket %d: %w: ts %d lies in bucket %d", key, bucket, ErrCorrupt, e.ts, s.BucketOf(e.ts))
		}
	}
	for _, v := range byName {
		if v.st != s.st {
			return fmt.Errorf("dedup: load shared key %q bucket %d: a view of another store", key, bucket)
		}
	}
	for k, name := range table {
		v := byName[name]
		if v == nil {
			s.markRef(BucketRef{key, bucket})
			continue
		}
		var mine []entry
		for j, e := range es {
			if masks[j]&(1<<k) != 0 {
				mine = append(mine, e)
			}
		}
		v.load(key, v.settle(key, bucket, mine))
	}
	return nil
}

// decodeShared parses a shared bucket value and checks every rule of the
// format: the view names, and the entries in order with their masks over
// the names.
func decodeShared(data []byte) (table []string, es []entry, masks []uint64, err error) {
	if len(data) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: empty (a bucket without ids has no value)", ErrCorrupt)
	}
	r := codec.NewReader(data, ErrCorrupt)
	if err := r.Version(sharedFormatVersion, ErrUnknownVersion); err != nil {
		return nil, nil, nil, err
	}
	v := r.Count("view name", 1)
	switch {
	case r.Err() != nil:
		return nil, nil, nil, r.Err()
	case v == 0 || v > MaxViews:
		return nil, nil, nil, fmt.Errorf("%w: %d view names, want 1..%d", ErrCorrupt, v, MaxViews)
	}
	table = make([]string, 0, v)
	for i := range v {
		n := r.String("view name")
		if r.Err() != nil {
			return nil, nil, nil, r.Err()
		}
		if n == "" || (i > 0 && n <= table[i-1]) {
			return nil, nil, nil, fmt.Errorf("%w: view name %d (%q) empty or not after the one before", ErrCorrupt, i, n)
		}
		table = append(table, n)
	}
	m := r.Count("id", minEntryBytes+1)
	switch {
	case r.Err() != nil:
		return nil, nil, nil, r.Err()
	case m == 0:
		return nil, nil, nil, fmt.Errorf("%w: no ids (a bucket without ids has no value)", ErrCorrupt)
	}
	es = make([]entry, 0, m)
	masks = make([]uint64, 0, m)
	all := uint64(math.MaxUint64)
	if v < 64 {
		all = 1<<v - 1
	}
	var used uint64
	views := make(map[string]uint64, m) // per id, the views remembering it
	for i := range m {
		e := readEntry(&r, es, i)
		mask := r.Uvarint("views")
		if r.Err() != nil {
			break
		}
		if i > 0 && cmpEntry(es[i-1], e) >= 0 {
			r.Fail("entry %d not after entry %d by (ts, event_id)", i, i-1)
			break
		}
		if mask == 0 || mask&^all != 0 {
			r.Fail("entry %d: views %#x, want a non-empty set of the %d named", i, mask, v)
			break
		}
		if views[e.id]&mask != 0 {
			r.Fail("event_id %q remembered twice by one view", e.id)
			break
		}
		views[e.id] |= mask
		used |= mask
		es = append(es, e)
		masks = append(masks, mask)
	}
	if err := r.Finish(); err != nil {
		return nil, nil, nil, err
	}
	if used != all {
		return nil, nil, nil, fmt.Errorf("%w: a view name that no id names", ErrCorrupt)
	}
	return table, es, masks, nil
}
