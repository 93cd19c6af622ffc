package dedup

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"strings"
)

// NoWatermark is the watermark of a new Set: minus infinity, nothing
// expires. It equals window.NoWatermark and aggwindow.NoWatermark.
const NoWatermark int64 = math.MinInt64

// MaxViews is how many Sets can share one store (NewView).
const MaxViews = 64

// Set remembers the event ids of one rule over one input partition, per
// key, while their ts >= W - H. It is not safe for concurrent use, and
// neither are the other Sets of its store (NewView): one goroutine owns
// them all.
//
// A Set is a view of a store, which it may share with the Sets of other
// rules over the same partition (NewView): each id is then held once, with
// the set of views that remember it, and a record costs one hash lookup
// for all of them rather than one per rule. Every view keeps exactly the
// semantics of a Set of its own (doc.go); sharing changes only the costs.
type Set struct {
	st   *store
	bit  uint64 // this view's bit in entry.mask
	slot int    // index in st.views

	wm    int64    // this view's W, never decreases
	dirty []string // may hold repeats; Dirty sorts and compacts
	nIDs  int      // ids this view remembers, for Stats

	// markBucket's latest bucket markB, which holds the ts in
	// [markLo, markHi) (empty at first).
	markLo, markHi, markB int64
}

// store holds the ids of the views that share it.
type store struct {
	h     int64 // dedup horizon H, ms, >= 0; the same for every view
	wm    int64 // the smallest W of the views: what has expired for all
	nSlow int   // how many views have W = wm

	keys map[string]*keyState // only keys with at least one entry
	due  dueQueue             // lazy expiry deadlines of keys, by wm

	// The lookup index of every held (key, event_id): idx maps the pair's
	// 64-bit hash (pairHash) to the ts of its entry, and a hit is
	// confirmed in the key's byTS, so a verdict never rests on a hash. A
	// pair whose hash slot is taken by another pair lives in coll instead
	// (rare: two of a few million 64-bit hashes). One table of integers
	// for the whole store (hashIndex), rather than a map of strings per
	// key, costs a fraction of the time per event and gives the garbage
	// collector no pointers to scan. A pair that views remember with different ts (two records with
	// one event_id and different ts, each the first for some view) has
	// one entry per ts: the first in idx or coll, the others' ts in more.
	seed     maphash.Seed // per store: in-memory only, never persisted
	hashMask uint64       // all ones; tests narrow it to force collisions
	idx      hashIndex
	coll     map[pair]int64
	more     map[pair][]int64

	views    []*Set
	bucketMs int64 // > 0: persisted by (key, bucket) (bucket.go)
	// keepLo, keepHi: with buckets, the bucket of the store's W - H when
	// pruneThr last computed it ([keepLo, keepHi), keepLo its start), or
	// empty.
	keepLo, keepHi int64

	// The changed buckets (bucketMs > 0), one list for all views:
	// dirtyRefs[i] changed for the views in dirtyMasks[i] since each one's
	// last ClearDirty; dirtyAt indexes dirtyRefs. A (key, bucket) is in
	// the list once however many views mark it, so a record's views make
	// one map lookup for its bucket (none when the key's marks cache
	// holds it) instead of a map insert each. The entries no view marks
	// any more are dropped once they are half the list (clearDirtyBuckets);
	// dirtyGen (from 1) counts those compactions and dates the keys' marks
	// caches.
	dirtyAt    map[BucketRef]int32
	dirtyRefs  []BucketRef
	dirtyMasks []uint64
	dirtyGen   uint32

	// last caches the latest first() answer, and cur the key state and
	// hash of the latest Seen: the views of one record ask for the same
	// pair one after the other.
	last lastFirst
	cur  curPair
}

