package pipeline

import (
	"encoding/json"
	"testing"

	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/avro/avrotest"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/schemas"
)

// writer is a producer's writer schema: ts as a long or a string, the
// optional clock, and a field the reader does not know.
var writer = avrotest.EventWriter(avrotest.ClockField, avrotest.StringField("gateway", "gw"))

// A Stage with the Avro decoder validates exactly as one with JSON: after
// decoding, the same event or the same reason, field and detail.
func TestAvroStageValidatesAsJSON(t *testing.T) {
	const recordTS int64 = 1767323045678
	ws := avrotest.ParseSchema(t, writer)
	dec, err := avro.NewDecoder(avro.NewLocalSource(ws, 3), avro.DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := rules.Compile(config.Default().LegacyRule())
	if err != nil {
		t.Fatal(err)
	}
	jsonStage, err := NewRuleStage(r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	avroStage, err := NewRuleStage(r, Options{Decoder: dec})
	if err != nil {
		t.Fatal(err)
	}
	unsynced := "unsynced"
	bogus := "maybe"
	base := func() avrotest.Event {
		return avrotest.Event{EventID: "e-1", MachineID: "M-1", SensorID: "S-1", TS: recordTS - 1000, Seq: 4, Value: 7.5,
			Unit: "mm/s", SchemaVersion: 1, Quality: "good", Gateway: "gw-9"}
	}
	cases := map[string]func(e *avrotest.Event){
		"valid":           func(e *avrotest.Event) {},
		"in/s":            func(e *avrotest.Event) { e.Unit, e.Value = "in/s", 0.3 },
		"rfc3339 ts":      func(e *avrotest.Event) { e.TS = "2026-01-02T03:04:04.678+01:00" },
		"unsynced clock":  func(e *avrotest.Event) { e.Clock = &unsynced },
		"bad clock":       func(e *avrotest.Event) { e.Clock = &bogus },
		"bad ts string":   func(e *avrotest.Event) { e.TS = "yesterday" },
		"negative ts":     func(e *avrotest.Event) { e.TS = int64(-5) },
		"bad unit":        func(e *avrotest.Event) { e.Unit = "furlong/s" },
		"bad quality":     func(e *avrotest.Event) { e.Quality = "great" },
		"negative seq":    func(e *avrotest.Event) { e.Seq = -1 },
		"empty event_id":  func(e *avrotest.Event) { e.EventID = "" },
		"empty sensor":    func(e *avrotest.Event) { e.SensorID = "" },
		"unknown version": func(e *avrotest.Event) { e.SchemaVersion = 7 },
		"key mismatch":    func(e *avrotest.Event) { e.MachineID = "M-2" },
		"clock ahead":     func(e *avrotest.Event) { e.TS = recordTS + 3_600_000 },
	}
	for name, mod := range cases {
		e := base()
		mod(&e)
		js, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		av := avrotest.Wire(3, avrotest.Body(t, ws, &e))
		key := []byte("M-1")
		wantEv, wantErr := jsonStage.Check(&Input{Key: key, Value: js, TimestampMs: recordTS})
		gotEv, gotErr := avroStage.Check(&Input{Key: key, Value: av, TimestampMs: recordTS})
		if gotEv != wantEv {
			t.Errorf("%s: event\n got %+v\nwant %+v", name, gotEv, wantEv)
		}
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && *gotErr != *wantErr {
			t.Errorf("%s: error\n got %+v\nwant %+v", name, gotErr, wantErr)
		}
		if name == "valid" && wantErr != nil {
			t.Fatalf("the valid event is not valid: %+v", wantErr)
		}
	}
	// A value of another schema id than the local schema's.
	_, verr := avroStage.Check(&Input{Key: []byte("M-1"), Value: avro.AppendHeader(nil, 4), TimestampMs: recordTS})
	if verr == nil || verr.Reason != "schema_unknown" {
		t.Fatalf("schema id 4: %+v, want schema_unknown", verr)
	}
}

// EncodeAlert writes the alerts; the JSON stays beside them for displays.
func TestStageEncodeAlert(t *testing.T) {
	enc, err := avro.NewAlertEncoder(5)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rules.Compile(config.Default().LegacyRule())
	if err != nil {
		t.Fatal(err)
	}
	st, err := NewRuleStage(r, Options{EncodeAlert: enc.EncodeAlert})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := NewRuleStage(r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got, want []Output
	pst, pplain := st.NewPartition(), plain.NewPartition()
	for i := range 3 {
		js, _ := json.Marshal(map[string]any{"event_id": string(rune('a' + i)), "machine_id": "M-1", "sensor_id": "S", "ts": 1767323040000 + int64(i)*1000,
			"seq": i, "value": 9.0, "unit": "mm/s", "schema_version": 1, "quality": "good"})
		in := Input{Key: []byte("M-1"), Value: js, TimestampMs: 1767323045678, Offset: int64(i)}
		st.Process(pst, in, &Accounting{}, func(o Output) { got = append(got, o) })
		plain.Process(pplain, in, &Accounting{}, func(o Output) { want = append(want, o) })
	}
	if len(got) != 1 || len(want) != 1 || got[0].Kind != Alert {
		t.Fatalf("outputs %d / %d, want one alert each", len(got), len(want))
	}
	if id, ok := avro.SchemaID(got[0].Value); !ok || id != 5 {
		t.Fatalf("alert value is not Avro of schema id 5: %x", got[0].Value)
	}
	if string(got[0].JSON) != string(want[0].Value) || want[0].JSON != nil {
		t.Fatalf("JSON beside the Avro alert:\n got %s\nwant %s", got[0].JSON, want[0].Value)
	}
	d, err := avro.NewAlertDecoder(avro.NewLocalSource(avrotest.ParseSchema(t, schemas.Alert()), 5))
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.DecodeAlert(got[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	ja, err := a.Encode()
	if err != nil || string(ja) != string(want[0].Value) {
		t.Fatalf("decoded Avro alert as JSON:\n got %s\nwant %s (%v)", ja, want[0].Value, err)
	}
}
