package dedup

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
)

// TestChunkOrder: the consumer feeds the views of a shared store
// rule-major over chunks of records (every record's Pair prepared first,
// then view 0 takes the whole chunk, SeenPair and Advance per record, then
// view 1, ...), where it used to feed them record-major (every view takes
// a record before the next one). The dedup keeper persists, at a commit,
// EncodeShared of every StoreDirtyBuckets entry, so the order must not
// show at a chunk end: two identical shared stores, one fed record-major
// and one rule-major, give the same verdicts, and at every chunk end the
// same watermarks, Dirty, DirtyBuckets, Stats per view, the same
// StoreDirtyBuckets, and the same EncodeShared (and EncodeBucket) of every
// bucket either holds or lists, and both keep their invariants. Unlike
// TestSharedViewsInChunks (shared views against Sets of their own, dirty
// lists compared only while the views' W agree), the views here have
// watermarks of their own all along: each its own filter and its own
// delay behind the records' ts, some adaptive (the delay changes, W never
// decreases), some jumping ahead; so an id expires for one view while a
// slower one holds it, and comes back for some views and not others.
// Commits (ClearDirty on every view of both stores) fall at random chunk
// ends, as the processor's.
func TestChunkOrder(t *testing.T) {
	t.Run("hash", func(t *testing.T) { chunkOrder(t, math.MaxUint64) })
	// Two-bit hashes: most pairs collide, through coll and more.
	t.Run("colliding", func(t *testing.T) { chunkOrder(t, 3) })
}

// orderRec is one record of a chunk-order stream.
type orderRec struct {
	key, id string
	ts      int64
}

// orderStep is what one view does with one record: Seen when take, then
// Advance(w) when advance.
type orderStep struct {
	take, advance bool
	w             int64
}

// orderCounts counts, over the seeds of a run, what the streams exercised:
// the test requires every one of them.
type orderCounts struct {
	differingW int // chunk ends where the views' W differ
	heldOnly   int // chunk ends where an id expired for one view is held for another
	split      int // records two take-everything views disagree on (expiry only)
	tombstones int // store-dirty buckets whose EncodeShared is nil
	commits    int
}

func chunkOrder(t *testing.T, hashMask uint64) {
	seeds := 120
	if testing.Short() {
		seeds = 30
	}
	var cnt orderCounts
	for seed := range uint64(seeds) {
		chunkOrderSeed(t, hashMask, seed, &cnt)
	}
	if cnt.differingW == 0 || cnt.heldOnly == 0 || cnt.split == 0 || cnt.tombstones == 0 || cnt.commits == 0 {
		t.Fatalf("the streams do not exercise what they must: %+v", cnt)
	}
}

