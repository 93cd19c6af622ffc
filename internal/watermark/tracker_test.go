package watermark

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	adaptive := Config{Strategy: Adaptive, DelayMs: 30_000, Percentile: 99, MinMs: 0, MaxMs: 600_000, Sample: 1000}
	with := func(f func(*Config)) Config { c := adaptive; f(&c); return c }
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none: valid
	}{
		{"fixed", Config{Strategy: Fixed, DelayMs: 30_000}, nil},
		{"fixed zero delay", Config{Strategy: Fixed}, nil},
		{"fixed max delay", Config{Strategy: Fixed, DelayMs: MaxDelayMs}, nil},
		{"adaptive", adaptive, nil},
		{"adaptive p100 sample 1", with(func(c *Config) { c.Percentile, c.Sample = 100, 1 }), nil},
		{"adaptive tiny percentile", with(func(c *Config) { c.Percentile = 1e-9 }), nil},
		{"adaptive max sample", with(func(c *Config) { c.Sample = MaxSample }), nil},
		{"adaptive min = max = delay", with(func(c *Config) { c.MinMs, c.MaxMs, c.DelayMs = 5, 5, 5 }), nil},
		{"no strategy", Config{DelayMs: 1}, []string{"Strategy = Strategy(0), must be Fixed or Adaptive"}},
		{"fixed negative delay", Config{Strategy: Fixed, DelayMs: -1}, []string{"DelayMs = -1, must be 0..1099511627776"}},
		{"fixed too large", Config{Strategy: Fixed, DelayMs: MaxDelayMs + 1}, []string{"DelayMs = 1099511627777"}},
		{"fixed with adaptive fields", Config{Strategy: Fixed, Percentile: 99, MinMs: 1, MaxMs: 2, Sample: 3},
			[]string{"Percentile = 99, must be 0", "MinMs = 1, must be 0", "MaxMs = 2, must be 0", "Sample = 3, must be 0"}},
		{"percentile 0", with(func(c *Config) { c.Percentile = 0 }), []string{"Percentile = 0, must be in (0, 100]"}},
		{"percentile above 100", with(func(c *Config) { c.Percentile = 100.5 }), []string{"Percentile = 100.5"}},
		{"percentile NaN", with(func(c *Config) { c.Percentile = math.NaN() }), []string{"Percentile = NaN"}},
		{"negative min", with(func(c *Config) { c.MinMs = -1 }), []string{"MinMs = -1, must be 0..1099511627776"}},
		{"max below min", with(func(c *Config) { c.MinMs, c.MaxMs, c.DelayMs = 10, 9, 10 }), []string{"MaxMs = 9, must be MinMs (10)..1099511627776"}},
		{"max too large", with(func(c *Config) { c.MaxMs = MaxDelayMs + 1 }), []string{"MaxMs = 1099511627777"}},
		{"delay below min", with(func(c *Config) { c.MinMs = 40_000 }), []string{"DelayMs = 30000, must be within [MinMs, MaxMs] = [40000, 600000]"}},
		{"delay above max", with(func(c *Config) { c.MaxMs = 20_000 }), []string{"DelayMs = 30000, must be within [MinMs, MaxMs] = [0, 20000]"}},
		{"sample 0", with(func(c *Config) { c.Sample = 0 }), []string{"Sample = 0, must be 1..1000000"}},
		{"sample too large", with(func(c *Config) { c.Sample = MaxSample + 1 }), []string{"Sample = 1000001"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if _, err := NewTracker(tc.cfg); err != nil {
					t.Fatalf("NewTracker: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate: nil, want an error")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if _, err := NewTracker(tc.cfg); err == nil {
				t.Error("NewTracker accepted an invalid config")
			}
		})
	}
}

