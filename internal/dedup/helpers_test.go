package dedup

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func mustNew(tb testing.TB, h int64) *Set {
	tb.Helper()
	s, err := New(h)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// check verifies every internal invariant of s's store (and so of every
// view sharing it) and returns the first violation, or nil.
func (s *Set) check() error {
	st := s.st
	thr := st.pruneThr() // W - H, or the start of its bucket
	low := int64(math.MaxInt64)
	for _, v := range st.views {
		low = min(low, v.wm)
	}
	if st.wm != low {
		return fmt.Errorf("store W %d, the slowest view's %d", st.wm, low)
	}
	slow := 0
	for _, v := range st.views {
		if v.wm == low {
			slow++
		}
	}
	if slow != st.nSlow {
		return fmt.Errorf("%d views at the store's W, counted %d", slow, st.nSlow)
	}
	queued := make(map[dueEntry]bool, len(st.due))
	for i, e := range st.due {
		queued[e] = true
		if p := (i - 1) / 2; i > 0 && dueLess(e, st.due[p]) {
			return fmt.Errorf("due queue not a heap at %d", i)
		}
	}
	listed := make([]map[string]bool, len(st.views))
	for i, v := range st.views {
		listed[i] = make(map[string]bool, len(v.dirty))
		for _, k := range v.dirty {
			listed[i][k] = true
		}
	}
	all := uint64(1)<<len(st.views) - 1
	if len(st.views) == 64 {
		all = math.MaxUint64
	}
	nIDs := make([]int, len(st.views))
	pairs, more := 0, 0
	for k, ks := range st.keys {
		if ks.key != k || ks.deleted {
			return fmt.Errorf("key %q stored under %q, deleted %v", ks.key, k, ks.deleted)
		}
		live := ks.byTS[ks.head:]
		if len(live) == 0 {
			return fmt.Errorf("key %q is empty but kept", k)
		}
		for i, e := range ks.byTS[:ks.head] {
			if e != (entry{}) {
				return fmt.Errorf("key %q: expired slot %d not zeroed", k, i)
			}
		}
		byID := make(map[string][]int64)
		for i, e := range live {
			if i > 0 && cmpEntry(live[i-1], e) >= 0 {
				return fmt.Errorf("key %q: entries not increasing at %d", k, i)
			}
			if e.mask == 0 || e.mask&^all != 0 {
				return fmt.Errorf("key %q: id %q at %d: views %b of %d", k, e.id, e.ts, e.mask, len(st.views))
			}
			for i := range st.views {
				if e.mask&(1<<i) != 0 {
					nIDs[i]++
				}
			}
			if e.ts < thr {
				return fmt.Errorf("key %q: id %q at %d kept below %d (W - H, with buckets the start of its bucket)", k, e.id, e.ts, thr)
			}
			byID[e.id] = append(byID[e.id], e.ts)
		}
		for id, tss := range byID {
			pairs++
			first, _, ok := st.first(ks, id, st.pairHash(ks, id))
			rest := st.more[pair{k, id}]
			more += len(rest)
			got := append([]int64{first}, rest...)
			slices.Sort(got)
			if !ok || !slices.Equal(got, tss) {
				return fmt.Errorf("key %q: id %q held at %v, the index says %d (%v) then %v", k, id, tss, first, ok, rest)
			}
		}
		if int(ks.peak) < len(live) {
			return fmt.Errorf("key %q: peak %d below %d", k, ks.peak, len(live))
		}
		if d, ok := st.deadline(ks); ok {
			if !ks.scheduled || ks.sched > d || ks.sched <= st.wm || !queued[dueEntry{at: ks.sched, ks: ks}] {
				return fmt.Errorf("key %q: deadline %d, scheduled %v at %d (W %d), queued %v",
					k, d, ks.scheduled, ks.sched, st.wm, queued[dueEntry{at: ks.sched, ks: ks}])
			}
		}
		for i := range st.views {
			if ks.dirty&(1<<i) != 0 && !listed[i][k] {
				return fmt.Errorf("key %q dirty for view %d but not listed", k, i)
			}
		}
	}
	for i, v := range st.views {
		if nIDs[i] != v.nIDs {
			return fmt.Errorf("view %d: nIDs %d, keys hold %d", i, v.nIDs, nIDs[i])
		}
	}
	if st.idx.countLive()+len(st.coll) != pairs {
		return fmt.Errorf("the index holds %d + %d collided pairs, keys hold %d", st.idx.countLive(), len(st.coll), pairs)
	}
	if err := st.idx.check(); err != nil {
		return err
	}
	if st.idx.floor != thr {
		return fmt.Errorf("the index's floor %d, the store's W - H (with buckets the start of its bucket) %d", st.idx.floor, thr)
	}
	n := 0
	for _, ts := range st.more {
		n += len(ts)
	}
	if n != more {
		return fmt.Errorf("the index holds %d further entries, keys %d", n, more)
	}
	return nil
}

// ---- the brute-force model ----

// model is SPEC.md section 4 step 3 written the obvious way: every
// remembered (key, id) -> ts, forever, and the comparison with W - H.
type model struct {
	h, wm int64
	m     map[[2]string]int64
}

func newModel(h int64) *model {
	return &model{h: h, wm: NoWatermark, m: make(map[[2]string]int64)}
}

func (m *model) seen(key, id string, ts int64) bool {
	k := [2]string{key, id}
	thr := subSat(m.wm, m.h)
	if r, ok := m.m[k]; ok && r >= thr {
		return true
	}
	if ts < thr {
		// Expired already: not remembered, and the expired entry it
		// replaces is forgotten (a Set may still hold one whose bucket
		// has not expired whole: keepThr).
		delete(m.m, k)
		return false
	}
	m.m[k] = ts
	return false
}

// held returns, per key, the remembered entries a Set with buckets of
// bucketMs (0: none) holds: those with ts >= keepFrom(W, H, bucketMs),
// the live ones and those of their buckets that expired (keepThr).
func (m *model) held(bucketMs int64) (keys, ids int) {
	thr := keepFrom(m.wm, m.h, bucketMs)
	ks := make(map[string]bool)
	for k, ts := range m.m {
		if ts >= thr {
			ks[k[0]] = true
			ids++
		}
	}
	return len(ks), ids
}

func (m *model) advance(w int64) { m.wm = max(m.wm, w) }

// live returns, per key, the remembered entries with ts >= W - H, sorted:
// what the Set must hold.
func (m *model) live() map[string][]entry {
	thr := subSat(m.wm, m.h)
	out := make(map[string][]entry)
	for k, ts := range m.m {
		if ts >= thr {
			out[k[0]] = append(out[k[0]], entry{ts: ts, id: k[1]})
		}
	}
	for _, es := range out {
		slices.SortFunc(es, cmpEntry)
	}
	return out
}

// ---- random operation streams ----

type op struct {
	advance bool
	key, id string
	ts      int64 // Seen: the event's ts; Advance: the watermark
}

func (o op) String() string {
	if o.advance {
		return fmt.Sprintf("Advance(%d)", o.ts)
	}
	return fmt.Sprintf("Seen(%q, %q, %d)", o.key, o.id, o.ts)
}

func (o op) apply(s *Set) bool {
	if o.advance {
		s.Advance(o.ts)
		return false
	}
	return s.Seen(o.key, o.id, o.ts)
}

func (o op) applyModel(m *model) bool {
	if o.advance {
		m.advance(o.ts)
		return false
	}
	return m.seen(o.key, o.id, o.ts)
}

// genHorizon picks H, small enough that ids expire often, with the edges.
func genHorizon(rng *rand.Rand) int64 {
	switch rng.IntN(12) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return math.MaxInt64
	default:
		return 1 + rng.Int64N(200)
	}
}

