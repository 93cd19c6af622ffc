package window

import "cmp"

// openIndex holds every open incident of the partition, ordered by
// (end, alert_id, key) — the SPEC's close order, with the key as a final
// tie-break so that the order is total even if two keys' ids collided. It is
// an indexed binary min-heap: each incident knows its position, so an end
// that grows is fixed in place and a merged incident is removed, both in
// O(log n); the next incident to close is always at the root.
type openIndex []*incident

func incLess(a, b *incident) bool {
	if a.end != b.end {
		return a.end < b.end
	}
	if c := cmp.Compare(a.alertID, b.alertID); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(a.ks.key, b.ks.key); c != 0 {
		return c < 0
	}
	return a.start < b.start
}

func (h *openIndex) push(inc *incident) {
	inc.hidx = len(*h)
	*h = append(*h, inc)
	h.up(inc.hidx)
}

// remove takes inc out of the index.
func (h *openIndex) remove(inc *incident) {
	i := inc.hidx
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	inc.hidx = -1
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
}

// fix restores the order after inc's end (or id) changed.
func (h *openIndex) fix(inc *incident) {
	if !h.down(inc.hidx) {
		h.up(inc.hidx)
	}
}

func (h openIndex) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx = i
	h[j].hidx = j
}

func (h openIndex) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !incLess(h[i], h[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h openIndex) down(i0 int) bool {
	i := i0
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && incLess(h[r], h[l]) {
			j = r
		}
		if !incLess(h[j], h[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// sweepEntry says that key may have something to prune once W >= at.
// Entries are lazy: one is valid only while the key still exists and its
// scheduled deadline equals at.
type sweepEntry struct {
	at  int64
	key string
}

// sweepQueue is a binary min-heap of sweepEntry by (at, key).
type sweepQueue []sweepEntry

func sweepLess(a, b sweepEntry) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.key < b.key
}

func (q *sweepQueue) push(e sweepEntry) {
	*q = append(*q, e)
	h := *q
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !sweepLess(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *sweepQueue) pop() sweepEntry {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = sweepEntry{}
	h = h[:last]
	*q = h
	i, n := 0, len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && sweepLess(h[r], h[l]) {
			j = r
		}
		if !sweepLess(h[j], h[i]) {
			break
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
	return top
}
