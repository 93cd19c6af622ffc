package aggwindow

import (
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

var allKinds = []Kind{Tumbling, Hopping, Session}

// forEachConfig runs body for seeds x kinds x fns with a fixed-seed rng.
func forEachConfig(t *testing.T, seeds uint64, body func(t *testing.T, rng *rand.Rand, cfg Config)) {
	for _, kind := range allKinds {
		for _, fn := range allFns {
			t.Run(fmt.Sprintf("%s/%s", kind, fn), func(t *testing.T) {
				for seed := range seeds {
					rng := rand.New(rand.NewPCG(seed, uint64(kind)<<8|uint64(fn)))
					cfg := genConfig(rng, kind, fn)
					body(t, rng, cfg)
				}
			})
		}
	}
}

// TestReference: after all events and a final watermark advance, the
// closed windows (key, start, end, aggregate, count, evidence) are exactly
// the brute-force windows of the applied events whose final aggregate
// satisfies the (monotone) predicate. Arrival orders include too-late
// events; the applied set is what Process reported as Processed.
func TestReference(t *testing.T) {
	forEachConfig(t, 60, func(t *testing.T, rng *rand.Rand, cfg Config) {
		p := mustPartition(t, cfg)
		evs := arrive(rng, genEvents(rng, 1+rng.IntN(3), 10+rng.IntN(60), int64(rng.IntN(3)-1)*50, 200), int64(rng.IntN(120)))
		revs, applied := run(t, p, evs)
		checkRevisions(t, revs)
		var want []refWin
		for _, w := range reference(cfg, applied) {
			if cfg.Fires(w.agg, w.count) {
				want = append(want, w)
			}
		}
		got := closedWins(revs)
		if !slices.EqualFunc(got, want, sameWin) {
			t.Fatalf("config %+v\nclosed windows:\n%v\nreference:\n%v", cfg, got, want)
		}
		if st := p.Stats(); st != (Stats{}) {
			t.Fatalf("state left after the final advance: %+v", st)
		}
	})
}

// TestReferenceNonMonotone: with a predicate that can become false again
// (avg above a level, min above a level), every closed window still
// carries the brute-force aggregate, and every window whose final
// aggregate satisfies the predicate closed.
func TestReferenceNonMonotone(t *testing.T) {
	for _, kind := range allKinds {
		for _, fn := range []Fn{Avg, Min, Sum} {
			t.Run(fmt.Sprintf("%s/%s", kind, fn), func(t *testing.T) {
				for seed := range uint64(60) {
					rng := rand.New(rand.NewPCG(seed, 77))
					cfg := genConfig(rng, kind, fn)
					level := rng.Float64() * 8
					cfg.Fires = func(agg float64, _ int) bool { return agg >= level }
					p := mustPartition(t, cfg)
					evs := genEvents(rng, 2, 10+rng.IntN(60), 0, 200)
					for i := range evs {
						if fn == Sum && rng.IntN(3) == 0 {
							evs[i].Value = -evs[i].Value // sums that go down
						}
					}
					revs, applied := run(t, p, arrive(rng, evs, int64(rng.IntN(100))))
					checkRevisions(t, revs)
					ref := map[[2]any]refWin{}
					for _, w := range reference(cfg, applied) {
						ref[[2]any{w.key, w.start}] = w
					}
					closed := map[[2]any]bool{}
					for _, w := range closedWins(revs) {
						if r, ok := ref[[2]any{w.key, w.start}]; !ok || !sameWin(w, r) {
							t.Fatalf("closed %v, reference %v", w, r)
						}
						closed[[2]any{w.key, w.start}] = true
					}
					for k, w := range ref {
						if cfg.Fires(w.agg, w.count) && !closed[k] {
							t.Fatalf("window %v satisfies the predicate but did not close", w)
						}
					}
				}
			})
		}
	}
}

// TestReferenceTies: with few distinct values (-0 and +0 among them) and
// times, the evidence orders' leading keys tie often, also with the last
// event of a full evidence list, which then decides by the other fields
// (addToPane's cut must not decide a tie), and with an event's extreme
// (extOnly: the pane's unchanged or not); every window closes and names
// the brute-force evidence and count. (Not -0 for sums: the reference's exact sum
// of a lone -0 is +0.)
func TestReferenceTies(t *testing.T) {
	for _, kind := range allKinds {
		for _, fn := range allFns {
			values := []float64{math.Copysign(0, -1), 0, 1, 1, 2}
			if fn == Sum || fn == Avg {
				values = values[1:]
			}
			t.Run(fmt.Sprintf("%s/%s", kind, fn), func(t *testing.T) {
				for seed := range uint64(60) {
					rng := rand.New(rand.NewPCG(seed, 78))
					cfg := genConfig(rng, kind, fn)
					cfg.EvidenceLimit = 1 + rng.IntN(3)
					cfg.Fires = func(float64, int) bool { return true }
					cfg.FiresIgnoresCount = seed%2 == 0 // min, max: windows skip the events that leave their pane's extreme
					evs := genEvents(rng, 2, 20+rng.IntN(80), 0, 40)
					for i := range evs {
						evs[i].Value = values[rng.IntN(len(values))]
						evs[i].TS -= evs[i].TS % 4
					}
					revs, applied := run(t, mustPartition(t, cfg), arrive(rng, evs, cfg.LatenessMs+cfg.DelayMs))
					checkRevisions(t, revs)
					if got, want := closedWins(revs), reference(cfg, applied); !slices.EqualFunc(got, want, sameWin) {
						t.Fatalf("seed %d config %+v\nclosed windows:\n%v\nreference:\n%v", seed, cfg, got, want)
					}
				}
			})
		}
	}
}

// TestOrderIndependence: when every event arrives within the allowed
// lateness, the closed windows do not depend on the arrival order; for
// tumbling and hopping windows neither do the alert ids.
func TestOrderIndependence(t *testing.T) {
	forEachConfig(t, 30, func(t *testing.T, rng *rand.Rand, cfg Config) {
		cfg.LatenessMs = 1000 // > the span of the events: nothing is too late
		evs := genEvents(rng, 1+rng.IntN(3), 10+rng.IntN(50), 0, 300)
		var first []Revision
		for perm := range 6 {
			order := slices.Clone(evs)
			if perm > 0 {
				rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			}
			p := mustPartition(t, cfg)
			revs, applied := run(t, p, order)
			if len(applied) != len(evs) {
				t.Fatalf("%d of %d events applied", len(applied), len(evs))
			}
			closed := closedRevs(revs)
			if perm == 0 {
				first = closed
				continue
			}
			if len(closed) != len(first) {
				t.Fatalf("permutation %d: %d closed, first order %d", perm, len(closed), len(first))
			}
			for i := range closed {
				a, b := closed[i], first[i]
				if !sameWin(fromRevision(a), fromRevision(b)) || (cfg.Kind != Session && a.AlertID != b.AlertID) {
					t.Fatalf("permutation %d: closed %+v, first order %+v", perm, a, b)
				}
			}
		}
	})
}

func closedRevs(revs []Revision) []Revision {
	var out []Revision
	for _, r := range revs {
		if r.Status == Closed {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Revision) int {
		if a.Key != b.Key {
			if a.Key < b.Key {
				return -1
			}
			return 1
		}
		return int(a.Start - b.Start)
	})
	return out
}

// TestDeterminism: the same calls yield the same results.
func TestDeterminism(t *testing.T) {
	forEachConfig(t, 10, func(t *testing.T, rng *rand.Rand, cfg Config) {
		evs := arrive(rng, genEvents(rng, 3, 80, 0, 300), 80)
		a, _ := run(t, mustPartition(t, cfg), evs)
		b, _ := run(t, mustPartition(t, cfg), evs)
		if !reflect.DeepEqual(a, b) {
			t.Fatal("two runs of the same input differ")
		}
	})
}

// TestEncodeRoundTrip: a partition persisted through Dirty/DirtyPanes/
// EncodeKey/EncodePane/EncodeMeta after every record and reloaded at random
// points (entries in random order) yields the same results as one that
// never stopped, and ends in the same state.
func TestEncodeRoundTrip(t *testing.T) {
	forEachConfig(t, 20, func(t *testing.T, rng *rand.Rand, cfg Config) {
		evs := arrive(rng, genEvents(rng, 3, 60+rng.IntN(60), 0, 400), int64(rng.IntN(80)))
		ref := mustPartition(t, cfg)
		p := mustPartition(t, cfg)
		store := newMemStore()
		for i, e := range evs {
			q := i%4 != 3
			want := ref.Process(e, q)
			got := p.Process(e, q)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("record %d: after reloads\n got %+v\nwant %+v", i, got, want)
			}
			store.persist(p)
			if rng.IntN(8) == 0 {
				p = store.restore(t, cfg, rng)
				if p.Stats() != ref.Stats() {
					t.Fatalf("reloaded stats %+v, uninterrupted %+v", p.Stats(), ref.Stats())
				}
			}
		}
		if got, want := store.entries(), entriesOf(ref); !maps.Equal(got, want) {
			t.Fatalf("persisted state differs from the uninterrupted one:\n got %q\nwant %q", got, want)
		}
		if !reflect.DeepEqual(p.Advance(math.MaxInt64), ref.Advance(math.MaxInt64)) {
			t.Fatal("final closes differ")
		}
	})
}

