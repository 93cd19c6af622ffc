package dedup

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
)

// NoWatermark is the watermark of a new Set: minus infinity, nothing
// expires. It equals window.NoWatermark and aggwindow.NoWatermark.
const NoWatermark int64 = math.MinInt64

// Set remembers the event ids of one rule over one input partition, per
// key, while their ts >= W - H. It is not safe for concurrent use.
type Set struct {
	h  int64 // dedup horizon H, ms, >= 0
	wm int64 // W, never decreases

	keys  map[string]*keyState // only keys with at least one id
	due   dueQueue             // lazy expiry deadlines of keys, by W
	dirty []string             // may hold repeats; Dirty sorts and compacts
	nIDs  int                  // for Stats

	// The lookup index of every remembered (key, event_id): idx maps the
	// pair's 64-bit hash (pairHash) to its ts, and a hit is confirmed in
	// the key's byTS, so a verdict never rests on a hash. A pair whose
	// hash slot is taken by another pair lives in coll instead (rare: two
	// of a few million 64-bit hashes). One map of integers for the whole
	// set, rather than a map of strings per key, costs a third of the time
	// per event and gives the garbage collector no pointers to scan.
	seed maphash.Seed // per Set: in-memory only, never persisted
	idx  map[uint64]int64
	coll map[pair]int64

	bucketMs int64                  // > 0: persisted by (key, bucket) (bucket.go)
	dirtyB   map[BucketRef]struct{} // changed buckets, when bucketMs > 0
	gen      uint64                 // ClearDirty count + 1, for keyState.markedGen
}

// pair is a remembered (key, event_id) in Set.coll.
type pair struct{ key, id string }

// keyState holds the remembered ids of one key: byTS[head:] holds them
// sorted by (ts, id), and Set.idx indexes them. byTS[:head] is expired
// space, zeroed, reused by the next compaction.
type keyState struct {
	key  string
	salt uint64 // pairHash's share of the key, fixed per Set
	byTS []entry
	head int
	peak int // most ids held since byTS was last allocated

	// The bucket last marked dirty, in generation markedGen of the Set:
	// most events of a key fall in its newest bucket, which is then marked
	// once per commit rather than once per event (bucket.go).
	marked    int64
	markedGen uint64

	sched     int64 // when scheduled: the W of its queue entry
	scheduled bool
	dirty     bool // listed in Set.dirty
	deleted   bool // no longer in Set.keys (replaced or emptied)
}

type entry struct {
	ts int64
	id string
}

