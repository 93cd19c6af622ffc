package pipeline

import (
	"encoding/json"
	"testing"

	hamba "github.com/hamba/avro/v2"

	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/schemas"
)

// writer is a producer's writer schema: ts as a long or a string, the
// optional clock, and a field the reader does not know.
const writer = `{"type":"record","name":"E","namespace":"test","fields":[
	{"name":"event_id","type":"string"},
	{"name":"machine_id","type":"string"},
	{"name":"sensor_id","type":"string"},
	{"name":"ts","type":["long","string"]},
	{"name":"seq","type":"long"},
	{"name":"value","type":"double"},
	{"name":"unit","type":"string"},
	{"name":"schema_version","type":"long"},
	{"name":"quality","type":"string"},
	{"name":"clock","type":["null","string"],"default":null},
	{"name":"gateway","type":"string","default":"gw"}]}`

type avroEvent struct {
	EventID       string  `avro:"event_id" json:"event_id"`
	MachineID     string  `avro:"machine_id" json:"machine_id"`
	SensorID      string  `avro:"sensor_id" json:"sensor_id"`
	TS            any     `avro:"ts" json:"ts"`
	Seq           int64   `avro:"seq" json:"seq"`
	Value         float64 `avro:"value" json:"value"`
	Unit          string  `avro:"unit" json:"unit"`
	SchemaVersion int64   `avro:"schema_version" json:"schema_version"`
	Quality       string  `avro:"quality" json:"quality"`
	Clock         *string `avro:"clock" json:"clock,omitempty"`
	Gateway       string  `avro:"gateway" json:"gateway"`
}

// A Stage with the Avro decoder validates exactly as one with JSON: after
// decoding, the same event or the same reason, field and detail.
func TestAvroStageValidatesAsJSON(t *testing.T) {
	const recordTS int64 = 1767323045678
	ws, err := hamba.ParseWithCache(writer, "", &hamba.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
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
	base := func() avroEvent {
		return avroEvent{EventID: "e-1", MachineID: "M-1", SensorID: "S-1", TS: recordTS - 1000, Seq: 4, Value: 7.5,
			Unit: "mm/s", SchemaVersion: 1, Quality: "good", Gateway: "gw-9"}
	}
	cases := map[string]func(e *avroEvent){
		"valid":           func(e *avroEvent) {},
		"in/s":            func(e *avroEvent) { e.Unit, e.Value = "in/s", 0.3 },
		"rfc3339 ts":      func(e *avroEvent) { e.TS = "2026-01-02T03:04:04.678+01:00" },
		"unsynced clock":  func(e *avroEvent) { e.Clock = &unsynced },
		"bad clock":       func(e *avroEvent) { e.Clock = &bogus },
		"bad ts string":   func(e *avroEvent) { e.TS = "yesterday" },
		"negative ts":     func(e *avroEvent) { e.TS = int64(-5) },
		"bad unit":        func(e *avroEvent) { e.Unit = "furlong/s" },
		"bad quality":     func(e *avroEvent) { e.Quality = "great" },
		"negative seq":    func(e *avroEvent) { e.Seq = -1 },
		"empty event_id":  func(e *avroEvent) { e.EventID = "" },
		"empty sensor":    func(e *avroEvent) { e.SensorID = "" },
		"unknown version": func(e *avroEvent) { e.SchemaVersion = 7 },
		"key mismatch":    func(e *avroEvent) { e.MachineID = "M-2" },
		"clock ahead":     func(e *avroEvent) { e.TS = recordTS + 3_600_000 },
	}
	api := hamba.Config{TagKey: "avro"}.Freeze()
	for name, mod := range cases {
		e := base()
		mod(&e)
		js, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		body, err := api.Marshal(ws, &e)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		av := append(avro.AppendHeader(nil, 3), body...)
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
	s, err := hamba.ParseWithCache(schemas.Alert(), "", &hamba.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := avro.NewAlertDecoder(avro.NewLocalSource(s, 5))
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
