package dedup

import (
	"cmp"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// qualifies is view v's filter in the views tests: a fixed pseudo-random
// verdict per (view, id, ts), so that the views remember different ids,
// and one id with different ts can be the first for different views (the
// store then holds one entry per ts).
func qualifies(v int, o op) bool {
	h := fnv.New64a()
	h.Write([]byte{byte(v)})
	h.Write([]byte(o.key + "\x00" + o.id))
	h.Write([]byte{byte(o.ts), byte(o.ts >> 8)})
	return h.Sum64()%3 != 0
}

// record applies a Seen op to every view as the pipeline does for the
// rules of one record: each view in turn runs Seen (if its filter passes)
// and then Advance to the watermark after the record (W = max(W, ts - d)),
// so a later view sees the record while an earlier one has already moved
// on. seen(i) does view i's Seen and advance(i, w) its Advance.
func record(n int, o op, d int64, seen func(i int) bool, advance func(i int, w int64)) []int {
	var dups []int
	for i := range n {
		if qualifies(i, o) && seen(i) {
			dups = append(dups, i)
		}
		advance(i, subSat(o.ts, d))
	}
	return dups
}

// TestSharedViewsModel: views sharing one store, each with its own filter
// and sometimes its own watermark, give every verdict of an independent
// model each, hold exactly what each model holds within the horizon, and
// keep the store's invariants. (Stats may count ids that expired for a
// view while a slower view keeps them: checked when the view is the
// slowest.)
func TestSharedViewsModel(t *testing.T) {
	t.Run("hash", func(t *testing.T) { sharedViewsModel(t, math.MaxUint64) })
	// Two-bit hashes: most pairs collide, through coll and more.
	t.Run("colliding", func(t *testing.T) { sharedViewsModel(t, 3) })
}

func sharedViewsModel(t *testing.T, hashMask uint64) {
	seeds := 300
	if testing.Short() {
		seeds = 60
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 11))
		h := genHorizon(rng)
		d := int64(rng.IntN(50))
		n := 1 + rng.IntN(5)
		views := []*Set{mustNew(t, h)}
		views[0].st.hashMask = hashMask
		for len(views) < n {
			v, err := views[0].NewView()
			if err != nil {
				t.Fatal(err)
			}
			views = append(views, v)
		}
		models := make([]*model, n)
		for i := range models {
			models[i] = newModel(h)
		}
		for k, o := range genOps(rng, h, 50+rng.IntN(300)) {
			switch {
			case o.advance && rng.IntN(3) == 0:
				// One view alone: the views' watermarks part (a rule
				// that joined later, or another watermark strategy).
				i := rng.IntN(n)
				views[i].Advance(o.ts)
				models[i].advance(o.ts)
			case o.advance:
				for i := range views {
					views[i].Advance(o.ts)
					models[i].advance(o.ts)
				}
			default:
				got := record(n, o, d, func(i int) bool { return views[i].Seen(o.key, o.id, o.ts) }, func(i int, w int64) { views[i].Advance(w) })
				want := record(n, o, d, func(i int) bool { return models[i].seen(o.key, o.id, o.ts) }, func(i int, w int64) { models[i].advance(w) })
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d H %d op %d %v: duplicate for views %v, the models say %v", seed, h, k, o, got, want)
				}
			}
			if err := views[0].check(); err != nil {
				t.Fatalf("seed %d H %d op %d %v: %v", seed, h, k, o, err)
			}
			for i, v := range views {
				live := models[i].live()
				ids := 0
				for _, es := range live {
					ids += len(es)
				}
				if got := v.Stats().IDs; got != ids && v.Watermark() == views[0].st.wm {
					t.Fatalf("seed %d op %d view %d: %d ids, the model holds %d", seed, k, i, got, ids)
				}
				if k%13 == 0 {
					if got := contents(t, v); !reflect.DeepEqual(got, live) {
						t.Fatalf("seed %d op %d view %d: remembers\n%v\nthe model\n%v", seed, k, i, got, live)
					}
				}
			}
		}
	}
}

