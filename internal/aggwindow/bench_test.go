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
