package pipeline

import (
	"fmt"
	"math"
	"testing"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/rules"
)

func alignEvent(id, machine string, ts int64, v float64) []byte {
	return []byte(fmt.Sprintf(`{"event_id":%q,"machine_id":%q,"sensor_id":"s1","ts":%d,"seq":1,"value":%v,"unit":"mm/s","schema_version":1,"quality":"good"}`, id, machine, ts, v))
}

// A repartitioned rule has no watermark until every source partition has
// been heard of (docs/RULES.md): its alerts carry none and nothing is too
// late, however old an event. Once the last source partition reports, the
// watermark is the slowest source's progress minus the delay. (Before, the
// "no watermark" of the alignment was an enormous delay, which still moved
// W to about 35 years before each event: alerts carried that watermark and
// an older event was too late.)
func TestRepartitionedRuleHasNoWatermarkUntilEverySourceIsHeardOf(t *testing.T) {
	c := compileRule(t, func(r *rules.Rule) { r.Repartition = true })
	s, err := NewRuleStage(c, Options{Repartitioned: true})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewPartition()
	acct := Accounting{Version: 1}
	var outs []Output
	emit := func(o Output) { outs = append(outs, o) }
	off := int64(0)
	marker := func(src int32, maxTS int64, idle bool) {
		t.Helper()
		if err := s.Marker(w, Input{Topic: "rp", Offset: off, Headers: MarkerRecord(src, 3, maxTS, idle)}, &acct, emit); err != nil {
			t.Fatal(err)
		}
		off++
	}
	send := func(src int, id string, ts int64) {
		in := Input{Topic: "rp", Offset: off, Key: []byte("m1"), Value: alignEvent(id, "m1", ts, 9), TimestampMs: ts,
			Headers: []Header{{HeaderSourcePartition, []byte(fmt.Sprint(src))}}}
		off++
		s.Process(w, in, &acct, emit)
	}
	const T = int64(1704067200000)  // 2024-01-01
	marker(1, math.MinInt64, false) // source 1 of 3: nothing forwarded yet
	send(0, "a", T)
	send(0, "b", T+1000)
	send(0, "c", T+2000)
	if w.Watermark() != math.MinInt64 {
		t.Errorf("watermark %s before source 2 was heard of, want none", alerts.FormatTime(w.Watermark()))
	}
	opened := 0
	for _, o := range outs {
		a, err := alerts.Decode(o.Value)
		if err != nil {
			t.Fatal(err)
		}
		opened++
		if a.Watermark != alerts.WatermarkNone {
			t.Errorf("%s revision carries watermark %s before every source partition was heard of", o.Status, alerts.FormatTime(a.Watermark))
		}
	}
	if opened == 0 {
		t.Fatal("no alert: the fixture proves nothing")
	}
	outs = nil
	send(0, "old", 315532800000) // 1980-01-01
	for _, o := range outs {
		if o.Kind == TooLate {
			t.Error("an event of 1980 was too late with no watermark")
		}
	}
	// Sources 1 and 2 report: the slowest source (1, at T+500) holds it.
	marker(1, T+500, false)
	marker(2, T+60_000, false)
	send(0, "d", T+3000)
	if want := T + 500 - c.DelayMs; w.Watermark() != want {
		t.Errorf("watermark %s once every source was heard of, want %s (slowest source minus the delay)", alerts.FormatTime(w.Watermark()), alerts.FormatTime(want))
	}
}
