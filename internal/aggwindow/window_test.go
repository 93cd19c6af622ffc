package aggwindow

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// fmtRev renders a revision compactly for table tests:
// "<status> <id> r<rev> [start,end) agg=<agg> n=<count>[ late][ -><into>]".
func fmtRev(r Revision) string {
	s := fmt.Sprintf("%s %s r%d [%d,%d) agg=%v n=%d", r.Status, r.AlertID, r.Revision, r.Start, r.End, r.Agg, r.Count)
	if r.Late {
		s += " late"
	}
	if r.MergedInto != "" {
		s += " ->" + r.MergedInto
	}
	return s
}

// step is one call in a table test: a record (Process) or, with advance
// set, Advance(ts).
type step struct {
	ts      int64
	v       float64
	filter  bool // qualifies = false
	advance bool
	out     Outcome  // expected outcome (0: Processed)
	want    []string // expected revisions, fmtRev form
}

func runSteps(t *testing.T, cfg Config, steps []step) {
	t.Helper()
	if cfg.AlertID == nil {
		cfg.AlertID = testAlertID
	}
	p := mustPartition(t, cfg)
	var all []Revision
	for i, s := range steps {
		var revs []Revision
		if s.advance {
			revs = p.Advance(s.ts)
		} else {
			res := p.Process(Event{Key: "k", EventID: fmt.Sprintf("e%d", i), TS: s.ts, Value: s.v}, !s.filter)
			want := s.out
			if want == 0 {
				want = Processed
				if s.filter {
					want = Filtered
				}
			}
			if res.Outcome != want {
				t.Fatalf("step %d (ts %d): outcome %s, want %s", i, s.ts, res.Outcome, want)
			}
			revs = res.Revisions
		}
		got := make([]string, len(revs))
		for j, r := range revs {
			got[j] = fmtRev(r)
		}
		if strings.Join(got, "\n") != strings.Join(s.want, "\n") {
			t.Fatalf("step %d (ts %d):\n got %q\nwant %q", i, s.ts, got, s.want)
		}
		all = append(all, revs...)
	}
	checkRevisions(t, all)
}

func countAtLeast(n int) func(float64, int) bool {
	return func(_ float64, c int) bool { return c >= n }
}

func aggAtLeast(x float64) func(float64, int) bool {
	return func(a float64, _ int) bool { return a >= x }
}

