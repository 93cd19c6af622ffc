package dedup

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestSharedViewsInChunks: the consumer runs the rules of a partition
// rule-major over chunks of records: view 0 takes every record of the
// chunk (its Seen where its filter passes, then its Advance), then view 1
// the same chunk, and so on. Within a chunk the views of one store are
// then at different positions in the stream (view 0 has remembered ids
// and moved its W past records view 3 has not seen yet). Each view must
// still behave exactly like a Set of its own fed record-major: the same
// verdict for every Seen, and at every chunk end the same contents (and
// a brute-force model's), the same encodings (EncodeKey, EncodeBucket,
// and its part of EncodeShared), and, when the views' watermarks agree
// again, the same Dirty and DirtyBuckets (and StoreDirtyBuckets their
// union). The store's invariants hold after every operation.
func TestSharedViewsInChunks(t *testing.T) {
	t.Run("hash", func(t *testing.T) { sharedViewsInChunks(t, math.MaxUint64) })
	// Two-bit hashes: most pairs collide, through coll and more.
	t.Run("colliding", func(t *testing.T) { sharedViewsInChunks(t, 3) })
}

// chunkStep is one operation of a chunked stream: an op and, for an
// Advance, the only view it is for (-1: every view).
type chunkStep struct {
	op
	solo int
}

// runStep applies s to view i as the consumer does for one rule: for a
// record, Seen if the view's filter passes (seen), then Advance to the
// watermark after the record (W = max(W, ts - d), as record); for an
// Advance, the view's Advance. It reports whether Seen said duplicate.
func runStep(i int, s chunkStep, d int64, seen func() bool, advance func(w int64)) bool {
	if s.advance {
		if s.solo < 0 || s.solo == i {
			advance(s.ts)
		}
		return false
	}
	dup := qualifies(i, s.op) && seen()
	advance(subSat(s.ts, d))
	return dup
}

