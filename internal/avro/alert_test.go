package avro

import (
	"encoding/hex"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/schemas"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// alertFingerprints pins schemas/alert.avsc per AlertVersion: the SHA-256
// of its Parsing Canonical Form. A change of the schema must add a version
// here and bump schemas.AlertVersion (docs/AVRO.md, "Alert schema").
var alertFingerprints = map[int]string{
	1: "57074e5e45e69c389b79f4e2c08f12d142560bb3641bdb268fc16fad037f4098",
	2: "a7456863c5bf96c4a84dd0df4f655dbe29f9234803fee6f99dfe0a108df71719", // + key_field, key, aggregate
	3: "137d15700deea38875e05a5c48eaa467ca4d37517b29c6e439a8ab6dbb6a99b3", // + evidence_omitted
}

func TestAlertSchemaVersioned(t *testing.T) {
	s, err := parseSchema(schemas.Alert())
	if err != nil {
		t.Fatal(err)
	}
	fp := s.Fingerprint()
	got := hex.EncodeToString(fp[:])
	want, ok := alertFingerprints[schemas.AlertVersion]
	if !ok || want != got {
		t.Fatalf("schemas/alert.avsc has fingerprint %s; alertFingerprints[%d] = %q: a changed alert schema needs a new AlertVersion, documented in docs/AVRO.md",
			got, schemas.AlertVersion, want)
	}
}

func testAlerts(t *testing.T) []alerts.Alert {
	t.Helper()
	files, err := filepath.Glob("../alerts/testdata/alert_*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no alert testdata: %v", err)
	}
	var out []alerts.Alert
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		a, err := alerts.Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, a)
	}
	return append(out, alerts.Alert{
		AlertID: "a", Status: alerts.StatusOpen, RuleID: "r", MachineID: "M", Watermark: alerts.WatermarkNone,
		Start: math.MinInt64 + 1, End: math.MaxInt64,
	})
}

// TestAlertRoundTrip: every alert of internal/alerts' testdata registered,
// encoded and decoded again through a registry is the same alert; and the
// JSON and Avro formats carry the same alert.
func TestAlertRoundTrip(t *testing.T) {
	f := newFakeRegistry(t)
	r := newTestRegistry(t, f, RegistryOptions{})
	enc, err := r.RegisterAlertSchema(t.Context(), TopicValueSubject("vibration.alerts"))
	if err != nil {
		t.Fatal(err)
	}
	if ids := f.subjects["vibration.alerts-value"]; len(ids) != 1 || ids[0] != enc.SchemaID() {
		t.Fatalf("subjects = %v, encoder id %d", f.subjects, enc.SchemaID())
	}
	// A second registration (a restart) gets the same id.
	enc2, err := r.RegisterAlertSchema(t.Context(), "vibration.alerts-value")
	if err != nil || enc2.SchemaID() != enc.SchemaID() {
		t.Fatalf("second registration: %v, %v", enc2, err)
	}
	// A fresh registry (another process) reads them after Prepare.
	r2 := newTestRegistry(t, f, RegistryOptions{})
	dec, err := NewAlertDecoder(r2)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range testAlerts(t) {
		v, err := enc.EncodeAlert(a)
		if err != nil {
			t.Fatalf("encode %s: %v", a.AlertID, err)
		}
		if id, ok := SchemaID(v); !ok || id != enc.SchemaID() {
			t.Fatalf("header id %d, %v", id, ok)
		}
		if err := r2.Prepare(t.Context(), [][]byte{v}); err != nil {
			t.Fatal(err)
		}
		got, err := dec.DecodeAlert(v)
		if err != nil {
			t.Fatalf("decode %s: %v", a.AlertID, err)
		}
		if !reflect.DeepEqual(got, a) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, a)
		}
		if _, err := dec.DecodeAlert(append(v, 0)); err == nil || !strings.Contains(err.Error(), "1 bytes after the record") {
			t.Fatalf("trailing byte: %v", err)
		}
	}
	if got := f.fetchCount(enc.SchemaID()); got != 1 {
		t.Fatalf("alert schema fetched %d times, want 1", got)
	}
}