func TestSessionMerges(t *testing.T) {
	base := Config{Kind: Session, GapMs: 10, Fn: Count, LatenessMs: 100}
	with := func(f func(*Config)) Config { c := base; f(&c); return c }
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{{
		name: "events less than gap apart share a session, exactly gap apart do not",
		cfg:  with(func(c *Config) { c.Fires = countAtLeast(2) }),
		steps: []step{
			{ts: 0},
			{ts: 10}, // 10 - 0 = gap: a new session
			{ts: 19, want: []string{"open k@10 r0 [10,29) agg=2 n=2"}},
			{advance: true, ts: 1000, want: []string{"closed k@10 r1 [10,29) agg=2 n=2"}},
		},
	}, {
		name: "late event bridges two fired sessions: survivor updated, the other merged",
		cfg:  with(func(c *Config) { c.Fires = countAtLeast(2) }),
		steps: []step{
			{ts: 0},
			{ts: 5, want: []string{"open k@0 r0 [0,15) agg=2 n=2"}},
			{ts: 20},
			{ts: 25, want: []string{"open k@20 r0 [20,35) agg=2 n=2"}},
			{ts: 12, want: []string{ // 12 < 5+10 and 20 < 12+10; W = 25 after D = 0: late
				"updated k@0 r1 [0,35) agg=5 n=5 late",
				"merged k@20 r1 [20,35) agg=2 n=2 late ->k@0",
			}},
			{advance: true, ts: 1000, want: []string{"closed k@0 r2 [0,35) agg=5 n=5"}},
		},
	}, {
		name: "bridge between an unfired and a fired session: the fired one survives, its start moves",
		cfg:  with(func(c *Config) { c.Fires = countAtLeast(2) }),
		steps: []step{
			{ts: 0},
			{ts: 15},
			{ts: 18, want: []string{"open k@15 r0 [15,28) agg=2 n=2"}},
			{ts: 7, want: []string{"updated k@15 r1 [0,28) agg=4 n=4 late"}},
			{advance: true, ts: 1000, want: []string{"closed k@15 r2 [0,28) agg=4 n=4"}},
		},
	}, {
		name: "two unfired sessions merge into one that fires: open with the union's start",
		cfg:  with(func(c *Config) { c.Fires = countAtLeast(3) }),
		steps: []step{
			{ts: 0},
			{ts: 15},
			{ts: 7, want: []string{"open k@0 r0 [0,25) agg=3 n=3 late"}},
		},
	}, {
		name: "late event extends a fired session backwards: updated (start changed)",
		cfg:  with(func(c *Config) { c.Fn = Max; c.Fires = aggAtLeast(5) }),
		steps: []step{
			{ts: 20, v: 6, want: []string{"open k@20 r0 [20,30) agg=6 n=1"}},
			{ts: 25, v: 1}, // max unchanged: nothing
			{ts: 12, v: 2, want: []string{"updated k@20 r1 [12,35) agg=6 n=3 late"}}, // start moved
			{ts: 26, v: 7, want: []string{"updated k@20 r2 [12,36) agg=7 n=4"}},
		},
	}, {
		name: "avg drops below the threshold (nothing) and rises again (updated); close reports the final",
		cfg:  with(func(c *Config) { c.Fn = Avg; c.Fires = aggAtLeast(5) }),
		steps: []step{
			{ts: 0, v: 6, want: []string{"open k@0 r0 [0,10) agg=6 n=1"}},
			{ts: 1, v: 1},
			{ts: 2, v: 11, want: []string{"updated k@0 r1 [0,12) agg=6 n=3"}},
			{ts: 3, v: 0},
			{advance: true, ts: 1000, want: []string{"closed k@0 r2 [0,13) agg=4.5 n=4"}},
		},
	}, {
		name: "close exactly when W - L reaches last + gap",
		cfg:  with(func(c *Config) { c.LatenessMs = 0; c.Fires = countAtLeast(1) }),
		steps: []step{
			{ts: 0, want: []string{"open k@0 r0 [0,10) agg=1 n=1"}},
			{ts: 9, filter: true}, // W = 9 < 10
			{ts: 10, filter: true, want: []string{"closed k@0 r1 [0,10) agg=1 n=1"}},
			{ts: 5, out: TooLate}, // ts < W - L
		},
	}, {
		name: "a session that never fired is dropped silently",
		cfg:  with(func(c *Config) { c.Fires = countAtLeast(5) }),
		steps: []step{
			{ts: 0}, {ts: 3},
			{advance: true, ts: 1000},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, tc.cfg, tc.steps) })
	}
}

