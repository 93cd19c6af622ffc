package rules

import (
	"fmt"
	"math"
	"testing"

	"github.com/vibeline/processor/internal/aggwindow"
)

// TestCompileProgrammatic: a Rule built in Go from DefaultRule compiles;
// messages then have no line numbers.
func TestCompileProgrammatic(t *testing.T) {
	r := DefaultRule()
	r.ID, r.Version, r.Source = "r", 1, "in"
	r.Window = Window{Type: Hopping, Size: Duration(60_000_000_000), Advance: Duration(10_000_000_000)}
	r.Aggregate.Fn = FnSum
	r.Threshold = "agg >= 30"
	r.Outputs.Alerts = "out"
	c, err := Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	if c.SizeMs != 60_000 || c.AdvanceMs != 10_000 || c.N != 0 || c.Rule.Outputs.DLQ != "in.dlq" {
		t.Fatalf("%+v", c)
	}
	r.Version = 0
	if err := r.Validate(); err == nil || err.Error() != "rules: rule r: version = 0 is invalid: an integer >= 1, bumped on every change of the rule" {
		t.Fatalf("got %v", err)
	}
}

// TestAggwindowWiring shows how a compiled rule drives package aggwindow
// (the integration to come): the window config from the Compiled fields,
// the threshold as the predicate, the filter deciding qualifies.
func TestAggwindowWiring(t *testing.T) {
	cs := mustLoad(t, "testdata/rules.yaml")
	var c *Compiled
	for _, x := range cs {
		if x.Rule.ID == "vibration-avg" {
			c = x
		}
	}
	th := c.NewThreshold()
	p, err := aggwindow.NewPartition(aggwindow.Config{
		Kind: aggwindow.Tumbling, SizeMs: c.SizeMs, Fn: aggwindow.Avg,
		DelayMs: c.DelayMs, LatenessMs: c.LatenessMs, EvidenceLimit: 3,
		Fires: th.Predicate(),
		AlertID: func(key string, start int64) string {
			return fmt.Sprintf("%s/v%d/%s/%d", c.Rule.ID, c.Rule.Version, key, start)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := c.NewFilter()
	var revs []aggwindow.Revision
	for i := range 12 {
		ev := Event{EventID: fmt.Sprint(i), MachineID: "m1", TS: int64(i) * 1000, Value: 10, Quality: "good", Clock: "synced"}
		if i == 5 {
			ev.Quality = "bad" // filtered
		}
		ok, err := f.Match(&ev)
		if err != nil {
			t.Fatal(err)
		}
		res := p.Process(aggwindow.Event{Key: ev.MachineID, EventID: ev.EventID, TS: ev.TS, Value: ev.Value}, ok)
		revs = append(revs, res.Revisions...)
	}
	revs = append(revs, p.Advance(math.MaxInt64)...)
	// avg 10 > 9.5 and count >= 10: opens at the 10th qualifying event
	// (i == 10); the 11th changes the count but not the average: nothing
	// until close.
	if len(revs) != 2 || revs[0].Status != aggwindow.Open || revs[0].Count != 10 ||
		revs[1].Status != aggwindow.Closed || revs[1].Count != 11 || revs[1].AlertID != "vibration-avg/v2/m1/0" {
		t.Fatalf("%+v", revs)
	}
	if th.Err() != nil {
		t.Fatal(th.Err())
	}
}