// curPair is a cached lookup of one (key, event_id): its key state and
// pairHash, and i, the index in ks.byTS of its entry (-1: not located
// yet; a hint: later inserts and removals move entries, so a user
// compares the entry with the pair). The store's own (store.cur) is the
// latest pair a Seen remembered, cleared when its key state is deleted;
// a caller's (Pair) may outlive its key state, which seen then ignores
// (keyState.deleted).
type curPair struct {
	key, id string
	ks      *keyState
	h       uint64
	i       int
}

// lastFirst is a cached first(): ok and ts for (ks, id), and i, the index
// of the entry in ks.byTS when it was last located (a hint, like
// curPair.i). Invalidated when the first entry of a pair is indexed or
// unindexed.
type lastFirst struct {
	ks *keyState
	id string
	ts int64
	i  int
	ok bool
}

// pair is a held (key, event_id).
type pair struct{ key, id string }

// keyState holds the entries of one key: byTS[head:] sorted by (ts, id),
// indexed by store.idx. byTS[:head] is expired space, zeroed, reused by
// the next compaction.
type keyState struct {
	key  string
	salt uint64 // pairHash's share of the key, fixed per store
	byTS []entry
	head int

	sched     int64  // when scheduled: the wm of its queue entry
	dirty     uint64 // the views that list it in their dirty
	peak      int32  // most entries held since byTS was last allocated (capped)
	scheduled bool
	deleted   bool // no longer in store.keys (replaced or emptied)
	// marks caches where two of the key's buckets are in the store's
	// dirty list (bucket.go): most events of a key fall in its newest
	// bucket, and most expiries in its oldest, so a view marks them
	// without a map lookup.
	marks marks
}

// marks caches two buckets of a key in the store's dirty list: the newest
// marked (new events) and an older one (expiries). One cache for both
// would alternate between them, a map lookup per event.
type marks struct{ newer, older mark }

// mark says that the key's bucket is st.dirtyRefs[i] while the store's
// dirty list is in generation gen (store.dirtyGen). (With peak and the
// flags in one word, a keyState is 112 bytes, a size class, as before the
// marks moved into it.)
type mark struct {
	bucket int64
	i      int32
	gen    uint32
}

// entry is one remembered (ts, event_id) and the views that remember it.
type entry struct {
	ts   int64
	id   string
	mask uint64
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
	st := &store{h: horizonMs, wm: NoWatermark, keys: make(map[string]*keyState), dirtyGen: 1,
		seed: maphash.MakeSeed(), hashMask: math.MaxUint64, idx: hashIndex{floor: NoWatermark}}
	return st.newView(), nil
}

// NewView returns a new empty Set (watermark NoWatermark) that shares s's
// store: the same horizon and persistence (NewBucketed), for another rule
// over the same input partition and key. Sharing pays when the views see
// the same events: their watermarks should move together (rules with the
// same watermark strategy), since an id is held until it has expired for
// every view. At most MaxViews Sets share a store.
func (s *Set) NewView() (*Set, error) {
	if len(s.st.views) >= MaxViews {
		return nil, fmt.Errorf("dedup: a store is shared by at most %d sets", MaxViews)
	}
	return s.st.newView(), nil
}

func (st *store) newView() *Set {
	// The store's watermark is the slowest view's: the new one's, until it
	// advances (other views may already have: a restore loads the rules of
	// a partition one after the other).
	st.wm = NoWatermark
	st.idx.setFloor(NoWatermark)
	v := &Set{st: st, slot: len(st.views), wm: NoWatermark}
	v.bit = 1 << v.slot
	st.views = append(st.views, v)
	st.nSlow = 0
	for _, u := range st.views {
		if u.wm == NoWatermark {
			st.nSlow++
		}
	}
	return v
}

// Watermark returns the set's watermark W, the largest value passed to
// Advance (NoWatermark before).
func (s *Set) Watermark() int64 { return s.wm }

// HorizonMs returns H.
func (s *Set) HorizonMs() int64 { return s.st.h }

