package dedup

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Bucketed persistence. EncodeKey writes all of a key's ids at once: a key
// that remembers an hour of ids rewrites them all whenever one is added.
// A Set made by NewBucketed persists instead by (key, time bucket): the ids
// of a key with ts in [b*B, (b+1)*B) are one entry, so a commit rewrites
// only the buckets that changed (normally the newest) and an expiry
// deletes whole old buckets. The entry format is EncodeKey's (doc.go); the
// lookups are the same (one id map per key).

// BucketRef names one persisted entry of a bucketed Set.
type BucketRef struct {
	Key    string
	Bucket int64 // floor(ts / B)
}

// NewBucketed returns an empty Set with horizon horizonMs that persists by
// (key, bucket) with buckets of bucketMs (> 0) milliseconds.
func NewBucketed(horizonMs, bucketMs int64) (*Set, error) {
	if bucketMs <= 0 {
		return nil, fmt.Errorf("dedup: bucket %d ms: must be > 0 milliseconds", bucketMs)
	}
	s, err := New(horizonMs)
	if err != nil {
		return nil, err
	}
	s.st.bucketMs = bucketMs
	return s, nil
}

// BucketOf returns the bucket of ts.
func (s *Set) BucketOf(ts int64) int64 { return s.st.bucketOf(ts) }

// bucketOf is BucketOf (bucketMs > 0).
func (st *store) bucketOf(ts int64) int64 { return floorDiv(ts, st.bucketMs) }

// floorDiv is a / b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// bucketStart is the smallest ts of bucket (a bucket of some ts), clamped
// at math.MinInt64: the bottom bucket of int64 starts below it, where
// bucket * bucketMs wraps.
func (st *store) bucketStart(bucket int64) int64 {
	lo := bucket * st.bucketMs
	if bucket < 0 && lo > 0 {
		return math.MinInt64
	}
	return lo
}

// markBucket records that s's entry of ks's bucket of ts changed.
func (s *Set) markBucket(ks *keyState, ts int64) {
	st := s.st
	if st.bucketMs == 0 {
		return
	}
	// A view marks the records of a chunk one after the other, most of
	// them in the bucket of the one before: no division for those.
	if ts < s.markLo || ts >= s.markHi {
		s.markB = s.BucketOf(ts)
		lo := s.markB * st.bucketMs
		hi := lo + st.bucketMs
		if lo > ts || hi <= ts {
			lo, hi = 0, 0 // wrapped (a bucket at an end of int64): not cached
		}
		s.markLo, s.markHi = lo, hi
	}
	b, m := s.markB, &ks.marks
	var i int32
	switch {
	case m.newer.gen == st.dirtyGen && m.newer.bucket == b:
		i = m.newer.i
	case m.older.gen == st.dirtyGen && m.older.bucket == b:
		i = m.older.i
	default:
		i = st.dirtyIndex(BucketRef{ks.key, b})
		k := mark{bucket: b, i: i, gen: st.dirtyGen}
		if m.newer.gen != st.dirtyGen || b >= m.newer.bucket {
			m.newer = k
		} else {
			m.older = k
		}
	}
	st.dirtyMasks[i] |= s.bit
}

// markRef records that s's entry of r changed.
func (s *Set) markRef(r BucketRef) {
	st := s.st
	st.dirtyMasks[st.dirtyIndex(r)] |= s.bit
}

// dirtyIndex returns the index of r in the store's dirty list, adding it
// (with no view's bit) if it is not there.
func (st *store) dirtyIndex(r BucketRef) int32 {
	if i, ok := st.dirtyAt[r]; ok {
		return i
	}
	if st.dirtyAt == nil {
		st.dirtyAt = map[BucketRef]int32{}
	}
	i := int32(len(st.dirtyRefs))
	st.dirtyAt[r] = i
	st.dirtyRefs = append(st.dirtyRefs, r)
	st.dirtyMasks = append(st.dirtyMasks, 0)
	return i
}

