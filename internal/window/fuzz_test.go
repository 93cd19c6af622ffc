package window

import (
	"math/rand/v2"
	"testing"
)

// fuzzConfig is the configuration FuzzDecodeKey loads under.
var fuzzConfig = Config{Threshold: 3, SizeMs: 60, DelayMs: 5, LatenessMs: 40, DedupHorizonMs: 200, AlertID: testAlertID}

// FuzzDecodeKey: LoadKey on arbitrary bytes never panics, and a state it
// accepts re-encodes to the same bytes and can be processed on.
func FuzzDecodeKey(f *testing.F) {
	// Seeds: real encodings from random runs, and a few hand-made ones.
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 9))
		cfg := genConfigN(rng, 3)
		p := mustPartition(f, cfg)
		for _, r := range arrive(rng, genEvents(rng, cfg, 2, 30), cfg.DelayMs) {
			p.Process(r.ev, r.q)
		}
		for _, k := range []string{"m1", "m2"} {
			if b := p.EncodeKey(k); b != nil {
				f.Add(b)
			}
		}
	}
	// Long incidents under the fuzz configuration: open incidents with
	// pruned events and partly or wholly pruned evidence.
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 10))
		p := mustPartition(f, fuzzConfig)
		for i, r := range arrive(rng, genDense(rng, fuzzConfig, 1, 60+rng.IntN(200)), fuzzConfig.DelayMs) {
			p.Process(r.ev, r.q)
			if i%7 == 0 {
				p.Sweep()
			}
		}
		if b := p.EncodeKey("m1"); b != nil {
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{1, 0, 0, 0})
	f.Add([]byte{1, 0, 1, 0, 1, 'a', 0})
	f.Add([]byte{2, 0, 0, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})

	f.Fuzz(func(t *testing.T, data []byte) {
		p := mustPartition(t, fuzzConfig)
		if err := p.LoadKey("m1", data); err != nil {
			if p.Stats() != (Stats{}) {
				t.Fatal("failed load changed the partition")
			}
			return
		}
		if got := p.EncodeKey("m1"); string(got) != string(data) {
			t.Fatalf("accepted a non-canonical encoding:\n got %x\nwant %x", got, data)
		}
		// Whatever was accepted must be safe to continue from.
		var hi int64
		for _, e := range p.keys["m1"].events {
			hi = max(hi, e.TS)
		}
		for i := range 6 {
			p.Process(Event{Key: "m1", EventID: string(rune('A' + i)), TS: hi - int64(i)*7}, true)
		}
		p.Process(Event{Key: "m1", EventID: "z", TS: hi + 10_000}, false)
		p.Sweep()
	})
}
