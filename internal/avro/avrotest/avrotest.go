// Package avrotest is scaffolding for tests of the Avro formats, in the
// manner of net/http/httptest: a fake Confluent-API schema registry
// (Registry), producers' writer schemas and records of the event
// (EventWriter, Event), the conversion of a JSON event value as
// internal/sim writes it into an Avro body (EventBody), the Confluent wire
// framing (Wire) and Avro alert values (AlertValue, DecodeAlert).
//
// It is for tests only: no production code imports it. internal/avro's
// own in-package tests cannot import it (it imports internal/avro).
package avrotest

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	hamba "github.com/hamba/avro/v2"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/avro"
)

// eventFields are the event's fields as a producer writes them (ts a plain
// long or a string), in the order of schemas/event.avsc.
var eventFields = []string{
	`{"name":"event_id","type":"string"}`,
	`{"name":"machine_id","type":"string"}`,
	`{"name":"sensor_id","type":"string"}`,
	`{"name":"ts","type":["long","string"]}`,
	`{"name":"seq","type":"long"}`,
	`{"name":"value","type":"double"}`,
	`{"name":"unit","type":"string"}`,
	`{"name":"schema_version","type":"long"}`,
	`{"name":"quality","type":"string"}`,
}

// ClockField is the event's optional clock as a writer field (an argument
// of EventWriter).
const ClockField = `{"name":"clock","type":["null","string"],"default":null}`

// StringField is a writer field of type string with a default (an
// argument of EventWriter): a field the reader schema does not know.
func StringField(name, def string) string {
	b, _ := json.Marshal(map[string]any{"name": name, "type": "string", "default": def})
	return string(b)
}

// EventWriter returns a producer's writer schema of the event, the record
// com.acme.iot.VibrationEvent (not the reader's name): the event's nine
// fields without clock, then the fields extra (JSON field objects, such as
// ClockField and StringField).
func EventWriter(extra ...string) string {
	return `{"type":"record","name":"VibrationEvent","namespace":"com.acme.iot","fields":[` +
		strings.Join(append(append([]string(nil), eventFields...), extra...), ",") + `]}`
}

// ParseSchema parses an Avro schema text (with a cache of its own), failing
// t when it is not one.
func ParseSchema(t testing.TB, text string) hamba.Schema {
	t.Helper()
	s, err := hamba.ParseWithCache(text, "", &hamba.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Event is a producer's record of an EventWriter schema or of
// schemas/event.avsc, with the extra fields the tests' writers add. A field
// the writer does not have is not written; a writer field that Event does
// not have (such as "site") is written with its default.
type Event struct {
	EventID       string  `avro:"event_id" json:"event_id"`
	MachineID     string  `avro:"machine_id" json:"machine_id"`
	SensorID      string  `avro:"sensor_id" json:"sensor_id"`
	TS            any     `avro:"ts" json:"ts"` // int64, string or time.Time
	Seq           int64   `avro:"seq" json:"seq"`
	Value         float64 `avro:"value" json:"value"`
	Unit          string  `avro:"unit" json:"unit"`
	SchemaVersion int64   `avro:"schema_version" json:"schema_version"`
	Quality       string  `avro:"quality" json:"quality"`
	Clock         *string `avro:"clock" json:"clock,omitempty"`
	Gateway       string  `avro:"gateway" json:"gateway,omitempty"`
	Firmware      *string `avro:"firmware" json:"firmware,omitempty"`
}

var api = hamba.Config{TagKey: "avro"}.Freeze()

// Body returns rec (an Event, or a struct with avro tags) as an Avro body
// of writer, failing t when it cannot be encoded.
func Body(t testing.TB, writer hamba.Schema, rec any) []byte {
	t.Helper()
	body, err := api.Marshal(writer, rec)
	if err != nil {
		t.Fatalf("encode %+v: %v", rec, err)
	}
	return body
}

// Wire returns body in the Confluent wire format of schema id (magic byte
// 0, the id as 4 bytes big-endian, the body), in a new slice.
func Wire(id uint32, body []byte) []byte {
	return append(avro.AppendHeader(make([]byte, 0, avro.HeaderSize+len(body)), id), body...)
}

// EventOf reads a JSON event value (as internal/sim writes it) as an Event.
// It returns false when the value is not an object with the event's fields
// in types Avro can carry (the simulator's poison records): a ts that is
// neither a string nor an integer, a seq or schema_version that is not an
// integer, a value that is not a number, a clock that is neither a string
// nor null. Gateway and Firmware are left empty.
func EventOf(value []byte) (Event, bool) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil {
		return Event{}, false
	}
	str := func(k string) (string, bool) { s, ok := m[k].(string); return s, ok }
	integer := func(k string) (int64, bool) {
		n, ok := m[k].(json.Number)
		if !ok {
			return 0, false
		}
		v, err := n.Int64()
		return v, err == nil
	}
	var e Event
	var ok [9]bool
	e.EventID, ok[0] = str("event_id")
	e.MachineID, ok[1] = str("machine_id")
	e.SensorID, ok[2] = str("sensor_id")
	e.Unit, ok[3] = str("unit")
	e.Quality, ok[4] = str("quality")
	if s, isStr := str("ts"); isStr {
		e.TS, ok[5] = s, true
	} else if v, isInt := integer("ts"); isInt {
		e.TS, ok[5] = v, true
	}
	e.Seq, ok[6] = integer("seq")
	if n, isNum := m["value"].(json.Number); isNum {
		v, err := n.Float64()
		e.Value, ok[7] = v, err == nil
	}
	e.SchemaVersion, ok[8] = integer("schema_version")
	for _, b := range ok {
		if !b {
			return Event{}, false
		}
	}
	switch c := m["clock"].(type) {
	case string:
		e.Clock = &c
	case nil:
	default:
		return Event{}, false
	}
	return e, true
}

// EventGateway is the gateway EventBody writes (for writers with a
// "gateway" field).
const EventGateway = "gw-7"

// EventBody converts a JSON event value (as internal/sim writes it) to an
// Avro body of writer, with Gateway EventGateway. It returns false when
// the value cannot be carried (see EventOf): such records keep their bytes
// and are dead-lettered decode_error.
func EventBody(t testing.TB, writer hamba.Schema, value []byte) ([]byte, bool) {
	t.Helper()
	e, ok := EventOf(value)
	if !ok {
		return nil, false
	}
	e.Gateway = EventGateway
	return Body(t, writer, &e), true
}

// AlertValue returns a in the Avro alert format, schema id id.
func AlertValue(t testing.TB, id uint32, a alerts.Alert) []byte {
	t.Helper()
	enc, err := avro.NewAlertEncoder(id)
	if err != nil {
		t.Fatal(err)
	}
	v, err := enc.EncodeAlert(a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// DecodeAlert fetches the writer schema of an Avro alert value into reg
// (failing t when it cannot) and decodes the value.
func DecodeAlert(t testing.TB, reg *avro.Registry, value []byte) (alerts.Alert, error) {
	t.Helper()
	if err := reg.Prepare(context.Background(), [][]byte{value}); err != nil {
		t.Fatal(err)
	}
	dec, err := avro.NewAlertDecoder(reg)
	if err != nil {
		t.Fatal(err)
	}
	return dec.DecodeAlert(value)
}

// NewCache returns a schema cache (an empty avro.Registry) over a client
// with the options o.
func NewCache(t testing.TB, o avro.ClientOptions) *avro.Registry {
	t.Helper()
	c, err := avro.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := avro.NewRegistry(avro.RegistryOptions{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
