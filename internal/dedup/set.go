package dedup

import (
	"cmp"
	"fmt"
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

	bucketMs int64                  // > 0: persisted by (key, bucket) (bucket.go)
	dirtyB   map[BucketRef]struct{} // changed buckets, when bucketMs > 0
}

// keyState holds the remembered ids of one key: ids maps each to its ts,
// and byTS[head:] holds the same pairs sorted by (ts, id). byTS[:head] is
// expired space, zeroed, reused by the next compaction.
type keyState struct {
	key  string
	ids  map[string]int64
	byTS []entry
	head int
	peak int // most ids held since ids and byTS were last allocated

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
	return &Set{h: horizonMs, wm: NoWatermark, keys: make(map[string]*keyState)}, nil
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
// copies the strings it keeps, so they may alias a reused buffer.
func (s *Set) Seen(key, eventID string, ts int64) bool {
	thr := subSat(s.wm, s.h)
	ks := s.keys[key]
	if ks != nil {
		if r, ok := ks.ids[eventID]; ok {
			if r >= thr {
				return true
			}
			// Unreachable: Advance and LoadKey forget every id with
			// ts < W - H. Replace the entry all the same, so that
			// correctness does not rest on that.
			ks.remove(entry{ts: r, id: eventID})
			s.nIDs--
			s.markDirty(ks)
			s.markBucket(ks.key, r)
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
		ks = &keyState{key: strings.Clone(key), ids: make(map[string]int64)}
		s.keys[ks.key] = ks
	}
	e := entry{ts: ts, id: strings.Clone(eventID)}
	ks.ids[e.id] = ts
	ks.insert(e)
	s.nIDs++
	s.markDirty(ks)
	s.markBucket(ks.key, ts)
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
		delete(ks.ids, ks.byTS[k].id)
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

// remove deletes e, which is remembered, from ids and byTS.
func (ks *keyState) remove(e entry) {
	delete(ks.ids, e.id)
	if i, ok := slices.BinarySearchFunc(ks.byTS[ks.head:], e, cmpEntry); ok {
		ks.byTS = slices.Delete(ks.byTS, ks.head+i, ks.head+i+1)
	}
	if ks.live() == 0 {
		ks.byTS, ks.head = ks.byTS[:0], 0
	}
}

// shrinkMin is the peak below which a key's storage is never rebuilt.
const shrinkMin = 64

// shrink rebuilds ids and byTS at their current size once at most an
// eighth of their peak is left (Go maps never shrink), so that a burst on
// one key does not hold memory for as long as the key lives. The rebuild
// costs O(live) after at least 7*live expiries.
func (ks *keyState) shrink() {
	live := ks.live()
	if ks.peak < shrinkMin || live > ks.peak/8 {
		return
	}
	b := make([]entry, live, 2*live)
	copy(b, ks.byTS[ks.head:])
	ids := make(map[string]int64, live)
	for _, e := range b {
		ids[e.id] = e.ts
	}
	ks.byTS, ks.head, ks.ids, ks.peak = b, 0, ids, live
}

// subSat returns a - b for b >= 0, clamped at math.MinInt64: at
// NoWatermark, W - H compares below every ts.
func subSat(a, b int64) int64 {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}
