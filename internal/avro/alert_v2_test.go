package avro

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/schemas"
)

// alertSchemaV1 is schemas/alert.avsc as version 1 had it: without
// key_field, key and aggregate.
func alertSchemaV1(t *testing.T) string {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal([]byte(schemas.Alert()), &s); err != nil {
		t.Fatal(err)
	}
	var kept []any
	for _, f := range s["fields"].([]any) {
		switch f.(map[string]any)["name"] {
		case "key_field", "key", "aggregate":
			continue
		}
		kept = append(kept, f)
	}
	s["fields"] = kept
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAlertKeyAndAggregate: the alerts of sensor-keyed and aggregating
// rules keep key_field, key and aggregate in Avro (alert schema version 2),
// exactly as in JSON.
func TestAlertKeyAndAggregate(t *testing.T) {
	enc, err := NewAlertEncoder(11)
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseSchema(schemas.Alert())
	if err != nil {
		t.Fatal(err)
	}
	dec, err := NewAlertDecoder(mapSource{11: s})
	if err != nil {
		t.Fatal(err)
	}
	a := alerts.Alert{
		AlertID: "0123456789abcdef0123456789abcdef", Revision: 2, Status: alerts.StatusUpdated,
		RuleID: "sensor-avg", RuleVersion: 3, Start: 1767323040000, End: 1767323100000, Count: 4,
		KeyField: "sensor_id", Key: "S-7-3", Aggregate: &alerts.Aggregate{Fn: "avg", Value: 7.25},
		Evidence: []alerts.Evidence{{EventID: "e-1", SensorID: "S-7-3", TS: 1767323041000, Value: 7.5, Partition: 2, Offset: 40}},
		Late:     false, Watermark: 1767323050000, Reason: "why",
	}
	v, err := enc.EncodeAlert(a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dec.DecodeAlert(v)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, a)
	}
	// The JSON of the decoded alert is the JSON of the alert.
	j1, err1 := a.Encode()
	j2, err2 := got.Encode()
	if err1 != nil || err2 != nil || string(j1) != string(j2) {
		t.Fatalf("JSON differs: %s / %s (%v, %v)", j1, j2, err1, err2)
	}

	for _, tc := range []struct {
		name string
		mod  func(*alerts.Alert)
		want string
	}{
		{"key without key_field", func(a *alerts.Alert) { a.KeyField = "" }, "want both or neither"},
		{"aggregate without fn", func(a *alerts.Alert) { a.Aggregate = &alerts.Aggregate{Value: 1} }, "aggregate without fn"},
		{"NaN aggregate", func(a *alerts.Alert) { a.Aggregate = &alerts.Aggregate{Fn: "sum", Value: math.NaN()} }, "aggregate.value NaN"},
	} {
		b := a
		tc.mod(&b)
		if _, err := enc.EncodeAlert(b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if _, err := b.Encode(); err == nil {
			t.Errorf("%s: the JSON encoder accepts what the Avro encoder refuses", tc.name)
		}
	}
}

// TestAlertV1ReadByV2: revisions written with alert schema version 1 (before
// key_field, key and aggregate) decode with the version 2 reader, and the
// reverse: a version 1 reader reads version 2 values (FULL compatibility).
func TestAlertV1ReadByV2(t *testing.T) {
	v1 := alertSchemaV1(t)
	rec := map[string]any{
		"alert_id": "a", "revision": int64(0), "status": "open", "merged_into": nil, "rule_id": "r", "rule_version": int64(1),
		"machine_id": "M", "start": int64(1), "end": int64(2), "count": int64(3),
		"evidence": []any{}, "late": false, "watermark": nil, "reason": "why",
	}
	val := encode(t, v1, 5, rec)
	dec, err := NewAlertDecoder(mapSource{5: mustParse(t, v1)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := dec.DecodeAlert(val)
	if err != nil {
		t.Fatal(err)
	}
	want := alerts.Alert{AlertID: "a", Status: "open", RuleID: "r", RuleVersion: 1, MachineID: "M", Start: 1, End: 2, Count: 3,
		Watermark: alerts.WatermarkNone, Reason: "why"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}

	// A v1 reader (a consumer that has not upgraded) resolves v2.
	r1, r2 := mustParse(t, v1), mustParse(t, schemas.Alert())
	if _, err := newAPI().Marshal(r2, &alertRecord{AlertID: "a", Status: "open", Evidence: []evidenceRecord{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := dec.compat.Resolve(r1, r2); err != nil {
		t.Fatalf("a version 1 reader cannot read version 2: %v", err)
	}
	if _, err := dec.compat.Resolve(r2, r1); err != nil {
		t.Fatalf("the version 2 reader cannot read version 1: %v", err)
	}
}