// TestSharedViewsAsOwnSets: views sharing a store, advanced together (every
// view after its own Seen of each record, as the pipeline does), report
// after every operation exactly what independent Sets fed the same
// operations report: the verdicts, Dirty and DirtyBuckets, and the
// encodings of every key and of every dirty bucket. Sharing changes only
// the costs; this catches a shortcut for the other views of a record
// (Seen's seenAgain) that skips a mark or a verdict.
func TestSharedViewsAsOwnSets(t *testing.T) {
	t.Run("hash", func(t *testing.T) { sharedViewsAsOwnSets(t, math.MaxUint64) })
	t.Run("colliding", func(t *testing.T) { sharedViewsAsOwnSets(t, 3) })
}

func sharedViewsAsOwnSets(t *testing.T, hashMask uint64) {
	seeds := 200
	if testing.Short() {
		seeds = 40
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 13))
		h := genHorizon(rng)
		d := int64(rng.IntN(50))
		n := 1 + rng.IntN(6)
		bucket := 1 + rng.Int64N(50)
		newSet := func() *Set {
			s, err := NewBucketed(h, bucket)
			if err != nil {
				t.Fatal(err)
			}
			s.st.hashMask = hashMask
			return s
		}
		shared, own := []*Set{newSet()}, []*Set{newSet()}
		for len(shared) < n {
			v, err := shared[0].NewView()
			if err != nil {
				t.Fatal(err)
			}
			shared, own = append(shared, v), append(own, newSet())
		}
		for k, o := range genOps(rng, h, 50+rng.IntN(300)) {
			if o.advance {
				for i := range n {
					shared[i].Advance(o.ts)
					own[i].Advance(o.ts)
				}
			} else {
				// As package consume: the record's Pair, prepared by some
				// view before the rules run (or prepared for another
				// pair, which SeenPair must ignore), or none, changes no
				// verdict.
				var p Pair
				seen := func(i int) bool { return shared[i].SeenPair(&p, o.key, o.id, o.ts) }
				switch rng.IntN(4) {
				case 0, 1:
					shared[rng.IntN(n)].PreparePair(&p, o.key, o.id)
				case 2:
					shared[rng.IntN(n)].PreparePair(&p, o.key, o.id+"'")
				default:
					seen = func(i int) bool { return shared[i].Seen(o.key, o.id, o.ts) }
				}
				got := record(n, o, d, seen, func(i int, w int64) { shared[i].Advance(w) })
				want := record(n, o, d, func(i int) bool { return own[i].Seen(o.key, o.id, o.ts) }, func(i int, w int64) { own[i].Advance(w) })
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d op %d %v: duplicate for views %v, own sets %v", seed, k, o, got, want)
				}
			}
			for i := range n {
				v, s := shared[i], own[i]
				if got, want := v.Dirty(), s.Dirty(); !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d op %d %v view %d: dirty keys %q, own set %q", seed, k, o, i, got, want)
				}
				if got, want := v.DirtyBuckets(), s.DirtyBuckets(); !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d op %d %v view %d: dirty buckets %v, own set %v", seed, k, o, i, got, want)
				}
				for _, r := range s.DirtyBuckets() {
					if got, want := v.EncodeBucket(r.Key, r.Bucket), s.EncodeBucket(r.Key, r.Bucket); string(got) != string(want) {
						t.Fatalf("seed %d op %d %v view %d: bucket %v %x, own set %x", seed, k, o, i, r, got, want)
					}
				}
				for _, keys := range []map[string]*keyState{v.st.keys, s.st.keys} {
					for key := range keys {
						if got, want := v.EncodeKey(key), s.EncodeKey(key); string(got) != string(want) {
							t.Fatalf("seed %d op %d %v view %d: key %q %x, own set %x", seed, k, o, i, key, got, want)
						}
					}
				}
				if rng.IntN(8) == 0 {
					v.ClearDirty()
					s.ClearDirty()
				}
			}
		}
	}
}

// TestSharedViewsRestore: bucketed views sharing a store, persisted per
// view at random commits and rebuilt at random crashes (a fresh store, its
// views loaded from their own entries in an interleaved random order, as
// a restore of several rules' changelogs does), give the verdicts of views
// that never crashed; a restore marks nothing live dirty.
func TestSharedViewsRestore(t *testing.T) {
	t.Run("hash", func(t *testing.T) { sharedViewsRestore(t, math.MaxUint64) })
	t.Run("colliding", func(t *testing.T) { sharedViewsRestore(t, 3) })
}

