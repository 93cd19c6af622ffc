package event

import (
	"math"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

const del = "\x00delete"

// record builds a JSON record from the valid base record with some members
// replaced by raw JSON text (or removed with del). Members are written in
// sorted order.
func record(overrides map[string]string) []byte {
	m := map[string]string{
		"event_id":       `"e-1"`,
		"machine_id":     `"M-7"`,
		"sensor_id":      `"S-1"`,
		"ts":             `"2026-01-02T03:04:05.678Z"`,
		"seq":            `42`,
		"value":          `7.5`,
		"unit":           `"mm/s"`,
		"schema_version": `1`,
		"quality":        `"good"`,
	}
	for k, v := range overrides {
		if v == del {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + k + `":` + m[k])
	}
	b.WriteByte('}')
	return []byte(b.String())
}

type o = map[string]string

var (
	baseTS   = time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC).UnixMilli()
	recordTS = baseTS + 1000 // the broker saw it a second later
)

func TestCheckRejects(t *testing.T) {
	small := NewValidator(JSONDecoder{}, Options{MaxBytes: 64})
	deep := `{"x":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `}`
	tests := []struct {
		name      string
		v         *Validator // default validator when nil
		key       string
		value     []byte
		recordTS  int64
		reason    Reason
		field     string
		detailHas []string
	}{
		// ids longer than MaxIDBytes
		{name: "event_id too long", value: record(o{"event_id": `"` + strings.Repeat("e", MaxIDBytes+1) + `"`}), key: "M-7",
			reason: ReasonInvalidField, field: FieldEventID, detailHas: []string{"1025 bytes", "at most 1024"}},
		{name: "machine_id too long", value: record(o{"machine_id": `"` + strings.Repeat("m", MaxIDBytes+1) + `"`}),
			reason: ReasonInvalidField, field: FieldMachineID, detailHas: []string{"at most 1024"}},
		{name: "sensor_id too long", value: record(o{"sensor_id": `"` + strings.Repeat("s", 5000) + `"`}), key: "M-7",
			reason: ReasonInvalidField, field: FieldSensorID, detailHas: []string{"5000 bytes"}},
		// decode_error
		{name: "nil value", value: nil, reason: ReasonDecodeError, detailHas: []string{"empty"}},
		{name: "empty value", value: []byte{}, reason: ReasonDecodeError},
		{name: "whitespace only", value: []byte(" \n\t"), reason: ReasonDecodeError},
		{name: "invalid json", value: []byte(`{"event_id":`), reason: ReasonDecodeError, detailHas: []string{"not valid JSON"}},
		{name: "single quotes", value: []byte(`{'a':1}`), reason: ReasonDecodeError},
		{name: "invalid utf-8", value: []byte("{\"event_id\":\"e\xff\"}"), reason: ReasonDecodeError, detailHas: []string{"UTF-8", "offset 14"}},
		{name: "top-level array", value: []byte(`[` + string(record(nil)) + `]`), reason: ReasonDecodeError, detailHas: []string{"JSON array"}},
		{name: "top-level string", value: []byte(`"x"`), reason: ReasonDecodeError, detailHas: []string{"JSON string"}},
		{name: "top-level null", value: []byte(`null`), reason: ReasonDecodeError, detailHas: []string{"JSON null"}},
		{name: "top-level number", value: []byte(` 12 `), reason: ReasonDecodeError, detailHas: []string{"JSON number"}},
		{name: "top-level bool", value: []byte(`true`), reason: ReasonDecodeError, detailHas: []string{"JSON boolean"}},
		{name: "trailing garbage", value: append(record(nil), " x"...), reason: ReasonDecodeError},
		{name: "two objects", value: append(record(nil), record(nil)...), reason: ReasonDecodeError},
		{name: "confluent avro frame", value: append([]byte{0, 0, 0, 0, 1}, record(nil)...), reason: ReasonDecodeError},
		{name: "too large", v: small, value: record(nil), reason: ReasonTooLarge, detailHas: []string{"larger than the limit of 64 bytes"}},
		{name: "nesting 100k deep", value: []byte(deep), reason: ReasonDecodeError, detailHas: []string{"depth"}},

		// invalid_field for schema_version comes before everything else
		{name: "schema_version missing", value: record(o{"schema_version": del}), reason: ReasonInvalidField, field: "schema_version", detailHas: []string{"missing", "an integer"}},
		{name: "schema_version null", value: record(o{"schema_version": `null`}), reason: ReasonInvalidField, field: "schema_version", detailHas: []string{"is null"}},
		{name: "schema_version string", value: record(o{"schema_version": `"1"`}), reason: ReasonInvalidField, field: "schema_version", detailHas: []string{`"1"`}},
		{name: "schema_version fraction", value: record(o{"schema_version": `1.5`}), reason: ReasonInvalidField, field: "schema_version", detailHas: []string{"1.5"}},
		{name: "schema_version missing and bad ts", value: record(o{"schema_version": del, "ts": `"yesterday"`}), reason: ReasonInvalidField, field: "schema_version"},
		{name: "schema_version missing and key mismatch", key: "M-8", value: record(o{"schema_version": del}), reason: ReasonInvalidField, field: "schema_version"},

		// schema_unknown before other fields
		{name: "schema_version 2", value: record(o{"schema_version": `2`}), reason: ReasonSchemaUnknown, field: "schema_version", detailHas: []string{"is 2", "known versions: 1"}},
		{name: "schema_version 0", value: record(o{"schema_version": `0`}), reason: ReasonSchemaUnknown, field: "schema_version"},
		{name: "schema_version huge", value: record(o{"schema_version": `9223372036854775807`}), reason: ReasonSchemaUnknown},
		{name: "schema_version beyond int64", value: record(o{"schema_version": `9223372036854775808`}), reason: ReasonInvalidField, field: "schema_version"},
		{name: "unknown version and missing event_id", value: record(o{"schema_version": `2`, "event_id": del}), reason: ReasonSchemaUnknown},

		// invalid_field, other fields, in field order
		{name: "event_id missing", value: record(o{"event_id": del}), reason: ReasonInvalidField, field: "event_id", detailHas: []string{`"event_id" is missing`, "non-empty string"}},
		{name: "event_id empty", value: record(o{"event_id": `""`}), reason: ReasonInvalidField, field: "event_id", detailHas: []string{`is ""`}},
		{name: "event_id number", value: record(o{"event_id": `17`}), reason: ReasonInvalidField, field: "event_id", detailHas: []string{"is 17"}},
		{name: "event_id null", value: record(o{"event_id": `null`}), reason: ReasonInvalidField, field: "event_id"},
		{name: "event_id missing and bad unit", value: record(o{"event_id": del, "unit": `"km/h"`}), reason: ReasonInvalidField, field: "event_id"},
		{name: "machine_id object", value: record(o{"machine_id": `{"id":"M-7"}`}), reason: ReasonInvalidField, field: "machine_id", detailHas: []string{`{"id":"M-7"}`}},
		{name: "machine_id missing and key mismatch", key: "M-8", value: record(o{"machine_id": del}), reason: ReasonInvalidField, field: "machine_id"},
		{name: "sensor_id array", value: record(o{"sensor_id": `["S-1"]`}), reason: ReasonInvalidField, field: "sensor_id"},
		{name: "ts missing", value: record(o{"ts": del}), reason: ReasonInvalidField, field: "ts"},
		{name: "ts without zone", value: record(o{"ts": `"2026-01-02T03:04:05"`}), reason: ReasonInvalidField, field: "ts", detailHas: []string{"no time zone", "RFC 3339"}},
		{name: "ts fraction without zone", value: record(o{"ts": `"2026-01-02T03:04:05.123"`}), reason: ReasonInvalidField, field: "ts", detailHas: []string{"no time zone"}},
		{name: "ts space separator", value: record(o{"ts": `"2026-01-02 03:04:05Z"`}), reason: ReasonInvalidField, field: "ts"},
		{name: "ts date only", value: record(o{"ts": `"2026-01-02"`}), reason: ReasonInvalidField, field: "ts"},
		{name: "ts february 30", value: record(o{"ts": `"2026-02-30T00:00:00Z"`}), reason: ReasonInvalidField, field: "ts", detailHas: []string{"out of range"}},
		{name: "ts leap second", value: record(o{"ts": `"2016-12-31T23:59:60Z"`}), reason: ReasonInvalidField, field: "ts"},
		{name: "ts offset hours 24", value: record(o{"ts": `"2026-01-02T03:04:05+24:00"`}), reason: ReasonInvalidField, field: "ts"},
		{name: "ts offset without colon", value: record(o{"ts": `"2026-01-02T03:04:05+0200"`}), reason: ReasonInvalidField, field: "ts"},
		{name: "ts empty fraction", value: record(o{"ts": `"2026-01-02T03:04:05.Z"`}), reason: ReasonInvalidField, field: "ts"},
		{name: "ts before 1970 via offset", value: record(o{"ts": `"1970-01-01T00:30:00+01:00"`}), reason: ReasonInvalidField, field: "ts", detailHas: []string{"out of range"}},
		{name: "ts after 9999 via offset", value: record(o{"ts": `"9999-12-31T23:30:00-01:00"`}), reason: ReasonInvalidField, field: "ts"},
		{name: "ts fractional millis", value: record(o{"ts": `1767323045678.5`}), reason: ReasonInvalidField, field: "ts"},
		{name: "ts negative millis", value: record(o{"ts": `-1`}), reason: ReasonInvalidField, field: "ts", detailHas: []string{"out of range"}},
		{name: "ts beyond year 9999", value: record(o{"ts": `253402300800000`}), reason: ReasonInvalidField, field: "ts"},
		{name: "ts beyond int64", value: record(o{"ts": `1e30`}), reason: ReasonInvalidField, field: "ts"},
		{name: "ts bool", value: record(o{"ts": `true`}), reason: ReasonInvalidField, field: "ts"},
		{name: "seq negative", value: record(o{"seq": `-1`}), reason: ReasonInvalidField, field: "seq", detailHas: []string{"is -1", "integer >= 0"}},
		{name: "seq fraction", value: record(o{"seq": `1.5`}), reason: ReasonInvalidField, field: "seq"},
		{name: "seq tiny fraction", value: record(o{"seq": `1.0000000000000000001`}), reason: ReasonInvalidField, field: "seq"},
		{name: "seq negative exponent", value: record(o{"seq": `15e-1`}), reason: ReasonInvalidField, field: "seq"},
		{name: "seq string", value: record(o{"seq": `"1"`}), reason: ReasonInvalidField, field: "seq"},
		{name: "value string", value: record(o{"value": `"7.5"`}), reason: ReasonInvalidField, field: "value", detailHas: []string{"finite number"}},
		{name: "value beyond float64", value: record(o{"value": `1e400`}), reason: ReasonInvalidField, field: "value", detailHas: []string{"1e400"}},
		{name: "value null", value: record(o{"value": `null`}), reason: ReasonInvalidField, field: "value"},
		{name: "value overflows in mm/s", value: record(o{"value": `1e308`, "unit": `"in/s"`}), reason: ReasonInvalidField, field: "value", detailHas: []string{"1e308 in/s"}},
		{name: "unit other", value: record(o{"unit": `"km/h"`}), reason: ReasonInvalidField, field: "unit", detailHas: []string{`"km/h"`, `"mm/s"`, `"in/s"`}},
		{name: "unit upper case", value: record(o{"unit": `"MM/S"`}), reason: ReasonInvalidField, field: "unit"},
		{name: "unit padded", value: record(o{"unit": `"mm/s "`}), reason: ReasonInvalidField, field: "unit"},
		{name: "unit missing", value: record(o{"unit": del}), reason: ReasonInvalidField, field: "unit"},
		{name: "quality other", value: record(o{"quality": `"ok"`}), reason: ReasonInvalidField, field: "quality", detailHas: []string{`"good"`, `"uncertain"`, `"bad"`}},
		{name: "quality missing", value: record(o{"quality": del}), reason: ReasonInvalidField, field: "quality"},
		{name: "clock other", value: record(o{"clock": `"gps"`}), reason: ReasonInvalidField, field: "clock"},
		{name: "clock bool", value: record(o{"clock": `true`}), reason: ReasonInvalidField, field: "clock"},

		// key_mismatch before clock_ahead
		{name: "key mismatch", key: "M-8", value: record(nil), reason: ReasonKeyMismatch, field: "machine_id", detailHas: []string{`"M-8"`, `"M-7"`}},
		{name: "key differs in case", key: "m-7", value: record(nil), reason: ReasonKeyMismatch},
		{name: "key mismatch and clock ahead", key: "M-8", value: record(nil), recordTS: baseTS - DefaultMaxFutureSkewMs - 1, reason: ReasonKeyMismatch},

		// clock_ahead
		{name: "clock ahead", value: record(nil), recordTS: baseTS - DefaultMaxFutureSkewMs - 1, reason: ReasonClockAhead, field: "ts", detailHas: []string{"300001 ms ahead", "at most 300000 ms"}},
		{name: "clock ahead custom skew", v: NewValidator(nil, Options{MaxFutureSkewMs: 1000}), value: record(nil), recordTS: baseTS - 1001, reason: ReasonClockAhead},
	}
	def := NewValidator(JSONDecoder{}, Options{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.v
			if v == nil {
				v = def
			}
			rts := tc.recordTS
			if rts == 0 {
				rts = recordTS
			}
			var key []byte
			if tc.key != "" {
				key = []byte(tc.key)
			}
			ev, err := v.Check(key, tc.value, rts)
			if err == nil {
				t.Fatalf("Check accepted %q as %+v, want %s", tc.value, ev, tc.reason)
			}
			if err.Reason != tc.reason {
				t.Fatalf("reason = %s (%s), want %s", err.Reason, err.Detail, tc.reason)
			}
			if tc.field != "" && err.Field != tc.field {
				t.Errorf("field = %q, want %q (%s)", err.Field, tc.field, err.Detail)
			}
			if ev != (Event{}) {
				t.Errorf("rejected record returned a non-zero event %+v", ev)
			}
			for _, s := range tc.detailHas {
				if !strings.Contains(err.Detail, s) {
					t.Errorf("detail %q does not contain %q", err.Detail, s)
				}
			}
			checkDetailSafe(t, err)
			if got, want := err.Error(), "event: "+string(err.Reason)+": "+err.Detail; got != want {
				t.Errorf("Error() = %q, want %q", got, want)
			}
		})
	}
}

// checkDetailSafe asserts the detail can go into a Kafka header and a log
// line as is.
func checkDetailSafe(t testing.TB, err *Error) {
	t.Helper()
	if err.Detail == "" || !utf8.ValidString(err.Detail) || len(err.Detail) > 1024 {
		t.Fatalf("detail not a bounded UTF-8 sentence: %q", err.Detail)
	}
	for _, r := range err.Detail {
		if !unicode.IsPrint(r) {
			t.Fatalf("detail has unprintable %U: %q", r, err.Detail)
		}
	}
}

func TestCheckAccepts(t *testing.T) {
	base := Event{
		EventID: "e-1", MachineID: "M-7", SensorID: "S-1",
		TS: baseTS, Seq: 42, Value: 7.5, RawValue: 7.5, Unit: "mm/s",
		SchemaVersion: 1, Quality: "good", Clock: "synced",
	}
	with := func(f func(*Event)) Event { e := base; f(&e); return e }
	tests := []struct {
		name     string
		key      []byte
		value    []byte
		recordTS int64
		want     Event
	}{
		{name: "base", value: record(nil), want: base},
		{name: "matching key", key: []byte("M-7"), value: record(nil), want: base},
		{name: "empty key means no key", key: []byte{}, value: record(nil), want: base},
		{name: "positive offset normalised to UTC", value: record(o{"ts": `"2026-01-02T05:04:05.678+02:00"`}), want: base},
		{name: "negative offset", value: record(o{"ts": `"2026-01-01T22:34:05.678-04:30"`}), want: base},
		{name: "lower-case t and z", value: record(o{"ts": `"2026-01-02t03:04:05.678z"`}), want: base},
		{name: "sub-millisecond digits truncated", value: record(o{"ts": `"2026-01-02T03:04:05.678999999999Z"`}), want: base},
		{name: "one fraction digit", value: record(o{"ts": `"2026-01-02T03:04:05.6Z"`}), want: with(func(e *Event) { e.TS = baseTS - 78 })},
		{name: "no fraction", value: record(o{"ts": `"2026-01-02T03:04:05Z"`}), want: with(func(e *Event) { e.TS = baseTS - 678 })},
		{name: "epoch millis", value: record(o{"ts": `1767323045678`}), want: base},
		{name: "epoch millis in exponent notation", value: record(o{"ts": `1.767323045678e12`}), want: base},
		{name: "epoch zero", value: record(o{"ts": `0`}), recordTS: 0, want: with(func(e *Event) { e.TS = 0 })},
		{name: "last representable instant", value: record(o{"ts": `"9999-12-31T23:59:59.999Z"`}), recordTS: MaxTSMs, want: with(func(e *Event) { e.TS = MaxTSMs })},
		{name: "leap day", value: record(o{"ts": `"2024-02-29T00:00:00Z"`}), want: with(func(e *Event) { e.TS = time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC).UnixMilli() })},
		{name: "in/s normalised", value: record(o{"value": `0.3`, "unit": `"in/s"`}), want: with(func(e *Event) { e.RawValue = 0.3; e.Value = 0.3 * 25.4; e.Unit = "in/s" })},
		{name: "in/s exact", value: record(o{"value": `1`, "unit": `"in/s"`}), want: with(func(e *Event) { e.RawValue = 1; e.Value = 25.4; e.Unit = "in/s" })},
		{name: "integer value", value: record(o{"value": `8`}), want: with(func(e *Event) { e.RawValue = 8; e.Value = 8 })},
		{name: "negative value allowed", value: record(o{"value": `-0.5`}), want: with(func(e *Event) { e.RawValue = -0.5; e.Value = -0.5 })},
		{name: "seq as 4.2e1", value: record(o{"seq": `4.2e1`}), want: base},
		{name: "seq as 42.000", value: record(o{"seq": `42.000`}), want: base},
		{name: "seq zero", value: record(o{"seq": `0`}), want: with(func(e *Event) { e.Seq = 0 })},
		{name: "seq max int64", value: record(o{"seq": `9223372036854775807`}), want: with(func(e *Event) { e.Seq = math.MaxInt64 })},
		{name: "schema_version 1.0", value: record(o{"schema_version": `1.0`}), want: base},
		{name: "clock unsynced", value: record(o{"clock": `"unsynced"`}), want: with(func(e *Event) { e.Clock = "unsynced" })},
		{name: "clock null means default", value: record(o{"clock": `null`}), want: base},
		{name: "quality bad", value: record(o{"quality": `"bad"`}), want: with(func(e *Event) { e.Quality = "bad" })},
		{name: "unknown fields ignored", value: record(o{"extra": `{"deep":[1,{"x":null},"}"]}`, "Event_ID": `5`, "zz": `"\"quoted\\"`}), want: base},
		{name: "unknown field nested 5000 deep", value: record(o{"extra": strings.Repeat("[", 5000) + strings.Repeat("]", 5000)}), want: base},
		{name: "duplicate member: last wins", value: []byte(`{"seq":-1,` + string(record(nil))[1:]), want: base},
		{name: "duplicate member: last wins, bad last", value: []byte(`{"seq":-1,` + string(record(o{"seq": `7`}))[1:]), want: with(func(e *Event) { e.Seq = 7 })},
		{name: "escaped member name", value: []byte(`{"event\u005fid":"e-2",` + string(record(o{"event_id": del}))[1:]), want: with(func(e *Event) { e.EventID = "e-2" })},
		{name: "escaped value", key: []byte("M-7"), value: record(o{"machine_id": `"M\u002d7"`}), want: base},
		{name: "unicode ids", key: []byte("Maschine-Ä"), value: record(o{"machine_id": `"Maschine-Ä"`, "event_id": `"\u00e9v\ud83d\ude00"`}), want: with(func(e *Event) { e.MachineID = "Maschine-Ä"; e.EventID = "év😀" })},
		{name: "whitespace around", value: []byte("\n\t " + strings.ReplaceAll(string(record(nil)), ",", " ,\n ") + " \r\n"), want: base},
		{name: "ts exactly at the skew limit", value: record(nil), recordTS: baseTS - DefaultMaxFutureSkewMs, want: base},
		{name: "no record timestamp", value: record(nil), recordTS: -1, want: base},
		{name: "record timestamp near max int64", value: record(nil), recordTS: math.MaxInt64, want: base},
	}
	v := NewValidator(nil, Options{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rts := tc.recordTS
			if rts == 0 && tc.want.TS != 0 {
				rts = recordTS
			}
			got, err := v.Check(tc.key, tc.value, rts)
			if err != nil {
				t.Fatalf("Check(%q) = %v", tc.value, err)
			}
			if got != tc.want {
				t.Fatalf("Check(%q)\n got %+v\nwant %+v", tc.value, got, tc.want)
			}
			checkInvariants(t, v, tc.key, rts, got)
		})
	}
}

func TestDetailTruncatesAndEscapes(t *testing.T) {
	v := NewValidator(nil, Options{})
	long := strings.Repeat("é", 200) // 400 bytes
	_, err := v.Check(nil, record(o{"unit": `"` + long + `"`}), recordTS)
	if err == nil || err.Field != "unit" {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Detail, "... (400 bytes)") || strings.Count(err.Detail, "é") != 32 {
		t.Errorf("detail not truncated at a rune boundary: %q", err.Detail)
	}
	_, err = v.Check([]byte("M-8\n\x1b[31m"), record(nil), recordTS)
	if err == nil || err.Reason != ReasonKeyMismatch {
		t.Fatalf("got %v", err)
	}
	checkDetailSafe(t, err)
	if !strings.Contains(err.Detail, `"M-8\n\x1b[31m"`) {
		t.Errorf("key not quoted: %q", err.Detail)
	}
	_, err = v.Check(nil, record(o{"quality": `"\u202egood\u0000"`}), recordTS)
	if err == nil {
		t.Fatal("accepted")
	}
	checkDetailSafe(t, err)
	_, err = v.Check(nil, record(o{"seq": `{"a": [1,` + "\n" + `2]}`}), recordTS)
	if err == nil {
		t.Fatal("accepted")
	}
	checkDetailSafe(t, err)
}

func TestOptionsDefaults(t *testing.T) {
	var opts Options
	opts.EnsureDefaults()
	if opts.MaxFutureSkewMs != 300_000 || opts.MaxBytes != 900_000 || len(opts.KnownVersions) != 1 || opts.KnownVersions[0] != 1 {
		t.Fatalf("defaults = %+v", opts)
	}
	known := []int{1, 2}
	v := NewValidator(nil, Options{KnownVersions: known})
	known[1] = 3 // the validator keeps its own copy
	if _, err := v.Check(nil, record(o{"schema_version": `2`}), recordTS); err != nil {
		t.Fatalf("version 2 rejected: %v", err)
	}
	_, err := v.Check(nil, record(o{"schema_version": `3`}), recordTS)
	if err == nil || err.Reason != ReasonSchemaUnknown || !strings.Contains(err.Detail, "known versions: 1, 2") {
		t.Fatalf("version 3: %v", err)
	}
	if got := v.Options().KnownVersions; len(got) != 2 || got[1] != 2 {
		t.Fatalf("Options().KnownVersions = %v", got)
	}
}

// stubDecoder returns a fixed result, to check Validator's handling of
// decoders other than JSON.
type stubDecoder struct {
	f   Fields
	err error
}

func (s stubDecoder) Decode([]byte) (Fields, error) { return s.f, s.err }

type plainError string

func (e plainError) Error() string { return string(e) }

func TestForeignDecoder(t *testing.T) {
	v := NewValidator(stubDecoder{err: plainError("avro: unknown schema id 7\n")}, Options{})
	_, err := v.Check(nil, []byte{0, 0, 0, 0, 7}, recordTS)
	if err == nil || err.Reason != ReasonDecodeError || !strings.Contains(err.Detail, "unknown schema id 7") {
		t.Fatalf("got %v", err)
	}
	checkDetailSafe(t, err)

	str := func(s string) Field { return Field{Kind: KindString, Text: []byte(s), Raw: []byte(s)} }
	num := func(n int64) Field { return Field{Kind: KindNumber, Num: float64(n), Int: n, IsInt: true} }
	f := Fields{
		SchemaVersion: num(1), EventID: str("e"), MachineID: str("m"), SensorID: str("s"),
		TS: num(5), Seq: num(0), Value: Field{Kind: KindNumber, Num: 0.25}, Unit: str("in/s"),
		Quality: str("uncertain"), Clock: Field{Kind: KindAbsent},
	}
	ev, err := NewValidator(stubDecoder{f: f}, Options{}).Check([]byte("m"), nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := Event{EventID: "e", MachineID: "m", SensorID: "s", TS: 5, Value: 6.35, RawValue: 0.25, Unit: "in/s", SchemaVersion: 1, Quality: "uncertain", Clock: "synced"}
	if ev != want {
		t.Fatalf("got %+v, want %+v", ev, want)
	}
}

func TestEventDoesNotAliasInput(t *testing.T) {
	v := NewValidator(nil, Options{})
	buf := record(nil)
	ev, err := v.Check(nil, buf, recordTS)
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 'x'
	}
	if ev.EventID != "e-1" || ev.MachineID != "M-7" || ev.SensorID != "S-1" || ev.Unit != "mm/s" || ev.Quality != "good" {
		t.Fatalf("event changed with its input buffer: %+v", ev)
	}
}

func TestReasons(t *testing.T) {
	got := Reasons()
	want := []Reason{"too_large", "decode_error", "invalid_field", "schema_unknown", "key_mismatch", "clock_ahead"}
	if len(got) != len(want) {
		t.Fatalf("Reasons() = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Reasons() = %v, want %v", got, want)
		}
	}
}

// checkInvariants asserts what every accepted event guarantees.
func checkInvariants(t testing.TB, v *Validator, key []byte, recordTSMs int64, ev Event) {
	t.Helper()
	opts := v.Options()
	switch {
	case ev.EventID == "" || ev.MachineID == "" || ev.SensorID == "":
		t.Fatalf("empty id in %+v", ev)
	case ev.TS < MinTSMs || ev.TS > MaxTSMs:
		t.Fatalf("ts out of range in %+v", ev)
	case ev.Seq < 0:
		t.Fatalf("negative seq in %+v", ev)
	case math.IsNaN(ev.Value) || math.IsInf(ev.Value, 0) || math.IsNaN(ev.RawValue) || math.IsInf(ev.RawValue, 0):
		t.Fatalf("value not finite in %+v", ev)
	case !(ev.Unit == "mm/s" && ev.Value == ev.RawValue || ev.Unit == "in/s" && nearlyEqual(ev.Value, ev.RawValue*25.4)):
		t.Fatalf("unit/value not normalised in %+v", ev)
	case ev.Quality != "good" && ev.Quality != "uncertain" && ev.Quality != "bad":
		t.Fatalf("quality in %+v", ev)
	case ev.Clock != "synced" && ev.Clock != "unsynced":
		t.Fatalf("clock in %+v", ev)
	case len(key) > 0 && string(key) != ev.MachineID:
		t.Fatalf("key %q accepted for %+v", key, ev)
	case recordTSMs >= 0 && recordTSMs <= math.MaxInt64-opts.MaxFutureSkewMs && ev.TS > recordTSMs+opts.MaxFutureSkewMs:
		t.Fatalf("clock ahead accepted: %+v at record ts %d", ev, recordTSMs)
	}
	known := false
	for _, k := range opts.KnownVersions {
		known = known || k == ev.SchemaVersion
	}
	if !known {
		t.Fatalf("unknown version accepted: %+v", ev)
	}
}

func TestNormalise(t *testing.T) {
	tests := []struct {
		raw  float64
		unit string
		want float64
		ok   bool
	}{
		{7.1, "mm/s", 7.1, true},
		{0.3, "in/s", 7.62, true},
		{-0.3, "in/s", -7.62, true},
		{1, "in/s", 25.4, true},
		{0, "in/s", 0, true},
		{0.1, "in/s", 2.54, true},
		{0.279527559, "in/s", 7.0999999986, true},
		{123456789.123456, "in/s", 3135802443.7357826, true},
		{5e-324, "in/s", 1.3e-322, true},
		{1e308, "in/s", 0, false},
		{-1e308, "in/s", 0, false},
		{math.MaxFloat64, "mm/s", math.MaxFloat64, true},
		{math.NaN(), "mm/s", 0, false},
		{math.Inf(1), "in/s", 0, false},
		{1, "m/s", 0, false},
	}
	for _, tc := range tests {
		got, ok := Normalise(tc.raw, tc.unit)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("Normalise(%v, %q) = %v, %v; want %v, %v", tc.raw, tc.unit, got, ok, tc.want, tc.ok)
		}
	}
	// Against the float64 product: never more than one ulp apart.
	for _, raw := range []float64{0.3, 0.7, 1.1, 3.3, 0.28, 1e-10, 12345.6789, 1e300} {
		got, _ := Normalise(raw, "in/s")
		prod := raw * 25.4
		if math.Abs(got-prod) > 2*(math.Nextafter(prod, math.Inf(1))-prod) {
			t.Errorf("Normalise(%v) = %v, float product %v", raw, got, prod)
		}
	}
}

// nearlyEqual reports a and b within a few ulps (Normalise rounds once from
// the decimal form, the float product rounds twice).
func nearlyEqual(a, b float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= 4e-16*math.Max(math.Abs(a), math.Abs(b)) || math.Abs(a-b) < 1e-320
}