func chunkOrderSeed(t *testing.T, hashMask uint64, seed uint64, cnt *orderCounts) {
	rng := rand.New(rand.NewPCG(seed, 0xc0de))
	h := genHorizon(rng)
	bucket := 1 + rng.Int64N(20) // small: many buckets, each expiring whole
	n := 2 + rng.IntN(4)
	recs := genOrderRecs(rng, h, 200+rng.IntN(1000))
	plan, all := genOrderPlan(rng, h, n, recs)

	newStore := func() []*Set {
		s, err := NewBucketed(h, bucket)
		if err != nil {
			t.Fatal(err)
		}
		s.st.hashMask = hashMask
		views := []*Set{s}
		for len(views) < n {
			v, err := s.NewView()
			if err != nil {
				t.Fatal(err)
			}
			views = append(views, v)
		}
		return views
	}
	a, b := newStore(), newStore() // a record-major, b rule-major
	models := make([]*model, n)    // per view, its verdicts written the obvious way
	for i := range models {
		models[i] = newModel(h)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("rule-%d.v1", n-i) // not in view order
	}
	at := func(start, end int) string {
		return fmt.Sprintf("seed %d H %d bucket %d n %d chunk [%d,%d) (W record-major %v, rule-major %v)",
			seed, h, bucket, n, start, end, watermarks(a), watermarks(b))
	}
	wantV := make([][]bool, n) // per view, the verdicts of the chunk
	gotV := make([][]bool, n)
	for start := 0; start < len(recs); {
		end := min(len(recs), start+1+rng.IntN(300))
		chunk := recs[start:end]
		for i := range n {
			wantV[i] = slices.Grow(wantV[i][:0], len(chunk))[:len(chunk)]
			gotV[i] = slices.Grow(gotV[i][:0], len(chunk))[:len(chunk)]
		}
		// Record-major: every view takes a record before the next one,
		// with Seen, or with SeenPair and a Pair prepared for the record
		// (or left empty).
		for j, r := range chunk {
			var p Pair
			mode := rng.IntN(3)
			if mode == 1 {
				a[rng.IntN(n)].PreparePair(&p, r.key, r.id)
			}
			for i, v := range a {
				s := plan[start+j][i]
				dup := false
				if s.take {
					if mode == 0 {
						dup = v.Seen(r.key, r.id, r.ts)
					} else {
						dup = v.SeenPair(&p, r.key, r.id, r.ts)
					}
				}
				if s.advance {
					v.Advance(s.w)
				}
				if m := s.take && models[i].seen(r.key, r.id, r.ts); dup != m {
					t.Fatalf("%s view %d: record %d %+v (%+v): record-major duplicate %v, the model %v",
						at(start, end), i, start+j, r, s, dup, m)
				}
				if s.advance {
					models[i].advance(s.w)
				}
				wantV[i][j] = dup
			}
		}
		// Rule-major, as consume: one Pair per record, prepared before
		// the views run, then each view over the whole chunk.
		pairs := make([]Pair, len(chunk))
		for j, r := range chunk {
			b[rng.IntN(n)].PreparePair(&pairs[j], r.key, r.id)
		}
		for i, v := range b {
			for j, r := range chunk {
				s := plan[start+j][i]
				dup := false
				if s.take {
					dup = v.SeenPair(&pairs[j], r.key, r.id, r.ts)
				}
				if s.advance {
					v.Advance(s.w)
				}
				gotV[i][j] = dup
			}
		}
		where := at(start, end)
		for i := range n {
			if !slices.Equal(gotV[i], wantV[i]) {
				j := 0
				for gotV[i][j] == wantV[i][j] {
					j++
				}
				t.Fatalf("%s view %d: record %d %+v (%+v): rule-major duplicate %v, record-major %v",
					where, i, start+j, chunk[j], plan[start+j][i], gotV[i][j], wantV[i][j])
			}
		}
		for x := range all {
			for _, y := range all[x+1:] {
				for j := range chunk {
					if wantV[all[x]][j] != wantV[y][j] {
						cnt.split++
					}
				}
			}
		}
		compareChunkOrder(t, where, a, b, names, cnt)
		if rng.IntN(3) == 0 {
			for i := range n {
				a[i].ClearDirty()
				b[i].ClearDirty()
			}
			cnt.commits++
		}
		start = end
	}
}

