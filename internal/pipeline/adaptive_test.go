package pipeline

import (
	"slices"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/internal/sim"
)

func compileRule(t testing.TB, mutate func(*rules.Rule)) *rules.Compiled {
	t.Helper()
	r := rules.DefaultRule()
	r.ID, r.Version, r.Description, r.Source = "adaptive", 1, "high-vibration events", "in"
	r.Filter = `value >= 7.1 && quality == "good"`
	r.Window = rules.Window{Type: rules.Sliding, Size: rules.Duration(2 * time.Minute)}
	r.Threshold = "count >= 3"
	r.Outputs.Alerts = "alerts"
	if mutate != nil {
		mutate(&r)
	}
	c, err := rules.Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// persist copies a partition's whole state into a fresh one through its
// encodings, as a restore from the changelog does: the dirty entries into
// store ("k" + name, "s" + bucket entry name, "m", "x", as consume names
// them), then every stored entry loaded in map order (random).
func persist(t testing.TB, s *Stage, w *Partition, store map[string][]byte) *Partition {
	t.Helper()
	put := func(name string, v []byte) {
		if len(v) == 0 {
			delete(store, name)
		} else {
			store[name] = v
		}
	}
	names, meta := w.Dirty()
	for _, n := range names {
		put("k"+n, w.EncodeKey(n))
	}
	for _, n := range w.DirtyBuckets() {
		put("s"+n, w.EncodeBucket(n))
	}
	if meta {
		store["m"] = w.EncodeMeta()
	}
	if w.ExtraDirty() {
		store["x"] = w.EncodeExtra()
	}
	w.ClearDirty()
	fresh := s.NewPartition()
	for name, v := range store {
		var err error
		switch {
		case name == "m":
			err = fresh.LoadMeta(v)
		case name == "x":
			err = fresh.LoadExtra(v)
		case name[0] == 's':
			err = fresh.LoadBucket(name[1:], v)
		default:
			err = fresh.LoadKey(name[1:], v)
		}
		if err != nil {
			t.Fatalf("load %q: %v", name, err)
		}
	}
	if err := fresh.FinishLoad(); err != nil {
		t.Fatal(err)
	}
	fresh.ClearLoaded()
	if names, meta := fresh.Dirty(); len(names) != 0 || meta || len(fresh.DirtyBuckets()) != 0 {
		t.Fatalf("a load of the current format left entries dirty: %q %v %q", names, meta, fresh.DirtyBuckets())
	}
	return fresh
}

func troubledLine(seed uint64, n int) []Input {
	o := sim.Demo()
	o.Seed, o.Machines, o.EpisodeRate = seed, 6, 0.03
	o.OutageRate, o.OutageLength = 0.003, 3*time.Minute // replays minutes behind
	line := sim.New(o)
	out := make([]Input, n)
	for i := range out {
		out[i] = input(0, int64(i), line.Next())
	}
	return out
}

// The adaptive watermark is a function of the log: a run restored from its
// persisted state at many points (as after crashes and rebalances) emits
// exactly what an uninterrupted run emits, and two runs agree.
func TestAdaptiveWatermarkDeterministicUnderRestore(t *testing.T) {
	for _, kind := range []string{rules.Sliding, rules.Tumbling, rules.Session} {
		t.Run(kind, func(t *testing.T) {
			c := compileRule(t, func(r *rules.Rule) {
				r.Watermark = rules.Watermark{Strategy: rules.WatermarkAdaptive, Delay: rules.Duration(30 * time.Second),
					Percentile: 90, Min: 0, Max: rules.Duration(5 * time.Minute), Sample: 200}
				switch kind {
				case rules.Tumbling:
					r.Window = rules.Window{Type: rules.Tumbling, Size: rules.Duration(time.Minute)}
					r.Aggregate = rules.Aggregate{Fn: rules.FnAvg, Field: "value"}
					r.Threshold = "agg > 7.5 && count >= 3"
				case rules.Session:
					r.Window = rules.Window{Type: rules.Session, Gap: rules.Duration(20 * time.Second)}
					r.Threshold = "count >= 4"
				}
			})
			s, err := NewRuleStage(c, Options{})
			if err != nil {
				t.Fatal(err)
			}
			log := troubledLine(3, 20_000)
			run := func(restoreEvery int) ([]string, Accounting, int) {
				var out []string
				acct := Accounting{Version: 1}
				w := s.NewPartition()
				store := map[string][]byte{}
				risk := 0
				for i, in := range log {
					if restoreEvery > 0 && i%restoreEvery == restoreEvery-1 {
						w.Sweep()
						risk += w.TakeAtRisk()
						w = persist(t, s, w, store)
					}
					s.Process(w, in, &acct, func(o Output) { out = append(out, string(o.Key)+"|"+Fingerprint(o.Value, o.Headers)) })
				}
				return out, acct, risk + w.TakeAtRisk()
			}
			a, acctA, riskA := run(0)
			b, acctB, riskB := run(0)
			c1, acctC, riskC := run(997)
			if !slices.Equal(a, b) || acctA != acctB || riskA != riskB {
				t.Fatal("two uninterrupted runs differ")
			}
			if !slices.Equal(a, c1) || acctA != acctC || riskA != riskC {
				t.Fatalf("restored run differs: %d vs %d outputs, accounting %+v vs %+v, at risk %d vs %d", len(a), len(c1), acctA, acctC, riskA, riskC)
			}
			if len(a) == 0 || !acctA.Balanced() {
				t.Fatalf("%d outputs, accounting %+v: the fixture proves nothing", len(a), acctA)
			}
			t.Logf("%d outputs, accounting %+v, %d events at risk", len(a), acctA, riskA)
		})
	}
}

// The adaptive delay follows the observed delays: with gateways replaying
// minutes late, it grows above its minimum (the fixed delay here), fewer
// records are too late than with the fixed delay, and the events it saved
// are counted as at risk.
func TestAdaptiveWatermarkSavesLateEvents(t *testing.T) {
	fixed := compileRule(t, func(r *rules.Rule) { r.AllowedLateness = rules.Duration(time.Minute) })
	adaptive := compileRule(t, func(r *rules.Rule) {
		r.AllowedLateness = rules.Duration(time.Minute)
		r.Watermark = rules.Watermark{Strategy: rules.WatermarkAdaptive, Delay: rules.Duration(30 * time.Second),
			Percentile: 99, Min: rules.Duration(30 * time.Second), Max: rules.Duration(10 * time.Minute), Sample: 500}
	})
	log := troubledLine(9, 30_000)
	count := func(c *rules.Compiled) (Accounting, int, int64) {
		s, err := NewRuleStage(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		w := s.NewPartition()
		acct := Accounting{Version: 1}
		for _, in := range log {
			s.Process(w, in, &acct, func(Output) {})
		}
		d, _ := w.DelayMs()
		return acct, w.TakeAtRisk(), d
	}
	fa, _, _ := count(fixed)
	aa, risk, delay := count(adaptive)
	t.Logf("fixed: %+v; adaptive: %+v, %d at risk, final delay %dms", fa, aa, risk, delay)
	if fa.TooLate == 0 {
		t.Fatal("nothing too late with the fixed delay: the fixture proves nothing")
	}
	if aa.TooLate >= fa.TooLate || risk == 0 || int64(risk) > fa.TooLate {
		t.Errorf("adaptive: %d too late (fixed %d), %d at risk, delay %dms: want fewer too late and some, not more than the fixed delay's too late, at risk", aa.TooLate, fa.TooLate, risk, delay)
	}
}