func TestRank(t *testing.T) {
	for _, tc := range []struct {
		p      float64
		sample int
		want   int
	}{
		{99, 1000, 990},
		{99, 1, 1},
		{99, 100, 99},
		{99, 101, 100}, // ceil(99.99)
		{99.9, 1000, 999},
		{99.99, 10_000, 9999},
		{100, 1000, 1000},
		{100, MaxSample, MaxSample},
		{50, 4, 2}, // the lower median
		{50, 5, 3},
		{25, 4, 1},
		{1, 1000, 10},
		{1e-9, 1000, 1}, // rounds to 0 millionths: rank 1
		{0.000001, MaxSample, 1},
		{0.0002, MaxSample, 2},
		{0.00015, MaxSample, 2}, // ceil(1.5)
		{100.0 / 3, 3, 1},       // 33.333333: ceil(0.99999999)
		{200.0 / 3, 3, 3},       // 66.666667: ceil(2.00000001), not 2: P is used rounded to millionths
		{66.666666, 3, 2},
		{95, 20, 19},
	} {
		c := Config{Strategy: Adaptive, Percentile: tc.p, MaxMs: 1, Sample: tc.sample}
		if got := c.rank(); got != tc.want {
			t.Errorf("rank(P=%v, Sample=%d) = %d, want %d", tc.p, tc.sample, got, tc.want)
		}
	}
}

func TestFixed(t *testing.T) {
	const d, l = 100, 50
	type step struct {
		rec, ev int64
		w       int64 // the caller's watermark before the record; judged when != 0
		risk    bool  // want ObserveEvent's verdict
		f       int64 // want FixedWatermark after
	}
	for _, tc := range []struct {
		name  string
		steps []step
		total uint64
	}{
		{"watermark follows max(ts) - D", []step{
			{rec: 1000, ev: 1000, f: 900},
			{rec: 1100, ev: 950, f: 900},
			{rec: 1200, ev: 1200, f: 1100},
			{rec: 1200, ev: 1150, f: 1100},
		}, 0},
		{"negative and extreme times saturate", []step{
			{rec: 0, ev: math.MinInt64 + 5, f: math.MinInt64},
			{rec: 0, ev: -1000, f: -1100},
			{rec: math.MinInt64, ev: math.MaxInt64, f: math.MaxInt64 - d},
		}, 0},
		{"at risk: too late for F, not for the caller's W", []step{
			{rec: 1000, ev: 1000, f: 900},
			// F - L = 850; the caller's W (an adaptive one) is 700: W - L = 650.
			{rec: 1000, ev: 849, w: 700, risk: true, f: 900},
			{rec: 1000, ev: 850, w: 700, risk: false, f: 900},  // not too late for F
			{rec: 1000, ev: 649, w: 700, risk: false, f: 900},  // too late for both
			{rec: 1000, ev: 650, w: 700, risk: true, f: 900},   // exactly W - L: accepted
			{rec: 1000, ev: 800, w: 900, risk: false, f: 900},  // W = F: never at risk
			{rec: 1000, ev: 800, w: 1000, risk: false, f: 900}, // the caller's W is ahead
		}, 2},
		{"nothing is too late at NoWatermark", []step{
			{rec: 0, ev: math.MinInt64, w: NoWatermark, f: NoWatermark},
			{rec: 0, ev: 1000, w: NoWatermark, f: 900},
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := mustTracker(t, Config{Strategy: Fixed, DelayMs: d})
			if tr.FixedWatermark() != NoWatermark || tr.DelayMs() != d {
				t.Fatalf("fresh tracker: %v", tr)
			}
			for i, s := range tc.steps {
				if s.w != 0 {
					if got := tr.ObserveEvent(s.rec, s.ev, l, s.w); got != s.risk {
						t.Errorf("step %d: at risk = %v, want %v", i, got, s.risk)
					}
				} else {
					tr.Observe(s.rec, s.ev)
				}
				if tr.DelayMs() != d {
					t.Errorf("step %d: delay %d, want %d", i, tr.DelayMs(), d)
				}
				if tr.FixedWatermark() != s.f {
					t.Errorf("step %d: F = %d, want %d", i, tr.FixedWatermark(), s.f)
				}
				if tr.Observed() != 0 {
					t.Errorf("step %d: the fixed strategy keeps a sample", i)
				}
			}
			if tr.AtRiskTotal() != tc.total {
				t.Errorf("AtRiskTotal = %d, want %d", tr.AtRiskTotal(), tc.total)
			}
		})
	}
}

