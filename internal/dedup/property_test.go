package dedup

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestModel: over many random streams, Seen gives the brute-force model's
// verdict every time, the Set holds exactly the model's ids with
// ts >= W - H (boundedness), and its invariants hold after every call.
func TestModel(t *testing.T) {
	seeds := 600
	if testing.Short() {
		seeds = 100
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 1))
		h := genHorizon(rng)
		s, m := mustNew(t, h), newModel(h)
		ops := genOps(rng, h, 50+rng.IntN(400))
		for i, o := range ops {
			got, want := o.apply(s), o.applyModel(m)
			if got != want {
				t.Fatalf("seed %d H %d op %d %v: duplicate %v, model says %v", seed, h, i, o, got, want)
			}
			if err := s.check(); err != nil {
				t.Fatalf("seed %d H %d op %d %v: %v", seed, h, i, o, err)
			}
			live := m.live()
			n := 0
			for _, es := range live {
				n += len(es)
			}
			if st := s.Stats(); st != (Stats{Keys: len(live), IDs: n}) {
				t.Fatalf("seed %d op %d: Stats %+v, the model holds %d keys, %d ids within the horizon", seed, i, st, len(live), n)
			}
			if i%17 == 0 || i == len(ops)-1 {
				if got := contents(t, s); !reflect.DeepEqual(got, live) {
					t.Fatalf("seed %d op %d: remembers\n%v\nthe model\n%v", seed, i, got, live)
				}
			}
		}
	}
}

// TestRestore: a processor persists the dirty keys at random commit
// points, and at random moments crashes, rebuilds a fresh Set from the
// store (New, LoadKey per key, Advance to the committed watermark, in
// either order) and replays the log from the committed position. Every
// verdict and count equals that of a run that never crashed, and at every
// commit the store equals the encodings of all keys (Dirty missed nothing).
func TestRestore(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 80
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 2))
		h := genHorizon(rng)
		ops := genOps(rng, h, 50+rng.IntN(400))

		ref := mustNew(t, h)
		verdicts := make([]bool, len(ops))
		stats := make([]Stats, len(ops))
		for i, o := range ops {
			verdicts[i] = o.apply(ref)
			stats[i] = ref.Stats()
		}

		s := mustNew(t, h)
		store := make(map[string][]byte)
		pos, storeW := 0, NoWatermark
		crashes := 0
		for i := 0; i < len(ops); {
			if rng.IntN(6) == 0 { // commit before ops[i]
				for _, k := range s.Dirty() {
					if b := s.EncodeKey(k); b != nil {
						store[k] = b
					} else {
						delete(store, k)
					}
				}
				s.ClearDirty()
				if d := s.Dirty(); len(d) != 0 {
					t.Fatalf("seed %d: Dirty after ClearDirty: %v", seed, d)
				}
				full := make(map[string][]byte)
				for k := range s.st.keys {
					full[k] = s.EncodeKey(k)
				}
				if !maps.EqualFunc(store, full, func(a, b []byte) bool { return string(a) == string(b) }) {
					t.Fatalf("seed %d before op %d: the store misses changes Dirty did not report", seed, i)
				}
				pos, storeW = i, s.Watermark()
			}
			if crashes < 5 && rng.IntN(25) == 0 { // crash and restore
				crashes++
				s = mustNew(t, h)
				advanceFirst := rng.IntN(2) == 0
				if advanceFirst {
					s.Advance(storeW)
				}
				keys := slices.Collect(maps.Keys(store))
				rng.Shuffle(len(keys), func(a, b int) { keys[a], keys[b] = keys[b], keys[a] })
				for _, k := range keys {
					if err := s.LoadKey(k, store[k]); err != nil {
						t.Fatalf("seed %d: restore: %v", seed, err)
					}
				}
				if !advanceFirst {
					s.Advance(storeW)
				}
				if d := s.Dirty(); len(d) != 0 {
					t.Fatalf("seed %d: restored state is dirty: %v (nothing had expired at the committed W)", seed, d)
				}
				if err := s.check(); err != nil {
					t.Fatalf("seed %d: after restore: %v", seed, err)
				}
				i = pos
				continue
			}
			if got := ops[i].apply(s); got != verdicts[i] {
				t.Fatalf("seed %d op %d %v (crashes %d): duplicate %v, the uninterrupted run said %v", seed, i, ops[i], crashes, got, verdicts[i])
			}
			if st := s.Stats(); st != stats[i] {
				t.Fatalf("seed %d op %d: Stats %+v, the uninterrupted run %+v", seed, i, st, stats[i])
			}
			i++
		}
	}
}

