package watermark

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkObserve measures one observation of a warm adaptive tracker
// (p99 clamped to [0, 10m]) for several sample sizes and two delay
// patterns: "realistic" (exponential around 2 s with a 1% tail of
// gateway replays up to an hour) and "increasing" (every new delay is the
// largest, the old ones leave from the bottom: each observation moves an
// entry between the heaps).
func BenchmarkObserve(b *testing.B) {
	for _, n := range []int{1000, 10_000, 100_000, 1_000_000} {
		for _, pattern := range []string{"realistic", "increasing"} {
			b.Run(fmt.Sprintf("sample=%d/%s", n, pattern), func(b *testing.B) {
				c := Config{Strategy: Adaptive, DelayMs: 30_000, Percentile: 99, MaxMs: 600_000, Sample: n}
				if pattern == "increasing" {
					c.MaxMs = MaxDelayMs // no clamping: the delays stay distinct
				}
				tr := mustTracker(b, c)
				rng := rand.New(rand.NewPCG(1, 2))
				const nd = 1 << 16
				delays := make([]int64, nd)
				for i := range delays {
					delays[i] = int64(rng.ExpFloat64() * 2000)
					if rng.IntN(100) == 0 {
						delays[i] = rng.Int64N(3_600_000)
					}
				}
				var ts, seq int64 = 1_700_000_000_000, 0
				next := func() (int64, int64) {
					ts += 7
					seq++
					if pattern == "increasing" {
						return ts + seq, ts
					}
					return ts + delays[seq&(nd-1)], ts
				}
				for range n {
					tr.Observe(next())
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					r, e := next()
					tr.ObserveEvent(r, e, 600_000, NoWatermark)
				}
				if tr.DelayMs() < 0 {
					b.Fatal("unreachable")
				}
			})
		}
	}
}

// BenchmarkEncodeDecode measures the persisted state of a warm tracker
// (p99 over realistic delays): AppendEncode, and Decode (which rebuilds the
// heaps).
func BenchmarkEncodeDecode(b *testing.B) {
	for _, n := range []int{1000, 1_000_000} {
		c := Config{Strategy: Adaptive, DelayMs: 30_000, Percentile: 99, MaxMs: 600_000, Sample: n}
		tr := mustTracker(b, c)
		rng := rand.New(rand.NewPCG(1, 2))
		for range n {
			tr.Observe(int64(rng.ExpFloat64()*2000), 0)
		}
		enc := tr.AppendEncode(nil)
		b.Run(fmt.Sprintf("encode/sample=%d", n), func(b *testing.B) {
			b.ReportMetric(float64(len(enc)), "bytes")
			buf := make([]byte, 0, len(enc))
			for range b.N {
				buf = tr.AppendEncode(buf[:0])
			}
		})
		b.Run(fmt.Sprintf("decode/sample=%d", n), func(b *testing.B) {
			b.ReportMetric(float64(len(enc)), "bytes")
			for range b.N {
				if err := tr.Decode(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
