package aggwindow

import (
	"cmp"
	"math"
)

// Exact summation.
//
// A sum is kept as a list of non-overlapping float64 partials in increasing
// magnitude whose exact sum is the exact sum of the values added
// (Shewchuk, "Adaptive precision floating-point arithmetic and fast robust
// geometric predicates", 1997; the msum/fsum of Python's math module). The
// partials' exact sum, rounded once to nearest-even, is independent of the
// order in which values were added, so sums and averages of a window depend
// only on its set of events. Usually one or two partials; at most about 40.
//
// Values are multiplied by 2^-64 before they are added (exact for every
// value of magnitude 2^-958 or more; a smaller one may be rounded, the same
// way whatever the order) so that no partial can overflow: the sum of fewer than
// 2^63 values of magnitude below 2^960 stays below 2^1023. The rounded sum is
// multiplied back by 2^64, which overflows to ±Inf only when the true sum is
// beyond the float64 range.

const (
	sumScale   = 0x1p-64
	sumUnscale = 0x1p64
)

// addPartial adds x (already scaled) to the partials ps and returns them.
func addPartial(ps []float64, x float64) []float64 {
	i := 0
	for _, y := range ps {
		if math.Abs(x) < math.Abs(y) {
			x, y = y, x
		}
		hi := x + y
		lo := y - (hi - x)
		if lo != 0 {
			ps[i] = lo
			i++
		}
		x = hi
	}
	return append(ps[:i], x)
}

// sumPartials returns the exact sum of the partials rounded to nearest-even
// (Python's fsum, final step).
func sumPartials(ps []float64) float64 {
	n := len(ps)
	if n == 0 {
		return 0
	}
	n--
	hi := ps[n]
	var lo float64
	for n > 0 {
		x := hi
		n--
		y := ps[n]
		hi = x + y
		yr := hi - x
		lo = y - yr
		if lo != 0 {
			break
		}
	}
	// Half-even rounding across partials: if the rest points the same way as
	// lo, hi + 2*lo is the correctly rounded result when it is exact.
	if n > 0 && ((lo < 0 && ps[n-1] < 0) || (lo > 0 && ps[n-1] > 0)) {
		y := lo * 2
		x := hi + y
		if yr := x - hi; y == yr {
			hi = x
		}
	}
	return hi
}

// aggState is a window's aggregate. Min and Max use the builtin min and
// max, which treat -0 as below +0 like math.Min and math.Max (the values
// are finite) and compile to a few instructions instead of a call.
type aggState struct {
	count    int
	partials []float64 // Sum, Avg: the scaled partials
	ext      float64   // Min, Max: the extreme value
}

func (a *aggState) add(fn Fn, v float64) {
	switch fn {
	case Sum, Avg:
		a.partials = addPartial(a.partials, v*sumScale)
	case Min:
		if a.count == 0 {
			a.ext = v
		} else {
			a.ext = min(a.ext, v)
		}
	case Max:
		if a.count == 0 {
			a.ext = v
		} else {
			a.ext = max(a.ext, v)
		}
	}
	a.count++
}

// merge adds b's events to a. a may be empty (a window rebuilt from its
// panes on load), b must not be.
func (a *aggState) merge(fn Fn, b *aggState) {
	if a.count == 0 && (fn == Min || fn == Max) {
		a.ext = b.ext // 0 is no extreme to compare with
	}
	switch fn {
	case Sum, Avg:
		for _, p := range b.partials {
			a.partials = addPartial(a.partials, p)
		}
	case Min:
		a.ext = min(a.ext, b.ext)
	case Max:
		a.ext = max(a.ext, b.ext)
	}
	a.count += b.count
}

// value returns the aggregate; a has count >= 1.
func (a *aggState) value(fn Fn) float64 {
	switch fn {
	case Count:
		return float64(a.count)
	case Sum:
		return sumPartials(a.partials) * sumUnscale
	case Avg:
		return sumPartials(a.partials) / float64(a.count) * sumUnscale
	default:
		return a.ext
	}
}

// cmpValue orders float64 values with -0 before +0 (NaN never occurs).
func cmpValue(a, b float64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return cmp.Compare(b2i(!math.Signbit(a)), b2i(!math.Signbit(b)))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cmpRest completes the evidence orders to a total order on every field.
func cmpRest(a, b *Evidence) int {
	if c := cmp.Compare(a.TS, b.TS); c != 0 {
		return c
	}
	if c := cmp.Compare(a.EventID, b.EventID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.SensorID, b.SensorID); c != 0 {
		return c
	}
	if c := cmpValue(a.Value, b.Value); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Partition, b.Partition); c != 0 {
		return c
	}
	return cmp.Compare(a.Offset, b.Offset)
}

