package dedup

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// check verifies the table's invariants: a power-of-two size of at least
// minIndex (or none), n counting the occupied slots, at most 3/4 of them
// occupied, and every key once, in its own probe sequence (find reaches
// it from its home slot without crossing an empty one).
func (x *hashIndex) check() error {
	if x.slots == nil {
		if x.n != 0 {
			return fmt.Errorf("index: no table but %d keys", x.n)
		}
		return nil
	}
	size := len(x.slots)
	if size < minIndex || size&(size-1) != 0 {
		return fmt.Errorf("index: %d slots", size)
	}
	n := 0
	for j, s := range x.slots {
		if s.key == 0 {
			continue
		}
		n++
		if i, ok := x.find(s.key); !ok || i != j {
			return fmt.Errorf("index: key %#x at slot %d, found at %d (%v)", s.key, j, i, ok)
		}
	}
	if n != x.n || 4*n > 3*size {
		return fmt.Errorf("index: %d occupied slots of %d, counted %d", n, size, x.n)
	}
	return nil
}

// drawHash returns a generator of hashes for seed: small ranges (long
// probe runs that wrap around the table, hashes 0 and 1, which share a
// slot key) and all 64 bits.
func drawHash(rng *rand.Rand, seed uint64) func() uint64 {
	switch seed % 4 {
	case 0:
		return func() uint64 { return rng.Uint64N(8) } // 0 and 1 often
	case 1:
		return func() uint64 { return rng.Uint64N(64) << (seed % 5) } // clustered homes
	case 2:
		return func() uint64 { return rng.Uint64N(5000) }
	default:
		return rng.Uint64
	}
}

// TestHashIndexModel: random adds and deletes, at a fixed floor, give a Go
// map's answers after every operation, and the table keeps its
// invariants.
func TestHashIndexModel(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 14))
		draw := drawHash(rng, seed)
		x := hashIndex{floor: NoWatermark}
		model := map[uint64]int64{} // by slotKey, as the table keys them
		var held []uint64           // hashes set, for deletes of held ones
		for op := range 3000 {
			h := draw()
			if len(held) > 0 && rng.IntN(5) < 2 {
				h = held[rng.IntN(len(held))]
			}
			if rng.IntN(2) == 0 {
				ts := rng.Int64()
				_, had := model[slotKey(h)]
				if x.add(h, ts) == had {
					t.Fatalf("seed %d op %d: add(%d) with the key held %v", seed, op, h, had)
				}
				if !had {
					model[slotKey(h)] = ts
				}
				held = append(held, h)
			} else {
				x.del(h)
				delete(model, slotKey(h))
			}
			if x.n != len(model) || x.countLive() != len(model) {
				t.Fatalf("seed %d op %d: %d keys (%d live), the model holds %d", seed, op, x.n, x.countLive(), len(model))
			}
			if err := x.check(); err != nil {
				t.Fatalf("seed %d op %d: %v", seed, op, err)
			}
			if op%7 == 0 {
				checkIndexModel(t, fmt.Sprintf("seed %d op %d", seed, op), &x, model, held)
			}
		}
	}
}

// checkIndexModel compares every answer of x with the model's: the keys
// of model with ts >= x.floor are held, at their ts, and no other of held.
func checkIndexModel(t *testing.T, at string, x *hashIndex, model map[uint64]int64, held []uint64) {
	t.Helper()
	for k, want := range model {
		got, ok := x.get(k)
		if live := want >= x.floor; ok != live || (ok && got != want) {
			t.Fatalf("%s: key %d: %d %v, the model %d (floor %d)", at, k, got, ok, want, x.floor)
		}
	}
	for _, h := range held {
		ts, had := model[slotKey(h)]
		want := had && ts >= x.floor
		if _, ok := x.get(h); ok != want {
			t.Fatalf("%s: hash %d held %v, the model %v", at, h, ok, want)
		}
	}
}

