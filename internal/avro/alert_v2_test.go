package avro

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/schemas"
)

// alertSchemaV1 is schemas/alert.avsc as version 1 had it: without
// key_field, key, aggregate and evidence_omitted.
func alertSchemaV1(t *testing.T) string {
	t.Helper()
	return alertSchemaWithout(t, "key_field", "key", "aggregate", "evidence_omitted")
}

// alertSchemaV2 is schemas/alert.avsc as version 2 had it: without
// evidence_omitted.
func alertSchemaV2(t *testing.T) string {
	t.Helper()
	return alertSchemaWithout(t, "evidence_omitted")
}

// alertSchemaWithout is schemas/alert.avsc without the named fields.
func alertSchemaWithout(t *testing.T, names ...string) string {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal([]byte(schemas.Alert()), &s); err != nil {
		t.Fatal(err)
	}
	var kept []any
	for _, f := range s["fields"].([]any) {
		if !slices.Contains(names, f.(map[string]any)["name"].(string)) {
			kept = append(kept, f)
		}
	}
	s["fields"] = kept
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEarlierAlertSchemas: the schemas the compatibility tests derive for
// versions 1 and 2 are those versions exactly (their fingerprints).
func TestEarlierAlertSchemas(t *testing.T) {
	for v, text := range map[int]string{1: alertSchemaV1(t), 2: alertSchemaV2(t)} {
		fp := mustParse(t, text).Fingerprint()
		if got := hex.EncodeToString(fp[:]); got != alertFingerprints[v] {
			t.Errorf("derived version %d has fingerprint %s, want %s", v, got, alertFingerprints[v])
		}
	}
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

// TestAlertV2ReadByV3: revisions written with alert schema version 2
// (before evidence_omitted) decode with the version 3 reader as whole
// evidence (evidence_omitted 0), and a version 2 reader reads version 3
// values, ignoring the count (FULL compatibility, so a subject holding
// version 2 accepts version 3 at every compatibility level).
func TestAlertV2ReadByV3(t *testing.T) {
	v2 := alertSchemaV2(t)
	rec := map[string]any{
		"alert_id": "a", "revision": int64(1), "status": "updated", "merged_into": nil, "rule_id": "r", "rule_version": int64(1),
		"machine_id": "M", "start": int64(1), "end": int64(2), "count": int64(3),
		"evidence": []any{map[string]any{"event_id": "e", "sensor_id": "s", "ts": int64(1), "value": 7.5, "partition": int32(0), "offset": int64(4)}},
		"late":     false, "watermark": nil, "reason": "why", "key_field": nil, "key": nil, "aggregate": nil,
	}
	dec, err := NewAlertDecoder(mapSource{6: mustParse(t, v2)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := dec.DecodeAlert(encode(t, v2, 6, rec))
	if err != nil {
		t.Fatal(err)
	}
	want := alerts.Alert{AlertID: "a", Revision: 1, Status: "updated", RuleID: "r", RuleVersion: 1, MachineID: "M", Start: 1, End: 2, Count: 3,
		Evidence: []alerts.Evidence{{EventID: "e", SensorID: "s", TS: 1, Value: 7.5, Offset: 4}}, Watermark: alerts.WatermarkNone, Reason: "why"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}

	// A version 2 reader reads a version 3 value with evidence left out:
	// it sees the evidence kept.
	enc, err := NewAlertEncoder(7)
	if err != nil {
		t.Fatal(err)
	}
	cut := want
	cut.EvidenceOmitted = 999
	val, err := enc.EncodeAlert(cut)
	if err != nil {
		t.Fatal(err)
	}
	r2, r3 := mustParse(t, v2), mustParse(t, schemas.Alert())
	resolved, err := dec.compat.Resolve(r2, r3)
	if err != nil {
		t.Fatalf("a version 2 reader cannot read version 3: %v", err)
	}
	var old map[string]any
	if err := newAPI().Unmarshal(resolved, val[HeaderSize:], &old); err != nil {
		t.Fatal(err)
	}
	if _, ok := old["evidence_omitted"]; ok || old["count"] != int64(3) || len(old["evidence"].([]any)) != 1 {
		t.Fatalf("version 2 reader: %v", old)
	}
	if _, err := dec.compat.Resolve(r3, r2); err != nil {
		t.Fatalf("the version 3 reader cannot read version 2: %v", err)
	}
	// And the current decoder round-trips it.
	dec3, err := NewAlertDecoder(mapSource{7: r3})
	if err != nil {
		t.Fatal(err)
	}
	if back, err := dec3.DecodeAlert(val); err != nil || !reflect.DeepEqual(back, cut) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}