// Seen runs step 3 for a qualifying event: it reports whether an event
// with the same key and eventID is remembered with ts >= W - H (a
// duplicate, and then nothing changes), and otherwise remembers
// (key, eventID) with ts and reports false. W is the watermark of the last
// Advance, which must be the partition watermark before this event. Seen
// keeps key and eventID without copying them: they must not alias memory
// that changes later (strings converted from a reused buffer with
// unsafe.String, for example). Decoded events own their strings.
func (s *Set) Seen(key, eventID string, ts int64) bool { return s.seen(&s.st.cur, key, eventID, ts) }

// Pair is a caller's cache of the lookup of one (key, event_id) in a
// store, for the views of the store that ask for the pair one after the
// other but not in a row: a caller that takes a chunk of records through
// one rule after the other (package consume) keeps one Pair per record
// and store and passes it to every view's SeenPair for that record, so
// the record costs one lookup for all of them, as Seen's own cache of the
// latest pair gives views that ask in a row. The zero Pair is empty. A
// Pair is only a cache: whatever it holds (another record's pair, a pair
// whose key has since been deleted), the verdicts are Seen's.
type Pair struct{ c curPair }

// SeenPair is Seen, with p as the cache of the pair's lookup: it uses what
// an earlier SeenPair or PreparePair of any view of the store left in p
// for (key, eventID), and leaves there what it found.
func (s *Set) SeenPair(p *Pair, key, eventID string, ts int64) bool {
	return s.seen(&p.c, key, eventID, ts)
}

// PreparePair prepares the SeenPairs of (key, eventID) with p: it looks
// the key up and hashes the pair once for all of them, into p, and starts
// loading the index slot that the first of them probes, without waiting
// for it. That slot is a random one among all the ids the store holds,
// usually not in the CPU's caches: a caller that prepares the pairs of a
// chunk of records before its rules run has their slots loaded in
// parallel, while it decodes the next records. It changes no verdict.
func (s *Set) PreparePair(p *Pair, key, eventID string) {
	st := s.st
	ks := st.keys[key]
	if ks == nil || len(st.idx.slots) == 0 {
		p.c = curPair{} // a new key: Seen's lookup misses without the index
		return
	}
	h := st.pairHash(ks, eventID)
	p.c = curPair{key: key, id: eventID, ks: ks, h: h, i: -1}
	prefetch(&st.idx.slots[slotKey(h)&uint64(len(st.idx.slots)-1)])
}

