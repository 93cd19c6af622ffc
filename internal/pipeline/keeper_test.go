package pipeline

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/dedup"
	"github.com/vibeline/processor/internal/rules"
)

// keeperRun is the state of rules over one input partition as consume
// keeps it: each rule's own store, and one store per dedup group's keeper.
type keeperRun struct {
	ss      []*Stage
	names   []string
	stores  []map[string][]byte
	keepers []map[string][]byte // by DedupGroups index
	kept    bool                // false: as before keepers (each rule its own dedup entries)
}

// load mirrors consume.loadPart: the rules one after the other
// (loadShared), then each group's keeper, its entries in key order; the
// rules' own dedup entries are deleted from their stores at the next
// commit (commit).
func (k *keeperRun) load(t *testing.T) ([]*Partition, []*DedupKeeper) {
	ps := loadShared(t, k.ss, k.stores, DedupShare{})
	if !k.kept {
		return ps, nil
	}
	var ks []*DedupKeeper
	for gi, g := range DedupGroups(k.ss) {
		var members []*Partition
		var names []string
		for _, i := range g.Members {
			members = append(members, ps[i])
			names = append(names, k.names[i])
		}
		kp, err := NewDedupKeeper(members, names)
		if err != nil {
			t.Fatal(err)
		}
		for len(k.keepers) <= gi {
			k.keepers = append(k.keepers, map[string][]byte{})
		}
		entries := slices.Sorted(func(yield func(string) bool) {
			for n := range k.keepers[gi] {
				if !yield(n) {
					return
				}
			}
		})
		for _, n := range entries {
			if err := kp.Load(n, k.keepers[gi][n]); err != nil {
				t.Fatalf("keeper %d load %q: %v", gi, n, err)
			}
		}
		ks = append(ks, kp)
	}
	return ps, ks
}

func (k *keeperRun) commit(ps []*Partition, ks []*DedupKeeper) {
	for i, p := range ps {
		if k.kept {
			for _, n := range p.OwnDedup() {
				delete(k.stores[i], "k"+n)
			}
		}
	}
	for gi, kp := range ks {
		for _, n := range kp.Dirty() {
			if v := kp.Encode(n); v != nil {
				k.keepers[gi][n] = v
			} else {
				delete(k.keepers[gi], n)
			}
		}
		kp.ClearDirty()
	}
	commitAll(ps, k.stores)
	for i := range ps {
		for n := range k.stores[i] {
			if k.kept && strings.HasPrefix(n, "kd") {
				panic(fmt.Sprintf("rule %d still has its own dedup entry %q with a keeper", i, n))
			}
		}
	}
}

