package avro

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vibeline/processor/internal/event"
)

// writerOdd exercises every Avro type in fields the reader ignores: a
// recursive record, enum, fixed, bytes, boolean, float, an array of empty
// records (items of zero size) and a map of unions.
const writerOdd = `{"type":"record","name":"Odd","fields":[
	{"name":"chain","type":{"type":"record","name":"Link","fields":[{"name":"next","type":["null","Link"]}]}},
	{"name":"event_id","type":"string"},
	{"name":"machine_id","type":"string"},
	{"name":"sensor_id","type":"string"},
	{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B","C"]}},
	{"name":"ts","type":["long","string"]},
	{"name":"seq","type":"int"},
	{"name":"hash","type":{"type":"fixed","name":"H","size":4}},
	{"name":"value","type":"float"},
	{"name":"blob","type":"bytes"},
	{"name":"unit","type":"string"},
	{"name":"ok","type":"boolean"},
	{"name":"empties","type":{"type":"array","items":{"type":"record","name":"Empty","fields":[]}}},
	{"name":"schema_version","type":"int"},
	{"name":"attrs","type":{"type":"map","values":["null","string","double"]}},
	{"name":"quality","type":"string"},
	{"name":"clock","type":["null","string"]}]}`

// fuzzSchemas are the writer schemas of FuzzDecode, by id; other ids are
// not found.
func fuzzDecoder(t testing.TB) *Decoder {
	src := mapSource{}
	for id, s := range map[uint32]string{1: writerV1, 2: writerV2, 3: readerSchema(), 4: writerOdd, 5: writerNoSeq} {
		src[id] = mustParse(t, s)
	}
	d, err := NewDecoder(src, DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// FuzzDecode feeds arbitrary values to the Avro decoder and the validator
// behind it (seed corpus: testdata/fuzz/FuzzDecode, written by
// TestFuzzDecodeSeeds -update). Decode must never panic, not even inside
// hamba (its recover path must never be taken), must fail only with the
// reasons decode_error or schema_unknown, must agree with hamba (a body
// checkBody accepts, hamba decodes), and must be deterministic.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s.value)
	}
	d := fuzzDecoder(f)
	v := event.NewValidator(d, event.Options{MaxBytes: 1 << 16})
	f.Fuzz(func(t *testing.T, value []byte) {
		fields, err := d.Decode(value)
		if err != nil {
			var e *event.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *event.Error", err)
			}
			if e.Reason != event.ReasonDecodeError && e.Reason != event.ReasonSchemaUnknown {
				t.Fatalf("reason %s (%s)", e.Reason, e.Detail)
			}
			if strings.Contains(e.Detail, "Avro decoder failed") {
				t.Fatalf("hamba panicked: %s", e.Detail)
			}
			if strings.Contains(e.Detail, "does not decode") {
				t.Fatalf("checkBody accepted a body hamba rejects: %s", e.Detail)
			}
			if !printable(e.Detail) {
				t.Fatalf("detail not printable: %q", e.Detail)
			}
		}
		again, err2 := d.Decode(value)
		if (err == nil) != (err2 == nil) || err == nil && fmt.Sprintf("%#v", fields) != fmt.Sprintf("%#v", again) {
			t.Fatalf("not deterministic: %v / %v", err, err2)
		}
		ev, cerr := v.Check(nil, value, recordTS)
		if cerr == nil && (ev.EventID == "" || math.IsNaN(ev.Value) || math.IsInf(ev.Value, 0)) {
			t.Fatalf("accepted an invalid event %+v", ev)
		}
	})
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

type fuzzSeed struct {
	name  string // valid_*: accepted by the validator; else the reason
	value []byte
}

