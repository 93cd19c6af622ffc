package pipeline

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/sim"
)

// jumped returns the stream with machine's device clock an hour ahead from
// record index from on (its records' timestamps, the gateway's send times,
// stay right), and whether each record was changed.
func jumped(t *testing.T, recs []sim.Record, machine string, from int) ([]Input, []bool) {
	t.Helper()
	out := make([]Input, len(recs))
	moved := make([]bool, len(recs))
	for i, r := range recs {
		out[i] = input(0, int64(i), r)
		if i < from || string(r.Key) != machine {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(r.Value, &m); err != nil {
			continue // poison stays poison
		}
		ts, ok := m["ts"].(float64)
		if !ok {
			continue
		}
		m["ts"] = int64(ts) + time.Hour.Milliseconds()
		v, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out[i].Value, moved[i] = v, true
	}
	return out, moved
}

// alertsBy runs a stage over a log and returns the alert values of every
// machine but skip, the dead letters' reasons of the jumped records, and
// the accounting.
func alertsBy(t *testing.T, s *Stage, log []Input, skip string) (map[string][]string, map[string]int, Accounting) {
	t.Helper()
	w := s.NewPartition()
	acct := Accounting{Version: 1}
	got := map[string][]string{}
	reasons := map[string]int{}
	for _, in := range log {
		s.Process(w, in, &acct, func(o Output) {
			switch {
			case o.Kind == Alert && string(o.Key) != skip:
				a, err := alerts.Decode(o.Value)
				if err != nil {
					t.Fatal(err)
				}
				// The watermark in an alert is the partition's: compare what
				// the alert says about its machine.
				got[a.MachineID] = append(got[a.MachineID], strings.Join([]string{a.AlertID, a.Status, alerts.FormatTime(a.Start), alerts.FormatTime(a.End)}, " "))
			case o.Kind == DeadLetter && string(o.Key) == skip:
				reasons[o.Reason]++
			}
		})
	}
	return got, reasons, acct
}

// Issue 3, clock trouble: one machine's device clock jumps an hour ahead
// while the other machines on the same partition keep producing. The
// clock_ahead guard dead-letters the jumped events before they can drag the
// partition watermark forward, so the other machines' alerts are exactly
// those of the stream without the jumped records. Without the guard (a
// skew allowance above the jump), the same jump makes the other machines'
// events too late and their alerts change.
func TestClockJumpDoesNotDisturbOtherMachines(t *testing.T) {
	o := sim.Demo()
	o.Machines, o.Seed, o.EpisodeRate = 6, 17, 0.04
	o.ClockAheadRate, o.OutageRate, o.PoisonRate = 0, 0, 0
	line := sim.New(o)
	recs := make([]sim.Record, 20_000)
	for i := range recs {
		recs[i] = line.Next()
	}
	const machine = "M-003"
	log, moved := jumped(t, recs, machine, 5000)
	var without []Input
	for i, in := range log {
		if !moved[i] {
			without = append(without, in)
		}
	}
	n := 0
	for _, m := range moved {
		if m {
			n++
		}
	}
	c := compileRule(t, nil)
	guarded, err := NewRuleStage(c, Options{MaxFutureSkewMs: (5 * time.Minute).Milliseconds()})
	if err != nil {
		t.Fatal(err)
	}
	got, reasons, acct := alertsBy(t, guarded, log, machine)
	want, _, _ := alertsBy(t, guarded, without, machine)
	if len(want) < 3 {
		t.Fatalf("alerts of %d other machines only: the fixture proves nothing", len(want))
	}
	for m, w := range want {
		if strings.Join(got[m], "\n") != strings.Join(w, "\n") {
			t.Errorf("machine %s: %d alert revisions with the jump, %d without", m, len(got[m]), len(w))
		}
	}
	if reasons["clock_ahead"] != n {
		t.Errorf("%d of %d jumped records dead-lettered as clock_ahead (%v)", reasons["clock_ahead"], n, reasons)
	}
	if !acct.Balanced() {
		t.Errorf("accounting %+v", acct)
	}
	t.Logf("%d jumped records of %s dead-lettered as clock_ahead; %d other machines' alerts unchanged", n, machine, len(want))

	// The guard is what protects them.
	unguarded, err := NewRuleStage(c, Options{MaxFutureSkewMs: (2 * time.Hour).Milliseconds()})
	if err != nil {
		t.Fatal(err)
	}
	bad, _, badAcct := alertsBy(t, unguarded, log, machine)
	same := true
	for m, w := range want {
		if strings.Join(bad[m], "\n") != strings.Join(w, "\n") {
			same = false
		}
	}
	if same || badAcct.TooLate == 0 {
		t.Errorf("without the guard the jump changed nothing (%d too late): the test does not show the guard's effect", badAcct.TooLate)
	}
	t.Logf("without the guard: %d records too late", badAcct.TooLate)
}
