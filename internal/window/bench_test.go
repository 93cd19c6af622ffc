package window

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// A realistic partition: 1000 machines sharing one event-time clock. Each
// machine alternates between active periods (1 to 10 minutes, one
// high-vibration event every 7 s: incidents open and grow) and quiet
// periods (15 minutes, no qualifying events: incidents close, state is
// garbage-collected). That keeps about 100 events per key inside L + S = 12
// minutes. 5% of the events arrive up to a minute late.
type benchLoad struct {
	keys    []string
	until   []int64 // end of the current period
	active  []bool
	rng     *rand.Rand
	slot, n int
}

func newBenchLoad(nKeys int) *benchLoad {
	l := &benchLoad{rng: rand.New(rand.NewPCG(1, 2))}
	for i := range nKeys {
		l.keys = append(l.keys, fmt.Sprintf("machine-%04d", i))
		l.until = append(l.until, l.rng.Int64N(10*60_000))
		l.active = append(l.active, l.rng.IntN(2) == 0)
	}
	return l
}

func (l *benchLoad) event() Event {
	for {
		k := l.slot % len(l.keys)
		ts := int64(l.slot) * 7000 / int64(len(l.keys)) // each key's turn comes every 7 s
		l.slot++
		if ts >= l.until[k] {
			l.active[k] = !l.active[k]
			if l.active[k] {
				l.until[k] = ts + 60_000 + l.rng.Int64N(9*60_000)
			} else {
				l.until[k] = ts + 15*60_000
			}
		}
		if !l.active[k] {
			continue
		}
		if l.rng.IntN(20) == 0 {
			ts -= l.rng.Int64N(60_000)
		}
		l.n++
		return Event{Key: l.keys[k], EventID: fmt.Sprintf("%s-%d", l.keys[k], l.n), SensorID: "s1", TS: ts, Value: 9.3, Offset: int64(l.n)}
	}
}

func warmPartition(b *testing.B, l *benchLoad, warm int) *Partition {
	p := mustPartition(b, vibration())
	for range warm {
		p.Process(l.event(), true)
		if l.n%1000 == 0 {
			p.Sweep()
			p.ClearDirty()
		}
	}
	return p
}

func BenchmarkProcessFiltered(b *testing.B) {
	l := newBenchLoad(1000)
	p := warmPartition(b, l, 200_000)
	evs := make([]Event, 4096)
	for i := range evs {
		evs[i] = l.event()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		p.Process(evs[i%len(evs)], false)
	}
}

func BenchmarkProcessQualifying(b *testing.B) {
	l := newBenchLoad(1000)
	p := warmPartition(b, l, 200_000)
	// Pre-generate so that fmt does not count. Beyond 1<<20 iterations the
	// events repeat (and become duplicates).
	evs := make([]Event, 0, 1<<20)
	for range cap(evs) {
		evs = append(evs, l.event())
	}
	st := p.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		p.Process(evs[i%len(evs)], true)
		i++
		if i%1000 == 0 { // the caller sweeps and persists at commit boundaries
			p.Sweep()
			p.ClearDirty()
		}
	}
	b.ReportMetric(float64(st.Events)/float64(max(st.Keys, 1)), "events/key")
	b.ReportMetric(float64(st.Dedup)/float64(max(st.Keys, 1)), "ids/key")
}

// busiest returns the key with the most kept events (ties: smallest key).
func busiest(p *Partition) string {
	best, n := "", -1
	for k, ks := range p.keys {
		if len(ks.events) > n || len(ks.events) == n && k < best {
			best, n = k, len(ks.events)
		}
	}
	return best
}

// BenchmarkEncodeKey encodes every entry of the busiest key (its key
// entry and all its buckets), what an upgrade from format version 1 or a
// full rewrite costs; a commit encodes the dirty ones only.
func BenchmarkEncodeKey(b *testing.B) {
	l := newBenchLoad(1000)
	p := warmPartition(b, l, 200_000)
	key := busiest(p)
	refs := keyBuckets(p, key)
	b.ReportAllocs()
	size := 0
	for b.Loop() {
		size = len(p.EncodeKey(key))
		for _, r := range refs {
			size += len(p.EncodeBucket(r))
		}
	}
	b.ReportMetric(float64(len(p.keys[key].events)), "events")
	b.ReportMetric(float64(len(p.keys[key].seenBy)), "ids")
	b.ReportMetric(float64(size), "bytes")
	b.ReportMetric(float64(1+len(refs)), "entries")
}

// BenchmarkLoadKey loads every entry of the busiest key.
func BenchmarkLoadKey(b *testing.B) {
	l := newBenchLoad(1000)
	p := warmPartition(b, l, 200_000)
	key := busiest(p)
	data := snapshotKey(p, key)
	q := mustPartition(b, vibration())
	b.ReportAllocs()
	for b.Loop() {
		if err := loadEntries(q, data, nil); err != nil {
			b.Fatal(err)
		}
	}
}