// TestRestoreLate: loading a snapshot into a Set whose watermark is later
// than the snapshot's forgets what expired and marks those keys dirty, and
// gives the same state as the original advanced to that watermark.
func TestRestoreLate(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 3))
		h := genHorizon(rng)
		ops := genOps(rng, h, 200)
		orig := mustNew(t, h)
		for _, o := range ops {
			o.apply(orig)
		}
		w := ops[rng.IntN(len(ops))].ts
		if delta := rng.Int64N(min(h, 1<<40)*3/2 + 1); w <= math.MaxInt64-delta {
			w += delta
		}
		w = max(w, orig.Watermark())
		s := mustNew(t, h)
		s.Advance(w)
		for k := range orig.st.keys {
			if err := s.LoadKey(k, orig.EncodeKey(k)); err != nil {
				t.Fatal(err)
			}
		}
		orig.ClearDirty()
		orig.Advance(w)
		if err := s.check(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if got, want := contents(t, s), contents(t, orig); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: loaded at W %d\n%v\nadvanced\n%v", seed, w, got, want)
		}
		if got, want := s.Dirty(), orig.Dirty(); !slices.Equal(got, want) {
			t.Fatalf("seed %d: dirty after late load %v, after advance %v", seed, got, want)
		}
	}
}

// TestBounded: a long steady stream over many keys never holds an id with
// ts < W - H, keeps its queue at about one entry per key, gives memory back
// after a burst, and is empty once the watermark passes everything.
func TestBounded(t *testing.T) {
	const (
		keys = 300
		h    = 2_000
		d    = 50
	)
	s := mustNew(t, h)
	rng := rand.New(rand.NewPCG(7, 7))
	var ts int64
	for i := range 100_000 {
		ts = int64(i) / 3
		late := ts - rng.Int64N(40) // mostly in order, some late
		s.Seen(fmt.Sprintf("m%d", rng.IntN(keys)), fmt.Sprint(i), late)
		s.Advance(ts - d)
		if i%5000 == 4999 {
			if err := s.check(); err != nil {
				t.Fatal(err)
			}
			// ids have ts in [W - H, ts], at most 3 per ms.
			if st := s.Stats(); st.IDs > 3*(h+d+1) || st.Keys > keys {
				t.Fatalf("after %d records: %+v", i+1, st)
			}
			if len(s.st.due) > 2*keys {
				t.Fatalf("after %d records: %d queue entries for %d keys", i+1, len(s.st.due), keys)
			}
		}
	}
	// A burst on one key, then a trickle: its storage shrinks again.
	for i := range 10_000 {
		s.Seen("burst", fmt.Sprint("b", i), ts)
	}
	big := cap(s.st.keys["burst"].byTS)
	for j := range int64(3 * h / 10) {
		s.Seen("burst", fmt.Sprint("t", j), ts+10*j)
		s.Advance(ts + 10*j - d)
	}
	if ks := s.st.keys["burst"]; cap(ks.byTS) > big/8 || int(ks.peak) > 8*ks.live() {
		t.Fatalf("after the burst expired: cap %d (was %d), peak %d, live %d", cap(ks.byTS), big, ks.peak, ks.live())
	}
	s.ClearDirty()
	alive := slices.Sorted(maps.Keys(s.st.keys))
	s.Advance(1 << 62)
	if st := s.Stats(); st != (Stats{}) || len(s.st.due) != 0 {
		t.Fatalf("after W passed everything: %+v, %d queued", st, len(s.st.due))
	}
	dirty := s.Dirty()
	if !slices.Equal(dirty, alive) {
		t.Fatalf("dirty keys %v, want the deleted ones %v", dirty, alive)
	}
	for _, k := range dirty {
		if b := s.EncodeKey(k); b != nil {
			t.Fatalf("deleted key %q encodes as %x", k, b)
		}
	}
}