func sharedViewsRestore(t *testing.T, hashMask uint64) {
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 12))
		const h, b, d = 1000, 100, 20
		n := 2 + rng.IntN(4)
		newStore := func() *Set {
			first, err := NewBucketed(h, b)
			if err != nil {
				t.Fatal(err)
			}
			first.st.hashMask = hashMask
			return first
		}
		newView := func(first *Set) *Set {
			v, err := first.NewView()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		ref := []*Set{newStore()}
		for len(ref) < n {
			ref = append(ref, newView(ref[0]))
		}
		cur := []*Set{newStore()}
		for len(cur) < n {
			cur = append(cur, newView(cur[0]))
		}
		stores := make([]map[BucketRef][]byte, n)
		for i := range stores {
			stores[i] = map[BucketRef][]byte{}
		}
		persist := func() {
			for i, v := range cur {
				for _, r := range v.DirtyBuckets() {
					if val := v.EncodeBucket(r.Key, r.Bucket); val != nil {
						stores[i][r] = val
					} else {
						delete(stores[i], r)
					}
				}
				v.ClearDirty()
			}
		}
		// restore rebuilds the views as consume's loadPart does: one rule
		// after the other, each view created, its entries loaded in a
		// random order, then its watermark (the rule's meta entry); the
		// dedup marks of the load are kept (pipeline's ClearLoaded).
		restore := func() {
			ws := make([]int64, n)
			for i, v := range cur {
				ws[i] = v.Watermark()
			}
			var next []*Set
			for i := range n {
				v := newStore()
				if i > 0 {
					v = newView(next[0])
				}
				next = append(next, v)
				refs := make([]BucketRef, 0, len(stores[i]))
				for r := range stores[i] {
					refs = append(refs, r)
				}
				slices.SortFunc(refs, func(a, b BucketRef) int { return cmpBucketRef(a, b) })
				rng.Shuffle(len(refs), func(x, y int) { refs[x], refs[y] = refs[y], refs[x] })
				for _, r := range refs {
					if err := v.LoadBucket(r.Key, r.Bucket, stores[i][r]); err != nil {
						t.Fatalf("seed %d: view %d load %v: %v", seed, i, r, err)
					}
				}
				v.Advance(ws[i])
			}
			cur = next
			if err := cur[0].check(); err != nil {
				t.Fatalf("seed %d after restore: %v", seed, err)
			}
		}
		ts := int64(0)
		for k := range 2500 {
			switch r := rng.IntN(100); {
			case r < 5:
				persist()
				restore()
			case r < 10:
				persist()
				checkPersisted(t, seed, cur, stores)
			case r < 13:
				// One view alone moves ahead (a rule that joined later
				// is behind the others until its events catch up).
				i, w := rng.IntN(n), ts-int64(rng.IntN(200))
				cur[i].Advance(w)
				ref[i].Advance(w)
			default:
				// Mostly in order, sometimes late, ids reused across keys
				// and times.
				ts += int64(rng.IntN(15))
				o := op{key: string(rune('a' + rng.IntN(3))), id: string(rune('A' + rng.IntN(40))), ts: ts - int64(rng.IntN(300))}
				got := record(n, o, d, func(i int) bool { return cur[i].Seen(o.key, o.id, o.ts) }, func(i int, w int64) { cur[i].Advance(w) })
				want := record(n, o, d, func(i int) bool { return ref[i].Seen(o.key, o.id, o.ts) }, func(i int, w int64) { ref[i].Advance(w) })
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d op %d %v: duplicate for views %v, uninterrupted %v", seed, k, o, got, want)
				}
				if err := cur[0].check(); err != nil {
					t.Fatalf("seed %d op %d: %v", seed, k, err)
				}
			}
		}
	}
}

func cmpBucketRef(a, b BucketRef) int {
	if a.Key != b.Key {
		return strings.Compare(a.Key, b.Key)
	}
	return cmp.Compare(a.Bucket, b.Bucket)
}

