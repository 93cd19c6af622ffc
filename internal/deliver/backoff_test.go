package deliver

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoffCeilingDoublesUpToMax(t *testing.T) {
	r := RetryConfig{Initial: 100 * time.Millisecond, Max: 3 * time.Second}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3 * time.Second, 3 * time.Second}
	for i, w := range want {
		if got := r.ceiling(i + 1); got != w {
			t.Errorf("ceiling(%d) = %s, want %s", i+1, got, w)
		}
	}
	// No overflow, however many retries.
	for _, n := range []int{64, 100, 1_000_000} {
		if got := r.ceiling(n); got != r.Max {
			t.Errorf("ceiling(%d) = %s, want max %s", n, got, r.Max)
		}
	}
	huge := RetryConfig{Initial: time.Hour, Max: 24 * time.Hour}
	if got := huge.ceiling(200); got != huge.Max {
		t.Errorf("ceiling(200) with initial 1h = %s, want %s", got, huge.Max)
	}
}

func TestBackoffFullJitterBounds(t *testing.T) {
	r := RetryConfig{Initial: 50 * time.Millisecond, Max: time.Second}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 12; n++ {
		c := r.ceiling(n)
		lo, hi := c, time.Duration(0)
		for range 2000 {
			d := r.Backoff(n, rng.Float64)
			if d < 0 || d > c {
				t.Fatalf("Backoff(%d) = %s, outside [0, %s]", n, d, c)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// Full jitter: the whole range is used, not just its top.
		if lo > c/20 || hi < c-c/20 {
			t.Errorf("Backoff(%d): 2000 samples span [%s, %s], want about [0, %s]", n, lo, hi, c)
		}
	}
	// Extremes of the random source.
	if got := r.Backoff(3, func() float64 { return 0 }); got != 0 {
		t.Errorf("rnd 0: %s, want 0", got)
	}
	if got := r.Backoff(3, func() float64 { return 0.999999 }); got > r.ceiling(3) || got < r.ceiling(3)*99/100 {
		t.Errorf("rnd ~1: %s, want just under %s", got, r.ceiling(3))
	}
	// A broken source (outside [0,1)) cannot stretch the bound.
	for _, f := range []float64{1, 7, -3} {
		if got := r.Backoff(2, func() float64 { return f }); got < 0 || got > r.ceiling(2) {
			t.Errorf("rnd %v: %s outside [0, %s]", f, got, r.ceiling(2))
		}
	}
	if got := r.Backoff(0, func() float64 { return 0.5 }); got != r.ceiling(1)/2 {
		t.Errorf("Backoff(0) = %s, want it treated as the first retry (%s)", got, r.ceiling(1)/2)
	}
}
