package alerts

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func ms(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

const what = "high-vibration events (>= 7.1 mm/s)"

// sample returns a revision with the given status, as the vibration rule
// would emit it.
func sample(status string) Alert {
	id := ID("vibration-high", 1, "M-7", "e-1")
	a := Alert{
		AlertID:     id,
		Revision:    0,
		Status:      status,
		RuleID:      "vibration-high",
		RuleVersion: 1,
		MachineID:   "M-7",
		Start:       ms("2026-01-02T10:00:00Z"),
		End:         ms("2026-01-02T10:01:30Z"),
		Count:       3,
		Evidence: []Evidence{
			{EventID: "e-1", SensorID: "S-1", TS: ms("2026-01-02T10:00:00Z"), Value: 7.5, Partition: 0, Offset: 12},
			{EventID: "e-2", SensorID: "S-2", TS: ms("2026-01-02T10:00:45.5Z"), Value: 7.62, Partition: 0, Offset: 15},
			{EventID: "e-3", SensorID: "S-1", TS: ms("2026-01-02T10:01:30Z"), Value: 12, Partition: 0, Offset: 19},
		},
		Watermark: ms("2026-01-02T10:01:00Z"),
	}
	switch status {
	case StatusUpdated: // a late event revealed an earlier firing set
		a.Revision, a.Late, a.Count = 1, true, 4
		a.Start = ms("2026-01-02T09:59:50.001Z")
		a.Evidence = append([]Evidence{{EventID: "e-0", SensorID: "S-3", TS: a.Start, Value: 25.4, Partition: 0, Offset: 20}}, a.Evidence[:2]...)
	case StatusMerged:
		a.Revision = 2
		a.MergedInto = ID("vibration-high", 1, "M-7", "e-0")
	case StatusClosed:
		a.Revision, a.Count = 3, 5
		a.End = ms("2026-01-02T10:03:00Z")
		a.Watermark = ms("2026-01-02T10:15:00.123Z")
	}
	a.Reason = ReasonSentence(a.Status, a.Count, what, a.MachineID, a.Start, a.End, a.MergedInto)
	return a
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\n got: %s\nwant: %s", name, got, want)
	}
}

func TestEncodeGolden(t *testing.T) {
	noWM := sample(StatusOpen)
	noWM.Watermark = WatermarkNone
	noWM.Evidence = noWM.Evidence[:1]
	noWM.MachineID = `M "7" <line\2>`
	tests := []struct {
		file  string
		alert Alert
	}{
		{"alert_open.json", sample(StatusOpen)},
		{"alert_updated_late.json", sample(StatusUpdated)},
		{"alert_merged.json", sample(StatusMerged)},
		{"alert_closed.json", sample(StatusClosed)},
		{"alert_no_watermark_escapes.json", noWM},
		{"alert_evidence_omitted.json", omittedSample()},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			b, err := tc.alert.Encode()
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.file, append(b, '\n'))
			if !json.Valid(b) || bytes.ContainsAny(b, "\n") {
				t.Fatalf("not one line of JSON: %s", b)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.alert) {
				t.Fatalf("Decode(Encode(a))\n got %+v\nwant %+v", got, tc.alert)
			}
		})
	}
}

// omittedSample is a closed revision whose evidence was cut to its first
// event, two more left out.
func omittedSample() Alert {
	a := sample(StatusClosed)
	a.Evidence, a.EvidenceOmitted = a.Evidence[:1], 2
	return a
}

func TestEncodeMemberOrder(t *testing.T) {
	b, err := sample(StatusMerged).Encode()
	if err != nil {
		t.Fatal(err)
	}
	keys := memberNames(t, b)
	want := []string{"alert_id", "revision", "status", "merged_into", "rule_id", "rule_version", "machine_id",
		"start", "end", "count", "evidence", "late", "watermark", "reason"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("members %v\nwant %v", keys, want)
	}
	if !strings.Contains(string(b), `"evidence":[{"event_id":"e-1","sensor_id":"S-1","ts":"2026-01-02T10:00:00.000Z","value":7.5,"partition":0,"offset":12},`) {
		t.Fatalf("evidence member order or format: %s", b)
	}
	// evidence_omitted follows evidence, only when not 0.
	b, err = omittedSample().Encode()
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"alert_id", "revision", "status", "rule_id", "rule_version", "machine_id",
		"start", "end", "count", "evidence", "evidence_omitted", "late", "watermark", "reason"}
	if keys := memberNames(t, b); !reflect.DeepEqual(keys, want) {
		t.Fatalf("members %v\nwant %v", keys, want)
	}
	if !strings.Contains(string(b), `"offset":12}],"evidence_omitted":2,"late":`) {
		t.Fatalf("evidence_omitted format: %s", b)
	}
}

