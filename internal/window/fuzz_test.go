package window

import (
	"encoding/binary"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// fuzzConfig is the configuration the fuzz tests load under (buckets of
// 7 ms of events and 16 ms of ids, so that a key spans several).
var fuzzConfig = Config{Threshold: 3, SizeMs: 60, DelayMs: 5, LatenessMs: 40, DedupHorizonMs: 200, AlertID: testAlertID,
	EventBucketMs: 7, DedupBucketMs: 16}

// fuzzStates returns partitions of random runs (under their own
// configurations, and long incidents under fuzzConfig: open incidents with
// pruned events and partly or wholly pruned evidence).
func fuzzStates(f *testing.F) []*Partition {
	var out []*Partition
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 9))
		cfg := genConfigN(rng, 3)
		p := mustPartition(f, cfg)
		for _, r := range arrive(rng, genEvents(rng, cfg, 2, 30), cfg.DelayMs) {
			p.Process(r.ev, r.q)
		}
		out = append(out, p)
	}
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 10))
		p := mustPartition(f, fuzzConfig)
		for i, r := range arrive(rng, genDense(rng, fuzzConfig, 1, 60+rng.IntN(200)), fuzzConfig.DelayMs) {
			p.Process(r.ev, r.q)
			if i%7 == 0 {
				p.Sweep()
			}
		}
		out = append(out, p)
	}
	return out
}

// continueFrom processes a few more records of m1 on an accepted state:
// whatever was accepted must be safe to continue from.
func continueFrom(p *Partition) {
	var hi int64
	for _, e := range p.keys["m1"].events {
		hi = max(hi, e.TS)
	}
	for i := range 6 {
		p.Process(Event{Key: "m1", EventID: string(rune('A' + i)), TS: hi - int64(i)*7}, true)
	}
	p.Process(Event{Key: "m1", EventID: "z", TS: hi + 10_000}, false)
	p.Sweep()
}

// FuzzDecodeKey: LoadKey on arbitrary bytes as a format version 1 value
// never panics, and a state it accepts re-encodes to the same bytes (with
// the version 1 encoder) and can be processed on.
func FuzzDecodeKey(f *testing.F) {
	for _, p := range fuzzStates(f) {
		for _, k := range []string{"m1", "m2"} {
			if b := encodeKeyV1(p, k); b != nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{1, 0, 0, 0})
	f.Add([]byte{1, 0, 1, 0, 1, 'a', 0})
	f.Add([]byte{2, 0, 0, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 0 && data[0] != legacyKeyVersion {
			return // FuzzLoadEntries has version 2
		}
		p := mustPartition(t, fuzzConfig)
		if err := loadKeyNow(p, "m1", data); err != nil {
			if p.Stats() != (Stats{}) {
				t.Fatal("failed load changed the partition")
			}
			return
		}
		if got := encodeKeyV1(p, "m1"); string(got) != string(data) {
			t.Fatalf("accepted a non-canonical encoding:\n got %x\nwant %x", got, data)
		}
		continueFrom(p)
	})
}

// fuzzEntries encodes the entries of key m1 as one input of
// FuzzLoadEntries: per entry, its kind ('k', EventsBucket or DedupBucket),
// its bucket (varint), its value (uvarint length and bytes).
func fuzzEntries(m map[entryName][]byte) []byte {
	var b []byte
	for _, n := range slices.SortedFunc(maps.Keys(m), cmpEntryName) {
		b = append(b, n.kind)
		b = binary.AppendVarint(b, n.bucket)
		b = binary.AppendUvarint(b, uint64(len(m[n])))
		b = append(b, m[n]...)
	}
	return b
}

// parseFuzzEntries reads fuzzEntries's encoding (false: not one).
func parseFuzzEntries(b []byte) (map[entryName][]byte, []entryName, bool) {
	m := map[entryName][]byte{}
	var order []entryName
	for len(b) > 0 {
		kind := b[0]
		bucket, k := binary.Varint(b[1:])
		if k <= 0 {
			return nil, nil, false
		}
		b = b[1+k:]
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, nil, false
		}
		name := entryName{kind, "m1", bucket}
		if kind == 'k' {
			name.bucket = 0
		}
		if _, dup := m[name]; dup {
			return nil, nil, false
		}
		m[name] = b[k : k+int(n)]
		order = append(order, name)
		b = b[k+int(n):]
	}
	return m, order, true
}

// FuzzLoadEntries: loading arbitrary entries of a key (key entry and
// buckets, in the input's order) never panics, a failed load leaves the
// partition empty, and a state it accepts re-encodes to exactly the
// entries loaded and can be processed on.
func FuzzLoadEntries(f *testing.F) {
	for _, p := range fuzzStates(f) {
		if m := snapshotKey(p, "m1"); m != nil && p.evB == 7 && p.ddB == 16 { // fuzzConfig's
			f.Add(fuzzEntries(m))
		}
	}
	f.Add([]byte{})
	f.Add([]byte{'k', 0, 1, 2})
	f.Add([]byte{'e', 0, 2, 2, 0})
	f.Add([]byte{'d', 2, 4, 2, 1, 0, 0})

	f.Fuzz(func(t *testing.T, data []byte) {
		m, order, ok := parseFuzzEntries(data)
		if !ok || len(m) == 0 {
			return
		}
		p := mustPartition(t, fuzzConfig)
		err := func() error {
			for _, n := range order {
				var err error
				if n.kind == 'k' {
					err = p.LoadKey(n.key, m[n])
				} else {
					err = p.LoadBucket(n.ref(), m[n])
				}
				if err != nil {
					return err
				}
			}
			return p.FinishLoad()
		}()
		if err != nil {
			if p.Stats() != (Stats{}) {
				t.Fatal("failed load changed the partition")
			}
			return
		}
		if got := snapshotKey(p, "m1"); !maps.EqualFunc(got, m, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Fatalf("accepted entries that do not re-encode the same:\n got %x\nwant %x", fuzzEntries(got), fuzzEntries(m))
		}
		continueFrom(p)
	})
}
