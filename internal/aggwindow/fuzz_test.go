package aggwindow

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// fuzzConfigs are the configurations FuzzDecodeKey and FuzzDecodePane load
// under; the first input byte picks one.
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

// fuzzRuns returns partitions of every fuzz config after random events,
// for seeds: at the middle of the events and at the end.
func fuzzRuns(f *testing.F, each func(i int, p *Partition)) {
	for i, cfg := range fuzzConfigs {
		for seed := range uint64(4) {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			p := mustPartition(f, cfg)
			evs := arrive(rng, genEvents(rng, 2, 40, 0, 200), 40)
			for j, e := range evs {
				p.Process(e, true)
				if j == len(evs)/2 {
					each(i, p)
				}
			}
			each(i, p)
		}
	}
}

// FuzzDecodeKey: LoadKey on arbitrary bytes never panics; a state it
// accepts re-encodes to the same bytes and can be processed on and closed.
// Seeds: session keys (version 1) and fixed-window keys (version 2) of
// random runs, under each config.
func FuzzDecodeKey(f *testing.F) {
	fuzzRuns(f, func(i int, p *Partition) {
		for _, k := range []string{"k0", "k1"} {
			if b := p.EncodeKey(k); b != nil {
				f.Add(append([]byte{byte(i)}, b...))
			}
		}
	})
	f.Add([]byte{})
	f.Add([]byte{0, 1})
	f.Add([]byte{0, 1, 1, 1, 0})
	f.Add([]byte{0, 2, 1, 1, 1, 0, 1, 'a', 0})
	f.Add([]byte{14, 2, 3, 5, 1, 0, 0, 1, 0, 0})
	f.Add([]byte{3, 1, 1, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		cfg := fuzzConfigs[int(data[0])%len(fuzzConfigs)]
		p := mustPartition(t, cfg)
		if err := p.LoadKey("k0", data[1:]); err != nil {
			if p.Stats() != (Stats{}) || len(p.keys) != 0 {
				t.Fatal("failed load changed the partition")
			}
			return
		}
		if got := p.EncodeKey("k0"); string(got) != string(data[1:]) {
			t.Fatalf("accepted a non-canonical encoding:\n got %x\nwant %x", got, data[1:])
		}
		var hi int64
		for _, wn := range p.keys["k0"].wins {
			hi = max(hi, wn.start)
		}
		continueAndClose(t, p, hi)
	})
}

// FuzzDecodePane: LoadPane on arbitrary bytes and pane starts never
// panics; a pane it accepts re-encodes to the same bytes, and the state
// (with a key entry loaded after it, if the input has one) can be
// processed on and closed. Input: config byte, pane start (8 bytes
// big-endian), uvarint length and pane value, then an optional key entry.
func FuzzDecodePane(f *testing.F) {
	fuzzRuns(f, func(i int, p *Partition) {
		if p.cfg.Kind == Session {
			return
		}
		for _, k := range []string{"k0", "k1"} {
			ks := p.keys[k]
			if ks == nil {
				continue
			}
			key := p.EncodeKey(k)
			for _, pn := range ks.panes {
				f.Add(fuzzPaneInput(i, pn.start, p.EncodePane(k, pn.start), key))
			}
		}
	})
	f.Add([]byte{})
	f.Add(fuzzPaneInput(0, 30, []byte{2, 1, 1, 1, 0}, nil))
	f.Add(fuzzPaneInput(5, -7, []byte{2, 2, 1, 1, 1, 0}, []byte{2, 2, 1, 1, 13, 1, 'a', 0}))

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 9 {
			return
		}
		fixed := slices.DeleteFunc(slices.Clone(fuzzConfigs), func(c Config) bool { return c.Kind == Session })
		cfg := fixed[int(data[0])%len(fixed)]
		start := int64(binary.BigEndian.Uint64(data[1:9]))
		n, k := binary.Uvarint(data[9:])
		if k <= 0 || n > uint64(len(data)-9-k) {
			return
		}
		val, key := data[9+k:9+k+int(n)], data[9+k+int(n):]
		p := mustPartition(t, cfg)
		if err := p.LoadPane("k0", start, val); err != nil {
			if p.Stats() != (Stats{}) || len(p.keys) != 0 {
				t.Fatal("failed load changed the partition")
			}
			return
		}
		if got := p.EncodePane("k0", start); string(got) != string(val) {
			t.Fatalf("accepted a non-canonical encoding:\n got %x\nwant %x", got, val)
		}
		if len(key) > 0 {
			before := p.Stats()
			if err := p.LoadKey("k0", key); err != nil && p.Stats() != before {
				t.Fatal("failed load changed the partition")
			}
		}
		continueAndClose(t, p, start)
	})
}

func fuzzPaneInput(cfg int, start int64, val, key []byte) []byte {
	b := []byte{byte(cfg)}
	b = binary.BigEndian.AppendUint64(b, uint64(start))
	b = binary.AppendUvarint(b, uint64(len(val)))
	return append(append(b, val...), key...)
}

// continueAndClose processes events of k0 at and before hi and closes
// everything: whatever was accepted must be safe to continue from.
func continueAndClose(t *testing.T, p *Partition, hi int64) {
	t.Helper()
	for i := range 6 {
		p.Process(Event{Key: "k0", EventID: string(rune('A' + i)), TS: hi - int64(i)*7, Value: float64(i)}, true)
	}
	revs := p.Advance(math.MaxInt64)
	for _, r := range revs {
		if r.Status != Closed {
			t.Fatalf("advance emitted %s", r.Status)
		}
	}
	if st := p.Stats(); st != (Stats{}) || len(p.keys) != 0 {
		t.Fatalf("state left after the final advance: %+v", st)
	}
}
