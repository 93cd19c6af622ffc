package dedup

import (
	"hash/fnv"
	"math/rand/v2"
	"reflect"
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

// TestSharedViewsRestore: bucketed views sharing a store, persisted per
// view at random commits and rebuilt at random crashes (a fresh store, its
// views loaded from their own entries in an interleaved random order, as
// a restore of several rules' changelogs does), give the verdicts of views
// that never crashed; a restore marks nothing live dirty.
func TestSharedViewsRestore(t *testing.T) {
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 12))
		const h, b, d = 1000, 100, 20
		n := 2 + rng.IntN(4)
		build := func() []*Set {
			first, err := NewBucketed(h, b)
			if err != nil {
				t.Fatal(err)
			}
			vs := []*Set{first}
			for len(vs) < n {
				v, err := first.NewView()
				if err != nil {
					t.Fatal(err)
				}
				vs = append(vs, v)
			}
			return vs
		}
		ref, cur := build(), build()
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
		ts := int64(0)
		for k := range 2500 {
			switch r := rng.IntN(100); {
			case r < 6:
				persist()
				w := cur[0].Watermark()
				cur = build()
				type load struct {
					view int
					ref  BucketRef
				}
				var loads []load
				for i, st := range stores {
					for r := range st {
						loads = append(loads, load{i, r})
					}
				}
				rng.Shuffle(len(loads), func(i, j int) { loads[i], loads[j] = loads[j], loads[i] })
				for i := range cur {
					cur[i].Advance(w)
				}
				for _, l := range loads {
					if err := cur[l.view].LoadBucket(l.ref.Key, l.ref.Bucket, stores[l.view][l.ref]); err != nil {
						t.Fatalf("seed %d: view %d load %v: %v", seed, l.view, l.ref, err)
					}
				}
				for i, v := range cur {
					for _, r := range v.DirtyBuckets() {
						if v.EncodeBucket(r.Key, r.Bucket) != nil {
							t.Fatalf("seed %d: a restore marked a live bucket of view %d dirty: %v", seed, i, r)
						}
						delete(stores[i], r)
					}
					v.ClearDirty()
				}
				if err := cur[0].check(); err != nil {
					t.Fatalf("seed %d after restore: %v", seed, err)
				}
			case r < 12:
				persist()
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
