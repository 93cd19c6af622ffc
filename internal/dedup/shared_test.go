package dedup

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestSharedPersistenceRestore: views whose ids are persisted together
// (StoreDirtyBuckets, EncodeShared) and restored from those entries alone
// (LoadShared, entries in a random order) give every verdict that views
// never restored give, also when a restore drops a view (a rule no longer
// configured) or adds one (a rule added, starting empty); the entries of a
// dropped view are rewritten without it.
func TestSharedPersistenceRestore(t *testing.T) {
	t.Run("hash", func(t *testing.T) { sharedPersistenceRestore(t, math.MaxUint64) })
	t.Run("colliding", func(t *testing.T) { sharedPersistenceRestore(t, 3) })
}

func sharedPersistenceRestore(t *testing.T, hashMask uint64) {
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 21))
		const h, b, d = 1000, 100, 20
		n := 2 + rng.IntN(4)
		// ref[i]: an uninterrupted Set of its own per view (shared views
		// give the verdicts of own Sets: TestSharedViewsAsOwnSets).
		ref := make([]*Set, n)
		for i := range ref {
			ref[i] = mustNew(t, h)
		}
		names := make([]string, n)
		next := n
		for i := range names {
			names[i] = fmt.Sprintf("rule-%d.v1", i)
		}
		newViews := func() []*Set {
			vs := make([]*Set, n)
			for i := range vs {
				if i == 0 {
					v, err := NewBucketed(h, b)
					if err != nil {
						t.Fatal(err)
					}
					v.st.hashMask = hashMask
					vs[i] = v
					continue
				}
				v, err := vs[0].NewView()
				if err != nil {
					t.Fatal(err)
				}
				vs[i] = v
			}
			return vs
		}
		cur := newViews()
		store := map[BucketRef][]byte{}
		persist := func() {
			for _, r := range cur[0].StoreDirtyBuckets() {
				if val := cur[0].EncodeShared(r.Key, r.Bucket, names); val != nil {
					store[r] = val
				} else {
					delete(store, r)
				}
			}
			for _, v := range cur {
				v.ClearDirty()
			}
		}
		restore := func() {
			ws := make([]int64, n)
			for i, v := range cur {
				ws[i] = v.Watermark()
			}
			if rng.IntN(3) == 0 {
				// View i's rule is replaced by another one, which starts
				// with no ids: the entries name the old one, whose ids
				// must not come back.
				i := rng.IntN(n)
				names[i] = fmt.Sprintf("rule-%d.v1", next)
				next++
				ref[i], ws[i] = mustNew(t, h), NoWatermark
			}
			cur = newViews()
			byName := map[string]*Set{}
			for i, v := range cur {
				v.Advance(ws[i]) // the rules' meta entries load first
				byName[names[i]] = v
			}
			refs := slices.Collect(func(yield func(BucketRef) bool) {
				for r := range store {
					if !yield(r) {
						return
					}
				}
			})
			slices.SortFunc(refs, cmpBucketRef)
			rng.Shuffle(len(refs), func(x, y int) { refs[x], refs[y] = refs[y], refs[x] })
			for _, r := range refs {
				if err := cur[0].LoadShared(r.Key, r.Bucket, store[r], byName); err != nil {
					t.Fatalf("seed %d: load %v: %v", seed, r, err)
				}
			}
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
				checkSharedPersisted(t, seed, cur, names, store)
			case r < 13:
				i, w := rng.IntN(n), ts-int64(rng.IntN(200))
				cur[i].Advance(w)
				ref[i].Advance(w)
			default:
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

// checkSharedPersisted: right after a commit, when every view has the
// same watermark, the persisted entries are exactly the shared encodings
// of what the views remember (no stale bucket, no missing one, no view
// name left of a rule that is gone). (While views' watermarks differ, an
// entry may still name ids that expired for a faster view: the store
// keeps them for the slower one, as with buckets of its own
// (checkPersisted), and a load forgets them.)
func checkSharedPersisted(t *testing.T, seed uint64, views []*Set, names []string, store map[BucketRef][]byte) {
	t.Helper()
	for _, v := range views {
		if v.Watermark() != views[0].Watermark() {
			return
		}
	}
	live := map[BucketRef]bool{}
	for _, v := range views {
		thr := subSat(v.wm, v.st.h)
		for k, ks := range v.st.keys {
			for _, e := range ks.byTS[ks.head:] {
				if e.mask&v.bit != 0 && e.ts >= thr {
					live[BucketRef{k, v.BucketOf(e.ts)}] = true
				}
			}
		}
	}
	for r, val := range store {
		if got := views[0].EncodeShared(r.Key, r.Bucket, names); !bytes.Equal(got, val) {
			t.Fatalf("seed %d: bucket %v persisted as %x, holds %x", seed, r, val, got)
		}
	}
	for r := range live {
		if store[r] == nil {
			t.Fatalf("seed %d: bucket %v not persisted", seed, r)
		}
	}
}

// TestSharedEncodingExample pins the shared bucket format of doc.go: ids
// "a" at ts 1000 (views x and y) and "b" at 1003 (view y alone).
func TestSharedEncodingExample(t *testing.T) {
	x, err := NewBucketed(10_000, 5000)
	if err != nil {
		t.Fatal(err)
	}
	y, _ := x.NewView()
	x.Seen("k", "a", 1000)
	y.Seen("k", "a", 1000)
	y.Seen("k", "b", 1003)
	if got := x.StoreDirtyBuckets(); !reflect.DeepEqual(got, []BucketRef{{"k", 0}}) {
		t.Fatalf("StoreDirtyBuckets = %v", got)
	}
	want := []byte{
		0x02,                 // version 2
		0x02,                 // V = 2 names, sorted
		0x01, 'x', 0x01, 'y', // "x", "y"
		0x02,       // M = 2
		0xd0, 0x0f, // varint 1000
		0x01, 'a', 0x03, // "a", views {x, y}
		0x03,            // delta 3
		0x01, 'b', 0x02, // "b", views {y}
	}
	// The table is sorted by name, whatever the views' order.
	if got := x.EncodeShared("k", 0, []string{"y", "x"}); bytes.Equal(got, want) {
		t.Fatalf("names given as [y x] encoded as if [x y]")
	}
	if got := x.EncodeShared("k", 0, []string{"x", "y"}); !bytes.Equal(got, want) {
		t.Fatalf("EncodeShared = %x, want %x", got, want)
	}
	if got := x.EncodeShared("k", 1, []string{"x", "y"}); got != nil {
		t.Fatalf("empty bucket encoded as %x", got)
	}
	// Loaded by a configuration that has y alone: y gets both ids, the
	// bucket is marked for a rewrite without x.
	y2, _ := NewBucketed(10_000, 5000)
	if err := y2.LoadShared("k", 0, want, map[string]*Set{"y": y2}); err != nil {
		t.Fatal(err)
	}
	if !y2.Seen("k", "a", 1000) || !y2.Seen("k", "b", 1003) {
		t.Fatal("y's ids not loaded")
	}
	if got := y2.EncodeShared("k", 0, []string{"y"}); !bytes.Equal(got, []byte{0x02, 0x01, 0x01, 'y', 0x02, 0xd0, 0x0f, 0x01, 'a', 0x01, 0x03, 0x01, 'b', 0x01}) {
		t.Fatalf("rewritten as %x", got)
	}
	if got := y2.StoreDirtyBuckets(); !reflect.DeepEqual(got, []BucketRef{{"k", 0}}) {
		t.Fatalf("a bucket naming a view that is gone is not rewritten: dirty %v", got)
	}
}

// TestLoadSharedRejects: malformed shared values are refused with
// ErrCorrupt (or ErrUnknownVersion), and leave the set unchanged.
func TestLoadSharedRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"version 1", []byte{0x01, 0x01, 0xd0, 0x0f, 0x01, 'a'}},
		{"no names", []byte{0x02, 0x00}},
		{"names unsorted", []byte{0x02, 0x02, 0x01, 'y', 0x01, 'x', 0x01, 0xd0, 0x0f, 0x01, 'a', 0x03}},
		{"empty name", []byte{0x02, 0x01, 0x00, 0x01, 0xd0, 0x0f, 0x01, 'a', 0x01}},
		{"no ids", []byte{0x02, 0x01, 0x01, 'x', 0x00}},
		{"empty mask", []byte{0x02, 0x01, 0x01, 'x', 0x01, 0xd0, 0x0f, 0x01, 'a', 0x00}},
		{"mask beyond the names", []byte{0x02, 0x01, 0x01, 'x', 0x01, 0xd0, 0x0f, 0x01, 'a', 0x02}},
		{"unused name", []byte{0x02, 0x02, 0x01, 'x', 0x01, 'y', 0x01, 0xd0, 0x0f, 0x01, 'a', 0x01}},
		{"out of order", []byte{0x02, 0x01, 0x01, 'x', 0x02, 0xd0, 0x0f, 0x01, 'b', 0x01, 0x00, 0x01, 'a', 0x01}},
		{"id twice for one view", []byte{0x02, 0x01, 0x01, 'x', 0x02, 0xd0, 0x0f, 0x01, 'a', 0x01, 0x01, 0x01, 'a', 0x01}},
		{"trailing byte", []byte{0x02, 0x01, 0x01, 'x', 0x01, 0xd0, 0x0f, 0x01, 'a', 0x01, 0x00}},
		{"outside the bucket", []byte{0x02, 0x01, 0x01, 'x', 0x01, 0x90, 0x4e, 0x01, 'a', 0x01}}, // ts 5000: bucket 1
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := NewBucketed(10_000, 5000)
			s.Seen("other", "o", 5)
			s.ClearDirty()
			err := s.LoadShared("k", 0, c.data, map[string]*Set{"x": s})
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownVersion) {
				t.Fatalf("LoadShared = %v, want ErrCorrupt or ErrUnknownVersion", err)
			}
			if s.Stats() != (Stats{1, 1}) || len(s.StoreDirtyBuckets()) != 0 {
				t.Fatal("a failed LoadShared changed the set")
			}
		})
	}
	// One id remembered by two views with different ts is two entries.
	s, _ := NewBucketed(10_000, 5000)
	v, _ := s.NewView()
	if err := s.LoadShared("k", 0, []byte{0x02, 0x02, 0x01, 'x', 0x01, 'y', 0x02, 0xd0, 0x0f, 0x01, 'a', 0x01, 0x01, 0x01, 'a', 0x02}, map[string]*Set{"x": s, "y": v}); err != nil {
		t.Fatal(err)
	}
	if !s.Seen("k", "a", 1000) || !v.Seen("k", "a", 1001) {
		t.Fatal("the two entries of one id not loaded")
	}
}