// TestDedupKeeperRestarts: rules whose dedup ids a keeper persists (one
// entry per bucket for all of them) give, through restarts at random
// points, the outputs and accounting of an uninterrupted run; also when
// the first restarts load state written before keepers (each rule its own
// dedup entries, taken over by the keeper), and when a rule is added to
// the group in the middle (it starts with no ids, as a rule added to a
// running group does).
func TestDedupKeeperRestarts(t *testing.T) {
	mk := func(id, filter string, w rules.Window, fn, thr string) *Stage {
		c := compileRule(t, func(r *rules.Rule) {
			r.ID = id
			r.Filter = rules.Expr(filter)
			r.Window = w
			r.Aggregate = rules.Aggregate{Fn: fn, Field: "value"}
			r.Threshold = rules.Expr(thr)
		})
		s, err := NewRuleStage(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tumbling := rules.Window{Type: rules.Tumbling, Size: rules.Duration(time.Minute)}
	all := []*Stage{
		mk("max", "true", tumbling, rules.FnMax, "agg >= 9"),
		mk("count", `quality == "good"`, tumbling, rules.FnCount, "agg >= 4"),
		mk("sum", "value >= 5", rules.Window{Type: rules.Hopping, Size: rules.Duration(2 * time.Minute), Advance: rules.Duration(time.Minute)}, rules.FnSum, "agg >= 30"),
		mk("late", "true", tumbling, rules.FnCount, "agg >= 5"), // added in the middle
	}
	names := []string{"max.v1", "count.v1", "sum.v1", "late.v1"}
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 31))
		var in []Input
		for off := range int64(600) {
			at := time.Duration(off)*2*time.Second - time.Duration(rng.IntN(90))*time.Second
			id := fmt.Sprintf("e%d", off)
			if off > 0 && rng.IntN(5) == 0 {
				id = fmt.Sprintf("e%d", off-1-int64(rng.IntN(min(int(off), 30)))) // a redelivery
			}
			q := []string{"good", "good", "uncertain"}[rng.IntN(3)]
			v := fmt.Sprintf(`{"event_id":%q,"machine_id":"M-%d","sensor_id":"S-1","ts":%d,"seq":1,"value":%d,"unit":"mm/s","schema_version":1,"quality":%q}`,
				id, rng.IntN(3), base.Add(at).UnixMilli(), rng.IntN(11), q)
			in = append(in, Input{Topic: "in", Partition: 0, Offset: off, Key: fmt.Appendf(nil, "M-%d", 0), Value: []byte(v), TimestampMs: base.Add(at).UnixMilli()})
		}
		for i := range in {
			// The record key is the machine of the event.
			m := strings.Split(strings.Split(string(in[i].Value), `"machine_id":"`)[1], `"`)[0]
			in[i].Key = []byte(m)
		}
		added := 200 + rng.IntN(200) // rule "late" joins at this record
		migrate := rng.IntN(added)   // keepers from this record on
		var restarts []int           // restart before these records
		for range 6 {
			restarts = append(restarts, rng.IntN(len(in)))
		}
		restarts = append(restarts, added, migrate)
		slices.Sort(restarts)
		run := func(restart bool) []string {
			var out []string
			accts := make([]Accounting, len(all))
			k := &keeperRun{ss: all[:3], names: names[:3], stores: []map[string][]byte{{}, {}, {}}}
			ps, ks := k.load(t)
			for off, r := range in {
				if restart && slices.Contains(restarts, off) || off == added {
					k.commit(ps, ks)
					if off >= migrate {
						k.kept = true
					}
					if off == added {
						k.ss, k.names, k.stores = all, names, append(k.stores, map[string][]byte{})
					}
					ps, ks = k.load(t)
				}
				for i, p := range ps {
					k.ss[i].Process(p, r, &accts[i], func(o Output) {
						out = append(out, fmt.Sprintf("rule %d: %v %s %s %s", i, o.Kind, o.Status, o.Key, o.Value))
					})
				}
			}
			for i, a := range accts {
				out = append(out, fmt.Sprintf("rule %d accounting %+v", i, a))
			}
			return out
		}
		ref := run(false)
		if dups := strings.Count(strings.Join(ref, "\n"), "Duplicate:0"); dups == len(all) {
			t.Fatalf("seed %d: no rule counted a duplicate: the test does not exercise dedup", seed)
		}
		if got := run(true); !slices.Equal(got, ref) {
			for i := range min(len(got), len(ref)) {
				if got[i] != ref[i] {
					t.Fatalf("seed %d (restarts %v, keepers from %d, rule added at %d): first difference at output %d:\n got %s\nwant %s", seed, restarts, migrate, added, i, got[i], ref[i])
				}
			}
			t.Fatalf("seed %d: %d outputs, uninterrupted %d", seed, len(got), len(ref))
		}
	}
}

// TestDedupGroups: the aggregating rules of one share key form groups of
// at most dedup.MaxViews, in order; sliding rules are in none; rules of
// another key (another horizon) form their own; NewPartitionShared shares
// stores exactly so.
func TestDedupGroups(t *testing.T) {
	agg := func(id string, horizon time.Duration) *Stage {
		c := compileRule(t, func(r *rules.Rule) {
			r.ID = id
			r.Window = rules.Window{Type: rules.Tumbling, Size: rules.Duration(time.Minute)}
			r.Aggregate = rules.Aggregate{Fn: rules.FnCount, Field: "value"}
			r.Threshold = "agg >= 3"
			r.DedupHorizon = rules.Duration(horizon)
		})
		s, err := NewRuleStage(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	slide := compileRule(t, func(r *rules.Rule) { r.ID = "slide" })
	sl, err := NewRuleStage(slide, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ss []*Stage
	ss = append(ss, sl)
	for i := range dedup.MaxViews + 2 {
		ss = append(ss, agg(fmt.Sprintf("r%d", i), time.Hour))
	}
	ss = append(ss, agg("other", 2*time.Hour))
	gs := DedupGroups(ss)
	if len(gs) != 3 || len(gs[0].Members) != dedup.MaxViews || gs[0].Members[0] != 1 || len(gs[1].Members) != 2 || gs[1].Chunk != 1 || gs[1].Key != gs[0].Key || len(gs[2].Members) != 1 || gs[2].Key == gs[0].Key {
		t.Fatalf("DedupGroups = %+v", gs)
	}
	share := DedupShare{}
	var ps []*Partition
	for _, s := range ss {
		ps = append(ps, s.NewPartitionShared(share))
	}
	for _, g := range gs {
		var members []*Partition
		var names []string
		for _, i := range g.Members {
			members = append(members, ps[i])
			names = append(names, fmt.Sprint(i))
		}
		if _, err := NewDedupKeeper(members, names); err != nil {
			t.Fatalf("group %+v: %v", g, err)
		}
	}
	if _, err := NewDedupKeeper(ps[1:3], []string{"a", "b"}); err == nil {
		t.Fatal("a keeper of part of a store's views was accepted")
	}
}