// TestHashIndexLazy: with a floor that rises (and, rarely, falls back, as
// when a store gains a view), the store's way of using the table — expire
// for every live key that the floor passes, del of live keys, add of ts
// at or above the floor — gives the model's answers: a key whose ts is
// below the floor is not held, add reuses stale slots (its own or
// another's), rebuilds drop them, and the table shrinks as keys go.
func TestHashIndexLazy(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 15))
		draw := drawHash(rng, seed)
		x := hashIndex{floor: NoWatermark}
		model := map[uint64]int64{} // live keys only, by slotKey
		var held []uint64
		floor := int64(0)
		rebuilds, reused := 0, 0
		for op := range 4000 {
			at := fmt.Sprintf("seed %d op %d", seed, op)
			switch r := rng.IntN(100); {
			case r < 55: // add at or above the floor
				h := draw()
				if len(held) > 0 && rng.IntN(4) == 0 {
					h = held[rng.IntN(len(held))]
				}
				ts := floor + rng.Int64N(200)
				_, had := model[slotKey(h)]
				size, n := len(x.slots), x.n
				if x.add(h, ts) == had {
					t.Fatalf("%s: add(%d) with the key held %v", at, h, had)
				}
				if !had {
					model[slotKey(h)] = ts
					if len(x.slots) == size && x.n == n {
						reused++
					}
				}
				held = append(held, h)
			case r < 65: // del of a live key
				if len(held) > 0 {
					h := held[rng.IntN(len(held))]
					if _, ok := model[slotKey(h)]; ok {
						x.del(h)
						delete(model, slotKey(h))
					}
				}
			case r < 99: // the floor rises: what it passes expires
				if seed%3 == 0 && op > 2000 {
					floor += 200 // nothing new below: the table empties
				} else {
					floor += rng.Int64N(20)
				}
				if op%500 == 499 {
					floor = NoWatermark + rng.Int64N(10) // a new view: the floor falls
				}
				size := len(x.slots)
				x.setFloor(floor)
				for k, ts := range model {
					if ts < floor {
						delete(model, k)
						x.expire()
					}
				}
				x.shrink()
				if len(x.slots) != size {
					rebuilds++
				}
				if x.n-x.gone != len(model) {
					t.Fatalf("%s: %d slots less %d gone, the model holds %d", at, x.n, x.gone, len(model))
				}
				if len(x.slots) > minIndex && 8*len(model) < len(x.slots) {
					t.Fatalf("%s: %d live keys in %d slots after shrink", at, len(model), len(x.slots))
				}
				if floor < 0 {
					floor = 0
					x.setFloor(floor)
					for k, ts := range model {
						if ts < floor {
							delete(model, k)
							x.expire()
						}
					}
				}
			default:
				x.rebuild()
				if x.gone != 0 || x.n != len(model) || 2*x.n >= len(x.slots) || (len(x.slots) > minIndex && 8*x.n < len(x.slots)) {
					t.Fatalf("%s: rebuilt to %d slots of %d (%d gone), the model holds %d", at, x.n, len(x.slots), x.gone, len(model))
				}
			}
			if x.countLive() != len(model) {
				t.Fatalf("%s: %d live slots, the model holds %d", at, x.countLive(), len(model))
			}
			if err := x.check(); err != nil {
				t.Fatalf("%s: %v", at, err)
			}
			if op%5 == 0 {
				checkIndexModel(t, at, &x, model, held)
			}
		}
		if seed%4 == 3 && (reused == 0 || rebuilds == 0) {
			t.Fatalf("seed %d: %d adds reused a stale slot, %d rebuilds: the test misses them", seed, reused, rebuilds)
		}
	}
}

// TestLazyIndexViews: a long stream through two views of one store, the
// second slower (its W further behind) and taking only some records, with
// redeliveries of ids that expired for the faster view but not the
// slower: every verdict is each view's model's, the store keeps its
// invariants (check: the index's live slots are exactly the held pairs,
// at the floor W - H of the slowest view), entries expire lazily (their
// slots go stale) or, when only the faster view remembered them and it
// forgets them, at once, and the table stays at the size of what is held
// while many times as many ids go through it (its stale slots are reused
// and rebuilt away).
func TestLazyIndexViews(t *testing.T) {
	for _, mask := range []uint64{math.MaxUint64, 1<<12 - 1, 3} {
		t.Run(fmt.Sprintf("mask=%#x", mask), func(t *testing.T) { lazyIndexViews(t, mask) })
	}
}

func lazyIndexViews(t *testing.T, hashMask uint64) {
	const (
		h     = 1000
		n     = 30_000
		slowD = 400 // the slower view's W is this far behind ts, the faster's 10
	)
	a := mustNew(t, h)
	a.st.hashMask = hashMask
	b, err := a.NewView()
	if err != nil {
		t.Fatal(err)
	}
	ma, mb := newModel(h), newModel(h)
	rng := rand.New(rand.NewPCG(uint64(hashMask), 16))
	lazy, maxSlots := 0, 0
	for i := range int64(n) {
		ts, id := i, fmt.Sprintf("e%d", i%4000)
		if i%5 == 0 && i > 2000 {
			back := rng.Int64N(1400) // within H for b, not always for a
			ts, id = i-back, fmt.Sprintf("e%d", (i-back)%4000)
		}
		key := fmt.Sprintf("k%d", ts%7)
		if got, want := a.Seen(key, id, ts), ma.seen(key, id, ts); got != want {
			t.Fatalf("record %d: Seen(%q, %q, %d) for the faster view: %v, the model %v", i, key, id, ts, got, want)
		}
		a.Advance(i - 10)
		ma.advance(i - 10)
		if ts%3 != 0 {
			if got, want := b.Seen(key, id, ts), mb.seen(key, id, ts); got != want {
				t.Fatalf("record %d: Seen(%q, %q, %d) for the slower view: %v, the model %v", i, key, id, ts, got, want)
			}
		}
		gone := a.st.idx.gone
		b.Advance(i - slowD)
		mb.advance(i - slowD)
		if a.st.idx.gone > gone {
			lazy++
		}
		maxSlots = max(maxSlots, len(a.st.idx.slots))
		if i%499 == 0 {
			if err := a.check(); err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
		}
	}
	// About H + slowD ids are held (a pair per slot, or in coll): a table
	// of 4096 slots holds them at most half live, and 30,000 went through.
	// With 2-bit hashes almost every pair is in coll, which expires at
	// once.
	wantLazy := n / 2
	if hashMask == 3 {
		wantLazy = 1
	}
	if lazy < wantLazy || maxSlots > 4096 {
		t.Fatalf("%d of %d records expired an entry lazily, the table reached %d slots", lazy, n, maxSlots)
	}
}
