package dedup

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// A bucketed Set persisted by its dirty buckets at random points and
// rebuilt from them (as a restore from the changelog does) gives the same
// verdicts as an uninterrupted one; the store holds exactly the live ids;
// and a commit rewrites only the buckets that changed.
func TestBucketedRestoreEquivalence(t *testing.T) {
	for seed := uint64(0); seed < 80; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		const h, b = 1000, 100
		ref, _ := New(h)
		cur, _ := NewBucketed(h, b)
		store := map[BucketRef][]byte{}
		persist := func() {
			for _, r := range cur.DirtyBuckets() {
				if v := cur.EncodeBucket(r.Key, r.Bucket); v != nil {
					store[r] = v
				} else {
					delete(store, r)
				}
			}
			cur.ClearDirty()
		}
		w := int64(-500)
		for i := 0; i < 3000; i++ {
			switch r := rng.IntN(100); {
			case r < 5:
				w += int64(rng.IntN(200))
				ref.Advance(w)
				cur.Advance(w)
			case r < 10:
				persist()
				fresh, _ := NewBucketed(h, b)
				refs := make([]BucketRef, 0, len(store))
				for r := range store {
					refs = append(refs, r)
				}
				slices.SortFunc(refs, func(a, b BucketRef) int { return int(a.Bucket - b.Bucket) })
				rng.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
				fresh.Advance(cur.Watermark())
				for _, r := range refs {
					if err := fresh.LoadBucket(r.Key, r.Bucket, store[r]); err != nil {
						t.Fatalf("seed %d: load %v: %v", seed, r, err)
					}
				}
				persist2 := fresh.DirtyBuckets()
				for _, r := range persist2 {
					if fresh.EncodeBucket(r.Key, r.Bucket) != nil {
						t.Fatalf("seed %d: a restore marked a live bucket dirty: %v", seed, r)
					}
					delete(store, r)
				}
				fresh.ClearDirty()
				if fresh.Stats() != cur.Stats() {
					t.Fatalf("seed %d: restored %+v, want %+v", seed, fresh.Stats(), cur.Stats())
				}
				cur = fresh
			default:
				key := fmt.Sprintf("k%d", rng.IntN(4))
				id := fmt.Sprintf("e%d", rng.IntN(300))
				ts := w + int64(rng.IntN(400)) - 250
				if got, want := cur.Seen(key, id, ts), ref.Seen(key, id, ts); got != want {
					t.Fatalf("seed %d op %d: Seen(%s, %s, %d) = %v, want %v", seed, i, key, id, ts, got, want)
				}
			}
		}
		// The store holds exactly the live ids, and no bucket entry of a
		// persisted set spans two buckets.
		persist()
		n := 0
		for r, v := range store {
			es, err := decodeKey(v)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				if cur.BucketOf(e.ts) != r.Bucket {
					t.Fatalf("seed %d: bucket %d holds ts %d", seed, r.Bucket, e.ts)
				}
			}
			n += len(es)
		}
		if n != cur.Stats().IDs {
			t.Fatalf("seed %d: store holds %d ids, the set %d", seed, n, cur.Stats().IDs)
		}
	}
}

// Adding one id to a key holding many rewrites one small bucket, not the
// key.
func TestBucketedWritesOnlyChangedBuckets(t *testing.T) {
	s, _ := NewBucketed(3_600_000, 60_000)
	for i := range 7200 {
		s.Seen("M-1", fmt.Sprintf("e%d", i), int64(i)*500)
	}
	s.ClearDirty()
	s.Seen("M-1", "new", 7200*500)
	d := s.DirtyBuckets()
	if len(d) != 1 {
		t.Fatalf("dirty %v", d)
	}
	if n := len(s.EncodeBucket(d[0].Key, d[0].Bucket)); n > 2000 {
		t.Fatalf("the changed bucket is %d bytes", n)
	}
	if err := s.LoadBucket("M-1", 0, s.EncodeBucket("M-1", 1)); err == nil {
		t.Fatal("a bucket's ids loaded into another bucket")
	}
}

// TestDirtyListGenerations: the store's dirty list is shared by its
// views; a view's ClearDirty takes out only its own marks, the list is
// emptied once no view is left in it, and the keys' caches of where their
// buckets are in it are dated by the list's generation, also across the
// wrap of that count (a cache from before the wrap must not pass for
// current).
func TestDirtyListGenerations(t *testing.T) {
	const b = 60_000
	a, _ := NewBucketed(3_600_000, b)
	v, _ := a.NewView()
	want := func(s *Set, refs ...BucketRef) {
		t.Helper()
		if refs == nil {
			refs = []BucketRef{}
		}
		if got := s.DirtyBuckets(); !slices.Equal(got, refs) {
			t.Fatalf("view %d: dirty buckets %v, want %v", s.slot, got, refs)
		}
	}
	a.Seen("A", "e1", 10)
	v.Seen("A", "e1", 10)
	a.ClearDirty()
	want(a)
	want(v, BucketRef{"A", 0})
	a.Seen("A", "e2", 20) // a's mark again, through the key's cache
	want(a, BucketRef{"A", 0})
	a.ClearDirty()
	v.ClearDirty()
	want(a)
	want(v)
	if n := len(a.st.dirtyRefs); n != 0 {
		t.Fatalf("the list holds %d buckets after every view cleared", n)
	}
	// Key A's cache says generation 1, index 0, stale since. Many
	// emptyings later the count wraps to 1 again: A's cache must not be
	// taken for current (index 0 of the list is B's bucket, or nothing).
	a.st.dirtyGen = math.MaxUint32
	a.Seen("B", "e3", b+5)
	a.ClearDirty()
	v.ClearDirty()
	if g := a.st.dirtyGen; g != 1 {
		t.Fatalf("generation %d after the wrap, want 1", g)
	}
	a.Seen("A", "e4", 30)
	want(a, BucketRef{"A", 0})
	want(v)
}