func TestFixedWindows(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{{
		name: "tumbling: ts == end belongs to the next window; close at W - L >= end",
		cfg:  Config{Kind: Tumbling, SizeMs: 10, Fn: Count, LatenessMs: 10, Fires: countAtLeast(2)},
		steps: []step{
			{ts: 9},
			{ts: 10},
			{ts: 0, want: []string{"open k@0 r0 [0,10) agg=2 n=2 late"}},
			{ts: 19, filter: true}, // W - L = 9
			{ts: 20, filter: true, want: []string{"closed k@0 r1 [0,10) agg=2 n=2"}},
			{ts: 8, out: TooLate}, // 8 < 20 - 10
			{ts: 11, want: []string{"open k@10 r0 [10,20) agg=2 n=2 late"}},
		},
	}, {
		name: "tumbling over negative time is aligned to the epoch",
		cfg:  Config{Kind: Tumbling, SizeMs: 10, Fn: Sum, LatenessMs: 20, Fires: aggAtLeast(3)},
		steps: []step{
			{ts: -1, v: 2},
			{ts: -10, v: 2, want: []string{"open k@-10 r0 [-10,0) agg=4 n=2 late"}},
			{ts: 0, v: 5, want: []string{"open k@0 r0 [0,10) agg=5 n=1"}},
			{advance: true, ts: 20, want: []string{"closed k@-10 r1 [-10,0) agg=4 n=2"}},
		},
	}, {
		name: "hopping: an event updates every window holding it, in order of start",
		cfg:  Config{Kind: Hopping, SizeMs: 10, AdvanceMs: 4, Fn: Max, LatenessMs: 100, Fires: aggAtLeast(5)},
		steps: []step{
			// 9 is in [0,10), [4,14), [8,18)
			{ts: 9, v: 6, want: []string{"open k@0 r0 [0,10) agg=6 n=1", "open k@4 r0 [4,14) agg=6 n=1", "open k@8 r0 [8,18) agg=6 n=1"}},
			// 12 is in [4,14), [8,18), [12,22); max unchanged in the first two
			{ts: 12, v: 6, want: []string{"open k@12 r0 [12,22) agg=6 n=1"}},
			{ts: 13, v: 8, want: []string{"updated k@4 r1 [4,14) agg=8 n=3", "updated k@8 r1 [8,18) agg=8 n=3", "updated k@12 r1 [12,22) agg=8 n=2"}},
			{advance: true, ts: 1000, want: []string{
				"closed k@0 r1 [0,10) agg=6 n=1", "closed k@4 r2 [4,14) agg=8 n=3",
				"closed k@8 r2 [8,18) agg=8 n=3", "closed k@12 r2 [12,22) agg=8 n=2",
			}},
		},
	}, {
		name: "hopping with size not a multiple of advance",
		cfg:  Config{Kind: Hopping, SizeMs: 5, AdvanceMs: 3, Fn: Count, LatenessMs: 100, Fires: countAtLeast(1)},
		steps: []step{
			// 4 is in [0,5) and [3,8); 6 in [3,8) and [6,11)
			{ts: 4, want: []string{"open k@0 r0 [0,5) agg=1 n=1", "open k@3 r0 [3,8) agg=1 n=1"}},
			{ts: 6, want: []string{"updated k@3 r1 [3,8) agg=2 n=2", "open k@6 r0 [6,11) agg=1 n=1"}},
		},
	}, {
		name: "min fires when it drops low enough; watermark delay D",
		cfg:  Config{Kind: Tumbling, SizeMs: 100, Fn: Min, DelayMs: 50, Fires: func(a float64, _ int) bool { return a <= 1 }},
		steps: []step{
			{ts: 10, v: 3},
			{ts: 20, v: 0.5, want: []string{"open k@0 r0 [0,100) agg=0.5 n=2"}},
			{ts: 30, v: 0.25, want: []string{"updated k@0 r1 [0,100) agg=0.25 n=3"}},
			{ts: 149, filter: true}, // W = 99
			{ts: 150, filter: true, want: []string{"closed k@0 r2 [0,100) agg=0.25 n=3"}},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, tc.cfg, tc.steps) })
	}
}

func TestLatenessAndWatermark(t *testing.T) {
	p := mustPartition(t, Config{Kind: Tumbling, SizeMs: 10, Fn: Count, DelayMs: 5, LatenessMs: 20, Fires: countAtLeast(1), AlertID: testAlertID})
	res := p.Process(Event{Key: "k", EventID: "a", TS: 100}, true)
	if res.Watermark != NoWatermark || res.LatenessMs != 0 || p.Watermark() != 95 {
		t.Fatalf("first record: %+v, W %d", res, p.Watermark())
	}
	res = p.Process(Event{Key: "k", EventID: "b", TS: 80}, true) // W - L = 75 <= 80 < 95: late, applied
	if res.Outcome != Processed || res.LatenessMs != 15 || len(res.Revisions) != 1 || !res.Revisions[0].Late || res.Revisions[0].Watermark != 95 {
		t.Fatalf("late event: %+v", res)
	}
	res = p.Process(Event{Key: "k", EventID: "c", TS: 74}, true)
	if res.Outcome != TooLate || res.LatenessMs != 21 || res.Revisions != nil {
		t.Fatalf("too-late event: %+v", res)
	}
	if p.Watermark() != 95 {
		t.Fatalf("watermark moved back: %d", p.Watermark())
	}
	if got := p.Advance(50); got != nil || p.Watermark() != 95 {
		t.Fatalf("Advance to an earlier watermark: %v, W %d", got, p.Watermark())
	}
	for _, bad := range []Event{{Key: "k", TS: MaxTS + 1}, {Key: "k", TS: MinTS - 1}, {Key: "k", TS: 100, Value: math.NaN()}, {Key: "k", TS: 100, Value: math.Inf(1)}} {
		if res := p.Process(bad, true); res.Outcome != OutOfRange || p.Watermark() != 95 {
			t.Fatalf("%+v: %+v, W %d", bad, res, p.Watermark())
		}
	}
}