func sharedViewsInChunks(t *testing.T, hashMask uint64) {
	seeds := 200
	if testing.Short() {
		seeds = 40
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 31))
		h := genHorizon(rng)
		d := int64(rng.IntN(50))
		n := 1 + rng.IntN(5)
		var bucket int64 // 0: persisted per key (New)
		if rng.IntN(3) != 0 {
			bucket = 1 + rng.Int64N(50)
		}
		// Some streams advance single views too (a rule with another
		// watermark strategy): the views' W then part beyond a chunk.
		solo := rng.IntN(3) == 0
		newSet := func() *Set {
			var s *Set
			var err error
			if bucket > 0 {
				s, err = NewBucketed(h, bucket)
			} else {
				s, err = New(h)
			}
			if err != nil {
				t.Fatal(err)
			}
			s.st.hashMask = hashMask
			return s
		}
		shared, own, models := []*Set{newSet()}, []*Set{newSet()}, []*model{newModel(h)}
		for len(shared) < n {
			v, err := shared[0].NewView()
			if err != nil {
				t.Fatal(err)
			}
			shared, own, models = append(shared, v), append(own, newSet()), append(models, newModel(h))
		}
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("rule-%d.v1", i)
		}
		ops := genOps(rng, h, 50+rng.IntN(300))
		steps := make([]chunkStep, len(ops))
		for k, o := range ops {
			steps[k] = chunkStep{op: o, solo: -1}
			if o.advance && solo && rng.IntN(3) == 0 {
				steps[k].solo = rng.IntN(n)
			}
		}
		c := chunkCheck{t: t, bucket: bucket, shared: shared, own: own, models: models, names: names}
		for start := 0; start < len(steps); {
			end := min(len(steps), start+1+rng.IntN(64))
			chunk := steps[start:end]
			// The references, record-major: every view takes a record
			// before the next record.
			want := make([][]bool, len(chunk))
			for j, s := range chunk {
				want[j] = make([]bool, n)
				for i := range n {
					w := runStep(i, s, d, func() bool { return own[i].Seen(s.key, s.id, s.ts) }, own[i].Advance)
					m := runStep(i, s, d, func() bool { return models[i].seen(s.key, s.id, s.ts) }, models[i].advance)
					if w != m {
						t.Fatalf("seed %d H %d op %d %v view %d: own set says duplicate %v, the model %v", seed, h, start+j, s.op, i, w, m)
					}
					want[j][i] = w
				}
			}
			// As consume: one Pair per record of the chunk, prepared
			// before the views run (mostly), passed to every view's
			// SeenPair; sometimes a view is given another record's Pair,
			// or none (Seen), which must change no verdict.
			pairs := make([]Pair, len(chunk))
			usePairs := rng.IntN(4) != 0
			for j, s := range chunk {
				if usePairs && !s.advance && rng.IntN(4) != 0 {
					shared[rng.IntN(n)].PreparePair(&pairs[j], s.key, s.id)
				}
			}
			// The shared views, rule-major: view i takes the whole chunk
			// before view i+1 starts it.
			for i, v := range shared {
				for j, s := range chunk {
					seen := func() bool { return v.Seen(s.key, s.id, s.ts) }
					if usePairs {
						p := &pairs[j]
						switch rng.IntN(8) {
						case 0:
							p = &pairs[rng.IntN(len(pairs))]
						case 1:
							p = nil
						}
						if p != nil {
							seen = func() bool { return v.SeenPair(p, s.key, s.id, s.ts) }
						}
					}
					got := runStep(i, s, d, seen, v.Advance)
					if got != want[j][i] {
						t.Fatalf("seed %d H %d n %d d %d bucket %d chunk [%d,%d) op %d %v view %d (W %d, views' W %v): duplicate %v, own set %v",
							seed, h, n, d, bucket, start, end, start+j, s.op, i, v.Watermark(), watermarks(shared), got, want[j][i])
					}
					if err := shared[0].check(); err != nil {
						t.Fatalf("seed %d H %d chunk [%d,%d) op %d %v view %d: %v", seed, h, start, end, start+j, s.op, i, err)
					}
				}
			}
			c.at = fmt.Sprintf("seed %d H %d n %d bucket %d chunk [%d,%d)", seed, h, n, bucket, start, end)
			c.compare()
			// A commit at some chunk ends: what Dirty reported is
			// persisted and cleared, on both sides. Only where the views'
			// W agree: while one is ahead, an id that expired for it is
			// still held for a slower one, and its view marks it dirty
			// only once the store drops it (doc.go, Costs), later than a
			// Set of its own would.
			if c.aligned() {
				switch rng.IntN(4) {
				case 0:
					for i := range n {
						shared[i].ClearDirty()
						own[i].ClearDirty()
					}
				case 1:
					for i := range n {
						if rng.IntN(2) == 0 {
							shared[i].ClearDirty()
							own[i].ClearDirty()
						}
					}
				}
			}
			start = end
		}
	}
}

func watermarks(views []*Set) []int64 {
	ws := make([]int64, len(views))
	for i, v := range views {
		ws[i] = v.Watermark()
	}
	return ws
}

// chunkCheck compares, at a chunk end, the shared views with their own
// Sets and models.
type chunkCheck struct {
	t      *testing.T
	bucket int64
	shared []*Set
	own    []*Set
	models []*model
	names  []string
	at     string // the chunk, for messages
}

// aligned reports whether every view has the same W.
func (c *chunkCheck) aligned() bool {
	for _, v := range c.shared {
		if v.Watermark() != c.shared[0].Watermark() {
			return false
		}
	}
	return true
}

