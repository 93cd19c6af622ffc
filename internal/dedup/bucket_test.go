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