// memberNames lists the top-level member names of the JSON object b.
func memberNames(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	var keys []string
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			continue
		case json.Delim('}'), json.Delim(']'):
			depth--
			continue
		}
		if s, ok := tok.(string); ok && depth == 1 { // a member name: skip its value
			keys = append(keys, s)
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				t.Fatal(err)
			}
		}
	}
	return keys
}

func TestEncodeValues(t *testing.T) {
	a := sample(StatusOpen)
	for _, tc := range []struct {
		v    float64
		want string
	}{{7.62, `"value":7.62,`}, {25.4, `"value":25.4,`}, {7.619999999999999, `"value":7.619999999999999,`},
		{1e21, `"value":1e+21,`}, {1e-7, `"value":1e-7,`}, {0, `"value":0,`}, {-3, `"value":-3,`}, {12, `"value":12,`}} {
		a.Evidence = []Evidence{{EventID: "e", SensorID: "s", TS: 0, Value: tc.v}}
		b, err := a.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("value %v encoded as %s, want %s", tc.v, b, tc.want)
		}
		got, err := Decode(b)
		if err != nil || got.Evidence[0].Value != tc.v {
			t.Errorf("value %v decoded as %v, %v", tc.v, got.Evidence, err)
		}
	}
	a = sample(StatusOpen)
	a.Evidence = nil
	b, err := a.Encode()
	if err != nil || !strings.Contains(string(b), `"evidence":[]`) {
		t.Fatalf("nil evidence: %s, %v", b, err)
	}
	if got, err := Decode(b); err != nil || got.Evidence != nil {
		t.Fatalf("Decode: %+v, %v", got.Evidence, err)
	}
	a.Watermark = WatermarkNone
	b, _ = a.Encode()
	if !strings.Contains(string(b), `"watermark":null`) || strings.Contains(string(b), "merged_into") {
		t.Fatalf("watermark none / merged_into: %s", b)
	}
}

