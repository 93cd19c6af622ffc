package watermark

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
)

func mustTracker(tb testing.TB, cfg Config) *Tracker {
	tb.Helper()
	t, err := NewTracker(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// obs is one record as the tracker sees it.
type obs struct {
	rec, ev int64
	judged  bool // its lateness was judged (ObserveEvent), else Observe
}

// genAdaptive returns a random small adaptive configuration.
func genAdaptive(rng *rand.Rand) Config {
	c := Config{Strategy: Adaptive, Sample: 1 + rng.IntN(40)}
	switch rng.IntN(4) {
	case 0:
		c.Percentile = 100
	case 1:
		c.Percentile = float64(1 + rng.IntN(100))
	default:
		c.Percentile = math.Nextafter(rng.Float64()*100, math.Inf(1))
	}
	if rng.IntN(3) == 0 {
		c.MinMs = rng.Int64N(50)
	}
	c.MaxMs = c.MinMs + rng.Int64N(300)
	if rng.IntN(4) == 0 {
		c.MaxMs = MaxDelayMs
	}
	c.DelayMs = c.MinMs + rng.Int64N(c.MaxMs-c.MinMs+1)
	return c
}

// genObs returns n records: event times wandering forward with jitter,
// record timestamps mostly a little after the event time, sometimes much
// later (a gateway replaying), sometimes before it (clock skew), and a few
// extremes.
func genObs(rng *rand.Rand, n int) []obs {
	out := make([]obs, n)
	var now int64 = 1_000_000
	for i := range out {
		now += rng.Int64N(20)
		ev := now - rng.Int64N(100)
		var rec int64
		switch r := rng.IntN(100); {
		case r < 70:
			rec = ev + rng.Int64N(60)
		case r < 85:
			rec = ev + rng.Int64N(1000)
		case r < 95:
			rec = ev - rng.Int64N(50)
		case r < 97:
			rec = ev + rng.Int64N(1<<45)
		case r < 98:
			rec, ev = math.MaxInt64, math.MinInt64+rng.Int64N(10)
		case r < 99:
			rec, ev = math.MinInt64, math.MaxInt64-rng.Int64N(10)
		default:
			rec = ev // no delay
		}
		out[i] = obs{rec: rec, ev: ev, judged: rng.IntN(3) > 0}
	}
	return out
}

// refDelay is the package doc's definition, literally, in arbitrary
// precision: the delay before record i of the sequence.
func refDelay(c Config, seq []obs, i int) int64 {
	if c.Strategy == Fixed || i < c.Sample {
		return c.DelayMs
	}
	lo, hi := big.NewInt(c.MinMs), big.NewInt(c.MaxMs)
	sample := make([]*big.Int, 0, c.Sample)
	for _, o := range seq[i-c.Sample : i] {
		d := new(big.Int).Sub(big.NewInt(o.rec), big.NewInt(o.ev))
		if d.Sign() < 0 {
			d.SetInt64(0)
		}
		sample = append(sample, d)
	}
	slices.SortFunc(sample, (*big.Int).Cmp)
	// Nearest rank: ceil(p/100 * n), p the percentile rounded to millionths.
	p := new(big.Rat).SetFrac64(int64(math.Round(c.Percentile*1e6)), 100*1_000_000)
	r := new(big.Rat).Mul(p, new(big.Rat).SetInt64(int64(c.Sample)))
	k := new(big.Int).Quo(r.Num(), r.Denom()) // floor, r >= 0
	if !r.IsInt() {
		k.Add(k, big.NewInt(1))
	}
	if k.Sign() == 0 {
		k.SetInt64(1)
	}
	v := sample[k.Int64()-1]
	if v.Cmp(lo) < 0 {
		v = lo
	}
	if v.Cmp(hi) > 0 {
		v = hi
	}
	return v.Int64()
}

// check verifies the order-statistic structure's invariants.
func (q *kth) check() error {
	n := len(q.pos)
	if len(q.h[lo])+len(q.h[hi]) != n {
		return fmt.Errorf("heaps hold %d+%d entries, pos %d", len(q.h[lo]), len(q.h[hi]), n)
	}
	if len(q.h[lo]) != min(n, q.k) {
		return fmt.Errorf("lo holds %d, want min(%d, k=%d)", len(q.h[lo]), n, q.k)
	}
	for h := range 2 {
		a := q.h[h]
		for i := 1; i < len(a); i++ {
			if a[(i-1)/2] > a[i] {
				return fmt.Errorf("heap %d: parent of %d is larger", h, i)
			}
		}
		for i, x := range a {
			s := stored(h, x) & slotMask
			want := int32(i)
			if h == hi {
				want = ^want
			}
			if int(s) >= n || q.pos[s] != want {
				return fmt.Errorf("heap %d index %d: slot %d indexed at %d", h, i, s, q.pos[s])
			}
		}
	}
	if len(q.h[lo]) > 0 && len(q.h[hi]) > 0 && ^q.h[lo][0] > q.h[hi][0] {
		return fmt.Errorf("lo's largest %d above hi's smallest %d", ^q.h[lo][0], q.h[hi][0])
	}
	return nil
}
