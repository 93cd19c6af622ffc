package avro

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/event"
)

func TestWireHeader(t *testing.T) {
	v := append(AppendHeader(nil, 0x01020304), 'x')
	if want := []byte{0, 1, 2, 3, 4, 'x'}; string(v) != string(want) {
		t.Fatalf("AppendHeader = %v, want %v", v, want)
	}
	id, body, err := ParseHeader(v)
	if err != nil || id != 0x01020304 || string(body) != "x" {
		t.Fatalf("ParseHeader = %d, %q, %v", id, body, err)
	}
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"", "value is empty"},
		{"\x00\x00\x00\x01", "shorter than the 5-byte"},
		{`{"event_id":1}`, "first byte is 0x7b, want the magic byte 0x00 of the Confluent wire format (it looks like JSON"},
		{"\x01\x00\x00\x00\x01", "first byte is 0x01"},
	} {
		_, _, err := ParseHeader([]byte(tc.in))
		var he *HeaderError
		if !errors.As(err, &he) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseHeader(%q) = %v, want a HeaderError containing %q", tc.in, err, tc.want)
		}
		if _, ok := SchemaID([]byte(tc.in)); ok {
			t.Errorf("SchemaID(%q) ok", tc.in)
		}
	}
}

// check runs the validator with an Avro decoder over src on one value.
func check(t *testing.T, dec *Decoder, key string, value []byte) (event.Event, *event.Error) {
	t.Helper()
	return event.NewValidator(dec, event.Options{}).Check([]byte(key), value, recordTS)
}

func newMapDecoder(t *testing.T, schemas map[uint32]string) *Decoder {
	t.Helper()
	src := mapSource{}
	for id, s := range schemas {
		src[id] = mustParse(t, s)
	}
	d, err := NewDecoder(src, DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// writerNull has a field of type null, which hamba cannot skip.
var writerNull = strings.Replace(writerV1, `{"name":"event_id","type":"string"},`, `{"name":"event_id","type":"string"},{"name":"nothing","type":"null"},`, 1)

// TestEvolution: records of writer v1, v2 (added defaulted fields), a writer
// without the optional clock and with promotable types, and one written
// with the reader schema itself all decode to the same event; writers that
// cannot be resolved are schema_unknown naming the id.
func TestEvolution(t *testing.T) {
	d := newMapDecoder(t, map[uint32]string{1: writerV1, 2: writerV2, 3: writerNoClock, 4: readerSchema(), 5: writerNoSeq, 6: writerMicros, 7: `"string"`, 8: writerNull,
		9: strings.Replace(writerMicros, "timestamp-micros", "timestamp-nanos", 1)})
	want := event.Event{
		EventID: "e-1", MachineID: "M-7", SensorID: "S-7-3", TS: recordTS - 1000, Seq: 42,
		Value: 7.5, RawValue: 7.5, Unit: "mm/s", SchemaVersion: 1, Quality: "good", Clock: "synced",
	}
	tsString := time.UnixMilli(recordTS - 1000).UTC().Format(time.RFC3339Nano)
	for _, tc := range []struct {
		name  string
		value []byte
	}{
		{"v1", encode(t, writerV1, 1, event1(nil))},
		{"v2 with added fields", encode(t, writerV2, 2, event1(map[string]any{"gateway": "gw-12", "tags": []any{"a", "b"}, "extra": map[string]any{"x": 1.5, "y": nil}}))},
		{"no clock, promoted int seq and float value, string ts", encode(t, writerNoClock, 3, event1(map[string]any{"clock": absent{}, "seq": 42, "value": float32(7.5), "ts": tsString, "schema_version": int64(1)}))},
		{"reader schema as writer", encode(t, readerSchema(), 4, event1(map[string]any{"ts": map[string]any{"string": tsString}, "schema_version": int64(1)}))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := check(t, d, "M-7", tc.value)
			if err != nil {
				t.Fatalf("Check: %s: %s", err.Reason, err.Detail)
			}
			if ev != want {
				t.Fatalf("event = %+v\nwant    %+v", ev, want)
			}
		})
	}
	for _, tc := range []struct {
		name, want string
		value      []byte
	}{
		{"missing field without default", "schema id 5 cannot be read as an event", encode(t, writerNoSeq, 5, event1(map[string]any{"seq": absent{}}))},
		{"ts in microseconds", "schema id 6 cannot be read as an event: field ts is long with logical type timestamp-micros", encode(t, writerMicros, 6, event1(nil))},
		// A logical type the Avro library does not know (Avro 1.12's
		// nanoseconds) is refused too, not read as milliseconds.
		{"ts in nanoseconds", "schema id 9 cannot be read as an event: field ts is long with logical type timestamp-nanos",
			encode(t, strings.Replace(writerMicros, "timestamp-micros", "timestamp-nanos", 1), 9, event1(nil))},
		{"not a record", "schema id 7 is a string schema", encode(t, `"string"`, 7, "x")},
		{"unknown id", "schema id 42 not found in the registry", encode(t, writerV1, 42, event1(nil))},
		{"ignored null field", "schema id 8 cannot be read as an event: field nothing, which the reader ignores, has type null", encode(t, writerNull, 8, event1(map[string]any{"nothing": nil}))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := check(t, d, "", tc.value)
			if err == nil || err.Reason != event.ReasonSchemaUnknown || !strings.Contains(err.Detail, tc.want) {
				t.Fatalf("Check = %+v, want schema_unknown containing %q", err, tc.want)
			}
		})
	}
}