// TestExactSum: the partial sums equal the exact sum rounded once, in any
// order, also where naive summation overflows or cancels.
func TestExactSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := [][]float64{
		{1e308, 1e308, -1e308},
		{1, 1e100, 1, -1e100},
		{0.1, 0.2, 0.3},
		{1e-280, -1e-280, 1e-270}, // (values below 2^-958 are rounded when scaled, as documented)
		{math.MaxFloat64, math.MaxFloat64},
		{-0.0, -0.0},
		{1, 0x1p-53, 0x1p-106},
	}
	for range 200 {
		n := 1 + rng.IntN(30)
		vs := make([]float64, n)
		for i := range vs {
			vs[i] = math.Ldexp(rng.Float64()-0.5, rng.IntN(120)-60)
		}
		cases = append(cases, vs)
	}
	for _, vs := range cases {
		exact := new(big.Float).SetPrec(8192)
		for _, v := range vs {
			exact.Add(exact, new(big.Float).SetPrec(8192).SetFloat64(v))
		}
		want, _ := exact.Float64()
		for range 5 {
			rng.Shuffle(len(vs), func(i, j int) { vs[i], vs[j] = vs[j], vs[i] })
			var a aggState
			for _, v := range vs {
				a.add(Sum, v)
			}
			got := a.value(Sum)
			if got != want && !(math.Abs(want) > math.MaxFloat64/2 && math.IsInf(got, 0)) {
				t.Fatalf("sum of %v = %v, exact %v", vs, got, want)
			}
			if len(a.partials) > maxPartials {
				t.Fatalf("%d partials", len(a.partials))
			}
		}
	}
}