func TestEncodeRejects(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Alert)
		want string
	}{
		{"unknown status", func(a *Alert) { a.Status = "firing" }, `status "firing"`},
		{"merged without merged_into", func(a *Alert) { a.Status = StatusMerged }, "without merged_into"},
		{"merged_into without merged", func(a *Alert) { a.MergedInto = "x" }, `merged_into "x"`},
		{"empty id", func(a *Alert) { a.AlertID = "" }, "empty alert_id"},
		{"negative revision", func(a *Alert) { a.Revision = -1 }, "revision -1"},
		{"negative count", func(a *Alert) { a.Count = -1 }, "count -1"},
		{"negative evidence_omitted", func(a *Alert) { a.EvidenceOmitted = -1 }, "evidence_omitted -1"},
		{"year 10000", func(a *Alert) { a.End = maxWireMs + 1 }, "end"},
		{"watermark before year 0", func(a *Alert) { a.Watermark = minWireMs - 1 }, "watermark"},
		{"evidence ts", func(a *Alert) { a.Evidence[1].TS = math.MaxInt64 }, "evidence[1].ts"},
		{"NaN value", func(a *Alert) { a.Evidence[2].Value = math.NaN() }, "evidence[2].value"},
		{"Inf value", func(a *Alert) { a.Evidence[0].Value = math.Inf(-1) }, "evidence[0].value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := sample(StatusOpen)
			tc.mod(&a)
			b, err := a.Encode()
			if err == nil {
				t.Fatalf("encoded %s", b)
			}
			if !strings.HasPrefix(err.Error(), "alerts: encode") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
	// Times at both ends of the representable range are fine.
	a := sample(StatusOpen)
	a.Start, a.End, a.Watermark = minWireMs, maxWireMs, -30_000
	b, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(b); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("round trip at the range ends: %+v, %v", got, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	good, err := sample(StatusOpen).Encode()
	if err != nil {
		t.Fatal(err)
	}
	s := string(good)
	tests := []struct {
		name, in string
	}{
		{"not json", "nope"},
		{"array", "[]"},
		{"trailing data", s + " {}"},
		{"unknown member", strings.Replace(s, `"late":false`, `"late":false,"extra":1`, 1)},
		{"missing member", strings.Replace(s, `"count":3,`, ``, 1)},
		{"null member", strings.Replace(s, `"count":3`, `"count":null`, 1)},
		{"bad status", strings.Replace(s, `"status":"open"`, `"status":"opened"`, 1)},
		{"merged_into with open", strings.Replace(s, `"status":"open"`, `"status":"open","merged_into":"x"`, 1)},
		{"time without millis", strings.Replace(s, `"start":"2026-01-02T10:00:00.000Z"`, `"start":"2026-01-02T10:00:00Z"`, 1)},
		{"time with offset", strings.Replace(s, `"end":"2026-01-02T10:01:30.000Z"`, `"end":"2026-01-02T11:01:30.000+01:00"`, 1)},
		{"watermark number", strings.Replace(s, `"watermark":"2026-01-02T10:01:00.000Z"`, `"watermark":5`, 1)},
		{"evidence member missing", strings.Replace(s, `"sensor_id":"S-2",`, ``, 1)},
		{"evidence bad ts", strings.Replace(s, `"ts":"2026-01-02T10:00:45.500Z"`, `"ts":"yesterday"`, 1)},
		{"evidence_omitted 0", strings.Replace(s, `],"late"`, `],"evidence_omitted":0,"late"`, 1)},
		{"evidence_omitted negative", strings.Replace(s, `],"late"`, `],"evidence_omitted":-2,"late"`, 1)},
		{"evidence_omitted not an integer", strings.Replace(s, `],"late"`, `],"evidence_omitted":"2","late"`, 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in == s {
				t.Fatal("test input unchanged")
			}
			if a, err := Decode([]byte(tc.in)); err == nil {
				t.Fatalf("decoded %+v", a)
			} else if !strings.HasPrefix(err.Error(), "alerts: decode") {
				t.Fatalf("error without package prefix: %v", err)
			}
		})
	}
}

func TestID(t *testing.T) {
	// Known answer, computed independently (Python hashlib, struct.pack(">Q", len)).
	const want = "fcbb6ffe4c70e9d58d7550aa08757d6c"
	if got := ID("vibration-high", 1, "M-7", "e-1"); got != want {
		t.Fatalf("ID = %s, want %s", got, want)
	}
	if got := ID("vibration-high", 2, "M-7", "e-1"); got != "5ca5f4e49930458fc6e5d3716acc34b7" {
		t.Fatalf("ID v2 = %s", got)
	}
	if got := ID("", 0, "", ""); got != "d8e4482b9cd43492e9b24299b7f4b69b" {
		t.Fatalf("ID of empty fields = %s", got)
	}
	type in struct {
		rule string
		ver  int
		key  string
		ev   string
	}
	// Tuples whose plain concatenations collide must not.
	inputs := []in{
		{"vibration-high", 1, "M-7", "e-1"},
		{"vibration-high", 2, "M-7", "e-1"},
		{"vibration-high", 1, "M-8", "e-1"},
		{"vibration-high", 1, "M-7", "e-2"},
		{"vibration-high1", 1, "M-7", "e-1"},
		{"a", 11, "", "x"},
		{"a1", 1, "", "x"},
		{"a", 1, "1", "x"},
		{"a", 1, "", "1x"},
		{"a", 1, "1x", ""},
		{"a", -1, "", "x"},
		{"", 1, "a", "x"},
	}
	seen := map[string]in{}
	for _, x := range inputs {
		id := ID(x.rule, x.ver, x.key, x.ev)
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("ID%v = %q, want 32 lower-case hex digits", x, id)
		}
		if prev, dup := seen[id]; dup {
			t.Fatalf("ID%v == ID%v", x, prev)
		}
		seen[id] = x
		if again := ID(x.rule, x.ver, x.key, x.ev); again != id {
			t.Fatalf("ID%v not stable", x)
		}
	}
}

func TestFormatTime(t *testing.T) {
	tests := []struct {
		ms   int64
		want string
	}{
		{0, "1970-01-01T00:00:00.000Z"},
		{1, "1970-01-01T00:00:00.001Z"},
		{999, "1970-01-01T00:00:00.999Z"},
		{1000, "1970-01-01T00:00:01.000Z"},
		{-1, "1969-12-31T23:59:59.999Z"},
		{-1000, "1969-12-31T23:59:59.000Z"},
		{-1001, "1969-12-31T23:59:58.999Z"},
		{ms("2026-01-02T03:04:05Z"), "2026-01-02T03:04:05.000Z"},
		{ms("2024-02-29T23:59:59.999Z"), "2024-02-29T23:59:59.999Z"},
		{minWireMs, "0000-01-01T00:00:00.000Z"},
		{maxWireMs, "9999-12-31T23:59:59.999Z"},
	}
	for _, tc := range tests {
		if got := FormatTime(tc.ms); got != tc.want {
			t.Errorf("FormatTime(%d) = %s, want %s", tc.ms, got, tc.want)
		}
		if back, err := parseTime(tc.want); err != nil || back != tc.ms {
			t.Errorf("parseTime(%s) = %d, %v; want %d", tc.want, back, err, tc.ms)
		}
	}
	for _, x := range []int64{math.MinInt64, math.MaxInt64, minWireMs - 1, maxWireMs + 1} {
		_ = FormatTime(x) // must not panic
	}
}

func TestReasonSentence(t *testing.T) {
	start, end := ms("2026-01-02T10:00:00Z"), ms("2026-01-02T10:01:30Z")
	tests := []struct {
		status, merged string
		start, end     int64
		want           string
	}{
		{StatusOpen, "", start, end, "3 high-vibration events (>= 7.1 mm/s) on machine M-7 within 1m30s, from 2026-01-02T10:00:00.000Z to 10:01:30.000Z"},
		{StatusUpdated, "", start, end, "3 high-vibration events (>= 7.1 mm/s) on machine M-7 within 1m30s, from 2026-01-02T10:00:00.000Z to 10:01:30.000Z (revised)"},
		{StatusMerged, "abc", start, end, "3 high-vibration events (>= 7.1 mm/s) on machine M-7 within 1m30s, from 2026-01-02T10:00:00.000Z to 10:01:30.000Z, merged into alert abc"},
		{StatusClosed, "", start, end, "3 high-vibration events (>= 7.1 mm/s) on machine M-7 within 1m30s, from 2026-01-02T10:00:00.000Z to 10:01:30.000Z, closed"},
		{StatusOpen, "", ms("2026-01-02T23:59:00Z"), ms("2026-01-03T00:00:30.25Z"), "3 high-vibration events (>= 7.1 mm/s) on machine M-7 within 1m30.25s, from 2026-01-02T23:59:00.000Z to 2026-01-03T00:00:30.250Z"},
		{StatusOpen, "", start, start, "3 high-vibration events (>= 7.1 mm/s) on machine M-7 within 0s, from 2026-01-02T10:00:00.000Z to 10:00:00.000Z"},
		{StatusOpen, "", math.MinInt64, math.MaxInt64, "3 high-vibration events (>= 7.1 mm/s) on machine M-7 within -1ms, from "},
	}
	for _, tc := range tests {
		got := ReasonSentence(tc.status, 3, what, "M-7", tc.start, tc.end, tc.merged)
		if tc.start == math.MinInt64 {
			if !strings.HasPrefix(got, tc.want) { // overflowing span: only must not panic
				t.Errorf("got %q", got)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("ReasonSentence(%s)\n got %q\nwant %q", tc.status, got, tc.want)
		}
	}
}

func TestHumanGolden(t *testing.T) {
	var b strings.Builder
	for _, st := range []string{StatusOpen, StatusUpdated, StatusMerged, StatusClosed} {
		b.WriteString(Human(sample(st)))
		b.WriteByte('\n')
	}
	a := sample(StatusOpen)
	a.Watermark = WatermarkNone
	a.Evidence = a.Evidence[:1]
	b.WriteString(Human(a))
	b.WriteString(Human(omittedSample()))
	golden(t, "human.txt", []byte(b.String()))
}

func FuzzRoundTrip(f *testing.F) {
	f.Add("id", 0, "open", "", "M-7", int64(0), int64(120_000), int64(math.MinInt64), "e-1", 7.5, int64(12), true, "reason <&>", 0)
	f.Add("id", 2, "merged", "other", "M \"7\"\n", int64(-5), int64(5), int64(-30_000), "e\u2028", -0.0, int64(-1), false, "", 999)
	f.Add("id", 1, "closed", "", "M", int64(0), int64(0), int64(0), "e", 1.0, int64(0), false, "r", -1)
	f.Fuzz(func(t *testing.T, id string, rev int, status, merged, machine string, start, end, wm int64, ev string, v float64, off int64, late bool, reason string, omitted int) {
		a := Alert{
			AlertID: id, Revision: rev, Status: status, MergedInto: merged, RuleID: "r", RuleVersion: rev - 1,
			MachineID: machine, Start: start, End: end, Count: rev, Late: late, Watermark: wm, Reason: reason,
			Evidence:        []Evidence{{EventID: ev, SensorID: machine, TS: start, Value: v, Partition: int32(rev), Offset: off}},
			EvidenceOmitted: omitted,
		}
		b, err := a.Encode()
		if err != nil {
			if a.check() == nil {
				t.Fatalf("Encode failed on a valid alert: %v", err)
			}
			return
		}
		if !json.Valid(b) || bytes.IndexByte(b, '\n') >= 0 {
			t.Fatalf("not one line of JSON: %q", b)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(Encode(a)): %v\n%s", err, b)
		}
		if lenient, err := DecodeLenient(b); err != nil || !reflect.DeepEqual(lenient, got) {
			t.Fatalf("DecodeLenient(Encode(a)) = %+v, %v; Decode gave %+v", lenient, err, got)
		}
		for _, s := range []string{id, merged, machine, ev, reason} {
			if !utf8.ValidString(s) {
				return // encoding/json writes invalid UTF-8 as U+FFFD: no round trip
			}
		}
		if !reflect.DeepEqual(got, a) {
			t.Fatalf("Decode(Encode(a))\n got %+v\nwant %+v", got, a)
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	a := sample(StatusOpen)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = ID("vibration-high", 1, "M-7", "0b8e2f52-5b7e-4c36-9d4e-6f1c2a7d9e10")
	}
}