func TestAlertEncodeRefuses(t *testing.T) {
	enc, err := NewAlertEncoder(1)
	if err != nil {
		t.Fatal(err)
	}
	ok := alerts.Alert{AlertID: "a", Status: alerts.StatusOpen, Watermark: alerts.WatermarkNone}
	for _, tc := range []struct {
		name string
		mod  func(*alerts.Alert)
		want string
	}{
		{"unknown status", func(a *alerts.Alert) { a.Status = "snoozed" }, `status "snoozed"`},
		{"merged without merged_into", func(a *alerts.Alert) { a.Status = alerts.StatusMerged }, "without merged_into"},
		{"merged_into without merged", func(a *alerts.Alert) { a.MergedInto = "b" }, `merged_into "b" with status "open"`},
		{"empty id", func(a *alerts.Alert) { a.AlertID = "" }, "empty alert_id"},
		{"negative revision", func(a *alerts.Alert) { a.Revision = -1 }, "revision -1"},
		{"negative evidence_omitted", func(a *alerts.Alert) { a.EvidenceOmitted = -1 }, "evidence_omitted -1"},
		{"NaN evidence", func(a *alerts.Alert) { a.Evidence = []alerts.Evidence{{Value: math.NaN()}} }, "evidence[0].value NaN"},
	} {
		a := ok
		tc.mod(&a)
		if _, err := enc.EncodeAlert(a); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := enc.EncodeAlert(ok); err != nil {
		t.Fatal(err)
	}
}

// TestAlertGolden pins the bytes of one encoded alert
// (testdata/alert_merged.avro.hex; -update rewrites it).
func TestAlertGolden(t *testing.T) {
	b, err := os.ReadFile("../alerts/testdata/alert_merged.json")
	if err != nil {
		t.Fatal(err)
	}
	a, err := alerts.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := NewAlertEncoder(7)
	if err != nil {
		t.Fatal(err)
	}
	v, err := enc.EncodeAlert(a)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "alert_merged.avro.hex")
	got := hex.EncodeToString(v) + "\n"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("encoding of alert_merged.json changed:\n got %s\nwant %s", got, want)
	}
}

// TestAlertEvolution: a later alert schema that adds a defaulted field is
// read by this reader (consumers of v1 keep working).
func TestAlertEvolution(t *testing.T) {
	v2 := strings.Replace(schemas.Alert(), `{"name": "reason", "type": "string", "doc": "One human sentence."}`,
		`{"name": "reason", "type": "string"}, {"name": "severity", "type": "string", "default": "warning"}`, 1)
	if v2 == schemas.Alert() {
		t.Fatal("could not derive a v2 alert schema")
	}
	rec := map[string]any{
		"alert_id": "a", "revision": int64(1), "status": "updated", "merged_into": nil, "rule_id": "r", "rule_version": int64(2),
		"machine_id": "M", "start": int64(1), "end": int64(2), "count": int64(3),
		"evidence": []any{map[string]any{"event_id": "e", "sensor_id": "s", "ts": int64(1), "value": 7.5, "partition": 0, "offset": int64(9)}},
		"late":     true, "watermark": nil, "reason": "why", "severity": "critical",
	}
	v := encode(t, v2, 9, rec)
	dec, err := NewAlertDecoder(mapSource{9: mustParse(t, v2)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := dec.DecodeAlert(v)
	if err != nil {
		t.Fatal(err)
	}
	want := alerts.Alert{AlertID: "a", Revision: 1, Status: "updated", RuleID: "r", RuleVersion: 2, MachineID: "M", Start: 1, End: 2, Count: 3,
		Evidence: []alerts.Evidence{{EventID: "e", SensorID: "s", TS: 1, Value: 7.5, Offset: 9}}, Late: true, Watermark: alerts.WatermarkNone, Reason: "why"}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("got %+v\nwant %+v", a, want)
	}
}