// compareChunkOrder compares, at a chunk end, the views of store a (fed
// record-major) with those of store b (rule-major).
func compareChunkOrder(t *testing.T, where string, a, b []*Set, names []string, cnt *orderCounts) {
	t.Helper()
	for _, s := range [][]*Set{a, b} {
		if err := s[0].check(); err != nil {
			t.Fatalf("%s: store %s: %v", where, storeOrder(s, a), err)
		}
	}
	for i := range a {
		va, vb := a[i], b[i]
		if va.Watermark() != vb.Watermark() {
			t.Fatalf("%s view %d: W rule-major %d, record-major %d", where, i, vb.Watermark(), va.Watermark())
		}
		if got, want := vb.Dirty(), va.Dirty(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s view %d: dirty keys rule-major %q, record-major %q", where, i, got, want)
		}
		if got, want := vb.DirtyBuckets(), va.DirtyBuckets(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s view %d: dirty buckets rule-major %v, record-major %v", where, i, got, want)
		}
		if got, want := vb.Stats(), va.Stats(); got != want {
			t.Fatalf("%s view %d: Stats rule-major %+v, record-major %+v", where, i, got, want)
		}
	}
	if vs := watermarks(a); slices.Min(vs) != slices.Max(vs) {
		cnt.differingW++
	}
	if heldForAnother(a) {
		cnt.heldOnly++
	}
	dirty := a[0].StoreDirtyBuckets()
	if got := b[0].StoreDirtyBuckets(); !reflect.DeepEqual(got, dirty) {
		t.Fatalf("%s: store dirty buckets rule-major %v, record-major %v", where, got, dirty)
	}
	// What the keeper writes: EncodeShared of every dirty entry (nil: a
	// tombstone). And of every entry either store holds, which a commit
	// wrote earlier: one that differs now changed without being marked.
	refs := map[BucketRef]bool{}
	for _, r := range dirty {
		refs[r] = true
	}
	for _, s := range [][]*Set{a, b} {
		for k, ks := range s[0].st.keys {
			for _, e := range ks.byTS[ks.head:] {
				if r := (BucketRef{k, s[0].BucketOf(e.ts)}); !refs[r] {
					refs[r] = false
				}
			}
		}
	}
	for _, r := range slices.SortedFunc(maps.Keys(refs), cmpRef) { // reproducible messages
		isDirty := refs[r]
		want, got := a[0].EncodeShared(r.Key, r.Bucket, names), b[0].EncodeShared(r.Key, r.Bucket, names)
		if (got == nil) != (want == nil) || string(got) != string(want) {
			t.Fatalf("%s: EncodeShared(%v) (dirty %v) rule-major %x (nil %v), record-major %x (nil %v)",
				where, r, isDirty, got, got == nil, want, want == nil)
		}
		if isDirty && want == nil {
			cnt.tombstones++
		}
		if want != nil {
			if _, _, _, err := decodeShared(want); err != nil {
				t.Fatalf("%s: EncodeShared(%v) = %x does not decode: %v", where, r, want, err)
			}
		}
		for i := range a {
			want, got := a[i].EncodeBucket(r.Key, r.Bucket), b[i].EncodeBucket(r.Key, r.Bucket)
			if (got == nil) != (want == nil) || string(got) != string(want) {
				t.Fatalf("%s view %d: EncodeBucket(%v) (dirty %v) rule-major %x, record-major %x", where, i, r, isDirty, got, want)
			}
		}
	}
}

func storeOrder(s, a []*Set) string {
	if s[0] == a[0] {
		return "record-major"
	}
	return "rule-major"
}

// heldForAnother reports whether the store of views holds an entry that
// has expired for a view that remembered it (its bit still set: it forgets
// it when the store drops it or at its next encounter) while another view
// still remembers it within its horizon.
func heldForAnother(views []*Set) bool {
	st := views[0].st
	for _, ks := range st.keys {
		for _, e := range ks.byTS[ks.head:] {
			var expired, holding bool
			for _, v := range views {
				if e.mask&v.bit == 0 {
					continue
				}
				if e.ts < subSat(v.wm, st.h) {
					expired = true
				} else {
					holding = true
				}
			}
			if expired && holding {
				return true
			}
		}
	}
	return false
}

