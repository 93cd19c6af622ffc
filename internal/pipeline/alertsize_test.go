package pipeline

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/avro/avrotest"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/schemas"
)

// longID is an id of exactly event.MaxIDBytes bytes starting with prefix,
// padded with bytes that JSON escapes (\u0001 is six bytes on the wire, \"
// two): the largest evidence a valid event can give an alert.
func longID(prefix string) string {
	pad := strings.Repeat("\x01\"\x1f\\", event.MaxIDBytes)
	return prefix + pad[:event.MaxIDBytes-len(prefix)]
}

// bigAlertLog is one machine (its id long too) with n qualifying events one
// second apart, every id of the maximum length, then a filtered event far
// later that closes the incident; and the ids of the n events in order.
func bigAlertLog(t *testing.T, n int) (Log, string, []string) {
	t.Helper()
	machine := longID("M-")
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC).UnixMilli()
	var ins []Input
	var ids []string
	add := func(id string, ts int64, value float64) {
		v, err := json.Marshal(map[string]any{"event_id": id, "machine_id": machine, "sensor_id": longID("S-" + id[:6]),
			"ts": ts, "seq": len(ins), "value": value, "unit": "mm/s", "schema_version": 1, "quality": "good"})
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, Input{Topic: "in", Partition: 0, Offset: int64(len(ins)), Key: []byte(machine), Value: v, TimestampMs: ts})
	}
	for i := range n {
		id := longID(fmt.Sprintf("e%05d", i))
		ids = append(ids, id)
		add(id, base+int64(i)*1000, 9)
	}
	add(longID("closer"), base+int64(n)*1000+2*time.Hour.Milliseconds(), 1)
	return Log{0: ins}, machine, ids
}

// bigRule is the vibration rule with threshold n and a window the n events
// fit in.
func bigRule(n int) config.Rule {
	r := config.Default().Rule
	r.Threshold = n
	r.Window = 30 * time.Minute
	return r
}