// TestFiresIgnoresCount: with a threshold on the aggregate alone, the
// shortcut FiresIgnoresCount (a window is not judged again until its
// aggregate changes) gives exactly the revisions of judging every time.
func TestFiresIgnoresCount(t *testing.T) {
	forEachConfig(t, 40, func(t *testing.T, rng *rand.Rand, cfg Config) {
		level := rng.Float64() * 8
		if cfg.Fn == Count {
			level = float64(1 + rng.IntN(6))
		}
		cfg.Fires = func(agg float64, _ int) bool { return agg >= level }
		evs := arrive(rng, genEvents(rng, 1+rng.IntN(3), 10+rng.IntN(60), 0, 200), int64(rng.IntN(120)))
		slow := mustPartition(t, cfg)
		cfg.FiresIgnoresCount = true
		fast := mustPartition(t, cfg)
		want, _ := run(t, slow, evs)
		got, _ := run(t, fast, evs)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("level %v: with FiresIgnoresCount\n%v\nwithout\n%v", level, got, want)
		}
	})
}

// TestRevisionEvidenceOwned: the Evidence of a revision is the caller's
// (windowEvidence merges in the partition's scratch buffers, sessions copy
// theirs): nothing the partition does later, including overwriting what
// the caller received, changes an earlier revision's evidence or a later
// one's. Hopping windows of several panes each, so that revisions merge
// several panes' evidence in turn.
func TestRevisionEvidenceOwned(t *testing.T) {
	forEachConfig(t, 20, func(t *testing.T, rng *rand.Rand, cfg Config) {
		cfg.EvidenceLimit = 1 + rng.IntN(4)
		cfg.Fires = func(float64, int) bool { return true } // every change is a revision
		if cfg.Kind == Hopping {
			cfg.SizeMs, cfg.AdvanceMs = 40, 10*int64(1+rng.IntN(2))
		}
		p := mustPartition(t, cfg)
		evs := arrive(rng, genEvents(rng, 1+rng.IntN(3), 30+rng.IntN(60), 0, 200), int64(rng.IntN(60)))
		var revs []Revision
		var copies [][]Evidence
		keep := func(rs []Revision) {
			for _, r := range rs {
				for i := range r.Evidence { // a caller may change its own
					r.Evidence[i].EventID += "-scribbled"
				}
				revs = append(revs, r)
				copies = append(copies, slices.Clone(r.Evidence))
			}
		}
		for _, e := range evs {
			keep(p.Process(e, true).Revisions)
		}
		keep(p.Advance(math.MaxInt64))
		if len(revs) == 0 {
			t.Fatal("no revisions")
		}
		for i, r := range revs {
			if !slices.Equal(r.Evidence, copies[i]) {
				t.Fatalf("revision %d (%s %s r%d): evidence %v, was %v when emitted", i, r.Status, r.AlertID, r.Revision, evIDs(r.Evidence), evIDs(copies[i]))
			}
			for j := range r.Evidence {
				if !strings.HasSuffix(r.Evidence[j].EventID, "-scribbled") {
					t.Fatalf("revision %d evidence %d: %q, the caller's change is lost", i, j, r.Evidence[j].EventID)
				}
				if strings.Count(r.Evidence[j].EventID, "-scribbled") != 1 {
					t.Fatalf("revision %d evidence %d: %q, shares its slice with another revision", i, j, r.Evidence[j].EventID)
				}
			}
		}
	})
}

// TestProcessTo: ProcessTo writes what Process returns, overwriting every
// field of the Result it is given (one left from an earlier record).
func TestProcessTo(t *testing.T) {
	forEachConfig(t, 5, func(t *testing.T, rng *rand.Rand, cfg Config) {
		ref, p := mustPartition(t, cfg), mustPartition(t, cfg)
		evs := arrive(rng, genEvents(rng, 2, 60, 0, 200), int64(rng.IntN(80)))
		evs = append(evs, Event{Key: "k0", EventID: "x", TS: MaxTS + 1}, Event{Key: "k0", EventID: "y", TS: 100, Value: math.NaN()})
		stale := Result{Outcome: Processed, Revisions: []Revision{{AlertID: "stale"}}, Watermark: 1, LatenessMs: 2}
		for i, e := range evs {
			q := i%3 != 2
			want := ref.Process(e, q)
			got := stale
			p.ProcessTo(&got, &e, q)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("record %d: ProcessTo %+v, Process %+v", i, got, want)
			}
		}
	})
}