// TestValidatorReasons: values the Avro types admit but the contract does
// not reach the validator and get its reasons, as in JSON.
func TestValidatorReasons(t *testing.T) {
	d := newMapDecoder(t, map[uint32]string{1: writerV1})
	for _, tc := range []struct {
		name   string
		key    string
		over   map[string]any
		reason event.Reason
		field  string
		detail string
	}{
		{"NaN", "", map[string]any{"value": math.NaN()}, event.ReasonInvalidField, "value", `field "value" is NaN; want a finite number`},
		{"+Inf", "", map[string]any{"value": math.Inf(1)}, event.ReasonInvalidField, "value", `field "value" is +Inf`},
		{"-Inf", "", map[string]any{"value": math.Inf(-1)}, event.ReasonInvalidField, "value", `is -Inf`},
		{"bad unit", "", map[string]any{"unit": "furlong/s"}, event.ReasonInvalidField, "unit", `field "unit" is "furlong/s"; want one of "mm/s", "in/s"`},
		{"bad quality", "", map[string]any{"quality": "GOOD"}, event.ReasonInvalidField, "quality", `"GOOD"`},
		{"bad clock", "", map[string]any{"clock": "drifting"}, event.ReasonInvalidField, "clock", `"drifting"`},
		{"empty event_id", "", map[string]any{"event_id": ""}, event.ReasonInvalidField, "event_id", `non-empty`},
		{"negative seq", "", map[string]any{"seq": int64(-1)}, event.ReasonInvalidField, "seq", `field "seq" is -1`},
		{"negative ts", "", map[string]any{"ts": int64(-5)}, event.ReasonInvalidField, "ts", `out of range`},
		{"unknown schema_version", "", map[string]any{"schema_version": 2}, event.ReasonSchemaUnknown, "schema_version", `is 2, a schema version this processor does not know`},
		{"key mismatch", "M-8", nil, event.ReasonKeyMismatch, "machine_id", `"M-8"`},
		{"clock ahead", "", map[string]any{"ts": recordTS + time.Hour.Milliseconds()}, event.ReasonClockAhead, "ts", `ahead of the record timestamp`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := check(t, d, tc.key, encode(t, writerV1, 1, event1(tc.over)))
			if err == nil || err.Reason != tc.reason || err.Field != tc.field || !strings.Contains(err.Detail, tc.detail) {
				t.Fatalf("Check = %+v, want %s on %s containing %q", err, tc.reason, tc.field, tc.detail)
			}
		})
	}
	// in/s is normalised like JSON's.
	ev, err := check(t, d, "", encode(t, writerV1, 1, event1(map[string]any{"value": 0.3, "unit": "in/s", "clock": "unsynced"})))
	if err != nil || ev.Value != 7.62 || ev.Clock != "unsynced" {
		t.Fatalf("in/s: %+v, %v", ev, err)
	}
}