// TestDirtyListBounded: views that clear at different commits, with
// marks between them, keep the shared dirty list within twice what they
// marked since their clears (a list emptied only once no view is left in
// it would grow with every key ever marked).
func TestDirtyListBounded(t *testing.T) {
	a, _ := NewBucketed(3_600_000, 60_000)
	v, _ := a.NewView()
	for i := range 10_000 {
		key, id := fmt.Sprintf("k%d", i), fmt.Sprintf("e%d", i)
		a.Seen(key, id, int64(i))
		v.Seen(key, id, int64(i))
		if i%2 == 0 {
			a.ClearDirty()
		} else {
			v.ClearDirty()
		}
		marked := len(a.DirtyBuckets()) + len(v.DirtyBuckets())
		if n := len(a.st.dirtyRefs); n > 2*marked+2 {
			t.Fatalf("round %d: the list holds %d buckets, the views mark %d", i, n, marked)
		}
	}
	want := []BucketRef{{"k9999", 0}}
	if got := a.DirtyBuckets(); !slices.Equal(got, want) {
		t.Fatalf("view 0: %v, want %v", got, want)
	}
	if got := v.DirtyBuckets(); len(got) != 0 {
		t.Fatalf("view 1: %v, want none", got)
	}
}

// TestMarkBucketAtInt64Ends: markBucket's cache of a view's latest bucket
// (its ts range) is right for buckets at both ends of int64, where the
// range's bounds do not fit, and for ts on either side of a bucket's
// bounds.
func TestMarkBucketAtInt64Ends(t *testing.T) {
	for _, bms := range []int64{1000, 56250, 7} {
		s, err := NewBucketed(3_600_000, bms)
		if err != nil {
			t.Fatal(err)
		}
		tss := []int64{math.MinInt64, math.MinInt64 + 5, math.MaxInt64 - 5, math.MaxInt64,
			math.MinInt64 + bms, -1, 0, bms - 1, bms, -bms, -bms - 1, math.MaxInt64 - bms, 3 * bms}
		want := map[BucketRef]bool{}
		for i, ts := range tss {
			s.Seen("k", fmt.Sprint("id-", i), ts)
			want[BucketRef{Key: "k", Bucket: s.BucketOf(ts)}] = true
			got := map[BucketRef]bool{}
			for _, r := range s.DirtyBuckets() {
				got[r] = true
			}
			if len(got) != len(want) {
				t.Fatalf("bucket %d ms, after ts %d: dirty buckets %v, want %v", bms, ts, got, want)
			}
			for r := range want {
				if !got[r] {
					t.Fatalf("bucket %d ms, after ts %d: dirty buckets %v lack %v", bms, ts, got, r)
				}
			}
		}
	}
}

