package window

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const (
	sec    = int64(1000)
	minute = 60 * sec
)

func ids(ev []Evidence) []string {
	out := make([]string, len(ev))
	for i, e := range ev {
		out[i] = e.EventID
	}
	return out
}

// feed processes recs and returns every revision, failing on an unexpected
// outcome when outs is not nil.
func feed(t *testing.T, p *Partition, recs ...rec) []Revision {
	t.Helper()
	var revs []Revision
	for _, r := range recs {
		revs = append(revs, p.Process(r.ev, r.q).Revisions...)
	}
	return revs
}

func wantRevs(t *testing.T, got []Revision, want ...string) {
	t.Helper()
	var lines []string
	for _, r := range got {
		lines = append(lines, fmtRevision(r))
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("revisions:\n got:\n  %s\nwant:\n  %s", strings.Join(lines, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestConfigValidate(t *testing.T) {
	ok := vibration()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Threshold = 0 }, "Threshold = 0, must be >= 1"},
		{func(c *Config) { c.SizeMs = 0 }, "SizeMs = 0, must be > 0"},
		{func(c *Config) { c.SizeMs = -5 }, "SizeMs = -5"},
		{func(c *Config) { c.DelayMs = -1 }, "DelayMs = -1, must be >= 0"},
		{func(c *Config) { c.LatenessMs = -1 }, "LatenessMs = -1, must be >= 0"},
		{func(c *Config) { c.DedupHorizonMs = 720_000 }, "DedupHorizonMs = 720000, must be > SizeMs + LatenessMs = 720000"},
		{func(c *Config) { c.SizeMs, c.LatenessMs = math.MaxInt64, 1 }, "DedupHorizonMs = 3600000, must be > SizeMs + LatenessMs = 9223372036854775807"},
		{func(c *Config) { c.AlertID = nil }, "AlertID is nil"},
	} {
		c := vibration()
		tc.mut(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Validate() = %v, want an ErrInvalidConfig containing %q", err, tc.want)
		}
		if _, err := NewPartition(c); err == nil {
			t.Errorf("NewPartition accepted %+v", c)
		}
	}
	// Zero delay and lateness are valid.
	c := vibration()
	c.DelayMs, c.LatenessMs, c.DedupHorizonMs = 0, 0, c.SizeMs+1
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestStrings(t *testing.T) {
	for v, want := range map[Outcome]string{Processed: "processed", Filtered: "filtered", Duplicate: "duplicate", TooLate: "too_late", 0: "Outcome(0)"} {
		if v.String() != want {
			t.Errorf("%d: %q, want %q", v, v.String(), want)
		}
	}
	for v, want := range map[Status]string{Open: "open", Updated: "updated", Merged: "merged", Closed: "closed", 9: "Status(9)"} {
		if v.String() != want {
			t.Errorf("%d: %q, want %q", v, v.String(), want)
		}
	}
}

func TestFiltered(t *testing.T) {
	p := mustPartition(t, vibration())
	res := p.Process(fev("m1", "e1", 10*minute).ev, false)
	if res.Outcome != Filtered || res.Revisions != nil || res.Watermark != NoWatermark || res.LatenessMs != 0 {
		t.Fatalf("%+v", res)
	}
	if p.Watermark() != 10*minute-30*sec {
		t.Fatalf("filtered events advance W: %d", p.Watermark())
	}
	if st := p.Stats(); st != (Stats{}) {
		t.Fatalf("filtered event left state: %+v", st)
	}
	// A filtered event is not remembered: the same id qualifying later is new.
	if res := p.Process(qev("m1", "e1", 10*minute).ev, true); res.Outcome != Processed {
		t.Fatalf("%v", res.Outcome)
	}
	// A filtered event behind the watermark still reports its lateness.
	if res := p.Process(fev("m1", "e2", 0).ev, false); res.Outcome != Filtered || res.LatenessMs != 10*minute-30*sec {
		t.Fatalf("%+v", res)
	}
}

func TestDuplicate(t *testing.T) {
	cfg := vibration() // D=30s L=10m H=1h
	p := mustPartition(t, cfg)
	step := func(r rec, want Outcome) {
		t.Helper()
		if got := p.Process(r.ev, r.q).Outcome; got != want {
			t.Fatalf("%+v at W=%d: %v, want %v", r.ev, p.Watermark(), got, want)
		}
	}
	step(qev("m1", "a", 0), Processed)
	step(qev("m1", "a", 0), Duplicate)
	step(qev("m2", "a", 0), Processed) // dedup is per key
	step(fev("m1", "a", 0), Filtered)  // the filter runs first

	// W - H == remembered ts: still a duplicate (ts >= W - H).
	step(fev("m9", "x", 60*minute+30*sec), Filtered) // W = 60m
	if p.Watermark() != cfg.DedupHorizonMs {
		t.Fatal(p.Watermark())
	}
	step(qev("m1", "a", 0), Duplicate)
	// One ms later the entry has expired: not a duplicate, but too late.
	step(fev("m9", "y", 60*minute+30*sec+1), Filtered)
	step(qev("m1", "a", 0), TooLate)
	// It is remembered again, but with a ts already behind W - H, so a
	// redelivery is not a duplicate either: too late again.
	step(qev("m1", "a", 0), TooLate)

	// A too-late event is remembered: its redelivery is a duplicate.
	step(qev("m3", "late", 30*minute), TooLate)
	step(qev("m3", "late", 30*minute), Duplicate)

	// Expiry then reuse of an id with a new ts: applied, not a duplicate.
	step(fev("m9", "z", 200*minute), Filtered)
	step(qev("m2", "a", 200*minute), Processed)
	step(qev("m2", "a", 200*minute), Duplicate)
}

func TestTooLate(t *testing.T) {
	p := mustPartition(t, vibration())
	p.Process(fev("m1", "f", 20*minute+30*sec).ev, false) // W = 20m, W - L = 10m
	w := p.Watermark()

	res := p.Process(qev("m1", "a", 10*minute-1).ev, true)
	if res.Outcome != TooLate || res.Watermark != w || res.LatenessMs != w-(10*minute-1) || res.Revisions != nil {
		t.Fatalf("ts = W-L-1: %+v", res)
	}
	if st := p.Stats(); st.Events != 0 || st.Dedup != 1 {
		t.Fatalf("too late changes no window state but is remembered: %+v", st)
	}
	// W - L is inclusive: applied, late.
	res = p.Process(qev("m1", "b", 10*minute).ev, true)
	if res.Outcome != Processed || res.LatenessMs != 10*minute {
		t.Fatalf("ts = W-L: %+v", res)
	}
	// The too-late event is not part of any firing set: b, c, d fire, a never.
	revs := feed(t, p, qev("m1", "c", 10*minute+1), qev("m1", "d", 10*minute+2))
	wantRevs(t, revs, "open    m1/b r0 start=0:10:00 end=0:10:00.002 count=3 evidence=[b@0:10:00 c@0:10:00.001 d@0:10:00.002] wm=0:20:00 late")
	// A too-late event moves the watermark too.
	p.Process(qev("m1", "e", 30*minute).ev, true)
	if w := p.Watermark(); w != 29*minute+30*sec {
		t.Fatal(w)
	}
}

func TestOpenAndLate(t *testing.T) {
	p := mustPartition(t, vibration())
	revs := feed(t, p,
		qev("m1", "e1", 0),
		fev("m1", "f1", 30*sec),
		qev("m1", "e2", 45*sec),
	)
	if len(revs) != 0 {
		t.Fatal(revs)
	}
	res := p.Process(qev("m1", "e3", 90*sec).ev, true)
	wantRevs(t, res.Revisions, "open    m1/e1 r0 start=0:00:00 end=0:01:30 count=3 evidence=[e1@0:00:00 e2@0:00:45 e3@0:01:30] wm=0:00:15")
	r := res.Revisions[0]
	if r.Evidence[2] != (Evidence{EventID: "e3", SensorID: "s-m1", TS: 90 * sec, Value: 9}) {
		t.Fatalf("%+v", r.Evidence[2])
	}
	// The caller owns the evidence slice.
	r.Evidence[0].EventID = "scribbled"
	if p.keys["m1"].open[0].evidence[0].EventID != "e1" {
		t.Fatal("revision evidence aliases the state")
	}

	// A late event (ts < W) that opens a new incident carries late.
	p2 := mustPartition(t, vibration())
	feed(t, p2, fev("m9", "f", 5*minute), qev("m1", "a", 0), qev("m1", "b", sec))
	res = p2.Process(qev("m1", "c", 2*sec).ev, true)
	if len(res.Revisions) != 1 || !res.Revisions[0].Late || res.Revisions[0].Watermark != 4*minute+30*sec {
		t.Fatalf("%+v", res)
	}
	// An on-time event does not.
	res = p2.Process(qev("m2", "a", 5*minute).ev, true)
	res = p2.Process(qev("m2", "b", 5*minute).ev, true)
	res = p2.Process(qev("m2", "c", 5*minute).ev, true)
	if len(res.Revisions) != 1 || res.Revisions[0].Late {
		t.Fatalf("%+v", res)
	}
}

func TestSizeBoundaryInclusive(t *testing.T) {
	p := mustPartition(t, vibration())
	// span exactly S fires
	revs := feed(t, p, qev("m1", "a", 0), qev("m1", "b", minute), qev("m1", "c", 2*minute))
	wantRevs(t, revs, "open    m1/a r0 start=0:00:00 end=0:02:00 count=3 evidence=[a@0:00:00 b@0:01:00 c@0:02:00] wm=0:00:30")
	// span S + 1 does not
	p = mustPartition(t, vibration())
	if revs := feed(t, p, qev("m1", "a", 0), qev("m1", "b", minute), qev("m1", "c", 2*minute+1)); len(revs) != 0 {
		t.Fatal(fmtRevisions(revs))
	}
}

func TestTouchingSpansChain(t *testing.T) {
	cfg := vibration()
	cfg.DelayMs = 10 * minute // W stays behind: nothing is late, nothing closes
	p := mustPartition(t, cfg)
	revs := feed(t, p,
		qev("m1", "a", 0), qev("m1", "b", 1*minute), qev("m1", "c", 2*minute), // [0, 2m]
		// (b,c,d) spans 2m+1ms: no; (c,d,e) = [2m, 4m] fires and touches at 2m
		qev("m1", "d", 3*minute+1), qev("m1", "e", 4*minute),
	)
	wantRevs(t, revs, "open    m1/a r0 start=0:00:00 end=0:02:00 count=3 evidence=[a@0:00:00 b@0:01:00 c@0:02:00] wm=-0:09:00")
	if inc := p.keys["m1"].open; len(inc) != 1 || inc[0].end != 4*minute || inc[0].count != 5 {
		t.Fatalf("touching spans must chain into one incident: %d incidents", len(inc))
	}

	// Spans 1 ms apart do not chain: [0, 0] and [1ms, ...] are two
	// incidents until an event makes them touch.
	p = mustPartition(t, cfg)
	revs = feed(t, p,
		qev("m1", "a", 0), qev("m1", "b", 0), qev("m1", "c", 0), // [0, 0]
		qev("m1", "d", 2*minute+1), qev("m1", "e", 2*minute+1), qev("m1", "f", 2*minute+1), // [2m+1, 2m+1]
	)
	if len(revs) != 2 || len(p.keys["m1"].open) != 2 {
		t.Fatal(fmtRevisions(revs))
	}
	// g at 1ms: (b,c,g) = [0, 1ms] touches the first; (g,d,e) spans 2m: fires, [1ms, 2m+1] touches both.
	revs = feed(t, p, qev("m1", "g", 1))
	wantRevs(t, revs,
		"updated m1/a r1 start=0:00:00 end=0:02:00.001 count=7 evidence=[a@0:00:00 b@0:00:00 c@0:00:00] wm=-0:07:59.999",
		"merged  m1/d r1 into=m1/a start=0:02:00.001 end=0:02:00.001 count=3 evidence=[d@0:02:00.001 e@0:02:00.001 f@0:02:00.001] wm=-0:07:59.999")
}

func TestUpdated(t *testing.T) {
	p := mustPartition(t, vibration())
	revs := feed(t, p, qev("m1", "e5", 5*minute), qev("m1", "e6", 6*minute), qev("m1", "e7", 6*minute+30*sec))
	wantRevs(t, revs, "open    m1/e5 r0 start=0:05:00 end=0:06:30 count=3 evidence=[e5@0:05:00 e6@0:06:00 e7@0:06:30] wm=0:05:30")
	// Extending end and count alone emits nothing.
	if revs := feed(t, p, qev("m1", "e8", 8*minute)); len(revs) != 0 {
		t.Fatal(fmtRevisions(revs))
	}
	// A late event reveals an earlier firing set: start and evidence change.
	revs = feed(t, p, qev("m1", "e4", 4*minute))
	wantRevs(t, revs, "updated m1/e5 r1 start=0:04:00 end=0:08:00 count=5 evidence=[e4@0:04:00 e5@0:05:00 e6@0:06:00] wm=0:07:30 late")
	// A late event inside the first firing set changes the evidence only.
	revs = feed(t, p, qev("m1", "e4b", 4*minute+30*sec))
	wantRevs(t, revs, "updated m1/e5 r2 start=0:04:00 end=0:08:00 count=6 evidence=[e4@0:04:00 e4b@0:04:30 e5@0:05:00] wm=0:07:30 late")
	// Same ts as start but a smaller event_id: evidence changes, start not.
	revs = feed(t, p, qev("m1", "e3", 4*minute))
	wantRevs(t, revs, "updated m1/e5 r3 start=0:04:00 end=0:08:00 count=7 evidence=[e3@0:04:00 e4@0:04:00 e4b@0:04:30] wm=0:07:30 late")
	// A late event after the evidence, inside the incident: silent.
	if revs := feed(t, p, qev("m1", "e7b", 7*minute)); len(revs) != 0 {
		t.Fatal(fmtRevisions(revs))
	}
	// Close: the final state, revision + 1.
	revs = feed(t, p, fev("m9", "f", 21*minute))
	wantRevs(t, revs, "closed  m1/e5 r4 start=0:04:00 end=0:08:00 count=8 evidence=[e3@0:04:00 e4@0:04:00 e4b@0:04:30] wm=0:20:30")
}

func TestMerge(t *testing.T) {
	p := mustPartition(t, vibration())
	revs := feed(t, p,
		qev("m1", "a1", 0), qev("m1", "a2", 20*sec), qev("m1", "a3", 40*sec),
		qev("m1", "b1", 3*minute+30*sec), qev("m1", "b2", 3*minute+40*sec), qev("m1", "b3", 3*minute+50*sec),
	)
	if len(revs) != 2 || len(p.keys["m1"].open) != 2 {
		t.Fatal(fmtRevisions(revs))
	}
	// x at 2m: (a2,a3,x) = [20s, 2m] touches A; (x,b1,b2) = [2m, 3m40] touches B.
	revs = feed(t, p, qev("m1", "x", 2*minute))
	wantRevs(t, revs,
		"updated m1/a1 r1 start=0:00:00 end=0:03:50 count=7 evidence=[a1@0:00:00 a2@0:00:20 a3@0:00:40] wm=0:03:20 late",
		"merged  m1/b1 r1 into=m1/a1 start=0:03:30 end=0:03:50 count=3 evidence=[b1@0:03:30 b2@0:03:40 b3@0:03:50] wm=0:03:20 late")
	if len(p.keys["m1"].open) != 1 || p.Stats().OpenIncidents != 1 {
		t.Fatal("merged incident still open")
	}
	// The merged alert gets no further revisions: only the survivor closes.
	revs = feed(t, p, fev("m9", "f", 20*minute))
	wantRevs(t, revs, "closed  m1/a1 r2 start=0:00:00 end=0:03:50 count=7 evidence=[a1@0:00:00 a2@0:00:20 a3@0:00:40] wm=0:19:30")
}

func TestMergeThreeInStartOrder(t *testing.T) {
	cfg := vibration()
	cfg.Threshold = 4
	p := mustPartition(t, cfg)
	// Three incidents A, B, C that no window spans; x (late) lands in B
	// so that (a4, b1, b2, x) touches A and (x, b3, b4, c1) touches C.
	// C arrives first so that arrival order differs from start order.
	revs := feed(t, p,
		qev("m1", "c1", 4*minute+15*sec), qev("m1", "c2", 4*minute+31*sec), qev("m1", "c3", 4*minute+32*sec), qev("m1", "c4", 4*minute+33*sec),
		qev("m1", "a1", 0), qev("m1", "a2", 1*sec), qev("m1", "a3", 2*sec), qev("m1", "a4", 15*sec),
		qev("m1", "b1", 2*minute+2*sec), qev("m1", "b2", 2*minute+10*sec), qev("m1", "b3", 2*minute+20*sec), qev("m1", "b4", 2*minute+30*sec),
	)
	if len(revs) != 3 {
		t.Fatal(fmtRevisions(revs))
	}
	revs = feed(t, p, qev("m1", "x", 2*minute+15*sec))
	wantRevs(t, revs,
		"updated m1/a1 r1 start=0:00:00 end=0:04:33 count=13 evidence=[a1@0:00:00 a2@0:00:01 a3@0:00:02 a4@0:00:15] wm=0:04:03 late",
		"merged  m1/b1 r1 into=m1/a1 start=0:02:02 end=0:02:30 count=4 evidence=[b1@0:02:02 b2@0:02:10 b3@0:02:20 b4@0:02:30] wm=0:04:03 late",
		"merged  m1/c1 r1 into=m1/a1 start=0:04:15 end=0:04:33 count=4 evidence=[c1@0:04:15 c2@0:04:31 c3@0:04:32 c4@0:04:33] wm=0:04:03 late")
}

func TestCloseOrder(t *testing.T) {
	cfg := vibration()
	// ids that sort differently from the keys
	cfg.AlertID = func(key, id string) string { return id + "@" + key }
	p := mustPartition(t, cfg)
	feed(t, p,
		qev("k1", "z", 0), qev("k1", "z2", 10*sec), qev("k1", "z3", 60*sec), // end 1:00, id z@k1
		qev("k2", "a", 0), qev("k2", "a2", 20*sec), qev("k2", "a3", 60*sec), // end 1:00, id a@k2
		qev("k3", "m", 0), qev("k3", "m2", 5*sec), qev("k3", "m3", 50*sec), // end 0:50, id m@k3
		qev("k4", "b", 70*sec), qev("k4", "b2", 80*sec), qev("k4", "b3", 90*sec), // end 1:30
	)
	// W - L > end + S: W > 1:00 + 2:00 + 10:00 = 13:00 closes k1, k2, k3;
	// W = 13:00 exactly closes nothing.
	res := p.Process(fev("x", "f", 13*minute+30*sec).ev, false)
	if p.Watermark() != 13*minute || len(res.Revisions) != 1 || res.Revisions[0].Key != "k3" {
		t.Fatalf("W=%d: %s", p.Watermark(), fmtRevisions(res.Revisions))
	}
	res = p.Process(fev("x", "f", 13*minute+30*sec+1).ev, false)
	var got []string
	for _, r := range res.Revisions {
		got = append(got, r.AlertID+" "+r.Status.String())
	}
	if want := []string{"a@k2 closed", "z@k1 closed"}; !slices.Equal(got, want) {
		t.Fatalf("close order %v, want %v", got, want)
	}
	// All at once, in (end, alert_id) order, across keys.
	p = mustPartition(t, cfg)
	feed(t, p,
		qev("k1", "z", 0), qev("k1", "z2", 10*sec), qev("k1", "z3", 60*sec),
		qev("k4", "b", 70*sec), qev("k4", "b2", 80*sec), qev("k4", "b3", 90*sec),
		qev("k2", "a", 0), qev("k2", "a2", 20*sec), qev("k2", "a3", 60*sec),
		qev("k3", "m", 0), qev("k3", "m2", 5*sec), qev("k3", "m3", 50*sec),
	)
	res = p.Process(fev("x", "f", time0(60)).ev, false)
	got = nil
	for _, r := range res.Revisions {
		got = append(got, r.AlertID)
		if r.Watermark != p.Watermark() || r.Late {
			t.Fatalf("%s", fmtRevision(r))
		}
	}
	if want := []string{"m@k3", "a@k2", "z@k1", "b@k4"}; !slices.Equal(got, want) {
		t.Fatalf("close order %v, want %v", got, want)
	}
}

func time0(minutes int64) int64 { return minutes * minute }

// TestClosedIncidentUntouchable: the earliest event still applied after a
// close (ts = W - L) cannot reach the closed incident: it opens a new one.
func TestClosedIncidentUntouchable(t *testing.T) {
	cfg := vibration()
	p := mustPartition(t, cfg)
	feed(t, p, qev("m1", "a", 0), qev("m1", "b", 10*sec), qev("m1", "c", 20*sec))
	revs := feed(t, p, fev("m1", "f", 12*minute+20*sec+30*sec+1)) // W - L = 2:20 + 1ms > end + S
	if len(revs) != 1 || revs[0].Status != Closed {
		t.Fatal(fmtRevisions(revs))
	}
	wl := p.Watermark() - cfg.LatenessMs
	revs = feed(t, p, qev("m1", "d", wl), qev("m1", "e", wl), qev("m1", "f2", wl))
	wantRevs(t, revs, "open    m1/d r0 start=0:02:20.001 end=0:02:20.001 count=3 evidence=[d@0:02:20.001 e@0:02:20.001 f2@0:02:20.001] wm=0:12:20.001 late")
}

func TestWatermarkNeverDecreases(t *testing.T) {
	p := mustPartition(t, vibration())
	prev := p.Watermark()
	for i, ts := range []int64{10 * minute, 5 * minute, 10 * minute, 0, 11 * minute, -5 * minute, 11 * minute} {
		r := qev("m1", string(rune('a'+i)), ts)
		r.q = i%2 == 0
		p.Process(r.ev, r.q)
		if w := p.Watermark(); w < prev || w != max(prev, ts-30*sec) {
			t.Fatalf("after ts=%d: W=%d, before %d", ts, w, prev)
		}
		prev = p.Watermark()
	}
}

// TestOverflow: extreme timestamps and configurations must not wrap.
func TestOverflow(t *testing.T) {
	cfg := vibration()
	cfg.LatenessMs, cfg.DedupHorizonMs = math.MaxInt64/2, math.MaxInt64
	p := mustPartition(t, cfg)
	// At NoWatermark nothing is late, too late or expired.
	for i, ts := range []int64{math.MinInt64, math.MinInt64 + 1, math.MinInt64 + 2} {
		res := p.Process(qev("m1", string(rune('a'+i)), ts).ev, true)
		if res.Outcome != Processed || res.LatenessMs != 0 {
			t.Fatalf("ts=%d: %+v", ts, res)
		}
		if i == 2 && (len(res.Revisions) != 1 || res.Revisions[0].Late) {
			t.Fatalf("%+v", res)
		}
	}
	if p.Watermark() != NoWatermark {
		t.Fatalf("ts - D saturates at minus infinity: %d", p.Watermark())
	}
	if p.Sweep() != 0 || p.Stats().Keys != 1 {
		t.Fatal("nothing expires at NoWatermark")
	}
	// Far future: the incident at MinInt64 is so old that W - L - S ... must
	// not wrap; it closes once W - L > end + S.
	res := p.Process(fev("m2", "f", math.MaxInt64).ev, false)
	if p.Watermark() != math.MaxInt64-30*sec {
		t.Fatal(p.Watermark())
	}
	if len(res.Revisions) != 1 || res.Revisions[0].Status != Closed {
		t.Fatalf("%s", fmtRevisions(res.Revisions))
	}
	// Lateness saturates.
	res = p.Process(qev("m3", "x", math.MinInt64).ev, true)
	if res.Outcome != TooLate || res.LatenessMs != math.MaxInt64 {
		t.Fatalf("%+v", res)
	}
	// An incident ending near MaxInt64: end + S saturates, it never closes.
	feed(t, p, qev("m4", "a", math.MaxInt64-2), qev("m4", "b", math.MaxInt64-1), qev("m4", "c", math.MaxInt64))
	if p.Stats().OpenIncidents != 1 {
		t.Fatal(p.Stats())
	}
	p.Sweep()

	// Default config, NoWatermark, and a span computation across the whole
	// int64 range.
	p = mustPartition(t, vibration())
	if revs := feed(t, p, qev("m1", "a", math.MinInt64), qev("m1", "b", 0), qev("m1", "c", math.MaxInt64)); len(revs) != 0 {
		t.Fatal(fmtRevisions(revs))
	}
}

func TestNoWatermarkNothingCloses(t *testing.T) {
	cfg := vibration()
	p := mustPartition(t, cfg)
	revs := feed(t, p, qev("m1", "a", math.MinInt64+10), qev("m1", "b", math.MinInt64+11), qev("m1", "c", math.MinInt64+12))
	if len(revs) != 1 || p.Watermark() != NoWatermark || p.Stats().OpenIncidents != 1 {
		t.Fatalf("W=%d %s", p.Watermark(), fmtRevisions(revs))
	}
}

func TestDirty(t *testing.T) {
	p := mustPartition(t, vibration())
	if k, m := p.Dirty(); len(k) != 0 || m {
		t.Fatal(k, m)
	}
	p.Process(fev("m1", "f", 0).ev, false)
	if k, m := p.Dirty(); len(k) != 0 || !m {
		t.Fatal("filtered: meta only", k, m)
	}
	p.ClearDirty()
	p.Process(qev("m2", "a", 0).ev, true)
	p.Process(qev("m1", "a", 0).ev, true)
	if k, m := p.Dirty(); !slices.Equal(k, []string{"m1", "m2"}) || m {
		t.Fatal(k, m)
	}
	p.ClearDirty()
	p.Process(qev("m1", "a", 0).ev, true) // duplicate: nothing changes
	if k, m := p.Dirty(); len(k) != 0 || m {
		t.Fatal("duplicate", k, m)
	}
	if p.EncodeKey("nope") != nil {
		t.Fatal("unknown key encodes")
	}
	// Deleted by Sweep: dirty, and encodes as nil.
	p.Process(fev("m9", "f", 5*60*minute).ev, false)
	p.ClearDirty()
	if n := p.Sweep(); n != 2 {
		t.Fatalf("swept %d keys", n)
	}
	if k, _ := p.Dirty(); !slices.Equal(k, []string{"m1", "m2"}) || p.EncodeKey("m1") != nil {
		t.Fatal(k)
	}
	if p.Sweep() != 0 {
		t.Fatal("second sweep")
	}
}

func TestSweepCheapWhenNothingDue(t *testing.T) {
	p := mustPartition(t, vibration())
	for i := range 1000 {
		p.Process(qev("m"+string(rune('a'+i%26)), string(rune(i)), int64(i)*sec).ev, true)
	}
	if n := len(p.sweepQ); n > 100 {
		t.Fatalf("sweep queue has %d entries for 26 keys", n)
	}
	allocs := testing.AllocsPerRun(100, func() { p.Sweep() })
	if allocs != 0 || p.sweepQ[0].at <= p.Watermark() {
		t.Fatal(allocs)
	}
}

func TestEncodingErrors(t *testing.T) {
	p := mustPartition(t, vibration())
	feed(t, p, qev("m1", "a", 0), qev("m1", "b", sec), qev("m1", "c", 2*sec), qev("m1", "d", 3*sec))
	good := encodeKeyV1(p, "m1")
	q := mustPartition(t, vibration())
	if err := loadKeyNow(q, "m1", good); err != nil {
		t.Fatal(err)
	}
	bad := func(name string, data []byte, want error) {
		t.Helper()
		q := mustPartition(t, vibration())
		err := loadKeyNow(q, "m1", data)
		if err == nil || !errors.Is(err, want) || !strings.HasPrefix(err.Error(), "window: load key \"m1\": ") {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
		if q.Stats() != (Stats{}) {
			t.Errorf("%s: failed load changed the partition", name)
		}
	}
	bad("empty", nil, ErrCorrupt)
	bad("version", append([]byte{3}, good[1:]...), ErrUnknownVersion)
	bad("version 0", append([]byte{0}, good[1:]...), ErrUnknownVersion)
	bad("trailing", append(slices.Clone(good), 0), ErrCorrupt)
	for i := 1; i < len(good); i++ {
		bad("truncated", good[:i], ErrCorrupt)
	}
	bad("no state", []byte{1, 0, 0, 0}, ErrCorrupt)
	// Another threshold: the evidence length no longer fits.
	cfg := vibration()
	cfg.Threshold = 2
	if err := loadKeyNow(mustPartition(t, cfg), "m1", good); !errors.Is(err, ErrCorrupt) {
		t.Errorf("threshold change: %v", err)
	}

	if err := q.LoadMeta(p.EncodeMeta()); err != nil || q.Watermark() != p.Watermark() {
		t.Fatal(err)
	}
	for _, b := range [][]byte{nil, {1}, {1, 0, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if err := q.LoadMeta(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("meta %v: %v", b, err)
		}
	}
	if err := q.LoadMeta([]byte{9, 0, 0, 0, 0, 0, 0, 0, 0}); !errors.Is(err, ErrUnknownVersion) {
		t.Error(err)
	}
	// NoWatermark round trip.
	if err := q.LoadMeta(mustPartition(t, vibration()).EncodeMeta()); err != nil || q.Watermark() != NoWatermark {
		t.Fatal(err, q.Watermark())
	}
}

// bucketed is the vibration configuration with buckets of 1 s (events) and
// 2 s (ids), so that a few events of a test span several entries.
func bucketed() Config {
	cfg := vibration()
	cfg.EventBucketMs, cfg.DedupBucketMs = sec, 2*sec
	return cfg
}

// TestEntryErrors: every entry of the version 2 layout refuses what is not
// its encoding, and the entries of a key are checked together: a failed
// load changes nothing.
func TestEntryErrors(t *testing.T) {
	p := mustPartition(t, bucketed())
	feed(t, p, qev("m1", "a", 0), qev("m1", "b", sec), qev("m1", "c", 2*sec), qev("m1", "d", 3*sec), qev("m1", "e", 3*sec+500))
	good := snapshot(p)
	if len(good) != 1+4+2 {
		t.Fatalf("%d entries, want the key, 4 event buckets and 2 dedup buckets", len(good))
	}
	if err := loadEntries(mustPartition(t, bucketed()), good, nil); err != nil {
		t.Fatal(err)
	}
	key, ev3, dd1 := keyEntry("m1"), entryName{EventsBucket, "m1", 3}, entryName{DedupBucket, "m1", 1}
	bad := func(name string, spoil func(m map[entryName][]byte), want error, prefix string) {
		t.Helper()
		m := maps.Clone(good)
		spoil(m)
		q := mustPartition(t, bucketed())
		err := loadEntries(q, m, nil)
		if err == nil || !errors.Is(err, want) || !strings.HasPrefix(err.Error(), prefix) {
			t.Errorf("%s: %v, want %v with prefix %q", name, err, want, prefix)
		}
		if q.Stats() != (Stats{}) {
			t.Errorf("%s: failed load changed the partition", name)
		}
	}
	set := func(n entryName, v []byte) func(m map[entryName][]byte) {
		return func(m map[entryName][]byte) { m[n] = v }
	}
	const kp, ep, dp = `window: load key "m1": `, `window: load key "m1" events bucket 3: `, `window: load key "m1" dedup bucket 1: `
	for _, c := range []struct {
		name   entryName
		prefix string
	}{{key, kp}, {ev3, ep}, {dd1, dp}} {
		v := good[c.name]
		bad(fmt.Sprint(c.name, " empty"), set(c.name, []byte{}), ErrCorrupt, c.prefix)
		bad(fmt.Sprint(c.name, " version"), set(c.name, append([]byte{3}, v[1:]...)), ErrUnknownVersion, c.prefix)
		bad(fmt.Sprint(c.name, " version 0"), set(c.name, append([]byte{0}, v[1:]...)), ErrUnknownVersion, c.prefix)
		bad(fmt.Sprint(c.name, " trailing"), set(c.name, append(slices.Clone(v), 0)), ErrCorrupt, c.prefix)
		for i := 1; i < len(v); i++ {
			bad(fmt.Sprint(c.name, " truncated"), set(c.name, v[:i]), ErrCorrupt, c.prefix)
		}
	}
	if c := good[key]; string(c[:5]) != "\x02\xe8\x07\xd0\x0f" {
		t.Fatalf("key entry %x: want version 2 and the bucket lengths 1000 and 2000 first", c)
	}
	bad("no state", set(key, []byte{2, 0xe8, 0x07, 0xd0, 0x0f, 0, 0, 0}), ErrCorrupt, kp)
	bad("other event bucket", set(key, append([]byte{2, 0xe9, 0x07}, good[key][3:]...)), ErrUnknownVersion, kp)
	bad("other dedup bucket", set(key, append([]byte{2, 0xe8, 0x07, 0xd1, 0x0f}, good[key][5:]...)), ErrUnknownVersion, kp)
	bad("empty events bucket", set(ev3, []byte{2, 0}), ErrCorrupt, ep)
	bad("empty dedup bucket", set(dd1, []byte{2, 0}), ErrCorrupt, dp)
	bad("events out of order", set(ev3, []byte{2, 2, 0xf0, 0x2e, 1, 'e', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'd', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}), ErrCorrupt, ep)
	bad("ts overflows", set(dd1, []byte{2, 2, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1, 'a', 1, 1, 'b'}), ErrCorrupt, dp)
	bad("id repeated", set(dd1, []byte{2, 2, 0xa0, 0x1f, 1, 'a', 1, 1, 'a'}), ErrCorrupt, dp)
	bad("dedup out of order", set(dd1, []byte{2, 2, 0xa0, 0x1f, 1, 'b', 0, 1, 'a'}), ErrCorrupt, dp)
	// The key as a whole.
	bad("key entry missing", func(m map[entryName][]byte) { delete(m, key) }, ErrCorrupt, kp)
	bad("events bucket missing", func(m map[entryName][]byte) { delete(m, ev3) }, ErrCorrupt, kp)
	bad("dedup bucket missing", func(m map[entryName][]byte) { delete(m, dd1) }, ErrCorrupt, kp)
	bad("events in another bucket", func(m map[entryName][]byte) {
		m[entryName{EventsBucket, "m1", 9}] = m[ev3]
		delete(m, ev3)
	}, ErrCorrupt, kp)
	bad("ids in another bucket", func(m map[entryName][]byte) {
		m[entryName{DedupBucket, "m1", 9}] = m[dd1]
		delete(m, dd1)
	}, ErrCorrupt, kp)
	bad("an id in two buckets", func(m map[entryName][]byte) {
		m[entryName{DedupBucket, "m1", 0}] = []byte{2, 2, 0, 1, 'a', 0xdc, 0x0b, 1, 'c'} // a at 0, c at 1.5 s (c is in bucket 1 too)
	}, ErrCorrupt, kp)
	bad("a version 1 value and buckets", set(key, encodeKeyV1(p, "m1")), ErrCorrupt, kp)
	bad("an event changed", func(m map[entryName][]byte) {
		q := mustPartition(t, bucketed())
		feed(t, q, qev("m1", "a", 0), rec{ev: Event{Key: "m1", EventID: "b", SensorID: "other", TS: sec, Value: 9}, q: true})
		m[entryName{EventsBucket, "m1", 1}] = q.EncodeBucket(BucketRef{EventsBucket, "m1", 1})
	}, ErrCorrupt, kp)
	cfg := bucketed()
	cfg.Threshold = 2
	if err := loadEntries(mustPartition(t, cfg), good, nil); !errors.Is(err, ErrCorrupt) {
		t.Errorf("threshold change: %v", err)
	}
}

// TestLoadKeyReplaces: loading over an existing key replaces its state and
// keeps the partition-wide index consistent.
func TestLoadKeyReplaces(t *testing.T) {
	p := mustPartition(t, bucketed())
	feed(t, p, qev("m1", "a", 0), qev("m1", "b", sec), qev("m1", "c", 2*sec))
	b := snapshot(p)
	for range 3 {
		if err := loadEntries(p, b, nil); err != nil {
			t.Fatal(err)
		}
	}
	legacy := encodeKeyV1(p, "m1")
	for range 2 { // staged twice before one FinishLoad: the second replaces the first
		if err := p.LoadKey("m1", legacy); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.FinishLoad(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st != (Stats{Keys: 1, Events: 3, Dedup: 3, OpenIncidents: 1}) {
		t.Fatalf("%+v", st)
	}
	revs := feed(t, p, fev("m9", "f", 20*minute))
	if len(revs) != 1 || revs[0].Status != Closed || revs[0].Revision != 1 {
		t.Fatal(fmtRevisions(revs))
	}
}

// TestLongIncidentBoundedState: a machine that vibrates continuously keeps
// one incident open for hours (one qualifying event every 20 s for 12 h;
// every three consecutive events span 40 s <= S, so all spans chain).
// Pruning inside the open incident keeps the key at about
// (D + L + S)/interval + N events however long the incident lasts, the
// incident still counts every event, and the revisions are identical to a
// run that never prunes, and to one that sweeps, persists and restores at
// random points. A few events arrive late or twice.
func TestLongIncidentBoundedState(t *testing.T) {
	cfg := vibration()
	const interval = 20 * sec
	const n = 12 * 3600 * sec / interval
	var recs []rec
	for i := int64(0); i < n; i++ {
		recs = append(recs, qev("m1", fmt.Sprintf("e%05d", i), i*interval))
		recs[len(recs)-1].ev.Offset = int64(len(recs))
		if i%97 == 5 {
			recs = append(recs, recs[len(recs)-1]) // a redelivery
		}
	}
	for i := 10; i+1 < len(recs); i += 53 {
		recs[i], recs[i+1] = recs[i+1], recs[i] // 20 s late, applied
	}
	closer := fev("m9", "f", n*interval+30*minute)
	recs = append(recs, closer)

	never := newDriver(t, cfg)
	never.setKeepAll(true)
	never.run(recs)

	d := newDriver(t, cfg)
	ck := newChecker(t, cfg)
	maxEvents, maxBytes, maxPruned := 0, 0, 0
	for _, r := range recs {
		p := d.p
		res := d.step(r)
		ck.observe(p, r, res)
		if r == closer {
			break
		}
		ks := d.p.keys["m1"]
		if len(ks.open) != 1 && len(d.revs) > 0 {
			t.Fatalf("at %s: %d open incidents, want one all along", fmtTS(r.ev.TS), len(ks.open))
		}
		if len(ks.open) == 0 {
			continue
		}
		maxEvents = max(maxEvents, d.p.Stats().Events)
		size := 0
		for _, v := range snapshotKey(d.p, "m1") {
			size += len(v)
		}
		maxBytes = max(maxBytes, size)
		maxPruned = max(maxPruned, ks.open[0].pruned)
	}
	bound := int((cfg.DelayMs+cfg.LatenessMs+cfg.SizeMs)/interval) + cfg.Threshold
	t.Logf("%d events in one incident: at most %d kept (bound %d), %d bytes encoded; never pruning: %d kept",
		n, maxEvents, bound, maxBytes, never.p.Stats().Events)
	if maxEvents > bound || maxPruned < int(n)-bound {
		t.Fatalf("kept up to %d events (bound %d), pruned up to %d of %d", maxEvents, bound, maxPruned, n)
	}

	if !reflect.DeepEqual(d.revs, never.revs) || !reflect.DeepEqual(d.outs, never.outs) {
		t.Fatalf("pruning inside the open incident changed the output:\n%s\n%s", fmtRevisions(never.revs), fmtRevisions(d.revs))
	}
	restored := newDriver(t, cfg)
	restored.rnd, restored.sweep, restored.flush, restored.restore = rand.New(rand.NewPCG(1, 1)).Float64, 0.3, 0.3, 0.05
	restored.run(recs)
	if !reflect.DeepEqual(restored.revs, never.revs) || !reflect.DeepEqual(restored.outs, never.outs) {
		t.Fatalf("sweeping and restoring changed the output:\n%s\n%s", fmtRevisions(never.revs), fmtRevisions(restored.revs))
	}
	wantRevs(t, d.revs,
		"open    m1/e00000 r0 start=0:00:00 end=0:00:40 count=3 evidence=[e00000@0:00:00 e00001@0:00:20 e00002@0:00:40] wm=-0:00:10",
		"closed  m1/e00000 r1 start=0:00:00 end=11:59:40 count=2160 evidence=[e00000@0:00:00 e00001@0:00:20 e00002@0:00:40] wm=12:29:30")
}

// TestMergeIntoPrunedIncident: a late event chains an incident that has
// been open for an hour (its first events, evidence included, are pruned)
// with a young one. The survivor keeps its stored evidence, and its count
// is its pruned events plus the kept events of the union.
func TestMergeIntoPrunedIncident(t *testing.T) {
	cfg := vibration()
	var recs []rec
	for i := int64(0); i <= 180; i++ { // A: [0:00, 1:00:00], 181 events
		recs = append(recs, qev("m1", fmt.Sprintf("a%03d", i), i*20*sec))
	}
	for i := int64(0); i < 5; i++ { // B: [1:02:30, 1:03:50] after a 150 s gap
		recs = append(recs, qev("m1", fmt.Sprintf("b%d", i), 3750*sec+i*20*sec))
	}
	// x at 1:01:15: (a179, a180, x) spans 95 s and touches A; (x, b0, b1)
	// spans 95 s and touches B.
	x := qev("m1", "x", 3675*sec)
	closer := fev("m9", "f", 2*3600*sec)

	never := newDriver(t, cfg)
	never.setKeepAll(true)
	never.run(append(slices.Clone(recs), x, closer))

	d := newDriver(t, cfg)
	ck := newChecker(t, cfg)
	for _, r := range recs {
		p := d.p
		ck.observe(p, r, d.step(r))
	}
	d.reload() // the pruned counter goes through the encoding
	a := d.p.keys["m1"].open[0]
	if a.pruned == 0 || d.p.keys["m1"].events[0].TS <= a.evidence[2].TS {
		t.Fatalf("A's evidence is still kept (pruned %d): the test proves nothing", a.pruned)
	}
	for _, r := range []rec{x, closer} {
		p := d.p
		ck.observe(p, r, d.step(r))
	}
	wantRevs(t, d.revs[len(d.revs)-3:],
		"updated m1/a000 r1 start=0:00:00 end=1:03:50 count=187 evidence=[a000@0:00:00 a001@0:00:20 a002@0:00:40] wm=1:03:20 late",
		"merged  m1/b0 r1 into=m1/a000 start=1:02:30 end=1:03:50 count=5 evidence=[b0@1:02:30 b1@1:02:50 b2@1:03:10] wm=1:03:20 late",
		"closed  m1/a000 r2 start=0:00:00 end=1:03:50 count=187 evidence=[a000@0:00:00 a001@0:00:20 a002@0:00:40] wm=1:59:30")
	if !reflect.DeepEqual(d.revs, never.revs) {
		t.Fatalf("pruning changed the output:\n%s\n%s", fmtRevisions(never.revs), fmtRevisions(d.revs))
	}
}

// TestLoadKeyPrunedIncident: an incident whose first events (and some or
// all of its evidence) were pruned round-trips, and LoadKey rejects the
// inconsistencies that can still be detected without the pruned events.
func TestLoadKeyPrunedIncident(t *testing.T) {
	for _, format := range []string{"v1", "v2"} {
		t.Run(format, func(t *testing.T) { testLoadKeyPrunedIncident(t, format) })
	}
}

func testLoadKeyPrunedIncident(t *testing.T, format string) {
	cfg := vibration()
	encode := func(p *Partition) map[entryName][]byte {
		if format == "v1" {
			return map[entryName][]byte{keyEntry("m1"): encodeKeyV1(p, "m1")}
		}
		return snapshot(p)
	}
	build := func(last int64) map[entryName][]byte {
		p := mustPartition(t, cfg)
		for i := int64(0); i <= last; i++ {
			p.Process(qev("m1", fmt.Sprintf("e%03d", i), i*20*sec).ev, true)
		}
		p.Sweep()
		return encode(p)
	}
	// Events every 20 s up to 12:40: W = 12:10, W - L - S = 0:10, so e000
	// is pruned and the evidence continues into the kept events (j = 1).
	partial := build(38)
	// Up to 1:00:00: W - L - S = 0:47:30, the whole evidence and 140 more
	// events are pruned (j = N).
	whole := build(180)
	// Up to 0:10:00: nothing pruned.
	fresh := build(30)

	load := func(data map[entryName][]byte) (*Partition, error) {
		q := mustPartition(t, cfg)
		return q, loadEntries(q, data, nil)
	}
	for name, tc := range map[string]struct {
		data   map[entryName][]byte
		pruned int
	}{"partial": {partial, 1}, "whole": {whole, 143}, "fresh": {fresh, 0}} {
		q, err := load(tc.data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if inc := q.keys["m1"].open[0]; inc.pruned != tc.pruned || inc.count != inc.pruned+len(q.keys["m1"].events) {
			t.Fatalf("%s: pruned %d count %d with %d kept, want pruned %d", name, inc.pruned, inc.count, len(q.keys["m1"].events), tc.pruned)
		}
	}

	corrupt := func(name string, data map[entryName][]byte, mut func(ks *keyState, inc *incident)) {
		t.Helper()
		q, err := load(data)
		if err != nil {
			t.Fatal(err)
		}
		ks := q.keys["m1"]
		inc := ks.open[0]
		inc.evidence = slices.Clone(inc.evidence)
		mut(ks, inc)
		q2, err := load(encode(q))
		if !errors.Is(err, ErrCorrupt) || q2.Stats() != (Stats{}) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	for _, data := range []map[entryName][]byte{partial, whole} {
		corrupt("pruned+1", data, func(ks *keyState, inc *incident) { inc.pruned++ })
		corrupt("count+1", data, func(ks *keyState, inc *incident) { inc.count++ })
		corrupt("pruned > count", data, func(ks *keyState, inc *incident) { inc.pruned = inc.count + 1 })
		corrupt("pruned evidence not counted", data, func(ks *keyState, inc *incident) { inc.count -= inc.pruned; inc.pruned = 0 })
		corrupt("last event dropped", data, func(ks *keyState, inc *incident) {
			ks.events = ks.events[:len(ks.events)-1]
			inc.count--
		})
		corrupt("evidence out of order", data, func(ks *keyState, inc *incident) {
			inc.evidence[0], inc.evidence[1] = inc.evidence[1], inc.evidence[0]
		})
		corrupt("evidence spans more than S", data, func(ks *keyState, inc *incident) { inc.evidence[2].TS += 2 * minute })
		corrupt("start is not the evidence's", data, func(ks *keyState, inc *incident) { inc.start-- })
	}
	// (Dropping it and counting it as pruned is a valid state: the one a
	// later prune would leave.)
	corrupt("kept evidence event dropped", partial, func(ks *keyState, inc *incident) {
		ks.events = ks.events[1:]
		inc.count--
	})
	corrupt("kept evidence differs", partial, func(ks *keyState, inc *incident) { inc.evidence[1].Value++ })
	corrupt("pruning did not cut by ts", partial, func(ks *keyState, inc *incident) {
		inc.evidence[0].TS = ks.events[0].TS
		inc.start = ks.events[0].TS
	})
	corrupt("pruned events before a kept evidence", fresh, func(ks *keyState, inc *incident) {
		inc.pruned++
		inc.count++
	})
	corrupt("evidence not the kept events", fresh, func(ks *keyState, inc *incident) { inc.evidence[2].SensorID = "other" })
	corrupt("count", fresh, func(ks *keyState, inc *incident) { inc.count-- })
}

// TestRememberAgainMovesBucket: an expired id remembered again (here
// without pruning in between) moves to the bucket of its new ts; the
// bucket of the old one is rewritten without it (deleted, as it held
// nothing else).
func TestRememberAgainMovesBucket(t *testing.T) {
	d := newDriver(t, bucketed())
	d.setKeepAll(true)
	d.step(qev("m1", "a", 0))
	d.step(fev("m9", "f", 2*3600*sec)) // W - H > 0: "a" expired
	d.persist()
	if res := d.step(qev("m1", "a", 2*3600*sec)); res.Outcome != Processed {
		t.Fatal(res.Outcome)
	}
	if !slices.Contains(d.p.DirtyBuckets(), BucketRef{DedupBucket, "m1", 0}) {
		t.Fatalf("the old bucket of a moved id is not dirty: %v", d.p.DirtyBuckets())
	}
	d.reload()
	if _, ok := d.store[entryName{DedupBucket, "m1", 0}]; ok {
		t.Fatal("the old bucket of a moved id is still stored")
	}
}