// genOps returns a stream like a partition's: Seen calls for a few keys
// with few distinct ids (so that redeliveries and id reuse are frequent),
// event times around a moving clock (late, early, some far off and some at
// the int64 edges), and Advance calls to the clock minus a delay, sometimes
// jumping ahead or going back (a no-op).
func genOps(rng *rand.Rand, h int64, n int) []op {
	nKeys, nIDs := 1+rng.IntN(4), 1+rng.IntN(12)
	spread := 1 + rng.Int64N(max(1, min(h, 400))*2)
	clock := rng.Int64N(1000) - 500
	if rng.IntN(8) == 0 {
		clock = math.MaxInt64 - 3000 // near the top: deadlines overflow
	}
	ops := make([]op, 0, n)
	for range n {
		if rng.IntN(4) == 0 {
			w := clock - rng.Int64N(spread)
			switch rng.IntN(40) {
			case 0:
				w = math.MaxInt64
			case 1:
				w = clock + rng.Int64N(10*spread)
			case 2:
				w = NoWatermark
			}
			ops = append(ops, op{advance: true, ts: w})
			continue
		}
		if c := clock + rng.Int64N(3); c > clock {
			clock = c
		}
		ts := clock - rng.Int64N(spread) + rng.Int64N(spread/4+1)
		switch rng.IntN(60) {
		case 0:
			ts = math.MinInt64
		case 1:
			ts = math.MaxInt64
		case 2:
			ts = clock - 10*spread
		}
		ops = append(ops, op{
			key: fmt.Sprintf("k%d", rng.IntN(nKeys)),
			id:  strings.Repeat("e", rng.IntN(2)) + fmt.Sprint(rng.IntN(nIDs)),
			ts:  ts,
		})
	}
	return ops
}

// contents decodes every key of s: what it remembers.
func contents(tb testing.TB, s *Set) map[string][]entry {
	tb.Helper()
	out := make(map[string][]entry)
	for k := range s.st.keys {
		if s.EncodeKey(k) == nil {
			continue // held for another view only
		}
		es, err := decodeKey(s.EncodeKey(k))
		if err != nil {
			tb.Fatalf("EncodeKey(%q) does not decode: %v", k, err)
		}
		out[k] = es
	}
	return out
}
