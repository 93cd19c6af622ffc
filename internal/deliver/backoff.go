package deliver

import "time"

// ceiling is the upper bound of the backoff before retry n (n >= 1):
// min(Max, Initial*2^(n-1)), computed without overflow.
func (r RetryConfig) ceiling(n int) time.Duration {
	c := r.Initial
	for i := 1; i < n; i++ {
		if c >= r.Max || c > r.Max/2 {
			return r.Max
		}
		c *= 2
	}
	return min(c, r.Max)
}

// Backoff returns the wait before retry n (n = 1 is the first retry) with
// full jitter: rnd() * min(Max, Initial*2^(n-1)), rnd returning a uniformly
// random number in [0, 1). The result is in [0, ceiling]; n < 1 counts as 1.
func (r RetryConfig) Backoff(n int, rnd func() float64) time.Duration {
	n = max(n, 1)
	c := r.ceiling(n)
	f := rnd()
	if f < 0 || f >= 1 { // a broken source must not stretch the bound
		f = 0
	}
	return time.Duration(f * float64(c))
}