func TestEvidenceOrder(t *testing.T) {
	for _, tc := range []struct {
		fn   Fn
		want []string
	}{
		{Count, []string{"a", "b"}}, // earliest by (ts, event_id)
		{Max, []string{"c", "b"}},   // largest values
		{Min, []string{"d", "a"}},   // smallest values
	} {
		p := mustPartition(t, Config{Kind: Tumbling, SizeMs: 100, Fn: tc.fn, LatenessMs: 100, EvidenceLimit: 2, Fires: countAtLeast(4), AlertID: testAlertID})
		var last Result
		for _, e := range []Event{{EventID: "c", TS: 5, Value: 9}, {EventID: "a", TS: 1, Value: 2}, {EventID: "d", TS: 7, Value: 1}, {EventID: "b", TS: 1, Value: 3}} {
			e.Key = "k"
			last = p.Process(e, true)
		}
		if len(last.Revisions) != 1 {
			t.Fatalf("%s: %+v", tc.fn, last)
		}
		if got := evIDs(last.Revisions[0].Evidence); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: evidence %v, want %v", tc.fn, got, tc.want)
		}
	}
}

// TestEvidenceLead: the leading keys that addEvidence and pane.cut compare
// agree with the full evidence order: lead(a) < lead(b) only if a comes
// before b, and before(a, lead(a), b, lead(b)) is cmp(a, b) < 0, over
// values with ties, -0 and +0, subnormals and extremes.
func TestEvidenceLead(t *testing.T) {
	values := []float64{math.Copysign(0, -1), 0, 5e-324, -5e-324, 1, -1, 1.5, -1.5, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64 * 3}
	var evs []Evidence
	for i, v := range values {
		for _, ts := range []int64{-7, 0, 3} {
			evs = append(evs, Evidence{EventID: fmt.Sprint("e", i%3), TS: ts, Value: v})
		}
	}
	for _, o := range []evOrder{byTime, byValueAsc, byValueDesc} {
		for i := range evs {
			for j := range evs {
				a, b := &evs[i], &evs[j]
				la, lb := o.lead(a), o.lead(b)
				c := o.cmp(a, b)
				if la < lb && c >= 0 {
					t.Fatalf("order %d: lead(%+v) < lead(%+v) but cmp %d", o, *a, *b, c)
				}
				if got := before(a, la, b, lb); got != (c < 0) {
					t.Fatalf("order %d: before(%+v, %+v) = %v, cmp %d", o, *a, *b, got, c)
				}
				if o.beyond(la, b) && c >= 0 {
					t.Fatalf("order %d: %+v beyond %+v's key but cmp %d", o, *b, *a, c)
				}
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Kind: Hopping, SizeMs: 10, AdvanceMs: 5, Fn: Sum, Fires: countAtLeast(1), AlertID: testAlertID}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.AdvanceMs = 11 }, "AdvanceMs = 11, must be 1..SizeMs (10)"},
		{func(c *Config) { c.SizeMs, c.AdvanceMs = 10000, 1 }, "AdvanceMs = 1, must be such that ceil(SizeMs/AdvanceMs) <= 1000"},
		// floor(2001/2) = 1000, but an event belongs to 1001 windows.
		{func(c *Config) { c.SizeMs, c.AdvanceMs = 2001, 2 }, "AdvanceMs = 2, must be such that ceil(SizeMs/AdvanceMs) <= 1000"},
		// 2.000016 windows per event, in 120000 panes of 1 ms.
		{func(c *Config) { c.SizeMs, c.AdvanceMs = 120000, 59999 }, "AdvanceMs = 59999, must be such that SizeMs/gcd(SizeMs, AdvanceMs) <= 1000"},
		{func(c *Config) { c.Kind = Tumbling }, "AdvanceMs = 5, must be 0 (tumbling windows advance by their size)"},
		{func(c *Config) { c.Kind = Session }, "GapMs = 0, must be 1..1099511627776"},
		{func(c *Config) { c.Fn = 0 }, "Fn = Fn(0), must be Count, Sum, Avg, Min or Max"},
		{func(c *Config) { c.LatenessMs = -1 }, "LatenessMs = -1, must be 0..1099511627776 (milliseconds)"},
		{func(c *Config) { c.Fires = nil }, "Fires is nil"},
		{func(c *Config) { c.EvidenceLimit = 1001 }, "EvidenceLimit = 1001, must be 0..1000"},
	} {
		c := ok
		tc.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("got %v, want an ErrInvalidConfig containing %q", err, tc.want)
		}
	}
}