// A sliding rule with the highest threshold over events whose ids are as
// long as valid ids get (and escape to six times their bytes) would write
// alerts of about 12 MB, which the producer cannot write: each revision
// instead names the longest prefix of its evidence that keeps the value at
// most MaxAlertBytes and says how many events it left out, with the true
// count; the values are the same on every run, and an Avro stage cuts at
// the same place.
func TestOversizedAlertCutsItsEvidence(t *testing.T) {
	const n = rules.MaxThresholdN
	log, machine, ids := bigAlertLog(t, n)
	st, err := NewStage(bigRule(n))
	if err != nil {
		t.Fatal(err)
	}
	out, acct := st.Reference(log)
	if acct[0].Processed != n || acct[0].DeadLettered != 0 {
		t.Fatalf("accounting %+v: the events must all be valid and applied", acct[0])
	}
	values := out[Alert][machine]
	if len(values) != 2 {
		t.Fatalf("%d alert revisions, want open and closed", len(values))
	}
	for i, v := range values {
		if len(v) > MaxAlertBytes {
			t.Fatalf("revision %d is %d bytes, over MaxAlertBytes %d", i, len(v), MaxAlertBytes)
		}
		a, err := alerts.Decode([]byte(v))
		if err != nil {
			t.Fatalf("revision %d: %v", i, err)
		}
		k := len(a.Evidence)
		if a.Count != n || a.EvidenceOmitted == 0 || k+a.EvidenceOmitted != n || k == 0 {
			t.Fatalf("revision %d: count %d, %d evidence events, %d omitted; want count %d, a prefix and the rest omitted",
				i, a.Count, k, a.EvidenceOmitted, n)
		}
		for j, e := range a.Evidence {
			if e.EventID != ids[j] || e.Offset != int64(j) {
				t.Fatalf("revision %d: evidence[%d] is %.10q at offset %d, want the firing set's event %d", i, j, e.EventID, e.Offset, j)
			}
		}
		if a.AlertID != alerts.ID("vibration-high", 1, machine, a.Evidence[0].EventID) {
			t.Fatalf("revision %d: the alert id is not derived from the first evidence event", i)
		}
		// The longest prefix: one event more would not fit.
		more := a
		more.Evidence = append(a.Evidence[:k:k], alerts.Evidence{EventID: ids[k], SensorID: longID("S-" + ids[k][:6]),
			TS: a.Evidence[k-1].TS + 1000, Value: 9, Offset: int64(k)})
		more.EvidenceOmitted--
		if b, err := more.Encode(); err != nil || len(b) <= MaxAlertBytes {
			t.Fatalf("revision %d: %d evidence events fit in %d bytes (%v), but only %d were kept", i, k+1, len(b), err, k)
		}
		t.Logf("revision %d (%s): %d bytes, %d evidence events, %d omitted", i, a.Status, len(v), k, a.EvidenceOmitted)
	}

	again, _ := st.Reference(log)
	if d := Diff(out, again); d != "" {
		t.Fatalf("a second run differs:\n%s", d)
	}

	// Avro alerts: the same cut (reconcile compares them through their JSON).
	enc, err := avro.NewAlertEncoder(5)
	if err != nil {
		t.Fatal(err)
	}
	rule, err := rules.Compile(func() config.Config { c := config.Default(); c.Rule = bigRule(n); return c }().LegacyRule())
	if err != nil {
		t.Fatal(err)
	}
	ast, err := NewRuleStage(rule, Options{EncodeAlert: enc.EncodeAlert})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := avro.NewAlertDecoder(avro.NewLocalSource(avrotest.ParseSchema(t, schemas.Alert()), 5))
	if err != nil {
		t.Fatal(err)
	}
	aout, _ := ast.Reference(log)
	avals := aout[Alert][machine]
	if len(avals) != len(values) {
		t.Fatalf("Avro: %d revisions, JSON %d", len(avals), len(values))
	}
	for i, v := range avals {
		if len(v) > MaxAlertBytes {
			t.Fatalf("Avro revision %d is %d bytes", i, len(v))
		}
		a, err := dec.DecodeAlert([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		if js, err := a.Encode(); err != nil || string(js) != values[i] {
			t.Fatalf("Avro revision %d as JSON differs from the JSON stage's (%v): %d vs %d evidence events", i, err, len(a.Evidence), strings.Count(values[i], `"event_id"`))
		}
	}
}

// Unit cases of the cut, through Stage.encode: values up to MaxAlertBytes
// are written whole (byte-identical, no evidence_omitted member); one byte
// more cuts one event; an alert whose first event alone does not fit
// names none.
func TestEncodeBoundsTheAlertValue(t *testing.T) {
	st, err := NewStage(bigRule(3))
	if err != nil {
		t.Fatal(err)
	}
	const key = "M-1"
	mk := func(lastIDLen int, first string) alerts.Alert {
		ev := []alerts.Evidence{
			{EventID: first, SensorID: "S-1", TS: 1000, Value: 9, Offset: 1},
			{EventID: "e2", SensorID: "S-1", TS: 2000, Value: 9, Offset: 2},
			{EventID: strings.Repeat("x", lastIDLen), SensorID: "S-1", TS: 3000, Value: 9, Offset: 3},
		}
		return st.alertOf(alerts.ID("vibration-high", 1, key, first), 0, alerts.StatusOpen, "", 1000, 3000, 3, false, 500, ev)
	}
	decode := func(o Output) alerts.Alert {
		t.Helper()
		a, err := alerts.Decode(o.Value)
		if err != nil {
			t.Fatalf("%v: %.200s", err, o.Value)
		}
		return a
	}
	small := st.encode(mk(10, "e1"), key, nil)
	if strings.Contains(string(small.Value), "evidence_omitted") || len(decode(small).Evidence) != 3 {
		t.Fatalf("a small alert changed: %s", small.Value)
	}
	// The last id's length that makes the value exactly MaxAlertBytes.
	exact := 10 + MaxAlertBytes - len(small.Value)
	whole := st.encode(mk(exact, "e1"), key, nil)
	if a := decode(whole); len(whole.Value) != MaxAlertBytes || len(a.Evidence) != 3 || a.EvidenceOmitted != 0 {
		t.Fatalf("%d bytes (limit %d): %d evidence events, %d omitted; want it whole", len(whole.Value), MaxAlertBytes, len(a.Evidence), a.EvidenceOmitted)
	}
	over := st.encode(mk(exact+1, "e1"), key, nil)
	if a := decode(over); len(over.Value) > MaxAlertBytes || len(a.Evidence) != 2 || a.EvidenceOmitted != 1 || a.Count != 3 {
		t.Fatalf("one byte over: %d bytes, %d evidence events, %d omitted, count %d; want the last event left out",
			len(over.Value), len(a.Evidence), a.EvidenceOmitted, a.Count)
	}
	// The first event alone is too large (ids are bounded far below this in
	// valid events): no evidence, all of it counted as omitted.
	none := st.encode(mk(10, strings.Repeat("\x00", MaxAlertBytes/6)), key, nil)
	if a := decode(none); len(none.Value) > MaxAlertBytes || len(a.Evidence) != 0 || a.EvidenceOmitted != 3 || a.Count != 3 {
		t.Fatalf("first event too large: %d bytes, %d evidence events, %d omitted", len(none.Value), len(a.Evidence), a.EvidenceOmitted)
	}
	// The cut depends on the alert only.
	if again := st.encode(mk(exact+1, "e1"), key, nil); string(again.Value) != string(over.Value) {
		t.Fatal("the same alert was cut differently")
	}
}
