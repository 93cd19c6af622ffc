package dedup

// hashIndex is the store's index of the first entries of its pairs
// (store.idx): a map from a pair's 64-bit hash (pairHash) to the ts of the
// entry. It is an open-addressing table with linear probing rather than a
// Go map: the lookup of every new event id misses (it was never seen), and
// a miss here is one probe sequence in one array, usually within a cache
// line, where a Go map of the same size costs about two and a half times
// as much (its directory, table and control word, then the slot for the
// insert that follows). The slots hold no pointers, so the garbage
// collector does not scan them.
//
// A slot's key 0 marks it empty; a hash of 0 is stored as 1 (slotKey), so
// the pairs hashing to 0 and 1 share a key: the second of them is a
// collision, which the store keeps in coll, as for any two pairs with one
// hash.
type hashIndex struct {
	slots []idxSlot // a power of two long, or nil
	n     int       // keys held
}

type idxSlot struct {
	key uint64 // slotKey(hash); 0: empty
	ts  int64
}

// minIndex is the smallest table; it grows at 3/4 full and shrinks by
// half below 1/8 full, so a table is 1/4 to 3/4 full after a resize and
// the probe sequences stay short.
const minIndex = 16

func slotKey(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// len returns the number of keys held.
func (x *hashIndex) len() int { return x.n }

// find returns the slot of key, or of the empty slot ending its probe
// sequence (then ok is false). The table is not empty of slots.
func (x *hashIndex) find(key uint64) (i int, ok bool) {
	mask := uint64(len(x.slots) - 1)
	for j := key & mask; ; j = (j + 1) & mask {
		switch x.slots[j].key {
		case key:
			return int(j), true
		case 0:
			return int(j), false
		}
	}
}

// get returns the ts stored for hash h.
func (x *hashIndex) get(h uint64) (ts int64, ok bool) {
	if x.n == 0 {
		return 0, false
	}
	i, ok := x.find(slotKey(h))
	return x.slots[i].ts, ok
}

// add stores ts for hash h unless h is held, and reports whether it did:
// one probe sequence for the test and the insert.
func (x *hashIndex) add(h uint64, ts int64) bool {
	if 4*(x.n+1) > 3*len(x.slots) {
		x.resize(max(minIndex, 2*len(x.slots)))
	}
	key := slotKey(h)
	i, ok := x.find(key)
	if ok {
		return false
	}
	x.slots[i] = idxSlot{key: key, ts: ts}
	x.n++
	return true
}

// del removes hash h, if held. The slots after it in its probe run move
// back (backward-shift deletion), so that no probe sequence has a hole:
// the table needs no tombstones.
func (x *hashIndex) del(h uint64) {
	if x.n == 0 {
		return
	}
	i, ok := x.find(slotKey(h))
	if !ok {
		return
	}
	mask := len(x.slots) - 1
	for j := (i + 1) & mask; x.slots[j].key != 0; j = (j + 1) & mask {
		// The key at j may fill the hole at i unless its home slot lies
		// cyclically in (i, j]: then i is before its probe sequence.
		home := int(x.slots[j].key) & mask
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = idxSlot{}
	x.n--
	if len(x.slots) > minIndex && 8*x.n < len(x.slots) {
		x.resize(len(x.slots) / 2)
	}
}

// resize rehashes into a table of n slots (a power of two that holds the
// keys).
func (x *hashIndex) resize(n int) {
	old := x.slots
	x.slots = make([]idxSlot, n)
	for _, s := range old {
		if s.key != 0 {
			i, _ := x.find(s.key)
			x.slots[i] = s
		}
	}
}