// seen is Seen with c as the cache of the pair's lookup: the store's
// (st.cur, the latest pair a view remembered) or a caller's (Pair). A
// caller's may hold a key state deleted since (deleteKey clears only
// st.cur), which is not used.
func (s *Set) seen(c *curPair, key, eventID string, ts int64) bool {
	st := s.st
	thr := subSat(s.wm, st.h)
	var ks *keyState
	var h uint64
	if c.ks != nil && !c.ks.deleted && c.key == key && c.id == eventID {
		if dup, ok := s.seenAgain(c, ts, thr); ok {
			return dup
		}
		ks, h = c.ks, c.h
	} else if ks = st.keys[key]; ks != nil {
		h = st.pairHash(ks, eventID)
	}
	if ks != nil {
		if i := st.remembered(ks, eventID, h, s.bit); i >= 0 {
			if ks.byTS[i].ts >= thr {
				return true
			}
			// Expired for this view but still held: another view's W
			// is behind, or its bucket has not expired whole
			// (keepThr; without buckets and with one view this is
			// unreachable). This view forgets it now, as a Set of its
			// own would have.
			if st.forget(ks, i, s) {
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
		ks = st.newKey(key)
		st.keys[key] = ks
		h = st.pairHash(ks, eventID)
	}
	i := st.remember(ks, entry{ts: ts, id: eventID, mask: s.bit}, h)
	*c = curPair{key: key, id: eventID, ks: ks, h: h, i: i}
	s.nIDs++
	s.markDirty(ks)
	s.markBucket(ks, ts)
	if i == ks.head {
		// The key's oldest entry, so its deadline, changed (a key whose
		// oldest entry stays is queued no later than its deadline).
		st.reschedule(ks)
	}
	return false
}

// seenAgain is Seen for the cached pair c, in its most common case: the
// other views of one record, asking after the first remembered it.
// When the store holds a single entry of the pair (no pair has more than
// one while st.more is empty) and c still locates it, that entry alone
// decides: this view remembers it or not, at ts or not. ok is false when
// Seen must take its general path (the pair has several entries, the entry
// moved or is gone, or it expired for this view, which forgets it there).
// No deadline changes: the key already holds an entry at ts.
func (s *Set) seenAgain(c *curPair, ts, thr int64) (dup, ok bool) {
	ks := c.ks
	if c.i < ks.head || c.i >= len(ks.byTS) || len(s.st.more) > 0 {
		return false, false
	}
	e := &ks.byTS[c.i]
	if e.ts != ts || e.id != c.id {
		return false, false
	}
	switch {
	case e.mask&s.bit != 0:
		// A redelivery with the same ts, unless it expired for this view.
		return true, ts >= thr
	case ts < thr:
		return false, true // expired already: not remembered (as in Seen)
	}
	e.mask |= s.bit
	s.nIDs++
	s.markDirty(ks)
	s.markBucket(ks, ts)
	return false, true
}

// Advance moves the watermark to w if that is later (W never decreases)
// and forgets every id with ts < W - H (with buckets: every id of a bucket
// that has expired whole, keepThr), deleting keys left with none. The
// keys it changes are marked dirty. It costs O(1) when nothing expires,
// plus O(views) when it moves the last of the slowest views of a shared
// store: views that advance together cost O(views) per record in all.
func (s *Set) Advance(w int64) {
	if w <= s.wm {
		return
	}
	st := s.st
	slowest := s.wm == st.wm
	s.wm = w
	if !slowest {
		return // the store's W is a slower view's
	}
	if st.nSlow--; st.nSlow > 0 {
		return // another view is still at the store's W
	}
	low, n := w, 0
	for _, v := range st.views {
		switch {
		case v.wm < low:
			low, n = v.wm, 1
		case v.wm == low:
			n++
		}
	}
	st.nSlow = n
	st.advance(low)
}

// advance moves the store's watermark to w (the smallest of the views')
// and prunes the keys that came due.
func (st *store) advance(w int64) {
	if w <= st.wm {
		return
	}
	st.wm = w
	for len(st.due) > 0 && st.due[0].at <= w {
		d := st.due.pop()
		ks := d.ks
		if ks.deleted || !ks.scheduled || ks.sched != d.at {
			continue // stale entry
		}
		ks.scheduled = false
		st.prune(ks)
	}
	// Only now: while keys are pruned, the slots of the entries that
	// expired but are not yet pruned must stay theirs (index).
	st.idx.setFloor(st.pruneThr())
	st.idx.shrink()
}

// ---- the store ----

// newKey returns the empty state of key (not yet in st.keys).
func (st *store) newKey(key string) *keyState {
	return &keyState{key: key, salt: maphash.String(st.seed, key) * 0x9e3779b97f4a7c15}
}

// pairHash is the index hash of (ks.key, id).
func (st *store) pairHash(ks *keyState, id string) uint64 {
	return (maphash.String(st.seed, id) ^ ks.salt) & st.hashMask
}

// first returns the ts of the first entry of (ks.key, id) and its index
// in ks.byTS (-1 if the store is inconsistent). h is pairHash(ks, id).
func (st *store) first(ks *keyState, id string, h uint64) (ts int64, i int, ok bool) {
	if c := &st.last; c.ks == ks && c.id == id {
		if !c.ok {
			return 0, -1, false
		}
		if i := c.i; i < ks.head || i >= len(ks.byTS) || ks.byTS[i].ts != c.ts || ks.byTS[i].id != id {
			c.i = ks.find(c.ts, id) // the entry moved
		}
		return c.ts, c.i, true
	}
	// coll first: a pair whose first entry collided into coll may also have
	// a later entry at the ts of the idx slot's owner, which find would
	// confirm.
	i = -1
	if len(st.coll) > 0 {
		if ts, ok = st.coll[pair{ks.key, id}]; ok {
			i = ks.find(ts, id)
		}
	}
	if !ok {
		if ts, ok = st.idx.get(h); ok {
			if i = ks.find(ts, id); i < 0 {
				ts, ok = 0, false
			}
		}
	}
	st.last = lastFirst{ks: ks, id: id, ts: ts, i: i, ok: ok}
	return ts, i, ok
}

// remembered returns the index in ks.byTS of the entry of id that the
// views of mask remember, or -1.
func (st *store) remembered(ks *keyState, id string, h uint64, mask uint64) int {
	_, i, ok := st.first(ks, id, h)
	if !ok {
		return -1
	}
	if i >= 0 && ks.byTS[i].mask&mask != 0 {
		return i
	}
	if len(st.more) > 0 {
		for _, t := range st.more[pair{ks.key, id}] {
			if i := ks.find(t, id); i >= 0 && ks.byTS[i].mask&mask != 0 {
				return i
			}
		}
	}
	return -1
}

// remember adds e.mask's views to the entry (e.ts, e.id) of ks, creating
// it when there is none, and returns its index in ks.byTS. None of them
// remembers e.id yet. h is pairHash(ks, e.id).
func (st *store) remember(ks *keyState, e entry, h uint64) int {
	ts, i, ok := st.first(ks, e.id, h)
	switch {
	case !ok:
		st.index(ks, e, h)
	case ts == e.ts:
		ks.byTS[i].mask |= e.mask
		return i
	default:
		p := pair{ks.key, e.id}
		for _, t := range st.more[p] {
			if t == e.ts {
				i := ks.find(t, e.id)
				ks.byTS[i].mask |= e.mask
				return i
			}
		}
		if st.more == nil {
			st.more = make(map[pair][]int64)
		}
		st.more[p] = append(st.more[p], e.ts)
	}
	return ks.insert(e)
}

// index makes e, the first entry of its pair, findable. An entry below
// the index's floor (LoadKey's ids that expired, forgotten before it
// returns) goes to coll: in idx its slot would be stale at once, free for
// another pair's, and unindex would then delete that pair's slot.
func (st *store) index(ks *keyState, e entry, h uint64) {
	st.last = lastFirst{ks: ks, id: e.id, ts: e.ts, i: -1, ok: true}
	if e.ts >= st.idx.floor && st.idx.add(h, e.ts) {
		return
	}
	if st.coll == nil {
		st.coll = make(map[pair]int64)
	}
	st.coll[pair{ks.key, e.id}] = e.ts
}

// unindex removes e, an entry of ks, from the index; when it was the first
// entry of its pair, the next one (if any) takes its place.
func (st *store) unindex(ks *keyState, e entry) {
	p := pair{ks.key, e.id}
	if len(st.more) > 0 {
		if ts := st.more[p]; len(ts) > 0 {
			if k := slices.Index(ts, e.ts); k >= 0 {
				st.setMore(p, slices.Delete(ts, k, k+1))
				return
			}
			// e is the first entry: the next one takes its place.
			st.dropFirst(ks, p)
			st.setMore(p, ts[1:])
			st.index(ks, entry{ts: ts[0], id: e.id}, st.pairHash(ks, e.id))
			return
		}
	}
	st.dropFirst(ks, p)
}

// expireIndex is unindex for e, an entry of ks that expired for every
// view (ts < the store's W - H): when it is its pair's only entry and not
// a collision, its slot in idx just goes stale (hashIndex).
func (st *store) expireIndex(ks *keyState, e entry) {
	if len(st.more) > 0 || len(st.coll) > 0 {
		p := pair{ks.key, e.id}
		if _, ok := st.coll[p]; ok || len(st.more[p]) > 0 {
			st.unindex(ks, e)
			return
		}
	}
	st.last = lastFirst{}
	st.idx.expire()
}

func (st *store) setMore(p pair, ts []int64) {
	if len(ts) == 0 {
		delete(st.more, p)
	} else {
		st.more[p] = ts
	}
}

// dropFirst removes the first entry of p from idx or coll.
func (st *store) dropFirst(ks *keyState, p pair) {
	st.last = lastFirst{}
	if len(st.coll) > 0 {
		if _, ok := st.coll[p]; ok {
			delete(st.coll, p)
			return
		}
	}
	st.idx.del(st.pairHash(ks, p.id))
}

// forget makes view v forget the entry ks.byTS[i] (which it remembers),
// deleting the entry when no view remembers it any more, and ks when it is
// left empty (then it returns true).
func (st *store) forget(ks *keyState, i int, v *Set) bool {
	v.markDirty(ks)
	v.markBucket(ks, ks.byTS[i].ts)
	return st.unmark(ks, i, v)
}

// unmark is forget without marking anything dirty.
func (st *store) unmark(ks *keyState, i int, v *Set) bool {
	e := &ks.byTS[i]
	e.mask &^= v.bit
	v.nIDs--
	if e.mask != 0 {
		return false
	}
	st.unindex(ks, *e)
	ks.removeAt(i)
	if ks.live() == 0 {
		st.deleteKey(ks)
		return true
	}
	return false
}

// prune forgets ks's entries with ts < pruneThr (W - H, or with buckets
// the start of its bucket), deletes ks if it is left empty, else queues it
// at its next deadline.
func (st *store) prune(ks *keyState) {
	thr := st.pruneThr()
	k := ks.head
	// Every view marks ks, and each bucket of its expired entries, once;
	// the entries are sorted by ts, so those of one bucket are adjacent,
	// and most of them have the mask of the entry before.
	var (
		bucket  int64
		marked  uint64 // the views that marked the current bucket
		runMask uint64 // the mask of the current run of entries ...
		run     int    // ... and its length
	)
	for k < len(ks.byTS) && ks.byTS[k].ts < thr {
		e := &ks.byTS[k]
		st.expireIndex(ks, *e)
		if st.bucketMs > 0 {
			if b := st.bucketOf(e.ts); k == ks.head || b != bucket {
				bucket, marked = b, 0
			}
		}
		if fresh := e.mask &^ marked; fresh != 0 {
			for m := fresh; m != 0; m &= m - 1 {
				v := st.views[bits.TrailingZeros64(m)]
				v.markDirty(ks)
				v.markBucket(ks, e.ts)
			}
			marked |= fresh
		}
		if e.mask != runMask {
			st.forgot(runMask, run)
			runMask, run = e.mask, 0
		}
		run++
		k++
	}
	st.forgot(runMask, run)
	if k > ks.head {
		clear(ks.byTS[ks.head:k])
		ks.head = k
	}
	if ks.live() == 0 {
		st.deleteKey(ks)
		return
	}
	ks.shrink()
	st.reschedule(ks)
}

// forgot counts n ids forgotten by each view of mask.
func (st *store) forgot(mask uint64, n int) {
	for m := mask; m != 0; m &= m - 1 {
		st.views[bits.TrailingZeros64(m)].nIDs -= n
	}
}

// deadline returns the smallest wm at which ks's oldest entry is dropped
// (it expires; with buckets, its whole bucket does), or false when that
// never happens (the sum overflows) or ks is empty.
func (st *store) deadline(ks *keyState) (int64, bool) {
	if ks.live() == 0 {
		return 0, false
	}
	// ts < W - H  <=>  W >= ts + H + 1
	t := ks.byTS[ks.head].ts
	if st.bucketMs > 0 {
		// The whole bucket of t expires: its last ms does.
		end := (st.bucketOf(t) + 1) * st.bucketMs
		if end-1 < t { // overflow at the top of int64
			return 0, false
		}
		t = end - 1
	}
	if t > math.MaxInt64-st.h-1 {
		return 0, false
	}
	return t + st.h + 1, true
}

// reschedule makes sure ks is queued no later than its deadline. An entry
// already queued at or before it stays (it is popped early and prunes
// less, then requeues); that keeps the queue at about one entry per key.
func (st *store) reschedule(ks *keyState) {
	d, ok := st.deadline(ks)
	if !ok {
		ks.scheduled = false
		return
	}
	if ks.scheduled && ks.sched <= d {
		return
	}
	ks.sched, ks.scheduled = d, true
	st.due.push(dueEntry{at: d, ks: ks})
}

// deleteKey removes ks, which holds no entries, from the store.
func (st *store) deleteKey(ks *keyState) {
	st.last, st.cur = lastFirst{}, curPair{}
	delete(st.keys, ks.key)
	ks.deleted, ks.scheduled = true, false
}

// ---- per view ----

func (s *Set) markDirty(ks *keyState) {
	if ks.dirty&s.bit == 0 {
		ks.dirty |= s.bit
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
		if ks := s.st.keys[k]; ks != nil {
			ks.dirty &^= s.bit
		}
	}
	clear(s.dirty)
	s.dirty = s.dirty[:0]
	s.st.clearDirtyBuckets(s.bit)
}

// Stats counts the set's state.
type Stats struct {
	Keys int // keys with at least one remembered id (in the shared store)
	IDs  int // (key, event_id) pairs this Set remembers
}

// Stats returns the current counts. O(1). With shared views, Keys counts
// the store's keys, and IDs may include ids that expired for this view
// while another view's watermark is behind; with buckets, also the ids
// that expired in a bucket that has not expired whole (keepThr).
func (s *Set) Stats() Stats { return Stats{Keys: len(s.st.keys), IDs: s.nIDs} }

// String is for debugging.
func (s *Set) String() string {
	return fmt.Sprintf("dedup.Set{W: %d, H: %d, keys: %d, ids: %d, views: %d}", s.wm, s.st.h, len(s.st.keys), s.nIDs, len(s.st.views))
}

// ---- per-key storage ----

func (ks *keyState) live() int { return len(ks.byTS) - ks.head }

// find returns the index in byTS of the live entry (ts, id), or -1. Most
// lookups are of the newest entry (the other views of a record).
func (ks *keyState) find(ts int64, id string) int {
	n := len(ks.byTS)
	if n > ks.head {
		if e := &ks.byTS[n-1]; e.ts == ts && e.id == id {
			return n - 1
		}
	}
	if i := ks.search(ts, id); i < n && ks.byTS[i].ts == ts && ks.byTS[i].id == id {
		return i
	}
	return -1
}

// search returns the index in byTS of the first live entry at or after
// (ts, id) in (ts, id) order: a binary search that compares the ids only
// of entries at ts.
func (ks *keyState) search(ts int64, id string) int {
	lo, hi := ks.head, len(ks.byTS)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if e := &ks.byTS[m]; e.ts < ts || (e.ts == ts && e.id < id) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// insert adds e (not yet in byTS) in (ts, id) order and returns its
// index. In-order arrivals append. When the slice is full, its expired
// front is reused if it is at least half the live entries (a copy of the
// live ones per at least live/2 inserts), else the slice is reallocated at
// twice the live entries (also while it grows: append would grow a large
// slice by a quarter, copying it about five times over to reach its size);
// so a key whose entry count varies by less than a third allocates nothing.
func (ks *keyState) insert(e entry) int {
	if n := len(ks.byTS); n == cap(ks.byTS) {
		live := n - ks.head
		if ks.head > 0 && 2*ks.head >= live {
			copy(ks.byTS, ks.byTS[ks.head:])
			clear(ks.byTS[live:])
			ks.byTS = ks.byTS[:live]
		} else {
			b := make([]entry, live, max(2*live, 1))
			copy(b, ks.byTS[ks.head:])
			ks.byTS = b
		}
		ks.head = 0
	}
	i := len(ks.byTS)
	if i == ks.head || cmpEntry(ks.byTS[i-1], e) < 0 {
		ks.byTS = append(ks.byTS, e)
	} else {
		i = ks.search(e.ts, e.id)
		ks.byTS = slices.Insert(ks.byTS, i, e)
	}
	if n := ks.live(); n > int(ks.peak) && n <= math.MaxInt32 {
		ks.peak = int32(n)
	}
	return i
}

// removeAt deletes byTS[i] (already unindexed).
func (ks *keyState) removeAt(i int) {
	ks.byTS = slices.Delete(ks.byTS, i, i+1)
	if ks.live() == 0 {
		ks.byTS, ks.head = ks.byTS[:0], 0
	}
}

// shrinkMin is the peak below which a key's storage is never rebuilt.
const shrinkMin = 64

// shrink rebuilds byTS at its current size once at most an eighth of its
// peak is left, so that a burst on one key does not hold memory for as
// long as the key lives. The rebuild costs O(live) after at least 7*live
// expiries. (The store's index is one table that grows and shrinks with
// the store, hashIndex.)
func (ks *keyState) shrink() {
	live := ks.live()
	if ks.peak < shrinkMin || live > int(ks.peak)/8 {
		return
	}
	b := make([]entry, live, 2*live)
	copy(b, ks.byTS[ks.head:])
	ks.byTS, ks.head, ks.peak = b, 0, int32(live) // live <= peak/8
}

// pruneThr is the ts below which the store drops entries: keepThr at the
// store's W (the slowest view's). Advance asks at every move of the
// store's W, most often with W - H in the bucket of the time before: the
// bucket's range is cached, which saves two divisions per record.
func (st *store) pruneThr() int64 {
	thr := subSat(st.wm, st.h)
	if st.bucketMs == 0 {
		return thr
	}
	if thr >= st.keepLo && thr < st.keepHi {
		return st.keepLo
	}
	lo := keepFrom(st.wm, st.h, st.bucketMs)
	st.keepLo, st.keepHi = 0, 0 // empty: not cached
	if lo > math.MinInt64 && lo <= math.MaxInt64-st.bucketMs {
		st.keepLo, st.keepHi = lo, lo+st.bucketMs
	}
	return lo
}

// keepThr is the ts below which an entry is dropped, and no longer
// persisted, at watermark w: W - H, or with buckets the start of the
// bucket of W - H, so that a bucket is kept until all of it has expired
// and then dropped whole. An entry with ts in [keepThr, W - H) has
// expired all the same: no view counts it as remembered (seen compares
// with W - H), it only stays in memory and in its bucket's value until
// the rest of its bucket expires, which spares a rewrite of the oldest
// bucket of every key at every commit and a pruning of every key at
// almost every record.
func (st *store) keepThr(w int64) int64 { return keepFrom(w, st.h, st.bucketMs) }

// keepFrom is keepThr for watermark w, horizon h and bucket length
// bucketMs (0: no buckets).
func keepFrom(w, h, bucketMs int64) int64 {
	thr := subSat(w, h)
	if bucketMs == 0 || thr == math.MinInt64 {
		return thr
	}
	lo := floorDiv(thr, bucketMs) * bucketMs
	if lo > thr { // the product wrapped (a bucket at the bottom of int64)
		return math.MinInt64
	}
	return lo
}

// subSat returns a - b for b >= 0, clamped at math.MinInt64: at
// NoWatermark, W - H compares below every ts.
func subSat(a, b int64) int64 {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}
