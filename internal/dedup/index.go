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
//
// Deletion is lazy. A slot whose ts is below floor (the store's keepThr:
// W - H, or with buckets the start of its bucket; the store holds nothing
// below it) is stale: lookups pass over it as
// over another key's slot, and add reuses it. So an entry that expires
// costs the index nothing: the store only counts it (expire), instead of a
// probe into a random slot and a backward shift. Stale slots are dropped
// when the table is rebuilt (rebuild), once live and stale slots fill 3/4
// of it, or once the live ones fill less than 1/8. Entries that go before
// they expire (a view forgetting an id that no other view remembers) are
// deleted at once (del).
type hashIndex struct {
	slots []idxSlot // a power of two long, or nil
	n     int       // occupied slots: live and stale
	gone  int       // stale slots since the last rebuild, as far as expire was told
	floor int64     // slots with ts < floor are stale
}

type idxSlot struct {
	key uint64 // slotKey(hash); 0: empty
	ts  int64
}

// minIndex is the smallest table. It is rebuilt when its occupied slots
// (live or stale) would exceed 3/4; the rebuild drops the stale ones, and
// doubles the table if more than half of it is live, or halves it while
// less than 1/8 is, so probe sequences stay short and a table is at most
// half live after a rebuild (at least 1/4 when it was resized).
const minIndex = 16

func slotKey(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// find returns the slot of key (live or stale), or of the empty slot
// ending its probe sequence (then ok is false). The table is not empty of
// slots. No key occupies two slots: add reuses a key's own slot.
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

// get returns the ts stored for hash h, unless its slot is stale.
func (x *hashIndex) get(h uint64) (ts int64, ok bool) {
	if x.n == 0 {
		return 0, false
	}
	i, ok := x.find(slotKey(h))
	s := x.slots[i]
	return s.ts, ok && s.ts >= x.floor
}

// add stores ts for hash h unless h is held (live), and reports whether it
// did: one probe sequence for the test and the insert. It takes h's own
// stale slot, else the first stale slot of the probe sequence, else the
// empty one ending it.
func (x *hashIndex) add(h uint64, ts int64) bool {
	if 4*(x.n+1) > 3*len(x.slots) {
		x.rebuild()
	}
	key := slotKey(h)
	mask := uint64(len(x.slots) - 1)
	free := -1
	for j := key & mask; ; j = (j + 1) & mask {
		s := &x.slots[j]
		switch {
		case s.key == key:
			if s.ts >= x.floor {
				return false
			}
			s.ts = ts
			x.gone--
			return true
		case s.key == 0:
			if free < 0 {
				free = int(j)
				x.n++
			} else {
				x.gone--
			}
			x.slots[free] = idxSlot{key: key, ts: ts}
			return true
		case free < 0 && s.ts < x.floor:
			free = int(j)
		}
	}
}

// expire tells the index that the store let one of its slots go stale
// (its entry expired for every view).
func (x *hashIndex) expire() { x.gone++ }

// setFloor moves the floor to f. Moving it down would revive stale slots:
// they are dropped first.
func (x *hashIndex) setFloor(f int64) {
	if f < x.floor && x.n > 0 {
		x.rebuild()
	}
	x.floor = f
}

// shrink rebuilds the table once less than 1/8 of it is live (as far as
// expire was told), so that a store that empties gives its memory back.
func (x *hashIndex) shrink() {
	if len(x.slots) > minIndex && 8*(x.n-x.gone) < len(x.slots) {
		x.rebuild()
	}
}

// del removes hash h, if held (live or stale). The slots after it in its
// probe run move back (backward-shift deletion), so that no probe sequence
// has a hole.
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
}

// rebuild drops the stale slots and resizes the table if the live ones
// fill more than half of it (less one slot, for the add that asked) or,
// above minIndex, less than 1/8: to the smallest size (at least minIndex)
// that they fill at most half of. A table that keeps its size is purged
// in place. One that is resized needs no purge, as resize leaves the
// stale slots behind: when the slots known to be stale (gone) say it will
// be, the live ones are counted in one read of the table and resize alone
// rebuilds it. (A growing store's rebuilds all resize, and purging first
// moved every slot once for nothing.)
func (x *hashIndex) rebuild() {
	if x.resizes(x.n - x.gone) {
		if live := x.countLive(); x.resizes(live) {
			x.resize(indexSize(live))
			x.n, x.gone = live, 0
			return
		}
	}
	live := 0
	if x.slots != nil {
		live = x.purge()
	}
	if x.resizes(live) {
		x.resize(indexSize(live))
	}
	x.n, x.gone = live, 0
}

// resizes reports whether a table with live live slots is resized when it
// is rebuilt.
func (x *hashIndex) resizes(live int) bool {
	n := len(x.slots)
	return 2*(live+1) > n || (n > minIndex && 8*live < n)
}

// indexSize is the table size for live live slots: the smallest power of two
// of at least minIndex that they fill at most half of, with one slot more.
func indexSize(live int) int {
	size := minIndex
	for size < 2*(live+1) {
		size *= 2
	}
	return size
}

// countLive returns how many slots are live (occupied and not stale): one
// read of the table, in order.
func (x *hashIndex) countLive() int {
	live := 0
	for i := range x.slots {
		if s := &x.slots[i]; s.key != 0 && s.ts >= x.floor {
			live++
		}
	}
	return live
}

// purge empties the stale slots in place, moves every live one to the
// first free slot of its probe sequence and returns how many are live.
// Starting after an empty slot and going once around the table, a run of
// occupied slots is treated in probe order: when slot j is reached, every
// slot before it in its run is final (live or empty), so the entry taken
// out of j finds a place at or before j, and every slot it probes past
// stays occupied.
func (x *hashIndex) purge() int {
	mask := uint64(len(x.slots) - 1)
	start, _ := x.find(0) // an empty slot: the table is never full
	live := 0
	for k := 1; k < len(x.slots); k++ {
		j := (uint64(start) + uint64(k)) & mask
		s := x.slots[j]
		if s.key == 0 {
			continue
		}
		x.slots[j] = idxSlot{}
		if s.ts < x.floor {
			continue
		}
		live++
		i := s.key & mask
		for x.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		x.slots[i] = s
	}
	return live
}

// resize moves the live slots into a new table of n slots (a power of two
// that holds them); the stale ones are dropped.
func (x *hashIndex) resize(n int) {
	old := x.slots
	x.slots = make([]idxSlot, n)
	for _, s := range old {
		if s.key != 0 && s.ts >= x.floor {
			i, _ := x.find(s.key)
			x.slots[i] = s
		}
	}
}