func cmpEntry(a, b entry) int {
	if c := cmp.Compare(a.ts, b.ts); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// New returns an empty Set (watermark NoWatermark) with dedup horizon
// horizonMs, H in milliseconds; it must be >= 0 (the rule configuration
// requires H > S + L).
func New(horizonMs int64) (*Set, error) {
	if horizonMs < 0 {
		return nil, fmt.Errorf("dedup: horizon %d ms: must be >= 0 milliseconds", horizonMs)
	}
	return &Set{h: horizonMs, wm: NoWatermark, keys: make(map[string]*keyState),
		seed: maphash.MakeSeed(), idx: make(map[uint64]int64), gen: 1}, nil
}

// newKey returns the empty state of key (not yet in s.keys).
func (s *Set) newKey(key string) *keyState {
	return &keyState{key: key, salt: maphash.String(s.seed, key) * 0x9e3779b97f4a7c15}
}

// pairHash is the index hash of (ks.key, id).
func (s *Set) pairHash(ks *keyState, id string) uint64 {
	return maphash.String(s.seed, id) ^ ks.salt
}

// lookup returns the ts with which ks remembers id. h is pairHash(ks, id).
func (s *Set) lookup(ks *keyState, id string, h uint64) (int64, bool) {
	if ts, ok := s.idx[h]; ok && ks.holds(ts, id) {
		return ts, true
	}
	if len(s.coll) > 0 {
		ts, ok := s.coll[pair{ks.key, id}]
		return ts, ok
	}
	return 0, false
}

// index adds e, new to ks, to the lookup index (not to byTS).
func (s *Set) index(ks *keyState, e entry, h uint64) {
	if _, taken := s.idx[h]; !taken {
		s.idx[h] = e.ts
		return
	}
	if s.coll == nil {
		s.coll = make(map[pair]int64)
	}
	s.coll[pair{ks.key, e.id}] = e.ts
}

// unindex removes e, remembered by ks, from the lookup index.
func (s *Set) unindex(ks *keyState, e entry) {
	if len(s.coll) > 0 {
		p := pair{ks.key, e.id}
		if _, ok := s.coll[p]; ok {
			delete(s.coll, p)
			return
		}
	}
	delete(s.idx, s.pairHash(ks, e.id))
}

// Watermark returns the set's watermark W, the largest value passed to
// Advance (NoWatermark before).
func (s *Set) Watermark() int64 { return s.wm }

// HorizonMs returns H.
func (s *Set) HorizonMs() int64 { return s.h }

// Seen runs step 3 for a qualifying event: it reports whether an event
// with the same key and eventID is remembered with ts >= W - H (a
// duplicate, and then nothing changes), and otherwise remembers
// (key, eventID) with ts and reports false. W is the watermark of the last
// Advance, which must be the partition watermark before this event. Seen
// keeps key and eventID without copying them: they must not alias memory
// that changes later (strings converted from a reused buffer with
// unsafe.String, for example). Decoded events own their strings.
func (s *Set) Seen(key, eventID string, ts int64) bool {
	thr := subSat(s.wm, s.h)
	ks := s.keys[key]
	var h uint64
	if ks != nil {
		h = s.pairHash(ks, eventID)
		if r, ok := s.lookup(ks, eventID, h); ok {
			if r >= thr {
				return true
			}
			// Unreachable: Advance and LoadKey forget every id with
			// ts < W - H. Replace the entry all the same, so that
			// correctness does not rest on that.
			s.remove(ks, entry{ts: r, id: eventID})
			s.nIDs--
			s.markDirty(ks)
			s.markBucket(ks, r)
			if ks.live() == 0 {
				s.deleteKey(ks)
				ks = nil
			}
		}
	}
	if ts < thr {
		// Expired already: remembering it could never make a later event
		// a duplicate.
		return false
	}
	if ks == nil {
		ks = s.newKey(key)
		s.keys[key] = ks
		h = s.pairHash(ks, eventID)
	}
	e := entry{ts: ts, id: eventID}
	s.index(ks, e, h)
	ks.insert(e)
	s.nIDs++
	s.markDirty(ks)
	s.markBucket(ks, ts)
	s.reschedule(ks)
	return false
}

// Advance moves the watermark to w if that is later (W never decreases)
// and forgets every id with ts < W - H, deleting keys left with none. The
// keys it changes are marked dirty. It costs O(1) when nothing expires.
func (s *Set) Advance(w int64) {
	if w <= s.wm {
		return
	}
	s.wm = w
	for len(s.due) > 0 && s.due[0].at <= w {
		d := s.due.pop()
		ks := d.ks
		if ks.deleted || !ks.scheduled || ks.sched != d.at {
			continue // stale entry
		}
		ks.scheduled = false
		s.prune(ks)
	}
}

// prune forgets ks's ids with ts < W - H, deletes ks if it is left empty,
// else queues it at its next deadline.
func (s *Set) prune(ks *keyState) {
	thr := subSat(s.wm, s.h)
	k := ks.head
	last := int64(0)
	for k < len(ks.byTS) && ks.byTS[k].ts < thr {
		s.unindex(ks, ks.byTS[k])
		if s.bucketMs > 0 {
			if b := s.BucketOf(ks.byTS[k].ts); k == ks.head || b != last {
				s.dirtyB[BucketRef{ks.key, b}] = struct{}{}
				last = b
			}
		}
		k++
	}
	if n := k - ks.head; n > 0 {
		clear(ks.byTS[ks.head:k])
		ks.head = k
		s.nIDs -= n
		s.markDirty(ks)
	}
	if ks.live() == 0 {
		s.deleteKey(ks)
		return
	}
	ks.shrink()
	s.reschedule(ks)
}

// deadline returns the smallest W at which ks's oldest id expires, or false
// when it never does (ts + H + 1 overflows) or ks is empty.
func (s *Set) deadline(ks *keyState) (int64, bool) {
	if ks.live() == 0 {
		return 0, false
	}
	// ts < W - H  <=>  W >= ts + H + 1
	t := ks.byTS[ks.head].ts
	if t > math.MaxInt64-s.h-1 {
		return 0, false
	}
	return t + s.h + 1, true
}

// reschedule makes sure ks is queued no later than its deadline. An entry
// already queued at or before it stays (it is popped early and prunes
// less, then requeues); that keeps the queue at about one entry per key.
func (s *Set) reschedule(ks *keyState) {
	d, ok := s.deadline(ks)
	if !ok {
		ks.scheduled = false
		return
	}
	if ks.scheduled && ks.sched <= d {
		return
	}
	ks.sched, ks.scheduled = d, true
	s.due.push(dueEntry{at: d, ks: ks})
}

// deleteKey removes ks, which holds no ids, from the set.
func (s *Set) deleteKey(ks *keyState) {
	delete(s.keys, ks.key)
	ks.deleted, ks.scheduled = true, false
}

func (s *Set) markDirty(ks *keyState) {
	if !ks.dirty {
		ks.dirty = true
		s.dirty = append(s.dirty, ks.key)
	}
}

// Dirty returns the keys whose encoding changed since the last ClearDirty,
// sorted. A returned key whose EncodeKey is nil was deleted: the caller
// writes a tombstone.
func (s *Set) Dirty() []string {
	keys := slices.Clone(s.dirty)
	slices.Sort(keys)
	return slices.Compact(keys)
}

// ClearDirty forgets what Dirty reported (call it after persisting).
func (s *Set) ClearDirty() {
	for _, k := range s.dirty {
		if ks := s.keys[k]; ks != nil {
			ks.dirty = false
		}
	}
	clear(s.dirty)
	s.dirty = s.dirty[:0]
	clear(s.dirtyB)
	s.gen++
}

// Stats counts the set's state.
type Stats struct {
	Keys int // keys with at least one remembered id
	IDs  int // remembered (key, event_id) pairs, all with ts >= W - H
}

// Stats returns the current counts. O(1).
func (s *Set) Stats() Stats { return Stats{Keys: len(s.keys), IDs: s.nIDs} }

// String is for debugging.
func (s *Set) String() string {
	return fmt.Sprintf("dedup.Set{W: %d, H: %d, keys: %d, ids: %d}", s.wm, s.h, len(s.keys), s.nIDs)
}

// ---- per-key storage ----

func (ks *keyState) live() int { return len(ks.byTS) - ks.head }

// insert adds e (its id not yet in byTS) in (ts, id) order. In-order
// arrivals append. When the slice is full, its expired front is reused if
// it is at least half the live ids (a copy of the live ids per at least
// live/2 inserts), else the slice is reallocated at twice the live ids; so
// a key whose id count varies by less than a third allocates nothing.
func (ks *keyState) insert(e entry) {
	if n := len(ks.byTS); n == cap(ks.byTS) && ks.head > 0 {
		live := n - ks.head
		if 2*ks.head >= live {
			copy(ks.byTS, ks.byTS[ks.head:])
			clear(ks.byTS[live:])
			ks.byTS = ks.byTS[:live]
		} else {
			b := make([]entry, live, 2*live)
			copy(b, ks.byTS[ks.head:])
			ks.byTS = b
		}
		ks.head = 0
	}
	if n := len(ks.byTS); n == ks.head || cmpEntry(ks.byTS[n-1], e) < 0 {
		ks.byTS = append(ks.byTS, e)
	} else {
		i, _ := slices.BinarySearchFunc(ks.byTS[ks.head:], e, cmpEntry)
		ks.byTS = slices.Insert(ks.byTS, ks.head+i, e)
	}
	ks.peak = max(ks.peak, ks.live())
}

// holds reports whether byTS holds (ts, id).
func (ks *keyState) holds(ts int64, id string) bool {
	_, ok := slices.BinarySearchFunc(ks.byTS[ks.head:], entry{ts: ts, id: id}, cmpEntry)
	return ok
}

// remove deletes e, which ks remembers, from the index and byTS.
func (s *Set) remove(ks *keyState, e entry) {
	s.unindex(ks, e)
	if i, ok := slices.BinarySearchFunc(ks.byTS[ks.head:], e, cmpEntry); ok {
		ks.byTS = slices.Delete(ks.byTS, ks.head+i, ks.head+i+1)
	}
	if ks.live() == 0 {
		ks.byTS, ks.head = ks.byTS[:0], 0
	}
}

// shrinkMin is the peak below which a key's storage is never rebuilt.
const shrinkMin = 64

// shrink rebuilds byTS at its current size once at most an eighth of its
// peak is left, so that a burst on one key does not hold memory for as
// long as the key lives. The rebuild costs O(live) after at least 7*live
// expiries. (The set's index is one map whose size follows the set's.)
func (ks *keyState) shrink() {
	live := ks.live()
	if ks.peak < shrinkMin || live > ks.peak/8 {
		return
	}
	b := make([]entry, live, 2*live)
	copy(b, ks.byTS[ks.head:])
	ks.byTS, ks.head, ks.peak = b, 0, live
}

// subSat returns a - b for b >= 0, clamped at math.MinInt64: at
// NoWatermark, W - H compares below every ts.
func subSat(a, b int64) int64 {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}