// checkPersisted: right after a commit, when every view has the same
// watermark, each view's persisted buckets are exactly the encodings of
// what it remembers (no stale bucket, no missing one).
func checkPersisted(t *testing.T, seed uint64, views []*Set, stores []map[BucketRef][]byte) {
	t.Helper()
	for _, v := range views {
		if v.Watermark() != views[0].Watermark() {
			return
		}
	}
	for i, v := range views {
		live := map[BucketRef]bool{}
		thr := subSat(v.wm, v.st.h)
		for k, ks := range v.st.keys {
			for _, e := range ks.byTS[ks.head:] {
				if e.mask&v.bit != 0 && e.ts >= thr {
					live[BucketRef{k, v.BucketOf(e.ts)}] = true
				}
			}
		}
		for r, val := range stores[i] {
			if got := v.EncodeBucket(r.Key, r.Bucket); string(got) != string(val) {
				t.Fatalf("seed %d view %d: bucket %v persisted as %x, holds %x", seed, i, r, val, got)
			}
		}
		for r := range live {
			if stores[i][r] == nil {
				t.Fatalf("seed %d view %d: bucket %v not persisted", seed, i, r)
			}
		}
	}
}

// TestNewViewLimit: a store takes MaxViews views, no more.
func TestNewViewLimit(t *testing.T) {
	s := mustNew(t, 10)
	for range MaxViews - 1 {
		if _, err := s.NewView(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.NewView(); err == nil {
		t.Fatalf("view %d accepted", MaxViews+1)
	}
}

// TestViewAddedBehind: a restore loads the rules of a partition one after
// the other (consume's loadPart): the first view has advanced when the
// second is created, whose own watermark is behind. The store must not
// expire what the second still needs: its restored ids keep their verdict.
func TestViewAddedBehind(t *testing.T) {
	const h, b = 1000, 100
	ref, _ := NewBucketed(h, b)
	refB, _ := ref.NewView()
	ref.Advance(5000)
	refB.Advance(4700)
	refB.Seen("k", "X", 3800)
	stored := map[BucketRef][]byte{}
	for _, r := range refB.DirtyBuckets() {
		stored[r] = refB.EncodeBucket(r.Key, r.Bucket)
	}

	a, _ := NewBucketed(h, b)
	a.Advance(5000) // the first rule's meta
	a.ClearDirty()
	bv, _ := a.NewView()
	for r, v := range stored {
		if err := bv.LoadBucket(r.Key, r.Bucket, v); err != nil {
			t.Fatal(err)
		}
	}
	bv.Advance(4700) // the second rule's meta
	if err := a.check(); err != nil {
		t.Fatal(err)
	}
	if !bv.Seen("k", "X", 3800) || !refB.Seen("k", "X", 3800) {
		t.Fatal("a restored id of the slower view is no longer a duplicate")
	}
}

// TestLoadStaleBucket: a view's persisted buckets may hold one id twice (an
// expired entry whose bucket was not rewritten while a slower view kept it,
// and the id seen again later). Loading keeps the later entry, in either
// order, and marks the stale bucket dirty so that the next commit rewrites
// it without the id.
func TestLoadStaleBucket(t *testing.T) {
	const h, b = 1000, 100
	src, _ := NewBucketed(h, b)
	src.Seen("k", "X", 500)
	src.Seen("k", "Y", 510)
	old := src.EncodeBucket("k", 5)
	src2, _ := NewBucketed(h, b)
	src2.Seen("k", "X", 2500)
	newer := src2.EncodeBucket("k", 25)
	for _, order := range [][]int64{{5, 25}, {25, 5}} {
		s, _ := NewBucketed(h, b)
		for _, bucket := range order {
			data := old
			if bucket == 25 {
				data = newer
			}
			if err := s.LoadBucket("k", bucket, data); err != nil {
				t.Fatalf("order %v: %v", order, err)
			}
		}
		s.Advance(1400) // Y (510) live, X's old entry (500) would be too: the later one wins
		if err := s.check(); err != nil {
			t.Fatalf("order %v: %v", order, err)
		}
		if !slices.Contains(s.DirtyBuckets(), (BucketRef{"k", 5})) {
			t.Fatalf("order %v: the stale bucket is not dirty: %v", order, s.DirtyBuckets())
		}
		es, err := decodeKey(s.EncodeBucket("k", 5))
		if err != nil || len(es) != 1 || es[0].id != "Y" {
			t.Fatalf("order %v: bucket 5 now holds %v (%v), want Y only", order, es, err)
		}
		if !s.Seen("k", "X", 2500) || s.Stats().IDs != 2 {
			t.Fatalf("order %v: X@2500 not remembered once: %v", order, s)
		}
	}
}
