package event

import (
	"math"
	"strconv"
)

// parseNumber reads a valid JSON number. It returns the nearest float64
// (±Inf beyond the float64 range) and, when the number is an exact integer
// within the int64 range whatever its notation, that integer.
//
// Exactness is decided on the decimal text, not on the float64: 1.0, 1e2 and
// 100.00 are the integers 1, 100 and 100, while 1.0000000000000000001 is not
// an integer even though it rounds to the float64 1.
func parseNumber(raw []byte) (float64, int64, bool) {
	plain := true
	for _, c := range raw {
		if c == '.' || c == 'e' || c == 'E' {
			plain = false
			break
		}
	}
	if plain {
		if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return float64(n), n, true
		}
	}
	f, _ := strconv.ParseFloat(string(raw), 64) // ErrRange yields ±Inf or 0
	n, ok := exactInt(raw)
	return f, n, ok
}

// exactInt reports whether the valid JSON number raw is an integer in the
// int64 range, and its value. It allocates nothing.
func exactInt(raw []byte) (int64, bool) {
	i := 0
	neg := raw[0] == '-'
	if neg {
		i++
	}
	intStart := i
	for i < len(raw) && isDigit(raw[i]) {
		i++
	}
	ip := raw[intStart:i]
	var fp []byte
	if i < len(raw) && raw[i] == '.' {
		i++
		s := i
		for i < len(raw) && isDigit(raw[i]) {
			i++
		}
		fp = raw[s:i]
	}
	exp := 0
	if i < len(raw) && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		eneg := false
		if raw[i] == '+' || raw[i] == '-' {
			eneg = raw[i] == '-'
			i++
		}
		for ; i < len(raw); i++ {
			if exp < 1_000_000 { // saturate: anything beyond is out of range
				exp = exp*10 + int(raw[i]-'0')
			}
		}
		if eneg {
			exp = -exp
		}
	}
	// value = digits(ip ++ fp) × 10^e
	at := func(k int) byte {
		if k < len(ip) {
			return ip[k]
		}
		return fp[k-len(ip)]
	}
	e := exp - len(fp)
	lo, hi := 0, len(ip)+len(fp)
	for hi > lo && at(hi-1) == '0' {
		hi--
		e++
	}
	for lo < hi && at(lo) == '0' {
		lo++
	}
	if lo == hi {
		return 0, true // zero, however written
	}
	if e < 0 {
		return 0, false // the last significant digit is below the units
	}
	if hi-lo+e > 19 {
		return 0, false // at least 10^19 > MaxInt64
	}
	var u uint64 // at most 19 digits: fits
	for k := lo; k < hi; k++ {
		u = u*10 + uint64(at(k)-'0')
	}
	for ; e > 0; e-- {
		u *= 10 // total digits <= 19: cannot overflow uint64
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return int64(-u), true // two's complement: u <= 2^63
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
