package dedup

import (
	"math"
	"math/rand/v2"
	"testing"
)

// FuzzLoadKey: LoadKey on arbitrary bytes never panics, a rejected value
// leaves the set unchanged, an accepted one re-encodes to the same bytes
// (one encoding per state), and the set it builds is consistent and safe
// to continue from. Seeds: testdata/fuzz/FuzzLoadKey and the encodings of
// random runs below.
func FuzzLoadKey(f *testing.F) {
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 4))
		h := genHorizon(rng)
		s := mustNew(f, h)
		for _, o := range genOps(rng, h, 100) {
			o.apply(s)
		}
		for k := range s.st.keys {
			f.Add(s.EncodeKey(k))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := mustNew(t, 1000)
		s.Seen("other", "o", 5)
		s.ClearDirty()
		if err := s.LoadKey("k", data); err != nil {
			if s.Stats() != (Stats{1, 1}) || len(s.Dirty()) != 0 || s.st.keys["k"] != nil {
				t.Fatal("a failed LoadKey changed the set")
			}
			return
		}
		if got := s.EncodeKey("k"); string(got) != string(data) {
			t.Fatalf("accepted a non-canonical encoding:\n got %x\nwant %x", got, data)
		}
		if err := s.check(); err != nil {
			t.Fatal(err)
		}
		ks := s.st.keys["k"]
		first, last := ks.byTS[ks.head], ks.byTS[len(ks.byTS)-1]
		for _, e := range ks.byTS[ks.head:] {
			if !s.Seen("k", e.id, e.ts) {
				t.Fatalf("loaded id %q is not a duplicate", e.id)
			}
		}
		s.Seen("k", "new", last.ts)
		s.Advance(first.ts)
		s.Advance(last.ts)
		if err := s.check(); err != nil {
			t.Fatal(err)
		}
		if last.ts <= math.MaxInt64-1001 {
			s.Advance(last.ts + 1001) // everything of "k" expires
			if s.st.keys["k"] != nil {
				t.Fatalf("key still held at W %d: %v", s.Watermark(), s)
			}
		}
		if err := s.check(); err != nil {
			t.Fatal(err)
		}
	})
}