// TestDecodeErrors: bytes that are not one value of the writer schema are
// decode_error, quickly, whatever they claim.
func TestDecodeErrors(t *testing.T) {
	d := newMapDecoder(t, map[uint32]string{1: writerV1, 2: writerV2})
	good := encode(t, writerV1, 1, event1(nil))
	v2 := encode(t, writerV2, 2, event1(map[string]any{"gateway": "g", "tags": []any{}, "extra": map[string]any{}}))
	// In v2 the array block count sits right after "gateway" (1 + 1 bytes).
	hugeArray := append(append([]byte(nil), v2[:len(v2)-2]...), 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0)
	badUTF8 := encode(t, writerV1, 1, event1(map[string]any{"event_id": "e\xff"}))
	for _, tc := range []struct {
		name, want string
		value      []byte
	}{
		{"JSON on an Avro source", "first byte is 0x7b", []byte(`{"event_id":"e-1"}`)},
		{"empty (tombstone)", "value is empty", nil},
		{"header only", "Avro body does not match its writer schema: at byte 0 of the Avro body: field event_id: unexpected end of the body", AppendHeader(nil, 1)},
		{"truncated", "unexpected end of the body", good[:len(good)-3]},
		{"trailing bytes", "2 bytes after the record", append(append([]byte(nil), good...), 0, 0)},
		{"invalid UTF-8", "string is not valid UTF-8", badUTF8},
		{"huge array count", "block count", hugeArray},
		{"bad union index", "union index 5 out of range", append(append([]byte(nil), good[:len(good)-1]...), 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := check(t, d, "", tc.value)
			if err == nil || err.Reason != event.ReasonDecodeError || !strings.Contains(err.Detail, tc.want) {
				t.Fatalf("Check = %+v, want decode_error containing %q", err, tc.want)
			}
			if el := time.Since(start); el > time.Second {
				t.Fatalf("took %v", el)
			}
		})
	}
}

func TestNotPrepared(t *testing.T) {
	f := newFakeRegistry(t)
	f.add(1, writerV1)
	r := newTestRegistry(t, f, RegistryOptions{})
	d, err := NewDecoder(r, DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v := encode(t, writerV1, 1, event1(nil))
	_, derr := d.Decode(v)
	if !errors.Is(derr, ErrNotPrepared) {
		t.Fatalf("Decode before Prepare = %v, want ErrNotPrepared", derr)
	}
	if f.fetchCount(1) != 0 {
		t.Fatal("Decode fetched a schema: it must do no I/O")
	}
	if err := r.Prepare(t.Context(), [][]byte{v}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Decode(v); err != nil {
		t.Fatalf("Decode after Prepare: %v", err)
	}
}

func TestLocalSchema(t *testing.T) {
	w := mustParse(t, writerV1)
	t.Run("wire format, any id", func(t *testing.T) {
		d, err := NewDecoder(NewLocalSource(w, 0), DecoderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for id := range uint32(100) {
			if _, err := check(t, d, "", encode(t, writerV1, id*7919, event1(nil))); err != nil {
				t.Fatalf("id %d: %+v", id, err)
			}
		}
		n := 0
		d.plans.Range(func(any, any) bool { n++; return true })
		if n != 1 {
			t.Fatalf("%d plans for one local schema, want 1 (random ids must not grow memory)", n)
		}
	})
	t.Run("wire format, fixed id", func(t *testing.T) {
		d, err := NewDecoder(NewLocalSource(w, 7), DecoderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := check(t, d, "", encode(t, writerV1, 7, event1(nil))); err != nil {
			t.Fatal(err)
		}
		_, cerr := check(t, d, "", encode(t, writerV1, 8, event1(nil)))
		if cerr == nil || cerr.Reason != event.ReasonSchemaUnknown || cerr.Detail != "schema id 8 is not the id of the local schema (7)" {
			t.Fatalf("other id: %+v", cerr)
		}
	})
	t.Run("bare bodies", func(t *testing.T) {
		d, err := NewBareDecoder(w, DecoderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := check(t, d, "", encodeBare(t, writerV1, event1(nil))); err != nil {
			t.Fatal(err)
		}
		_, cerr := check(t, d, "", encode(t, writerV1, 1, event1(nil)))
		if cerr == nil || cerr.Reason != event.ReasonDecodeError {
			t.Fatalf("a wire-format value read as bare: %+v", cerr)
		}
		if _, err := NewBareDecoder(mustParse(t, writerNoSeq), DecoderOptions{}); err == nil ||
			!strings.Contains(err.Error(), "the local schema cannot be read as an event") {
			t.Fatalf("incompatible local schema: %v", err)
		}
	})
	t.Run("schema file", func(t *testing.T) {
		s, err := LoadSchemaFile("../../schemas/event.avsc")
		if err != nil {
			t.Fatal(err)
		}
		if s.(interface{ FullName() string }).FullName() != "vibeline.events.Event" {
			t.Fatalf("schema %s", s.String())
		}
		if _, err := LoadSchemaFile("testdata/missing.avsc"); err == nil {
			t.Fatal("missing file accepted")
		}
	})
}
