package pipeline

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/rules"
)

// loadShared mirrors consume.loadPart/loadRulePart: the rules of one input
// partition, one after the other, each from its store scanned in key order
// (Pebble), into one DedupShare; ClearLoaded per rule.
func loadShared(t *testing.T, ss []*Stage, stores []map[string][]byte, share DedupShare) []*Partition {
	var ps []*Partition
	for i, s := range ss {
		p := s.NewPartitionShared(share)
		names := make([]string, 0, len(stores[i]))
		for n := range stores[i] {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			v := stores[i][n]
			var err error
			switch {
			case n == "m":
				err = p.LoadMeta(v)
			case n == "x":
				err = p.LoadExtra(v)
			default:
				err = p.LoadKey(n[1:], v)
			}
			if err != nil {
				t.Fatalf("rule %d load %q: %v", i, n, err)
			}
		}
		p.ClearLoaded()
		ps = append(ps, p)
	}
	return ps
}

func commitAll(ps []*Partition, stores []map[string][]byte) {
	for i, p := range ps {
		names, meta := p.Dirty()
		for _, n := range names {
			if v := p.EncodeKey(n); v != nil {
				stores[i]["k"+n] = v
			} else {
				delete(stores[i], "k"+n)
			}
		}
		if meta {
			stores[i]["m"] = p.EncodeMeta()
		}
		if p.ExtraDirty() {
			if v := p.EncodeExtra(); v != nil {
				stores[i]["x"] = v
			}
		}
		p.ClearDirty()
	}
}

// TestSharedDedupRuleAddedBehind: a rule added to a running partition
// starts with its watermark behind the others' (here 2 h: another machine's
// live events moved them); restarting before redeliveries of what the new
// rule has seen gives the outputs and accounting of the uninterrupted run,
// with the rules' dedup sets shared or each its own.
func TestSharedDedupRuleAddedBehind(t *testing.T) {
	mk := func(id string) *Stage {
		c := compileRule(t, func(r *rules.Rule) {
			r.ID = id
			r.Filter = "true"
			r.Window = rules.Window{Type: rules.Tumbling, Size: rules.Duration(time.Minute)}
			r.Aggregate = rules.Aggregate{Fn: rules.FnCount, Field: "value"}
			r.Threshold = "agg >= 3"
		})
		s, err := NewRuleStage(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ss := []*Stage{mk("a"), mk("b")}
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	off := int64(0)
	ev := func(machine, id string, at time.Duration) Input {
		ts := base.Add(at)
		v := fmt.Sprintf(`{"event_id":%q,"machine_id":%q,"sensor_id":"S-1","ts":%d,"seq":1,"value":8,"unit":"mm/s","schema_version":1,"quality":"good"}`, id, machine, ts.UnixMilli())
		off++
		return Input{Topic: "in", Partition: 0, Offset: off, Key: []byte(machine), Value: []byte(v), TimestampMs: ts.UnixMilli()}
	}
	// Rule a alone: sees M-1 live, 2 h ahead of M-2's backlog.
	phase1 := []Input{ev("M-1", "live", 2*time.Hour)}
	// Then rule b is added (a restart); M-2's backlog arrives.
	var phase2, phase3 []Input
	for i := range 6 {
		phase2 = append(phase2, ev("M-2", fmt.Sprintf("e%d", i), time.Duration(i)*10*time.Second))
	}
	// The producer redelivers e3..e5, then more.
	for i := 3; i < 6; i++ {
		phase3 = append(phase3, ev("M-2", fmt.Sprintf("e%d", i), time.Duration(i)*10*time.Second))
	}
	run := func(share func() DedupShare, restartBeforePhase3 bool) []string {
		stores := []map[string][]byte{{}, {}}
		var out []string
		accts := []Accounting{{Version: 1}, {Version: 1}}
		apply := func(ps []*Partition, in Input) {
			for i, p := range ps {
				ss[i].Process(p, in, &accts[i], func(o Output) {
					out = append(out, fmt.Sprintf("rule %d: %v %s %s", i, o.Kind, o.Status, o.Key))
				})
			}
		}
		a := loadShared(t, ss[:1], stores[:1], share())
		for _, in := range phase1 {
			apply(a, in)
		}
		commitAll(a, stores[:1])
		ps := loadShared(t, ss, stores, share()) // rule b added
		for _, in := range phase2 {
			apply(ps, in)
		}
		commitAll(ps, stores)
		if restartBeforePhase3 {
			ps = loadShared(t, ss, stores, share())
		}
		for _, in := range phase3 {
			apply(ps, in)
		}
		out = append(out, fmt.Sprintf("rule b accounting %+v", accts[1]))
		return out
	}
	shared := func() DedupShare { return DedupShare{} }
	own := func() DedupShare { return nil }
	ref := run(shared, false)
	if want := "Duplicate:3"; !strings.Contains(ref[len(ref)-1], want) {
		t.Fatalf("the uninterrupted run should count the 3 redeliveries as duplicates: %v", ref)
	}
	for _, c := range []struct {
		name  string
		share func() DedupShare
	}{{"own sets", own}, {"shared store", shared}} {
		got := run(c.share, true)
		if !slices.Equal(got, ref) {
			t.Errorf("%s, restart before the redeliveries:\n%v\nuninterrupted:\n%v", c.name, got, ref)
		}
	}
}
