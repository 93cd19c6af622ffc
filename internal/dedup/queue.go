package dedup

// dueEntry says that ks may have ids to forget once W >= at. Entries are
// lazy: one is valid only while ks is not deleted, is scheduled, and its
// scheduled deadline equals at (see Set.reschedule). Holding the keyState
// rather than its key saves a map lookup per pop; a deleted keyState stays
// reachable only until its stale entries come due.
type dueEntry struct {
	at int64
	ks *keyState
}

// dueQueue is a binary min-heap of dueEntry by at. The order among equal
// deadlines is unspecified: when keys are pruned never shows in a verdict
// or an encoding, and Dirty sorts.
type dueQueue []dueEntry

func dueLess(a, b dueEntry) bool { return a.at < b.at }

func (q *dueQueue) push(e dueEntry) {
	*q = append(*q, e)
	h := *q
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !dueLess(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *dueQueue) pop() dueEntry {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = dueEntry{}
	h = h[:last]
	*q = h
	i, n := 0, len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && dueLess(h[r], h[l]) {
			j = r
		}
		if !dueLess(h[j], h[i]) {
			break
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
	return top
}