func fuzzSeeds(t testing.TB) []fuzzSeed {
	good := encode(t, writerV1, 1, event1(nil))
	odd := map[string]any{
		"chain":    map[string]any{"next": map[string]any{"Link": map[string]any{"next": nil}}},
		"event_id": "e-9", "machine_id": "M-1", "sensor_id": "S-1", "kind": "B",
		"ts": map[string]any{"string": "2026-01-02T03:04:05.678+01:00"}, "seq": 3, "hash": [4]byte{1, 2, 3, 4},
		"value": float32(0.25), "blob": []byte{0, 255}, "unit": "in/s", "ok": true, "empties": []any{map[string]any{}, map[string]any{}},
		"schema_version": 1, "attrs": map[string]any{"a": nil, "b": map[string]any{"string": "x"}, "c": map[string]any{"double": 1.5}},
		"quality": "bad", "clock": map[string]any{"string": "unsynced"},
	}
	return []fuzzSeed{
		{"valid_v1", good},
		{"valid_v2", encode(t, writerV2, 2, event1(map[string]any{"gateway": "gw", "tags": []any{"x"}, "extra": map[string]any{"k": 2.5}}))},
		{"valid_reader", encode(t, readerSchema(), 3, event1(map[string]any{"ts": map[string]any{"string": "2026-01-02T03:04:05Z"}, "schema_version": int64(1), "clock": map[string]any{"string": "synced"}}))},
		{"valid_odd", encode(t, writerOdd, 4, odd)},
		{"invalid_field_nan", encode(t, writerV1, 1, event1(map[string]any{"value": math.NaN()}))},
		{"invalid_field_unit", encode(t, writerV1, 1, event1(map[string]any{"unit": "m/s"}))},
		{"schema_unknown_version", encode(t, writerV1, 1, event1(map[string]any{"schema_version": 9}))},
		{"schema_unknown_id", encode(t, writerV1, 77, event1(nil))},
		{"schema_unknown_incompatible", encode(t, writerNoSeq, 5, event1(map[string]any{"seq": absent{}}))},
		{"decode_error_json", []byte(`{"event_id":"e-1","schema_version":1}`)},
		{"decode_error_truncated", good[:len(good)-4]},
		{"decode_error_trailing", append(append([]byte(nil), good...), 1)},
		{"decode_error_header", []byte{0, 0, 0}},
		{"decode_error_long_varint", append(AppendHeader(nil, 1), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
		// writerOdd up to its array of empty records (19 bytes of zeros:
		// every field zero or empty), which claims 70000 items of zero size.
		{"decode_error_empties", binary.AppendUvarint(append(AppendHeader(nil, 4), make([]byte, 19)...), 2*70000)},
		{"valid_empties", oddWithEmpties(1000)},
	}
}

// oddWithEmpties is a valid writerOdd value whose array holds n empty
// records (zero bytes each), written by hand.
func oddWithEmpties(n int) []byte {
	v := AppendHeader(nil, 4)
	v = append(v, 0)                                    // chain.next: null
	v = append(v, 2, 'e', 2, 'M', 2, 'S')               // event_id, machine_id, sensor_id
	v = append(v, 0)                                    // kind A
	v = append(v, 0, 0)                                 // ts: long 0
	v = append(v, 0)                                    // seq 0
	v = append(v, 0, 0, 0, 0)                           // hash
	v = append(v, 0, 0, 0, 0)                           // value 0.0
	v = append(v, 0)                                    // blob
	v = append(v, 8, 'm', 'm', '/', 's')                // unit
	v = append(v, 0)                                    // ok false
	v = append(binary.AppendUvarint(v, uint64(2*n)), 0) // empties: one block of n, end
	v = append(v, 2)                                    // schema_version 1
	v = append(v, 0)                                    // attrs {}
	v = append(v, 8, 'g', 'o', 'o', 'd')                // quality
	return append(v, 0)                                 // clock null
}

// TestFuzzDecodeSeeds checks the seed corpus: each file decodes with the
// outcome its name says. With -update it rewrites the corpus from
// fuzzSeeds.
func TestFuzzDecodeSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, s := range fuzzSeeds(t) {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(s.value)))
			if err := os.WriteFile(filepath.Join(dir, s.name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < len(fuzzSeeds(t)) {
		t.Fatalf("%d seeds in %s, want at least %d (go test -run TestFuzzDecodeSeeds -update)", len(entries), dir, len(fuzzSeeds(t)))
	}
	v := event.NewValidator(fuzzDecoder(t), event.Options{})
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" {
			t.Fatalf("%s: not a FuzzDecode seed", e.Name())
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		_, cerr := v.Check(nil, []byte(s), recordTS)
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "valid_"):
			if cerr != nil {
				t.Errorf("%s: %s: %s", name, cerr.Reason, cerr.Detail)
			}
		case cerr == nil:
			t.Errorf("%s: accepted", name)
		case !strings.HasPrefix(name, string(cerr.Reason)+"_"):
			t.Errorf("%s: %s: %s", name, cerr.Reason, cerr.Detail)
		}
	}
}
