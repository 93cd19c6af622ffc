package aggwindow

import "math"

// subSat returns a - b for b >= 0, clamped at math.MinInt64 (W may be
// NoWatermark, and W - L must not wrap).
func subSat(a, b int64) int64 {
	if r := a - b; r <= a {
		return r
	}
	return math.MinInt64
}

// floorDiv returns floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// dueEntry queues a window by (a lower bound of) its end.
type dueEntry struct {
	at int64
	w  *win
}

// dueQueue is a binary min-heap of dueEntry by at.
type dueQueue []dueEntry

// headAt returns the at of the first entry, math.MaxInt64 when there is
// none (then nothing is due, whatever the watermark).
func (q dueQueue) headAt() int64 {
	if len(q) == 0 {
		return math.MaxInt64
	}
	return q[0].at
}

func (q *dueQueue) push(e dueEntry) {
	*q = append(*q, e)
	h := *q
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent].at <= h[i].at {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
}

func (q *dueQueue) pop() dueEntry {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = dueEntry{}
	h = h[:n]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h[l].at < h[m].at {
			m = l
		}
		if r < n && h[r].at < h[m].at {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}