// evOrder is the order in which an aggregation picks its evidence: the
// first EvidenceLimit events in it are the evidence. A method on a value
// rather than a func value, so that the compiler sees what a comparison
// does: a pointer to a local passed to it stays on the stack. The hot
// paths (addEvidence, pane.cut) compare the events' leading keys
// (evOrder.lead), integers that decide most comparisons, and call the
// full comparison only on a tie.
type evOrder uint8

const (
	byTime      evOrder = iota // count, sum, avg: cmpRest alone
	byValueAsc                 // min: smallest value first
	byValueDesc                // max: largest value first
)

// evidenceOrder returns the evidence order of fn.
func evidenceOrder(fn Fn) evOrder {
	switch fn {
	case Min:
		return byValueAsc
	case Max:
		return byValueDesc
	default:
		return byTime
	}
}

// cmp compares a and b in the order o.
func (o evOrder) cmp(a, b *Evidence) int {
	switch o {
	case byValueAsc:
		if c := cmpValue(a.Value, b.Value); c != 0 {
			return c
		}
	case byValueDesc:
		if c := cmpValue(b.Value, a.Value); c != 0 {
			return c
		}
	}
	return cmpRest(a, b)
}

// lead returns the leading key of e in the order o, an integer in the
// order of o's first comparison: the ts for byTime; for byValueAsc the
// value's bits with those of a negative value (but the sign) flipped, which
// orders finite values as cmpValue does (-0 before +0), and for
// byValueDesc their complement. So lead(a) < lead(b) implies that a comes
// before b, and on a tie cmpRest decides (before).
func (o evOrder) lead(e *Evidence) int64 {
	if o == byTime {
		return e.TS
	}
	b := int64(math.Float64bits(e.Value))
	b ^= int64(uint64(b>>63) >> 1)
	if o == byValueDesc {
		return ^b
	}
	return b
}

// before reports whether a, whose leading key is la, comes before b, whose
// leading key is lb: o.cmp(a, b) < 0.
func before(a *Evidence, la int64, b *Evidence, lb int64) bool {
	if la != lb {
		return la < lb
	}
	return cmpRest(a, b) < 0
}

// beyond reports whether e comes after every event whose leading key is k
// (o.lead): when it does, it comes after the last of a full evidence list
// with that key, and cannot enter it. It is false on a tie, which the
// other fields decide.
func (o evOrder) beyond(k int64, e *Evidence) bool { return o.lead(e) > k }

// addEvidence inserts *e into the sorted evidence ev, keeping at most
// limit. An event that comes after the last of limit kept ones (most of a
// busy pane's) costs one comparison and touches nothing else.
func addEvidence(ev []Evidence, e *Evidence, limit int, o evOrder) []Evidence {
	n := len(ev)
	le := o.lead(e)
	if n >= limit && (n == 0 || !before(e, le, &ev[n-1], o.lead(&ev[n-1]))) {
		return ev // limit 0, or e cannot enter
	}
	// The first i with ev[i] >= e (e goes before its equals, if any),
	// searched from the end, as the events after it are moved anyway: an
	// event in time order (count, sum, avg) is last, one that enters a
	// full min or max list goes anywhere, and a binary search's branches
	// are unpredictable.
	i := n
	for i > 0 && !before(&ev[i-1], o.lead(&ev[i-1]), e, le) {
		i--
	}
	if n < limit {
		if ev == nil {
			ev = make([]Evidence, 0, limit)
		}
		ev = append(ev, Evidence{})
	} // else the last one drops out
	copy(ev[i+1:], ev[i:len(ev)-1])
	ev[i] = *e
	return ev
}

// mergeEvidence returns the first limit events of the union of the sorted
// lists a and b, in a new slice.
func mergeEvidence(a, b []Evidence, limit int, o evOrder) []Evidence {
	return mergeInto(make([]Evidence, 0, min(limit, len(a)+len(b))), a, b, limit, o)
}

// mergeInto appends the first limit-len(dst) events of the union of the
// sorted lists a and b to dst, which must not overlap them.
func mergeInto(dst, a, b []Evidence, limit int, o evOrder) []Evidence {
	i, j := 0, 0
	for len(dst) < limit && (i < len(a) || j < len(b)) {
		if j == len(b) || (i < len(a) && o.cmp(&a[i], &b[j]) <= 0) {
			dst = append(dst, a[i])
			i++
		} else {
			dst = append(dst, b[j])
			j++
		}
	}
	return dst
}
