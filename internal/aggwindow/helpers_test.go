package aggwindow

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
)

func testAlertID(key string, start int64) string { return fmt.Sprintf("%s@%d", key, start) }

func mustPartition(tb testing.TB, cfg Config) *Partition {
	tb.Helper()
	p, err := NewPartition(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// monotone returns a threshold predicate for fn that, for non-negative
// values, once true stays true as events are added: so a window fires iff
// its final aggregate satisfies it, whatever the arrival order.
func monotone(rng *rand.Rand, fn Fn) func(float64, int) bool {
	switch fn {
	case Sum:
		x := rng.Float64() * 30
		return func(agg float64, _ int) bool { return agg >= x }
	case Min:
		x := rng.Float64() * 5
		return func(agg float64, _ int) bool { return agg <= x }
	case Max:
		x := rng.Float64() * 10
		return func(agg float64, _ int) bool { return agg >= x }
	default: // Count, Avg: by count
		n := 1 + rng.IntN(4)
		return func(_ float64, count int) bool { return count >= n }
	}
}

var allFns = []Fn{Count, Sum, Avg, Min, Max}

// genConfig returns a random small config of kind and fn.
func genConfig(rng *rand.Rand, kind Kind, fn Fn) Config {
	cfg := Config{
		Kind:          kind,
		Fn:            fn,
		DelayMs:       int64(rng.IntN(20)),
		LatenessMs:    int64(rng.IntN(60)),
		EvidenceLimit: rng.IntN(4),
		Fires:         monotone(rng, fn),
		AlertID:       testAlertID,
	}
	switch kind {
	case Tumbling:
		cfg.SizeMs = int64(5 + rng.IntN(40))
	case Hopping:
		cfg.SizeMs = int64(5 + rng.IntN(40))
		cfg.AdvanceMs = int64(1 + rng.IntN(int(cfg.SizeMs)))
	case Session:
		cfg.GapMs = int64(1 + rng.IntN(25))
	}
	return cfg
}

// genEvents returns n events over keys k0.. with ts in [base, base+span) and
// non-negative values with full float64 precision (naive summation of these
// depends on the order).
func genEvents(rng *rand.Rand, keys, n int, base, span int64) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = Event{
			Key:       fmt.Sprintf("k%d", rng.IntN(keys)),
			EventID:   fmt.Sprintf("e%03d", i),
			SensorID:  fmt.Sprintf("s%d", rng.IntN(3)),
			TS:        base + rng.Int64N(span),
			Value:     rng.Float64() * 10,
			Partition: 0,
			Offset:    int64(i),
		}
		if rng.IntN(10) == 0 {
			evs[i].Value = float64(rng.IntN(4)) // ties for min/max evidence
		}
	}
	return evs
}

// arrive returns evs in an arrival order: sorted by ts, then every event
// displaced by a random delay of up to maxDelay (so with maxDelay <= L + D
// nothing is too late).
func arrive(rng *rand.Rand, evs []Event, maxDelay int64) []Event {
	type arr struct {
		at int64
		ev Event
	}
	as := make([]arr, len(evs))
	for i, e := range evs {
		as[i] = arr{at: e.TS + rng.Int64N(maxDelay+1), ev: e}
	}
	slices.SortStableFunc(as, func(a, b arr) int { return cmp.Compare(a.at, b.at) })
	out := make([]Event, len(as))
	for i := range as {
		out[i] = as[i].ev
	}
	return out
}

// win is a window as the reference computes it.
type refWin struct {
	key        string
	start, end int64
	agg        float64
	count      int
	evidence   []Evidence
}

func (w refWin) String() string {
	return fmt.Sprintf("%s [%d,%d) agg=%v count=%d ev=%v", w.key, w.start, w.end, w.agg, w.count, evIDs(w.evidence))
}

func evIDs(ev []Evidence) []string {
	ids := make([]string, len(ev))
	for i := range ev {
		ids[i] = ev[i].EventID
	}
	return ids
}

func toEvidence(e Event) Evidence {
	return Evidence{EventID: e.EventID, SensorID: e.SensorID, TS: e.TS, Value: e.Value, Partition: e.Partition, Offset: e.Offset}
}

// refAggregate computes fn over the events by brute force: the sum exactly
// with math/big, rounded once to nearest-even.
func refAggregate(fn Fn, evs []Event) float64 {
	switch fn {
	case Count:
		return float64(len(evs))
	case Sum, Avg:
		s := new(big.Float).SetPrec(4096)
		for _, e := range evs {
			s.Add(s, new(big.Float).SetPrec(4096).SetFloat64(e.Value))
		}
		f, _ := s.Float64()
		if fn == Avg {
			return f / float64(len(evs))
		}
		return f
	case Min:
		m := math.Inf(1)
		for _, e := range evs {
			m = math.Min(m, e.Value)
		}
		return m
	default:
		m := math.Inf(-1)
		for _, e := range evs {
			m = math.Max(m, e.Value)
		}
		return m
	}
}