func TestWarmupAndClamp(t *testing.T) {
	// P = 100 (the maximum) over the last 3, clamped to [10, 100], D = 42.
	tr := mustTracker(t, Config{Strategy: Adaptive, DelayMs: 42, Percentile: 100, MinMs: 10, MaxMs: 100, Sample: 3})
	for i, tc := range []struct {
		delay int64 // observed delay: rec = 1000 + delay, ev = 1000
		want  int64 // DelayMs after
	}{
		{5, 42},    // warming up: D
		{50, 42},   // still D
		{7, 50},    // full: max(5, 50, 7) = 50
		{3, 50},    // 50, 7, 3
		{1, 10},    // 7, 3, 1: clamped up to Min
		{-500, 10}, // 3, 1, 0 (negative delays count as 0)
		{5000, 100},
		{99, 100}, // 0, 5000, 99
		{98, 100},
		{97, 99}, // 99, 98, 97
	} {
		tr.Observe(1000+tc.delay, 1000)
		if got := tr.DelayMs(); got != tc.want {
			t.Fatalf("after observation %d (delay %d): DelayMs = %d, want %d", i, tc.delay, got, tc.want)
		}
		if want := min(i+1, 3); tr.Observed() != want {
			t.Fatalf("Observed = %d, want %d", tr.Observed(), want)
		}
	}
	// The median (P = 50, lower) of the last 4.
	tr = mustTracker(t, Config{Strategy: Adaptive, DelayMs: 0, Percentile: 50, MaxMs: 1 << 40, Sample: 4})
	for i, d := range []int64{40, 10, 30, 20} {
		tr.Observe(d, 0)
		if want := []int64{0, 0, 0, 20}[i]; tr.DelayMs() != want {
			t.Fatalf("after %d: DelayMs = %d, want %d", i, tr.DelayMs(), want)
		}
	}
	tr.Observe(math.MaxInt64, math.MinInt64) // 10, 30, 20, huge: saturates, clamped to Max
	if tr.DelayMs() != 20 {
		t.Fatalf("DelayMs = %d, want 20", tr.DelayMs())
	}
	tr.Observe(math.MaxInt64, 0)
	tr.Observe(math.MaxInt64, 0) // 20, huge, huge, huge
	if tr.DelayMs() != 1<<40 {
		t.Fatalf("DelayMs = %d, want Max", tr.DelayMs())
	}
}

// expected holds what the definitions give for record i.
type expected struct {
	delay  int64 // before record i
	fixed  int64 // F after record i
	risk   bool  // record i at risk
	wAfter int64 // the actual watermark after record i
}

// simulate evaluates the package doc's definitions over seq in arbitrary
// precision, with the actual watermark W moved by the reference delays (as
// a partition calling SetDelayMs would move it).
func simulate(c Config, seq []obs, l int64) []expected {
	out := make([]expected, len(seq))
	var w, f *big.Int // nil: minus infinity
	bl := big.NewInt(l)
	tooLate := func(ts, wm *big.Int) bool {
		return wm != nil && ts.Cmp(new(big.Int).Sub(wm, bl)) < 0
	}
	raise := func(wm *big.Int, ts *big.Int, d int64) *big.Int {
		nw := new(big.Int).Sub(ts, big.NewInt(d))
		if wm == nil || nw.Cmp(wm) > 0 {
			return nw
		}
		return wm
	}
	sat := func(x *big.Int) int64 {
		switch {
		case x == nil:
			return math.MinInt64
		case x.Cmp(big.NewInt(math.MinInt64)) < 0:
			return math.MinInt64
		case x.Cmp(big.NewInt(math.MaxInt64)) > 0:
			return math.MaxInt64
		}
		return x.Int64()
	}
	for i, o := range seq {
		d := refDelay(c, seq, i)
		ts := big.NewInt(o.ev)
		out[i].delay = d
		out[i].risk = o.judged && tooLate(ts, f) && !tooLate(ts, w)
		w = raise(w, ts, d)
		f = raise(f, ts, c.DelayMs)
		out[i].fixed = sat(f)
		out[i].wAfter = sat(w)
	}
	return out
}