// clearDirtyBuckets takes the views of bits out of the dirty list. Once
// at least half of the list is marked by no view, it drops those entries
// (all of them once no view is left in it), so that the list stays
// within twice what the views have marked since their clears, also
// where they clear at different times.
func (st *store) clearDirtyBuckets(bits uint64) {
	live := 0
	for i := range st.dirtyMasks {
		st.dirtyMasks[i] &^= bits
		if st.dirtyMasks[i] != 0 {
			live++
		}
	}
	if n := len(st.dirtyRefs); n == 0 || 2*live > n {
		return
	}
	k := 0
	for i, m := range st.dirtyMasks {
		if m != 0 {
			st.dirtyRefs[k], st.dirtyMasks[k] = st.dirtyRefs[i], m
			k++
		}
	}
	clear(st.dirtyRefs[k:]) // the keys, for the garbage collector
	st.dirtyRefs, st.dirtyMasks = st.dirtyRefs[:k], st.dirtyMasks[:k]
	clear(st.dirtyAt)
	for i, r := range st.dirtyRefs {
		st.dirtyAt[r] = int32(i)
	}
	st.dirtyGen++ // the entries moved: every key's marks cache is stale
	if st.dirtyGen == 0 {
		// Wrapped (after 2^32 - 1 compactions): a cache dated 0 or 1
		// could be taken for current.
		for _, ks := range st.keys {
			ks.marks = marks{}
		}
		st.dirtyGen = 1
	}
}

// dirtyBuckets returns the entries of the dirty list marked by any of the
// views of bits, sorted by bucket then key.
func (st *store) dirtyBuckets(bits uint64) []BucketRef {
	out := make([]BucketRef, 0) // empty, not nil
	for i, m := range st.dirtyMasks {
		if m&bits != 0 {
			out = append(out, st.dirtyRefs[i])
		}
	}
	slices.SortFunc(out, cmpRef)
	return out
}

// DirtyBuckets returns the (key, bucket) entries changed since the last
// ClearDirty, sorted by bucket then key. One whose EncodeBucket is nil holds
// nothing any more: the caller writes a tombstone.
func (s *Set) DirtyBuckets() []BucketRef { return s.st.dirtyBuckets(s.bit) }

// EncodeBucket returns the encoding (EncodeKey's format) of key's ids with
// ts in the bucket, or nil when there is none or the bucket has expired
// whole. The ids of a bucket that has not are all written, also those
// that have expired (keepThr).
func (s *Set) EncodeBucket(key string, bucket int64) []byte {
	ks := s.st.keys[key]
	if ks == nil || ks.live() == 0 {
		return nil
	}
	es := ks.byTS[ks.head:]
	lo := s.st.bucketStart(bucket)
	i, _ := slices.BinarySearchFunc(es, lo, func(e entry, t int64) int { return cmp.Compare(e.ts, t) })
	j := i
	for j < len(es) && s.BucketOf(es[j].ts) == bucket {
		j++
	}
	return encodeEntries(es[i:j], s.bit, s.st.keepThr(s.wm))
}

// LoadBucket adds the ids of one persisted (key, bucket) entry to the set.
// Every id must lie in the bucket (else ErrCorrupt). An id the set already
// remembers from another bucket keeps the later of its two ts (settle).
// Ids whose bucket has expired whole at the current watermark are
// forgotten at once (their buckets are then marked dirty); ids that
// expired in a bucket that has not are held, as the set that wrote them
// held them (keepThr). On error the set is unchanged.
func (s *Set) LoadBucket(key string, bucket int64, data []byte) error {
	es, err := decodeKey(data)
	if err != nil {
		return fmt.Errorf("dedup: load key %q bucket %d: %w", key, bucket, err)
	}
	for _, e := range es {
		if s.BucketOf(e.ts) != bucket {
			return fmt.Errorf("dedup: load key %q bucket %d: %w: ts %d lies in bucket %d", key, bucket, ErrCorrupt, e.ts, s.BucketOf(e.ts))
		}
	}
	s.load(key, s.settle(key, bucket, es))
	return nil
}

// settle drops from es, the entries of one bucket being loaded, the ids
// that this view already remembers from another bucket, keeping the later
// ts of the two, and marks the bucket that loses one dirty (it is then
// rewritten without it). A view remembers an id once, so one of the two
// entries is stale: the earlier one had expired when the later was
// remembered (else the later would have been a duplicate), and its bucket
// was not rewritten since (possible only while the views of a shared store
// have different watermarks).
func (s *Set) settle(key string, bucket int64, es []entry) []entry {
	st := s.st
	ks := st.keys[key]
	if ks == nil {
		return es
	}
	kept := es[:0:0]
	for _, e := range es {
		i := -1
		if ks != nil {
			i = st.remembered(ks, e.id, st.pairHash(ks, e.id), s.bit)
		}
		switch {
		case i < 0:
			kept = append(kept, e)
		case ks.byTS[i].ts < e.ts:
			if st.forget(ks, i, s) {
				ks = nil // the key held nothing else
			}
			kept = append(kept, e)
		default:
			s.markRef(BucketRef{key, bucket})
		}
	}
	return kept
}
