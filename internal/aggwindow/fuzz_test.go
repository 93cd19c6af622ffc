package aggwindow

import (
	"math"
	"math/rand/v2"
	"testing"
)

// fuzzConfigs are the configurations FuzzDecodeKey loads under; the first
// input byte picks one.
var fuzzConfigs = func() []Config {
	var cs []Config
	for _, kind := range allKinds {
		for _, fn := range allFns {
			c := Config{Kind: kind, Fn: fn, DelayMs: 5, LatenessMs: 40, EvidenceLimit: 2, Fires: countAtLeast(2), AlertID: testAlertID}
			switch kind {
			case Tumbling:
				c.SizeMs = 30
			case Hopping:
				c.SizeMs, c.AdvanceMs = 30, 7
			case Session:
				c.GapMs = 12
			}
			cs = append(cs, c)
		}
	}
	return cs
}()

// FuzzDecodeKey: LoadKey on arbitrary bytes never panics; a state it
// accepts re-encodes to the same bytes and can be processed on and closed.
func FuzzDecodeKey(f *testing.F) {
	for i, cfg := range fuzzConfigs {
		for seed := range uint64(4) {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			p := mustPartition(f, cfg)
			evs := arrive(rng, genEvents(rng, 2, 40, 0, 200), 40)
			for j, e := range evs {
				p.Process(e, true)
				if j == len(evs)/2 {
					if b := p.EncodeKey("k0"); b != nil {
						f.Add(append([]byte{byte(i)}, b...))
					}
				}
			}
			if b := p.EncodeKey("k1"); b != nil {
				f.Add(append([]byte{byte(i)}, b...))
			}
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0, 1})
	f.Add([]byte{0, 1, 1, 1, 0})
	f.Add([]byte{14, 2, 3, 5, 1, 0, 0, 1, 0, 0})
	f.Add([]byte{3, 1, 1, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		cfg := fuzzConfigs[int(data[0])%len(fuzzConfigs)]
		p := mustPartition(t, cfg)
		if err := p.LoadKey("k0", data[1:]); err != nil {
			if p.Stats() != (Stats{}) {
				t.Fatal("failed load changed the partition")
			}
			return
		}
		if got := p.EncodeKey("k0"); string(got) != string(data[1:]) {
			t.Fatalf("accepted a non-canonical encoding:\n got %x\nwant %x", got, data[1:])
		}
		// Whatever was accepted must be safe to continue from.
		var hi int64
		for _, wn := range p.keys["k0"].wins {
			hi = max(hi, wn.start)
		}
		for i := range 6 {
			p.Process(Event{Key: "k0", EventID: string(rune('A' + i)), TS: hi - int64(i)*7, Value: float64(i)}, true)
		}
		revs := p.Advance(math.MaxInt64)
		for _, r := range revs {
			if r.Status != Closed {
				t.Fatalf("advance emitted %s", r.Status)
			}
		}
		if st := p.Stats(); st != (Stats{}) {
			t.Fatalf("state left after the final advance: %+v", st)
		}
	})
}
