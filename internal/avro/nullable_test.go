package avro

import (
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/event"
)

// writerOptional declares every field optional, as Avro producers
// generated from optional fields do (["null", T] with default null), with
// promotable types (int seq and schema_version, float value) and a
// timestamp-millis ts.
const writerOptional = `{"type":"record","name":"OptionalEvent","namespace":"com.acme.iot","fields":[
	{"name":"event_id","type":["null","string"],"default":null},
	{"name":"machine_id","type":["null","string"],"default":null},
	{"name":"sensor_id","type":["null","string"],"default":null},
	{"name":"ts","type":["null",{"type":"long","logicalType":"timestamp-millis"}],"default":null},
	{"name":"seq","type":["null","int"],"default":null},
	{"name":"value","type":["null","float"],"default":null},
	{"name":"unit","type":["null","string"],"default":null},
	{"name":"schema_version","type":["null","int"],"default":null},
	{"name":"quality","type":["null","string"],"default":null},
	{"name":"clock","type":["null","string"],"default":null}]}`

// A writer whose fields are nullable unions is read, not refused as
// schema_unknown (Avro's resolution refuses a reader type that lacks the
// writer's null branch): a record with every field present decodes as
// writer v1's does, and one with a null field is invalid_field naming it,
// with the detail a JSON null of that field gets.
func TestNullableWriterFields(t *testing.T) {
	nullTSString := strings.Replace(writerOptional, `["null",{"type":"long","logicalType":"timestamp-millis"}]`, `["null","string"]`, 1)
	d := newMapDecoder(t, map[uint32]string{1: writerOptional, 2: nullTSString})
	present := func(over map[string]any) map[string]any {
		m := map[string]any{
			"event_id": map[string]any{"string": "e-1"}, "machine_id": map[string]any{"string": "M-7"},
			"sensor_id": map[string]any{"string": "S-7-3"}, "ts": map[string]any{"long.timestamp-millis": recordTS - 1000},
			"seq": map[string]any{"int": 42}, "value": map[string]any{"float": float32(7.5)},
			"unit": map[string]any{"string": "mm/s"}, "schema_version": map[string]any{"int": 1},
			"quality": map[string]any{"string": "good"}, "clock": nil,
		}
		for k, v := range over {
			m[k] = v
		}
		return m
	}
	want := event.Event{
		EventID: "e-1", MachineID: "M-7", SensorID: "S-7-3", TS: recordTS - 1000, Seq: 42,
		Value: 7.5, RawValue: 7.5, Unit: "mm/s", SchemaVersion: 1, Quality: "good", Clock: "synced",
	}
	tsString := time.UnixMilli(recordTS - 1000).UTC().Format(time.RFC3339Nano)
	for name, value := range map[string][]byte{
		"every field present": encode(t, writerOptional, 1, present(nil)),
		"string ts":           encode(t, nullTSString, 2, present(map[string]any{"ts": map[string]any{"string": tsString}})),
		"clock given":         encode(t, writerOptional, 1, present(map[string]any{"clock": map[string]any{"string": "synced"}})),
	} {
		ev, err := check(t, d, "M-7", value)
		if err != nil {
			t.Fatalf("%s: Check: %s: %s", name, err.Reason, err.Detail)
		}
		if ev != want {
			t.Fatalf("%s: event = %+v\nwant    %+v", name, ev, want)
		}
	}
	jsonv := map[string]string{
		"event_id": `"e-1"`, "machine_id": `"M-7"`, "sensor_id": `"S-7-3"`, "ts": "1767323044678", "seq": "42",
		"value": "7.5", "unit": `"mm/s"`, "schema_version": "1", "quality": `"good"`,
	}
	for _, field := range []string{"event_id", "machine_id", "sensor_id", "ts", "seq", "value", "unit", "schema_version", "quality"} {
		_, err := check(t, d, "", encode(t, writerOptional, 1, present(map[string]any{field: nil})))
		if err == nil || err.Reason != event.ReasonInvalidField || !strings.Contains(err.Detail, `"`+field+`"`) {
			t.Fatalf("null %s: Check = %+v, want invalid_field naming it", field, err)
		}
		// The same detail as a JSON null of the field.
		var b strings.Builder
		b.WriteString("{")
		for i, f := range []string{"event_id", "machine_id", "sensor_id", "ts", "seq", "value", "unit", "schema_version", "quality"} {
			if i > 0 {
				b.WriteString(",")
			}
			v := jsonv[f]
			if f == field {
				v = "null"
			}
			b.WriteString(`"` + f + `":` + v)
		}
		b.WriteString("}")
		_, jerr := event.NewValidator(event.JSONDecoder{}, event.Options{}).Check(nil, []byte(b.String()), recordTS)
		if jerr == nil || jerr.Reason != err.Reason || jerr.Detail != err.Detail {
			t.Fatalf("null %s: Avro %+v, JSON %+v: want the same reason and detail", field, err, jerr)
		}
	}
}