func (c *chunkCheck) compare() {
	t := c.t
	t.Helper()
	slowest := c.shared[0].st.wm
	for i, v := range c.shared {
		s, m := c.own[i], c.models[i]
		if v.Watermark() != s.Watermark() || v.Watermark() != m.wm {
			t.Fatalf("%s view %d: W %d, own set %d, model %d", c.at, i, v.Watermark(), s.Watermark(), m.wm)
		}
		live := m.live()
		ids := 0
		for _, es := range live {
			ids += len(es)
		}
		if got := contents(t, v); !reflect.DeepEqual(got, live) {
			t.Fatalf("%s view %d: remembers\n%v\nthe model\n%v", c.at, i, got, live)
		}
		if got := contents(t, s); !reflect.DeepEqual(got, live) {
			t.Fatalf("%s view %d: own set remembers\n%v\nthe model\n%v", c.at, i, got, live)
		}
		// Stats count the ids held: with buckets, also those that
		// expired in a bucket that has not expired whole (keepThr).
		hk, hi := m.held(c.bucket)
		if got := s.Stats(); got != (Stats{Keys: hk, IDs: hi}) {
			t.Fatalf("%s view %d: own set Stats %+v, the model holds %d keys, %d ids", c.at, i, got, hk, hi)
		}
		// A view's count may include ids that expired for it while a
		// slower view keeps them: exact when it is the slowest.
		if got := v.Stats().IDs; got != hi && v.Watermark() == slowest {
			t.Fatalf("%s view %d (the slowest): %d ids, the model holds %d", c.at, i, got, hi)
		}
		for _, keys := range []map[string]*keyState{v.st.keys, s.st.keys} {
			for key := range keys {
				if got, want := v.EncodeKey(key), s.EncodeKey(key); string(got) != string(want) {
					t.Fatalf("%s view %d: key %q %x, own set %x", c.at, i, key, got, want)
				}
			}
		}
	}
	aligned := c.aligned()
	if aligned {
		for i, v := range c.shared {
			s := c.own[i]
			if got, want := v.Dirty(), s.Dirty(); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s view %d: dirty keys %q, own set %q", c.at, i, got, want)
			}
		}
	}
	if c.bucket == 0 {
		return
	}
	refs := c.bucketRefs()
	for i, v := range c.shared {
		s := c.own[i]
		if aligned {
			if got, want := v.DirtyBuckets(), s.DirtyBuckets(); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s view %d: dirty buckets %v, own set %v", c.at, i, got, want)
			}
		}
		for _, r := range refs {
			if got, want := v.EncodeBucket(r.Key, r.Bucket), s.EncodeBucket(r.Key, r.Bucket); string(got) != string(want) {
				t.Fatalf("%s view %d: bucket %v %x, own set %x", c.at, i, r, got, want)
			}
		}
	}
	if aligned {
		union := map[BucketRef]struct{}{}
		for _, s := range c.own {
			for _, r := range s.DirtyBuckets() {
				union[r] = struct{}{}
			}
		}
		want := make([]BucketRef, 0, len(union))
		for r := range union {
			want = append(want, r)
		}
		slices.SortFunc(want, cmpRef)
		if got := c.shared[0].StoreDirtyBuckets(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: store dirty buckets %v, the own sets' %v", c.at, got, want)
		}
	}
	// The shared encoding of a bucket, decoded, is every view's
	// EncodeBucket: each view names exactly the ids its own Set would
	// write.
	for _, r := range refs {
		val := c.shared[0].EncodeShared(r.Key, r.Bucket, c.names)
		per := make([][]entry, len(c.shared))
		if val != nil {
			table, es, masks, err := decodeShared(val)
			if err != nil {
				t.Fatalf("%s: EncodeShared(%v) = %x does not decode: %v", c.at, r, val, err)
			}
			for k, name := range table {
				i := slices.Index(c.names, name)
				if i < 0 {
					t.Fatalf("%s: EncodeShared(%v) names %q", c.at, r, name)
				}
				for j, e := range es {
					if masks[j]&(1<<k) != 0 {
						per[i] = append(per[i], e)
					}
				}
			}
		}
		for i, s := range c.own {
			var want []entry
			if enc := s.EncodeBucket(r.Key, r.Bucket); enc != nil {
				var err error
				if want, err = decodeKey(enc); err != nil {
					t.Fatalf("%s view %d: own set's bucket %v does not decode: %v", c.at, i, r, err)
				}
			}
			if !reflect.DeepEqual(per[i], want) {
				t.Fatalf("%s view %d: bucket %v shared as %v (%x), own set %v", c.at, i, r, per[i], val, want)
			}
		}
	}
}

// bucketRefs returns, sorted, every (key, bucket) that a shared view or an
// own Set holds an entry in or lists as dirty.
func (c *chunkCheck) bucketRefs() []BucketRef {
	set := map[BucketRef]struct{}{}
	add := func(s *Set) {
		for k, ks := range s.st.keys {
			for _, e := range ks.byTS[ks.head:] {
				set[BucketRef{k, s.BucketOf(e.ts)}] = struct{}{}
			}
		}
		for _, r := range s.DirtyBuckets() {
			set[r] = struct{}{}
		}
	}
	for i := range c.shared {
		add(c.shared[i])
		add(c.own[i])
	}
	refs := make([]BucketRef, 0, len(set))
	for r := range set {
		refs = append(refs, r)
	}
	slices.SortFunc(refs, cmpRef)
	return refs
}