// genOrderRecs returns a partition's records: a few keys with few ids (so
// redeliveries, with the same or another ts, and ids that come back after
// they expired are frequent), ts around a clock that moves forward, out of
// order, sometimes jumping (ids expire), rarely at the int64 edges.
func genOrderRecs(rng *rand.Rand, h int64, n int) []orderRec {
	nKeys, nIDs := 1+rng.IntN(5), 2+rng.IntN(20)
	hh := max(1, min(h, 300))
	spread := 1 + rng.Int64N(2*hh)
	clock := rng.Int64N(1000) - 500
	if rng.IntN(16) == 0 {
		clock = math.MaxInt64 - 20000 // near the top: deadlines overflow
	}
	recs := make([]orderRec, 0, n)
	for range n {
		if len(recs) > 0 && rng.IntN(8) == 0 {
			r := recs[len(recs)-1-rng.IntN(min(len(recs), 60))]
			if rng.IntN(2) == 0 {
				r.ts = clock - rng.Int64N(spread) // the same pair, another ts
			}
			recs = append(recs, r) // a redelivery
			continue
		}
		switch c := rng.IntN(100); {
		case c == 0:
			clock += rng.Int64N(3 * hh) // a gap: most ids expire
		case c < 60:
			clock += rng.Int64N(3)
		}
		ts := clock - rng.Int64N(spread) + rng.Int64N(spread/4+1)
		switch rng.IntN(1500) {
		case 0:
			ts = math.MinInt64
		case 1:
			ts = math.MaxInt64
		}
		recs = append(recs, orderRec{
			key: fmt.Sprintf("k%d", rng.IntN(nKeys)),
			id:  fmt.Sprint(rng.IntN(nIDs)),
			ts:  ts,
		})
	}
	return recs
}

// genOrderPlan decides, for n views (rules), what each does with each
// record: its filter (everything; a hash of the pair, so a pair is
// always taken or never; a hash of the id and the ts, so a pair is taken
// at some ts only) and its watermark (W = the latest ts minus its own
// delay, over the records it takes or over every record; adaptive views
// change their delay now and then, and some jump ahead at times; W never
// decreases). It returns the plan, plan[record][view], and the views that
// take everything and advance on every record (their verdicts differ
// only through expiry). View 0 takes everything.
func genOrderPlan(rng *rand.Rand, h int64, n int, recs []orderRec) ([][]orderStep, []int) {
	hh := max(1, min(h, 300))
	type view struct {
		filter   func(r orderRec) bool
		overAll  bool // W follows every record, not only those taken
		delay    int64
		adaptive bool
		jumps    bool
		w        int64
	}
	hash := func(salt uint64, parts ...string) uint64 {
		f := fnv.New64a()
		f.Write(binary.LittleEndian.AppendUint64(nil, salt))
		for _, p := range parts {
			f.Write([]byte{0})
			f.Write([]byte(p))
		}
		return f.Sum64()
	}
	views := make([]view, n)
	var all []int
	for i := range views {
		v := &views[i]
		salt, m := rng.Uint64(), 2+rng.Uint64N(3)
		kind := rng.IntN(5)
		if i == 0 {
			kind = 0
		}
		switch kind {
		case 0, 1:
			v.filter = func(orderRec) bool { return true }
		case 2, 3:
			v.filter = func(r orderRec) bool { return hash(salt, r.key, r.id)%m != 0 }
		default:
			q := 1 + rng.Int64N(2*hh)
			v.filter = func(r orderRec) bool { return hash(salt, r.id, strconv.FormatInt(r.ts/q, 10))%m != 0 }
		}
		v.overAll = kind <= 1 || rng.IntN(3) == 0
		v.delay = rng.Int64N(2 * hh)
		v.adaptive, v.jumps = rng.IntN(3) == 0, rng.IntN(4) == 0
		v.w = NoWatermark
		if kind <= 1 && v.overAll {
			all = append(all, i)
		}
	}
	plan := make([][]orderStep, len(recs))
	for j, r := range recs {
		plan[j] = make([]orderStep, n)
		for i := range views {
			v := &views[i]
			if v.adaptive && rng.IntN(40) == 0 {
				v.delay = rng.Int64N(2 * hh)
			}
			s := orderStep{take: v.filter(r)}
			if s.take || v.overAll {
				v.w = max(v.w, subSat(r.ts, v.delay))
				if v.jumps && rng.IntN(200) == 0 {
					jump := rng.Int64N(2 * hh)
					v.w = max(v.w, min(r.ts, math.MaxInt64-jump)+jump) // an idle-timeout jump, say
				}
				s.advance, s.w = true, v.w
			}
			plan[j][i] = s
		}
	}
	return plan, all
}
