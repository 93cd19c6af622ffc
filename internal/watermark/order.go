package watermark

// kth is a multiset of values in [0, MaxDelayMs], each held by a slot in
// [0, MaxSample), that keeps its k-th smallest value available in O(1) and
// updates in O(log n) worst case, without allocating once its slices have
// grown to n.
//
// It is two binary heaps around the rank: lo holds the k smallest entries
// (a max-heap), hi the others (a min-heap), and every entry of lo is below
// every entry of hi. An entry is the value and its slot packed into one
// uint64, value<<slotBits | slot, so entries are distinct and compare by
// (value, slot); lo stores the bitwise complement of its entries, which
// turns the max-heap into a min-heap and lets both share one
// implementation. pos[slot] is the index of the slot's entry: i in lo, or
// ^i in hi, so that any slot's entry can be replaced in place.
//
// The k-th value depends only on the multiset of values; the heap layout
// (and the slot tie-break) does not matter to it.
type kth struct {
	k   int
	h   [2][]uint64 // h[lo], h[hi]
	pos []int32     // by slot
}

const (
	lo       = 0
	hi       = 1
	slotBits = 20 // 1<<20 > MaxSample
	slotMask = 1<<slotBits - 1
)

// Compile-time checks: an entry of the largest value and slot fits in a
// uint64 (a constant overflow does not compile), and every slot below
// MaxSample fits in slotBits (a negative uint constant does not compile).
const (
	_ uint64 = uint64(MaxDelayMs)<<slotBits | slotMask
	_ uint   = slotMask + 1 - MaxSample
)

func entry(v int64, slot int) uint64 { return uint64(v)<<slotBits | uint64(slot) }

// stored is the form of entry e in heap h.
func stored(h int, e uint64) uint64 {
	if h == lo {
		return ^e
	}
	return e
}

// len is the number of values held.
func (q *kth) len() int { return len(q.pos) }

// value is the k-th smallest value; the multiset holds at least k values.
func (q *kth) value() int64 { return int64(^q.h[lo][0] >> slotBits) }

// valueOf is the value held by slot.
func (q *kth) valueOf(slot int) int64 {
	p := q.pos[slot]
	if p >= 0 {
		return int64(^q.h[lo][p] >> slotBits)
	}
	return int64(q.h[hi][^p] >> slotBits)
}

// add inserts v in the next slot, len(): slots are added in order.
func (q *kth) add(v int64) {
	slot := len(q.pos)
	q.pos = append(q.pos, 0)
	e := entry(v, slot)
	if len(q.h[lo]) < q.k {
		// lo is short only while fewer than k values are held: hi is empty.
		q.push(lo, e)
		return
	}
	if top := ^q.h[lo][0]; e < top {
		// e joins the k smallest; lo's largest moves to hi.
		q.set(lo, 0, ^e)
		q.down(lo, 0)
		e = top
	}
	q.push(hi, e)
}

// replace sets the value of slot to v, in place.
func (q *kth) replace(slot int, v int64) {
	e := entry(v, slot)
	p := q.pos[slot]
	if p >= 0 { // in lo
		i := int(p)
		if len(q.h[hi]) == 0 || e < q.h[hi][0] {
			q.set(lo, i, ^e)
			q.fix(lo, i)
			return
		}
		// e belongs in hi: hi's smallest takes the slot's place in lo.
		m := q.h[hi][0]
		q.set(lo, i, ^m)
		q.fix(lo, i)
		q.set(hi, 0, e)
		q.down(hi, 0)
		return
	}
	i := int(^p) // in hi; lo holds k >= 1 values
	if e > ^q.h[lo][0] {
		q.set(hi, i, e)
		q.fix(hi, i)
		return
	}
	// e belongs in lo: lo's largest takes the slot's place in hi.
	m := ^q.h[lo][0]
	q.set(hi, i, m)
	q.fix(hi, i)
	q.set(lo, 0, ^e)
	q.down(lo, 0)
}

// set stores x (in heap h's form) at index i and indexes its slot.
func (q *kth) set(h, i int, x uint64) {
	q.h[h][i] = x
	s := int(stored(h, x) & slotMask)
	if h == lo {
		q.pos[s] = int32(i)
	} else {
		q.pos[s] = ^int32(i)
	}
}

func (q *kth) push(h int, e uint64) {
	q.h[h] = append(q.h[h], 0)
	i := len(q.h[h]) - 1
	q.set(h, i, stored(h, e))
	q.up(h, i)
}

func (q *kth) fix(h, i int) {
	if !q.up(h, i) {
		q.down(h, i)
	}
}

// up moves the element at i towards the root; it reports whether it moved.
func (q *kth) up(h, i int) bool {
	a := q.h[h]
	x := a[i]
	j := i
	for j > 0 {
		parent := (j - 1) / 2
		if a[parent] <= x {
			break
		}
		q.set(h, j, a[parent])
		j = parent
	}
	if j == i {
		return false
	}
	q.set(h, j, x)
	return true
}

func (q *kth) down(h, i int) {
	a := q.h[h]
	n := len(a)
	x := a[i]
	j := i
	for {
		c := 2*j + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && a[r] < a[c] {
			c = r
		}
		if x <= a[c] {
			break
		}
		q.set(h, j, a[c])
		j = c
	}
	if j != i {
		q.set(h, j, x)
	}
}
