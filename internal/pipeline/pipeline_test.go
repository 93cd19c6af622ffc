package pipeline

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/sim"
)

func stage(t testing.TB) *Stage {
	t.Helper()
	s, err := NewStage(config.Default().Rule)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func input(p int32, off int64, r sim.Record) Input {
	return Input{Topic: "in", Partition: p, Offset: off, Key: r.Key, Value: r.Value, TimestampMs: r.Timestamp.UnixMilli()}
}

func header(hs []Header, k string) string {
	for _, h := range hs {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// One record of each kind, through the real stage: outputs and accounting.
func TestProcessOutputs(t *testing.T) {
	s := stage(t)
	w := s.NewPartition()
	acct := Accounting{Version: 1}
	var outs []Output
	emit := func(o Output) { outs = append(outs, o) }
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	ev := func(id string, at time.Duration, value float64) Input {
		ts := base.Add(at)
		v := fmt.Sprintf(`{"event_id":%q,"machine_id":"M-1","sensor_id":"S-1","ts":%d,"seq":1,"value":%g,"unit":"mm/s","schema_version":1,"quality":"good"}`, id, ts.UnixMilli(), value)
		return Input{Topic: "in", Partition: 2, Key: []byte("M-1"), Value: []byte(v), TimestampMs: ts.UnixMilli() + 10,
			Headers: []Header{{"trace", []byte("t1")}}}
	}
	off := int64(0)
	run := func(in Input) {
		in.Offset = off
		off++
		s.Process(w, in, &acct, emit)
	}
	run(ev("e1", 0, 8))
	run(ev("e2", 30*time.Second, 9))
	run(ev("e2", 30*time.Second, 9)) // redelivery
	run(ev("e3", 60*time.Second, 2)) // filtered
	run(ev("e4", 90*time.Second, 10))
	poison := Input{Topic: "in", Partition: 2, Key: []byte("M-1"), Value: []byte("{oops"), TimestampMs: base.UnixMilli(),
		Headers: []Header{{"trace", []byte("t2")}}}
	run(poison)
	run(ev("far", 30*time.Minute, 1)) // filtered; watermark passes end + S + L: the alert closes
	run(ev("old", 5*time.Minute, 20)) // qualifying but too late now
	if !acct.Balanced() || acct.Records != 8 || acct.Processed != 3 || acct.Filtered != 2 || acct.Duplicate != 1 || acct.DeadLettered != 1 || acct.TooLate != 1 {
		t.Fatalf("accounting = %+v", acct)
	}
	if acct.NextOffset != 8 {
		t.Fatalf("next offset = %d", acct.NextOffset)
	}
	var kinds []string
	for _, o := range outs {
		kinds = append(kinds, fmt.Sprint(o.Kind, o.Status, o.Reason))
	}
	want := []string{"1open", "2decode_error", "1closed", "3"}
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Fatalf("outputs = %v, want %v", kinds, want)
	}
	open, err := alerts.Decode(outs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if open.Count != 3 || len(open.Evidence) != 3 || open.Evidence[2].EventID != "e4" || open.Evidence[2].Offset != 4 || open.Evidence[2].Partition != 2 {
		t.Fatalf("open alert = %+v", open)
	}
	if open.AlertID != alerts.ID("vibration-high", 1, "M-1", "e1") || string(outs[0].Key) != "M-1" {
		t.Fatalf("alert id/key = %s/%s", open.AlertID, outs[0].Key)
	}
	dlq := outs[1]
	if string(dlq.Value) != "{oops" || string(dlq.Key) != "M-1" {
		t.Fatalf("dead letter must keep the original bytes: %q %q", dlq.Key, dlq.Value)
	}
	for k, v := range map[string]string{"trace": "t2", HeaderErrorReason: "decode_error", HeaderSourceTopic: "in",
		HeaderSourcePartition: "2", HeaderSourceOffset: "5", HeaderSourceTimestamp: fmt.Sprint(base.UnixMilli())} {
		if got := header(dlq.Headers, k); got != v {
			t.Errorf("dead letter header %s = %q, want %q", k, got, v)
		}
	}
	if header(dlq.Headers, HeaderErrorDetail) == "" {
		t.Error("dead letter without error.detail")
	}
	late := outs[3]
	if header(late.Headers, HeaderLateReason) != "too_late" || header(late.Headers, HeaderSourceOffset) != "7" {
		t.Errorf("too-late headers = %v", late.Headers)
	}
	// W = far - 30s; lateness = W - ts(old) = 30m - 30s - 5m.
	if got, want := header(late.Headers, HeaderLatenessMs), fmt.Sprint((24*time.Minute + 30*time.Second).Milliseconds()); got != want {
		t.Errorf("late.lateness_ms = %s, want %s", got, want)
	}
	if got, want := header(late.Headers, HeaderLateWatermark), alerts.FormatTime(base.Add(30*time.Minute-30*time.Second).UnixMilli()); got != want {
		t.Errorf("late.watermark = %s, want %s", got, want)
	}
}

// State stays bounded on an endless stream (it does not grow from the first
// hour to the third) and goes to zero once every key is quiet past the
// horizons: garbage collection works end to end.
func TestStateIsBounded(t *testing.T) {
	s := stage(t)
	w := s.NewPartition()
	acct := Accounting{Version: 1}
	line := sim.New(sim.Load(25)) // an episode every few minutes per machine
	var peak [3]Stats
	var last sim.Record
	const perHour = 25 * 3600
	for i := 0; i < 3*perHour; i++ {
		last = line.Next()
		s.Process(w, input(0, int64(i), last), &acct, func(Output) {})
		if i%1000 == 0 {
			w.Sweep()
			st, h := w.Stats(), i/perHour
			peak[h] = Stats{Keys: max(peak[h].Keys, st.Keys), Events: max(peak[h].Events, st.Events),
				Dedup: max(peak[h].Dedup, st.Dedup), OpenIncidents: max(peak[h].OpenIncidents, st.OpenIncidents)}
		}
	}
	t.Logf("peak state per hour: %+v; accounting %+v", peak, acct)
	if acct.Processed < 500 {
		t.Fatalf("only %d qualifying events: the stream proves nothing", acct.Processed)
	}
	// Dedup fills up over the first hour (H = 1h), then is steady.
	if grow := float64(peak[2].Events) / float64(max(peak[1].Events, 1)); grow > 1.3 {
		t.Errorf("events grew %.2fx from hour 2 to hour 3: %+v", grow, peak)
	}
	if grow := float64(peak[2].Dedup) / float64(max(peak[1].Dedup, 1)); grow > 1.3 {
		t.Errorf("dedup entries grew %.2fx from hour 2 to hour 3: %+v", grow, peak)
	}
	if peak[2].Keys > 25 {
		t.Errorf("peak keys %d > 25 machines", peak[2].Keys)
	}
	// Two hours of silence from everyone (one far-later event): all state goes.
	far := last.Timestamp.Add(2 * time.Hour)
	v := fmt.Sprintf(`{"event_id":"x","machine_id":"M-999","sensor_id":"S","ts":%d,"seq":0,"value":1,"unit":"mm/s","schema_version":1,"quality":"good"}`, far.UnixMilli())
	s.Process(w, Input{Topic: "in", Key: []byte("M-999"), Value: []byte(v), TimestampMs: far.UnixMilli()}, &acct, func(Output) {})
	w.Sweep()
	if st := w.Stats(); st.Keys != 0 || st.Events != 0 || st.Dedup != 0 || st.OpenIncidents != 0 {
		t.Fatalf("state after the horizon: %+v, want empty", st)
	}
	if !acct.Balanced() {
		t.Fatalf("accounting unbalanced: %+v", acct)
	}
}

func TestReferenceDiff(t *testing.T) {
	a, b := Outputs{}, Outputs{}
	a.Add(Alert, []byte("k"), []byte("v1"), nil)
	b.Add(Alert, []byte("k"), []byte("v2"), nil)
	if d := Diff(a, b); !strings.Contains(d, `alerts key "k"`) {
		t.Fatalf("diff = %q", d)
	}
	if d := Diff(a, a); d != "" {
		t.Fatalf("diff of equal = %q", d)
	}
}

// BenchmarkStage is the CPU cost per input record of decode, validate,
// window logic and alert encoding, on the load generator's stream.
func BenchmarkStage(b *testing.B) {
	s := stage(b)
	w := s.NewPartition()
	acct := Accounting{Version: 1}
	line := sim.New(sim.Load(200))
	recs := make([]Input, 100_000)
	for i := range recs {
		recs[i] = input(0, int64(i), line.Next())
	}
	outputs := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%len(recs) == 0 && i > 0 {
			w = s.NewPartition() // the stream restarts in event time
		}
		s.Process(w, recs[i%len(recs)], &acct, func(Output) { outputs++ })
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// A dead letter larger than MaxDeadLetterBytes leaves out its value, then
// its key, then the original headers, saying what and how large the whole
// letter was; a smaller one is the original record.
func TestDeadLetterTooLargeLeavesOutItsValue(t *testing.T) {
	verr := &event.Error{Reason: event.ReasonTooLarge, Detail: "big"}
	base := Input{Topic: "in", Partition: 2, Offset: 7, TimestampMs: 1000, Key: []byte("m-1")}
	hdr := func(out Output, k string) string {
		v := ""
		for _, h := range out.Headers {
			if h.Key == k {
				v = string(h.Value)
			}
		}
		return v
	}
	// The largest dlq.rules value the processor writes (it refuses rules
	// that need a larger one).
	named := largestDeadLetterRules(t)
	small := base
	small.Value = bytes.Repeat([]byte("x"), 1000)
	if out := DeadLetterOutput(small, verr, named); !bytes.Equal(out.Value, small.Value) || hdr(out, HeaderOmitted) != "" || hdr(out, HeaderDeadLetterRules) != string(named) {
		t.Fatalf("small letter changed: omitted %q", hdr(out, HeaderOmitted))
	}
	for _, tc := range []struct {
		name       string
		key, value int
		want       string
	}{
		{"value", 3, MaxDeadLetterBytes, "value"},
		{"key", MaxDeadLetterBytes, 10, "value,key"},
		{"headers", 3, 10, "value,key,headers"},
	} {
		in := base
		in.Key, in.Value = bytes.Repeat([]byte("k"), tc.key), bytes.Repeat([]byte("v"), tc.value)
		if tc.want == "value,key,headers" {
			in.Headers = []Header{{"big", bytes.Repeat([]byte("h"), MaxDeadLetterBytes)}}
		}
		out := DeadLetterOutput(in, verr, named)
		size := len(out.Key) + len(out.Value) + headersBytes(out.Headers)
		if hdr(out, HeaderOmitted) != tc.want || out.Value != nil || size > MaxDeadLetterBytes || hdr(out, HeaderDeadLetterRules) != string(named) ||
			hdr(out, HeaderErrorReason) != "too_large" || hdr(out, HeaderSourceOffset) != "7" || hdr(out, HeaderOriginalBytes) == "" {
			t.Errorf("%s: omitted %q (want %q), %d value bytes, letter %d bytes, reason %q, offset %q", tc.name,
				hdr(out, HeaderOmitted), tc.want, len(out.Value), size, hdr(out, HeaderErrorReason), hdr(out, HeaderSourceOffset))
		}
	}
}