// feed runs one record through a tracker the way a caller does, with w the
// caller's watermark before the record (in the saturating int64 arithmetic
// of the window packages), and returns the new w and the verdict.
func feed(tr *Tracker, o obs, w, l int64) (int64, bool) {
	d := tr.DelayMs()
	risk := false
	if o.judged {
		risk = tr.ObserveEvent(o.rec, o.ev, l, w)
	} else {
		tr.Observe(o.rec, o.ev)
	}
	if nw := subSat(o.ev, d); nw > w {
		w = nw
	}
	return w, risk
}

func TestAdaptiveReference(t *testing.T) {
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 1))
		c := genAdaptive(rng)
		l := rng.Int64N(200)
		seq := genObs(rng, 50+rng.IntN(300))
		want := simulate(c, seq, l)
		tr := mustTracker(t, c)
		w, total := NoWatermark, uint64(0)
		for i, o := range seq {
			if got := tr.DelayMs(); got != want[i].delay {
				t.Fatalf("seed %d %+v: record %d: DelayMs = %d, want %d", seed, c, i, got, want[i].delay)
			}
			var risk bool
			w, risk = feed(tr, o, w, l)
			if risk != want[i].risk {
				t.Fatalf("seed %d %+v: record %d: at risk = %v, want %v", seed, c, i, risk, want[i].risk)
			}
			if risk {
				total++
			}
			if tr.FixedWatermark() != want[i].fixed || w != want[i].wAfter {
				t.Fatalf("seed %d: record %d: F = %d, W = %d, want %d, %d", seed, i, tr.FixedWatermark(), w, want[i].fixed, want[i].wAfter)
			}
			if tr.Observed() != min(i+1, c.Sample) {
				t.Fatalf("seed %d: Observed = %d after %d", seed, tr.Observed(), i+1)
			}
			if err := tr.q.check(); err != nil {
				t.Fatalf("seed %d: record %d: %v", seed, i, err)
			}
		}
		if tr.AtRiskTotal() != total {
			t.Fatalf("seed %d: AtRiskTotal = %d, want %d", seed, tr.AtRiskTotal(), total)
		}
	}
}

// TestAtRiskCounts checks that the reference and the tracker do count
// something: a bursty log where the adaptive delay exceeds D.
func TestAtRiskCounts(t *testing.T) {
	c := Config{Strategy: Adaptive, DelayMs: 0, Percentile: 90, MaxMs: 10_000, Sample: 10}
	rng := rand.New(rand.NewPCG(7, 7))
	var seq []obs
	for i := range 500 {
		ev := int64(i * 100)
		late := rng.Int64N(3000) // records arrive up to 3 s after their event time, out of order
		seq = append(seq, obs{rec: ev + late, ev: ev - late, judged: true})
	}
	want := simulate(c, seq, 500)
	tr := mustTracker(t, c)
	w, n := NoWatermark, 0
	for i, o := range seq {
		var risk bool
		w, risk = feed(tr, o, w, 500)
		if risk != want[i].risk {
			t.Fatalf("record %d: at risk = %v, want %v", i, risk, want[i].risk)
		}
		if risk {
			n++
		}
	}
	if n == 0 || tr.AtRiskTotal() != uint64(n) {
		t.Fatalf("AtRiskTotal = %d, counted %d: want a positive count", tr.AtRiskTotal(), n)
	}
}

