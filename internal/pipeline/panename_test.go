package pipeline

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/aggwindow"
	"github.com/vibeline/processor/internal/rules"
)

// Pane entry names parse back to their pane and sort by key prefix "p",
// then by pane start (negative starts first), as a store scans them.
func TestPaneName(t *testing.T) {
	refs := []aggwindow.PaneRef{{Key: "m1", Start: -120_000}, {Key: "m1", Start: -60_000}, {Key: "", Start: 0}, {Key: "m0", Start: 60_000}, {Key: "m1", Start: 60_000}}
	var names []string
	for _, r := range refs {
		n := paneName(r)
		if got, ok := parsePaneName(n); !ok || got != r {
			t.Fatalf("parsePaneName(paneName(%+v)) = %+v, %v", r, got, ok)
		}
		names = append(names, n)
	}
	if !slices.IsSorted(names) {
		t.Fatalf("pane names do not sort by start: %q", names)
	}
	for _, bad := range []string{"", "p", "p1234567", "w12345678k"} {
		if _, ok := parsePaneName(bad); ok {
			t.Fatalf("parsePaneName(%q) accepted", bad)
		}
	}
}

// An aggregating rule restored from its entries (panes, key entries, dedup
// buckets, meta: persist loads them in map order) at many points emits
// exactly what an uninterrupted run emits, for tumbling windows and for
// hopping windows with and without size a multiple of the advance.
func TestAggRestoreThroughEntries(t *testing.T) {
	for _, w := range []rules.Window{
		{Type: rules.Tumbling, Size: rules.Duration(time.Minute)},
		{Type: rules.Hopping, Size: rules.Duration(10 * time.Minute), Advance: rules.Duration(time.Minute)},
		{Type: rules.Hopping, Size: rules.Duration(5 * time.Minute), Advance: rules.Duration(2 * time.Minute)},
	} {
		t.Run(fmt.Sprintf("%s %v %v", w.Type, w.Size.D(), w.Advance.D()), func(t *testing.T) {
			c := compileRule(t, func(r *rules.Rule) {
				r.Filter = ""
				r.Window = w
				r.Aggregate = rules.Aggregate{Fn: rules.FnMax, Field: "value"}
				r.Threshold = "agg >= 9"
			})
			s, err := NewRuleStage(c, Options{})
			if err != nil {
				t.Fatal(err)
			}
			log := troubledLine(7, 20_000)
			run := func(restoreEvery int) ([]string, Accounting) {
				var out []string
				acct := Accounting{Version: 1}
				p := s.NewPartition()
				store := map[string][]byte{}
				for i, in := range log {
					if restoreEvery > 0 && i%restoreEvery == restoreEvery-1 {
						p.Sweep()
						p = persist(t, s, p, store)
					}
					s.Process(p, in, &acct, func(o Output) { out = append(out, string(o.Key)+"|"+Fingerprint(o.Value, o.Headers)) })
				}
				return out, acct
			}
			a, acctA := run(0)
			b, acctB := run(997)
			if !slices.Equal(a, b) || acctA != acctB {
				t.Fatalf("restored run differs: %d vs %d outputs, accounting %+v vs %+v", len(a), len(b), acctA, acctB)
			}
			if len(a) == 0 {
				t.Fatal("no outputs: the fixture proves nothing")
			}
		})
	}
}