func refWindowOf(cfg Config, key string, start, end int64, evs []Event) refWin {
	ev := make([]Evidence, len(evs))
	for i := range evs {
		ev[i] = toEvidence(evs[i])
	}
	slices.SortFunc(ev, func(a, b Evidence) int { return evidenceOrder(cfg.Fn).cmp(&a, &b) })
	return refWin{key: key, start: start, end: end, agg: refAggregate(cfg.Fn, evs), count: len(evs), evidence: ev[:min(len(ev), cfg.EvidenceLimit)]}
}

// reference computes every window of the applied events by brute force,
// sorted by (key, start).
func reference(cfg Config, applied []Event) []refWin {
	byKey := map[string][]Event{}
	for _, e := range applied {
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	var out []refWin
	for key, evs := range byKey {
		slices.SortFunc(evs, func(a, b Event) int { return cmp.Compare(a.TS, b.TS) })
		if cfg.Kind == Session {
			i := 0
			for i < len(evs) {
				j := i + 1
				for j < len(evs) && evs[j].TS-evs[j-1].TS < cfg.GapMs {
					j++
				}
				out = append(out, refWindowOf(cfg, key, evs[i].TS, evs[j-1].TS+cfg.GapMs, evs[i:j]))
				i = j
			}
			continue
		}
		adv := cfg.AdvanceMs
		if cfg.Kind == Tumbling {
			adv = cfg.SizeMs
		}
		// Every grid start from below the first event's earliest window to
		// the last event; a window is kept when it holds events.
		lo := evs[0].TS - cfg.SizeMs
		lo -= ((lo % adv) + adv) % adv
		for s := lo; s <= evs[len(evs)-1].TS; s += adv {
			var in []Event
			for _, e := range evs {
				if e.TS >= s && e.TS < s+cfg.SizeMs {
					in = append(in, e)
				}
			}
			if len(in) > 0 {
				out = append(out, refWindowOf(cfg, key, s, s+cfg.SizeMs, in))
			}
		}
	}
	slices.SortFunc(out, func(a, b refWin) int {
		if c := cmp.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.start, b.start)
	})
	return out
}

func fromRevision(r Revision) refWin {
	return refWin{key: r.Key, start: r.Start, end: r.End, agg: r.Agg, count: r.Count, evidence: r.Evidence}
}

func sameWin(a, b refWin) bool {
	return a.key == b.key && a.start == b.start && a.end == b.end &&
		math.Float64bits(a.agg) == math.Float64bits(b.agg) && a.count == b.count &&
		slices.EqualFunc(a.evidence, b.evidence, func(x, y Evidence) bool { return x == y })
}

// closedWins returns the Closed revisions as windows, sorted by (key, start).
func closedWins(revs []Revision) []refWin {
	var out []refWin
	for _, r := range revs {
		if r.Status == Closed {
			out = append(out, fromRevision(r))
		}
	}
	slices.SortFunc(out, func(a, b refWin) int {
		if c := cmp.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.start, b.start)
	})
	return out
}

// checkRevisions checks the life cycle of every alert: revision 0 Open,
// then +1 each, nothing after Merged or Closed, Merged points at an alert
// that is alive, Closed never late.
func checkRevisions(t *testing.T, revs []Revision) {
	t.Helper()
	type life struct {
		rev   int
		final bool
	}
	alerts := map[string]*life{}
	for i, r := range revs {
		l := alerts[r.AlertID]
		switch {
		case r.Status == Open:
			if l != nil || r.Revision != 0 {
				t.Fatalf("revision %d: open of known alert or revision %d: %+v", i, r.Revision, r)
			}
			alerts[r.AlertID] = &life{}
			continue
		case l == nil:
			t.Fatalf("revision %d: %s of unknown alert %q", i, r.Status, r.AlertID)
		case l.final:
			t.Fatalf("revision %d: %s after the final revision of %q", i, r.Status, r.AlertID)
		case r.Revision != l.rev+1:
			t.Fatalf("revision %d: %q revision %d after %d", i, r.AlertID, r.Revision, l.rev)
		}
		l.rev = r.Revision
		switch r.Status {
		case Merged:
			l.final = true
			if s := alerts[r.MergedInto]; s == nil || s.final || r.MergedInto == r.AlertID {
				t.Fatalf("revision %d: merged into %q, not a live alert", i, r.MergedInto)
			}
		case Closed:
			l.final = true
			if r.Late {
				t.Fatalf("revision %d: late closed", i)
			}
		}
	}
}

// run feeds evs (all qualifying; every fifth also preceded by a
// non-qualifying record that only moves the watermark) and a final
// Advance(MaxInt64), returning every revision and the applied events.
func run(t testing.TB, p *Partition, evs []Event) (revs []Revision, applied []Event) {
	for i, e := range evs {
		if i%5 == 4 {
			f := e
			f.EventID += "-filtered"
			f.TS -= 3
			res := p.Process(f, false)
			if res.Outcome != Filtered {
				t.Fatalf("non-qualifying record: outcome %s", res.Outcome)
			}
			revs = append(revs, res.Revisions...)
		}
		res := p.Process(e, true)
		if res.Outcome == Processed {
			applied = append(applied, e)
		}
		revs = append(revs, res.Revisions...)
	}
	revs = append(revs, p.Advance(math.MaxInt64)...)
	return revs, applied
}
