package window

import "math"

// Saturating int64 arithmetic. Timestamps are int64 milliseconds and the
// watermark may be NoWatermark (math.MinInt64), so W - L and friends must
// not wrap. Saturation keeps every comparison this package makes exact:
// a true value below MinInt64 compares like MinInt64 against any int64
// (ts < W - L is false either way), and one above MaxInt64 like MaxInt64.

// subSat returns a - b, clamped to [MinInt64, MaxInt64].
func subSat(a, b int64) int64 {
	r := a - b
	if b > 0 && r > a {
		return math.MinInt64
	}
	if b < 0 && r < a {
		return math.MaxInt64
	}
	return r
}

// addSat returns a + b, clamped to [MinInt64, MaxInt64].
func addSat(a, b int64) int64 {
	r := a + b
	if b > 0 && r < a {
		return math.MaxInt64
	}
	if b < 0 && r > a {
		return math.MinInt64
	}
	return r
}

// addChecked returns a + b and whether it did not overflow.
func addChecked(a, b int64) (int64, bool) {
	r := a + b
	if (b > 0 && r < a) || (b < 0 && r > a) {
		return 0, false
	}
	return r, true
}

// spanWithin reports hi - lo <= s for lo <= hi without overflow: the
// difference of two int64 with hi >= lo is exact as a uint64.
func spanWithin(lo, hi, s int64) bool {
	return uint64(hi-lo) <= uint64(s)
}