// FuzzLoadShared: LoadShared on arbitrary bytes never panics, a rejected
// value leaves the set unchanged, and an accepted one re-encodes to the
// same bytes (one encoding per state) when every view it names is loaded.
func FuzzLoadShared(f *testing.F) {
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 22))
		x, _ := NewBucketed(100_000, 100_000)
		y, _ := x.NewView()
		for _, o := range genOps(rng, 100_000, 100) {
			if o.ts < 0 || o.ts >= 100_000 {
				continue
			}
			if rng.IntN(3) != 0 {
				x.Seen(o.key, o.id, o.ts)
			}
			if rng.IntN(3) != 0 {
				y.Seen(o.key, o.id, o.ts)
			}
		}
		for _, r := range x.StoreDirtyBuckets() {
			if v := x.EncodeShared(r.Key, r.Bucket, []string{"x", "y"}); v != nil && r.Key == "a" && r.Bucket == 0 {
				f.Add(v)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		x, _ := NewBucketed(math.MaxInt64/4, math.MaxInt64/4)
		y, _ := x.NewView()
		x.Seen("other", "o", 5)
		x.ClearDirty()
		if err := x.LoadShared("a", 0, data, map[string]*Set{"x": x, "y": y}); err != nil {
			if x.Stats() != (Stats{1, 1}) || y.Stats().IDs != 0 || len(x.StoreDirtyBuckets()) != 0 {
				t.Fatal("a failed LoadShared changed the set")
			}
			return
		}
		if err := x.check(); err != nil {
			t.Fatal(err)
		}
		table, _, _, _ := decodeShared(data)
		if slices.Equal(table, []string{"x", "y"}) || slices.Equal(table, []string{"x"}) || slices.Equal(table, []string{"y"}) {
			if got := x.EncodeShared("a", 0, []string{"x", "y"}); !bytes.Equal(got, data) {
				t.Fatalf("accepted a non-canonical encoding:\n got %x\nwant %x", got, data)
			}
		}
	})
}