// TestBucketExpiresWhole: a bucketed Set keeps a bucket's ids until all of
// them have expired and then drops the bucket at once (keepThr), so that
// neither the oldest bucket of a key is rewritten nor the key pruned while
// W - H moves through it; the ids that expired in the meantime are no
// longer duplicates all the same.
func TestBucketExpiresWhole(t *testing.T) {
	const h, b = 1000, 100
	s, err := NewBucketed(h, b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 { // ts 0, 10, ..., 390: buckets 0 to 3, ten ids each
		if s.Seen("k", fmt.Sprint("e", i), int64(i)*10) {
			t.Fatalf("e%d: a first delivery is a duplicate", i)
		}
	}
	s.ClearDirty()
	ids := func(bucket int64) []string {
		t.Helper()
		v := s.EncodeBucket("k", bucket)
		if v == nil {
			return nil
		}
		es, err := decodeKey(v)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = e.id
		}
		return out
	}
	// W - H moves through bucket 0, one ms at a time: nothing changes.
	for w := int64(1001); w < 1100; w++ {
		s.Advance(w)
		if d := s.DirtyBuckets(); len(d) != 0 {
			t.Fatalf("W %d: dirty %v while bucket 0 has ids left to expire", w, d)
		}
		if got := s.Stats(); got != (Stats{Keys: 1, IDs: 40}) {
			t.Fatalf("W %d: %+v, want the 40 ids held", w, got)
		}
		if got := ids(0); len(got) != 10 {
			t.Fatalf("W %d: bucket 0 encodes %v, want its 10 ids", w, got)
		}
	}
	if q := len(s.st.due); q != 1 || s.st.due[0].at != 1100 {
		t.Fatalf("due queue %v, want the key once, at W 1100", s.st.due)
	}
	// e2 (ts 20) expired at W 1021: a redelivery is not a duplicate. At its
	// old ts it is not remembered again (expired already); the entry it
	// had is forgotten, and its bucket rewritten without it.
	if s.Seen("k", "e2", 20) {
		t.Fatal("e2 at ts 20, W - H 99: a duplicate")
	}
	if d := s.DirtyBuckets(); !slices.Equal(d, []BucketRef{{"k", 0}}) {
		t.Fatalf("dirty %v, want bucket 0", d)
	}
	if got := ids(0); len(got) != 9 || slices.Contains(got, "e2") {
		t.Fatalf("bucket 0 encodes %v, want its ids but e2", got)
	}
	// e3 (ts 30) comes again with a new ts: remembered anew, then a
	// duplicate.
	if s.Seen("k", "e3", 1095) || !s.Seen("k", "e3", 1095) {
		t.Fatal("e3 at ts 1095: want new, then a duplicate")
	}
	if got := ids(0); len(got) != 8 || slices.Contains(got, "e3") {
		t.Fatalf("bucket 0 encodes %v, want its ids but e2 and e3", got)
	}
	s.ClearDirty()
	// W - H reaches bucket 1: bucket 0 goes whole.
	s.Advance(1100)
	if d := s.DirtyBuckets(); !slices.Equal(d, []BucketRef{{"k", 0}}) {
		t.Fatalf("dirty %v, want bucket 0 only", d)
	}
	if got := ids(0); got != nil {
		t.Fatalf("bucket 0 encodes %v after it expired", got)
	}
	if got := s.Stats(); got != (Stats{Keys: 1, IDs: 31}) {
		t.Fatalf("%+v, want buckets 1 to 3 and e3", got)
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	// A restore at this W holds what the set holds, marking nothing.
	r, _ := NewBucketed(h, b)
	r.Advance(1150)
	s.Advance(1150)
	for bk := int64(0); bk <= 10; bk++ {
		if v := s.EncodeBucket("k", bk); v != nil {
			if err := r.LoadBucket("k", bk, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r.Stats() != s.Stats() || len(r.DirtyBuckets()) != 0 {
		t.Fatalf("restored %+v, dirty %v; want %+v, nothing dirty", r.Stats(), r.DirtyBuckets(), s.Stats())
	}
	if !r.Seen("k", "e15", 150) || r.Seen("k", "e5", 50) {
		t.Fatal("restored: e15 (live) must be a duplicate, e5 (expired) not")
	}
}

// keepFrom is W - H, or its bucket's start, and never wraps.
func TestKeepFrom(t *testing.T) {
	for _, c := range []struct{ w, h, b, want int64 }{
		{1050, 1000, 0, 50},
		{1050, 1000, 100, 0},
		{1100, 1000, 100, 100},
		{1099, 1000, 100, 0},
		{950, 1000, 100, -100},
		{1000, 1000, 100, 0},
		{NoWatermark, 1000, 100, math.MinInt64},
		{math.MinInt64 + 1500, 1000, 1000, math.MinInt64}, // the bucket of W - H starts below int64
		{math.MaxInt64, 0, 1000, math.MaxInt64 - math.MaxInt64%1000},
		{math.MaxInt64, math.MaxInt64, 7, 0},
	} {
		if got := keepFrom(c.w, c.h, c.b); got != c.want {
			t.Errorf("keepFrom(%d, %d, %d) = %d, want %d", c.w, c.h, c.b, got, c.want)
		}
	}
}

// TestBottomBucketEncodes: the bucket at the bottom of int64, which
// starts below math.MinInt64, encodes its ids (its start wrapped to a
// large ts, which found none: the commit tombstoned a bucket that held
// ids), alone and shared.
func TestBottomBucketEncodes(t *testing.T) {
	for _, bms := range []int64{7, 1000, 56250} {
		s, _ := NewBucketed(10, bms)
		s.Seen("k", "a", math.MinInt64)
		d := s.DirtyBuckets()
		if len(d) != 1 {
			t.Fatalf("bucket %d ms: dirty %v", bms, d)
		}
		v := s.EncodeBucket(d[0].Key, d[0].Bucket)
		if v == nil {
			t.Fatalf("bucket %d ms: bucket %d encodes nothing", bms, d[0].Bucket)
		}
		if sv := s.EncodeShared(d[0].Key, d[0].Bucket, []string{"r.v1"}); sv == nil {
			t.Fatalf("bucket %d ms: bucket %d shares nothing", bms, d[0].Bucket)
		}
		r, _ := NewBucketed(10, bms)
		if err := r.LoadBucket("k", d[0].Bucket, v); err != nil {
			t.Fatal(err)
		}
		if !r.Seen("k", "a", math.MinInt64) {
			t.Fatalf("bucket %d ms: restored set forgot the ids", bms)
		}
	}
}