// TestLargeSample compares a large sample with an incrementally sorted
// reference (the brute force above is quadratic).
func TestLargeSample(t *testing.T) {
	n, total := 5000, 20_000
	if testing.Short() {
		n, total = 500, 2000
	}
	for _, p := range []float64{99, 50, 0.01, 100, 99.999} {
		c := Config{Strategy: Adaptive, DelayMs: 500, Percentile: p, MinMs: 0, MaxMs: 1 << 30, Sample: n}
		tr := mustTracker(t, c)
		rng := rand.New(rand.NewPCG(uint64(p*1000), 3))
		var ring []int64
		var sorted []int64
		k := c.rank()
		for i := range total {
			want := c.DelayMs
			if len(ring) == n {
				want = sorted[k-1]
			}
			if got := tr.DelayMs(); got != want {
				t.Fatalf("P=%v, record %d: DelayMs = %d, want %d", p, i, got, want)
			}
			d := int64(rng.ExpFloat64() * 2000)
			if rng.IntN(50) == 0 {
				d = rng.Int64N(1 << 32) // clamped to Max
			}
			tr.Observe(10_000_000+d, 10_000_000)
			d = min(d, c.MaxMs)
			if len(ring) == n {
				old := ring[0]
				ring = ring[1:]
				j, _ := slices.BinarySearch(sorted, old)
				sorted = slices.Delete(sorted, j, j+1)
			}
			ring = append(ring, d)
			j, _ := slices.BinarySearch(sorted, d)
			sorted = slices.Insert(sorted, j, d)
		}
		if err := tr.q.check(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDeterminism(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 2))
		c := genAdaptive(rng)
		seq := genObs(rng, 500)
		a, b := mustTracker(t, c), mustTracker(t, c)
		wa, wb := NoWatermark, NoWatermark
		for i, o := range seq {
			var ra, rb bool
			wa, ra = feed(a, o, wa, 100)
			wb, rb = feed(b, o, wb, 100)
			if a.DelayMs() != b.DelayMs() || ra != rb || wa != wb {
				t.Fatalf("seed %d record %d: the same sequence gave different results", seed, i)
			}
		}
		if !slices.Equal(a.AppendEncode(nil), b.AppendEncode(nil)) {
			t.Fatalf("seed %d: different encodings", seed)
		}
	}
}

// TestRestore: a tracker encoded at a random point, decoded into a new one
// and continued produces exactly what an uninterrupted one does.
func TestRestore(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 4))
		c := genAdaptive(rng)
		if seed%5 == 0 {
			c = Config{Strategy: Fixed, DelayMs: rng.Int64N(100)}
		}
		seq := genObs(rng, 1+rng.IntN(300))
		split := rng.IntN(len(seq) + 1)
		l := rng.Int64N(100)

		whole := mustTracker(t, c)
		part := mustTracker(t, c)
		w1, w2 := NoWatermark, NoWatermark
		for i, o := range seq {
			if i == split {
				enc := part.AppendEncode([]byte("prefix"))
				part = mustTracker(t, c)
				if err := part.Decode(enc[len("prefix"):]); err != nil {
					t.Fatalf("seed %d: decode at %d: %v", seed, i, err)
				}
				if err := part.q.check(); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
			if whole.DelayMs() != part.DelayMs() || whole.FixedWatermark() != part.FixedWatermark() ||
				whole.AtRiskTotal() != part.AtRiskTotal() || whole.Observed() != part.Observed() {
				t.Fatalf("seed %d (split %d): record %d: restored %v, uninterrupted %v", seed, split, i, part, whole)
			}
			var r1, r2 bool
			w1, r1 = feed(whole, o, w1, l)
			w2, r2 = feed(part, o, w2, l)
			if r1 != r2 || w1 != w2 {
				t.Fatalf("seed %d (split %d): record %d: verdicts differ", seed, split, i)
			}
		}
		if !slices.Equal(whole.AppendEncode(nil), part.AppendEncode(nil)) {
			t.Fatalf("seed %d: encodings differ", seed)
		}
	}
}

func TestNoAllocationWhenWarm(t *testing.T) {
	for _, n := range []int{1, 7, 1000} {
		tr := mustTracker(t, Config{Strategy: Adaptive, DelayMs: 0, Percentile: 99, MaxMs: 1 << 40, Sample: n})
		rng := rand.New(rand.NewPCG(1, 1))
		for range n {
			tr.Observe(rng.Int64N(10_000), 0)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			tr.ObserveEvent(rng.Int64N(10_000), rng.Int64N(100), 10, 0)
		})
		if allocs != 0 {
			t.Errorf("sample %d: %v allocations per observation", n, allocs)
		}
	}
}
