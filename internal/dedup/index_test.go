package dedup

import (
	"math/rand/v2"
	"testing"
)

// TestHashIndexModel: random adds and deletes, of hashes drawn from small
// ranges (long probe runs that wrap around the table, hashes 0 and 1,
// which share a slot key) and from all 64 bits, give a Go map's answers
// after every operation, and the table grows and shrinks within its bounds.
func TestHashIndexModel(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 14))
		var draw func() uint64
		switch seed % 4 {
		case 0:
			draw = func() uint64 { return rng.Uint64N(8) } // 0 and 1 often
		case 1:
			draw = func() uint64 { return rng.Uint64N(64) << (seed % 5) } // clustered homes
		case 2:
			draw = func() uint64 { return rng.Uint64N(5000) }
		default:
			draw = rng.Uint64
		}
		var x hashIndex
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
			if x.len() != len(model) {
				t.Fatalf("seed %d op %d: %d keys, the model holds %d", seed, op, x.len(), len(model))
			}
			if n := len(x.slots); n > 0 && (n < minIndex || n&(n-1) != 0 || 4*x.n > 3*n || (n > minIndex && 8*x.n < n)) {
				t.Fatalf("seed %d op %d: %d keys in %d slots", seed, op, x.n, n)
			}
			if op%7 == 0 {
				for k, want := range model {
					if got, ok := x.get(k); !ok || got != want {
						t.Fatalf("seed %d op %d: key %d: %d %v, the model %d", seed, op, k, got, ok, want)
					}
				}
				for _, h := range held {
					_, want := model[slotKey(h)]
					if _, ok := x.get(h); ok != want {
						t.Fatalf("seed %d op %d: hash %d held %v, the model %v", seed, op, h, ok, want)
					}
				}
			}
		}
	}
}
