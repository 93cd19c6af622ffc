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

// check verifies every internal invariant of s and returns the first
// violation, or nil.
func (s *Set) check() error {
	thr := subSat(s.wm, s.h)
	queued := make(map[dueEntry]bool, len(s.due))
	for i, e := range s.due {
		queued[e] = true
		if p := (i - 1) / 2; i > 0 && dueLess(e, s.due[p]) {
			return fmt.Errorf("due queue not a heap at %d", i)
		}
	}
	listed := make(map[string]bool, len(s.dirty))
	for _, k := range s.dirty {
		listed[k] = true
	}
	n := 0
	for k, ks := range s.keys {
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
		for i, e := range live {
			if i > 0 && cmpEntry(live[i-1], e) >= 0 {
				return fmt.Errorf("key %q: entries not increasing at %d", k, i)
			}
			if ts, ok := s.lookup(ks, e.id, s.pairHash(ks, e.id)); !ok || ts != e.ts {
				return fmt.Errorf("key %q: id %q at %d in the slice, the index says %d, %v", k, e.id, e.ts, ts, ok)
			}
			if e.ts < thr {
				return fmt.Errorf("key %q: id %q at %d kept below W - H = %d", k, e.id, e.ts, thr)
			}
		}
		if ks.peak < len(live) {
			return fmt.Errorf("key %q: peak %d below %d", k, ks.peak, len(live))
		}
		n += len(live)
		if d, ok := s.deadline(ks); ok {
			if !ks.scheduled || ks.sched > d || ks.sched <= s.wm || !queued[dueEntry{at: ks.sched, ks: ks}] {
				return fmt.Errorf("key %q: deadline %d, scheduled %v at %d (W %d), queued %v",
					k, d, ks.scheduled, ks.sched, s.wm, queued[dueEntry{at: ks.sched, ks: ks}])
			}
		}
		if ks.dirty && !listed[k] {
			return fmt.Errorf("key %q dirty but not listed", k)
		}
	}
	if n != s.nIDs {
		return fmt.Errorf("nIDs %d, keys hold %d", s.nIDs, n)
	}
	if len(s.idx)+len(s.coll) != n {
		return fmt.Errorf("the index holds %d + %d collided pairs, keys hold %d", len(s.idx), len(s.coll), n)
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
	if r, ok := m.m[k]; ok && r >= subSat(m.wm, m.h) {
		return true
	}
	m.m[k] = ts
	return false
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
	for k := range s.keys {
		es, err := decodeKey(s.EncodeKey(k))
		if err != nil {
			tb.Fatalf("EncodeKey(%q) does not decode: %v", k, err)
		}
		out[k] = es
	}
	return out
}
