package aggwindow

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkProcess: in-order events of 100 keys, one per key per second of
// event time, under each window kind (hopping: 10 windows per event).
func BenchmarkProcess(b *testing.B) {
	for _, kind := range allKinds {
		b.Run(kind.String(), func(b *testing.B) {
			cfg := Config{Kind: kind, Fn: Avg, DelayMs: 5_000, LatenessMs: 60_000, EvidenceLimit: 3,
				Fires: func(agg float64, _ int) bool { return agg > 5 }, AlertID: testAlertID}
			switch kind {
			case Tumbling:
				cfg.SizeMs = 60_000
			case Hopping:
				cfg.SizeMs, cfg.AdvanceMs = 60_000, 6_000
			case Session:
				cfg.GapMs = 30_000
			}
			p := mustPartition(b, cfg)
			rng := rand.New(rand.NewPCG(1, 1))
			keys := make([]string, 100)
			for i := range keys {
				keys[i] = fmt.Sprintf("m%d", i)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				ev := Event{Key: keys[i%len(keys)], EventID: "e", TS: int64(i/len(keys)) * 1000, Value: rng.Float64() * 10}
				p.Process(ev, true)
				i++
			}
		})
	}
}

// BenchmarkMix is the aggregating part of the 10-rule mix (test/benchrules)
// without the pipeline around it: 200 keys, one record per key per second
// of event time (a few swapped with their neighbour; values and episodes as package sim's load generator), through the seven
// aggregating rules' partitions (tumbling avg 5m, max 1m, min 10m, sum 1m,
// count 1m, hopping max 10m/1m, session count 90s) with their filters,
// thresholds, D = 30 s, L = 0 and 10 events of evidence. One op is one
// record through all seven.
func BenchmarkMix(b *testing.B) {
	type rule struct {
		cfg    Config
		filter func(v float64) bool
	}
	all := func(float64) bool { return true }
	base := Config{DelayMs: 30_000, EvidenceLimit: 10, AlertID: testAlertID}
	mk := func(kind Kind, size, adv, gap int64, fn Fn, ignores bool, fires func(float64, int) bool) Config {
		c := base
		c.Kind, c.SizeMs, c.AdvanceMs, c.GapMs, c.Fn, c.FiresIgnoresCount, c.Fires = kind, size, adv, gap, fn, ignores, fires
		return c
	}
	const minute = 60_000
	rs := []rule{
		{mk(Tumbling, 5*minute, 0, 0, Avg, false, func(a float64, n int) bool { return a > 4.5 && n >= 100 }), all},
		{mk(Tumbling, minute, 0, 0, Max, true, func(a float64, _ int) bool { return a >= 12.5 }), all},
		{mk(Tumbling, 10*minute, 0, 0, Min, false, func(a float64, n int) bool { return a >= 2.5 && n >= 100 }), all},
		{mk(Tumbling, minute, 0, 0, Sum, true, func(a float64, _ int) bool { return a >= 150 }), func(v float64) bool { return v >= 4.5 }},
		{mk(Tumbling, minute, 0, 0, Count, false, func(_ float64, n int) bool { return n >= 8 }), func(v float64) bool { return v >= 7.1 }},
		{mk(Hopping, 10*minute, minute, 0, Max, true, func(a float64, _ int) bool { return a >= 12.8 }), all},
		{mk(Session, 0, 0, 90_000, Count, false, func(_ float64, n int) bool { return n > 4 }), func(v float64) bool { return v >= 4.5 }},
	}
	const keys, n = 200, 200_000
	rng := rand.New(rand.NewPCG(42, 42))
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("M-%03d", i)
	}
	evs := make([]Event, n)
	episode := make([]int, keys)
	for i := range evs {
		k := i % keys
		if episode[k] == 0 && rng.Float64() < 0.002 { // as package sim's load generator
			episode[k] = 15 + rng.IntN(15)
		}
		v := 1.5 + 3*rng.Float64()
		if episode[k] > 0 {
			episode[k]--
			if rng.Float64() < 0.4 {
				v = 7.1 + 6*rng.Float64()
			}
		}
		evs[i] = Event{Key: names[k], EventID: fmt.Sprintf("%s-%d", names[k], i), SensorID: names[k] + "-s0",
			TS: int64(i/keys)*1000 + int64(rng.IntN(900)), Value: v, Offset: int64(i)}
		if i > 0 && rng.Float64() < 0.01 {
			evs[i], evs[i-1] = evs[i-1], evs[i]
		}
	}
	fresh := func() []*Partition {
		ps := make([]*Partition, len(rs))
		for j, r := range rs {
			ps[j] = mustPartition(b, r.cfg)
		}
		return ps
	}
	ps := fresh()
	revs := 0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(evs) {
			ps, i = fresh(), 0 // the stream restarts in event time
		}
		ev := evs[i]
		for j, r := range rs {
			revs += len(ps[j].Process(ev, r.filter(ev.Value)).Revisions)
		}
		i++
	}
	b.ReportMetric(float64(revs)/float64(b.N), "revisions/op")
}
