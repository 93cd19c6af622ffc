package alerts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The hand-written Encode must write exactly the bytes the former
// encoding/json implementation wrote: replays and the determinism tests
// compare alert bytes with those of earlier runs. encodeReference below is
// that former implementation, kept as the oracle (with evidence_omitted, a
// member added since, as encoding/json would write it).

// wireAlert is the JSON value, members in their documented order.
type wireAlert struct {
	AlertID     string         `json:"alert_id"`
	Revision    int            `json:"revision"`
	Status      string         `json:"status"`
	MergedInto  string         `json:"merged_into,omitempty"`
	RuleID      string         `json:"rule_id"`
	RuleVersion int            `json:"rule_version"`
	MachineID   string         `json:"machine_id"`
	Start       string         `json:"start"`
	End         string         `json:"end"`
	Count       int            `json:"count"`
	KeyField    string         `json:"key_field,omitempty"`
	Key         string         `json:"key,omitempty"`
	Aggregate   *wireAggregate `json:"aggregate,omitempty"`
	Evidence    []wireEvidence `json:"evidence"`
	Omitted     int            `json:"evidence_omitted,omitempty"`
	Late        bool           `json:"late"`
	Watermark   *string        `json:"watermark"`
	Reason      string         `json:"reason"`
}

// wireAggregate is the optional aggregate member of aggregating rules.
type wireAggregate struct {
	Fn    string  `json:"fn"`
	Value float64 `json:"value"`
}

type wireEvidence struct {
	EventID   string  `json:"event_id"`
	SensorID  string  `json:"sensor_id"`
	TS        string  `json:"ts"`
	Value     float64 `json:"value"`
	Partition int32   `json:"partition"`
	Offset    int64   `json:"offset"`
}

// encodeReference is the encoding/json Encode that the hand-written encoder
// replaced.
func encodeReference(a Alert) ([]byte, error) {
	if err := a.check(); err != nil {
		return nil, fmt.Errorf("alerts: encode %s rev %d: %w", a.AlertID, a.Revision, err)
	}
	w := wireAlert{
		AlertID:     a.AlertID,
		Revision:    a.Revision,
		Status:      a.Status,
		MergedInto:  a.MergedInto,
		RuleID:      a.RuleID,
		RuleVersion: a.RuleVersion,
		MachineID:   a.MachineID,
		Start:       FormatTime(a.Start),
		End:         FormatTime(a.End),
		Count:       a.Count,
		KeyField:    a.KeyField,
		Key:         a.Key,
		Evidence:    make([]wireEvidence, len(a.Evidence)),
		Omitted:     a.EvidenceOmitted,
		Late:        a.Late,
		Reason:      a.Reason,
	}
	for i, e := range a.Evidence {
		w.Evidence[i] = wireEvidence{
			EventID: e.EventID, SensorID: e.SensorID, TS: FormatTime(e.TS),
			Value: e.Value, Partition: e.Partition, Offset: e.Offset,
		}
	}
	if a.Aggregate != nil {
		w.Aggregate = &wireAggregate{Fn: a.Aggregate.Fn, Value: a.Aggregate.Value}
	}
	if a.Watermark != WatermarkNone {
		s := FormatTime(a.Watermark)
		w.Watermark = &s
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&w); err != nil {
		return nil, fmt.Errorf("alerts: encode %s rev %d: %w", a.AlertID, a.Revision, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// compareWithReference fails t unless Encode and encodeReference agree on a:
// the same bytes, or the same error.
func compareWithReference(t *testing.T, a Alert) {
	t.Helper()
	want, wantErr := encodeReference(a)
	got, gotErr := a.Encode()
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("Encode error %v, reference error %v", gotErr, wantErr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Encode differs from the encoding/json reference\n got: %q\nwant: %q", got, want)
	}
	if gotErr == nil {
		checkSizeHint(t, a, got)
	}
}

// checkSizeHint fails t if sizeHint is not an upper bound of the output
// length apart from the growth caused by escapes (its promise: one
// allocation when no string needs an escape).
func checkSizeHint(t *testing.T, a Alert, got []byte) {
	t.Helper()
	growth := 0
	for _, s := range alertStrings(a) {
		growth += len(appendString(nil, s)) - len(s) - 2
	}
	if hint := a.sizeHint(); len(got) > hint+growth {
		t.Fatalf("output %d bytes, sizeHint %d + escape growth %d", len(got), hint, growth)
	}
}

// alertStrings lists every string field of a that Encode writes.
func alertStrings(a Alert) []string {
	s := []string{a.AlertID, a.Status, a.MergedInto, a.RuleID, a.MachineID, a.KeyField, a.Key, a.Reason}
	if a.Aggregate != nil {
		s = append(s, a.Aggregate.Fn)
	}
	for _, e := range a.Evidence {
		s = append(s, e.EventID, e.SensorID)
	}
	return s
}

// trickyStrings exercise every escaping rule of encoding/json.
var trickyStrings = []string{
	"",
	`quote " and backslash \ and slash /`,
	"controls \x00\x01\b\t\n\v\f\r\x0e\x1f\x7f end",
	"html <script>&amp;</script> >= 7.1",
	"non-ASCII: Grüße, 振動, 🚨, \u00a0",
	"separators \u2028 and \u2029 and \u2027 \u202a",
	"invalid UTF-8: \xff \xc3\x28 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 tail\xe2",
	"\ufffd literal replacement char",
	"\x80",
	`\u2028 already escaped text`,
}

// trickyFloats exercise every number-formatting rule of encoding/json.
var trickyFloats = []float64{
	0, math.Copysign(0, -1), 1, -1, 7.62, 7.619999999999999, 25.4, 12,
	1e-6, 9.999999999999999e-7, 1e-7, -1e-7, 1.5e-10, 1e-100, 1e-300,
	1e20, 1e21, -1e21, 9.999999999999999e20, 1.2345e22, 1e100,
	123456789.125, 0.1, 0.30000000000000004, 1.0000000000000002e-6,
	5e-324, -5e-324, math.SmallestNonzeroFloat64, math.MaxFloat64, -math.MaxFloat64,
	math.MaxInt64, math.MinInt64, 1 << 53, (1 << 53) + 2,
}

// refusedAlerts are alerts check refuses; both encoders must report the
// same error.
func refusedAlerts() []Alert {
	mods := []func(*Alert){
		func(a *Alert) { a.Status = "firing" },
		func(a *Alert) { a.Status = StatusMerged },
		func(a *Alert) { a.MergedInto = "x" },
		func(a *Alert) { a.AlertID = "" },
		func(a *Alert) { a.Revision = -1 },
		func(a *Alert) { a.Count = -1 },
		func(a *Alert) { a.EvidenceOmitted = -1 },
		func(a *Alert) { a.KeyField = "sensor_id" },
		func(a *Alert) { a.Aggregate = &Aggregate{Value: 1} },
		func(a *Alert) { a.Aggregate = &Aggregate{Fn: "sum", Value: math.NaN()} },
		func(a *Alert) { a.Start = minWireMs - 1 },
		func(a *Alert) { a.End = maxWireMs + 1 },
		func(a *Alert) { a.Watermark = math.MaxInt64 },
		func(a *Alert) { a.Evidence[1].TS = math.MinInt64 + 1 },
		func(a *Alert) { a.Evidence[2].Value = math.Inf(1) },
	}
	var out []Alert
	for _, mod := range mods {
		a := sample(StatusOpen)
		mod(&a)
		out = append(out, a)
	}
	return out
}

// handPickedAlerts cover every optional member (present and absent), the
// nil and empty evidence lists, and every escaping and number rule.
func handPickedAlerts() []Alert {
	var out []Alert
	for _, st := range []string{StatusOpen, StatusUpdated, StatusMerged, StatusClosed} {
		out = append(out, sample(st))
	}
	full := benchAlert()
	out = append(out, full)

	noOptional := sample(StatusOpen)
	noOptional.Watermark = WatermarkNone
	noOptional.Evidence = nil
	out = append(out, noOptional)
	emptyEvidence := noOptional
	emptyEvidence.Evidence = []Evidence{}
	out = append(out, emptyEvidence)

	omitted := full
	omitted.Evidence, omitted.EvidenceOmitted = full.Evidence[:3], 7
	out = append(out, omitted)
	allOmitted := noOptional
	allOmitted.EvidenceOmitted = math.MaxInt
	out = append(out, allOmitted)

	extremes := full
	extremes.Revision, extremes.RuleVersion, extremes.Count = math.MaxInt, math.MinInt, math.MaxInt
	extremes.Start, extremes.End, extremes.Watermark = minWireMs, maxWireMs, -1
	extremes.Evidence = []Evidence{
		{EventID: "a", SensorID: "b", TS: minWireMs, Value: -0.5, Partition: math.MinInt32, Offset: math.MinInt64},
		{EventID: "c", SensorID: "d", TS: maxWireMs, Value: 0.5, Partition: math.MaxInt32, Offset: math.MaxInt64},
	}
	out = append(out, extremes)

	for _, s := range trickyStrings {
		a := full
		a.AlertID, a.RuleID, a.MachineID, a.Reason = "id"+s, s, s, s
		a.KeyField, a.Key = "k"+s, "v"+s
		a.Aggregate = &Aggregate{Fn: "f" + s, Value: 1}
		a.Evidence = []Evidence{{EventID: s, SensorID: s, TS: 0, Value: 1}}
		out = append(out, a)
		a.Status, a.MergedInto = StatusMerged, "m"+s
		out = append(out, a)
	}
	for _, v := range trickyFloats {
		a := full
		a.Aggregate = &Aggregate{Fn: "max", Value: v}
		a.Evidence = []Evidence{{EventID: "e", SensorID: "s", TS: 1, Value: v}, {EventID: "e", SensorID: "s", TS: 2, Value: -v}}
		out = append(out, a)
	}
	return out
}

func TestEncodeMatchesReference(t *testing.T) {
	for i, a := range append(handPickedAlerts(), refusedAlerts()...) {
		t.Run(strconv.Itoa(i), func(t *testing.T) { compareWithReference(t, a) })
	}
}

// TestEncodeMatchesReferenceFloats compares random float64 bit patterns
// (every exponent, so both number forms and the cut-offs between them).
func TestEncodeMatchesReferenceFloats(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a := sample(StatusOpen)
	a.Evidence = a.Evidence[:1]
	for range 20_000 {
		v := math.Float64frombits(rng.Uint64())
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		a.Evidence[0].Value = v
		a.Aggregate = &Aggregate{Fn: "avg", Value: v / 3}
		compareWithReference(t, a)
	}
}

// TestCivilDate compares civilDate with the time package on every day of
// years 0000..9999.
func TestCivilDate(t *testing.T) {
	day := time.Date(0, time.January, 1, 0, 0, 0, 0, time.UTC)
	for days := int64(0); minWireMs+days*msPerDay <= maxWireMs; days++ {
		y, m, d := civilDate(days)
		wy, wm, wd := day.Date()
		if y != int64(wy) || m != int64(wm) || d != int64(wd) {
			t.Fatalf("civilDate(%d) = %04d-%02d-%02d, want %s", days, y, m, d, day.Format(time.DateOnly))
		}
		day = day.Add(24 * time.Hour)
	}
}

// TestAppendTime compares appendTime with FormatTime at the range ends,
// around midnights and on random instants (TestCivilDate covers every date).
func TestAppendTime(t *testing.T) {
	check := func(ms int64) {
		t.Helper()
		if got, want := string(appendTime(nil, ms)), FormatTime(ms); got != want {
			t.Fatalf("appendTime(%d) = %s, want FormatTime's %s", ms, got, want)
		}
	}
	for _, ms := range []int64{minWireMs, minWireMs + 1, maxWireMs, maxWireMs - 1, -1, 0, 1, -msPerDay,
		951_782_400_000 - 1, 951_782_400_000, 951_868_800_000} { // 2000-02-29, 2000-03-01
		check(ms)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50_000 {
		midnight := minWireMs + rng.Int64N((maxWireMs-minWireMs+1)/msPerDay)*msPerDay
		check(midnight)
		check(midnight + rng.Int64N(msPerDay))
		check(midnight + msPerDay - 1)
	}
}

// TestEncodeAllocs pins the point of the hand-written encoder: one
// allocation (the output) for an alert without escapes.
func TestEncodeAllocs(t *testing.T) {
	a := benchAlert()
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := a.Encode(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("Encode made %v allocations, want 1", allocs)
	}
}

// fuzzStatuses are picked by the fuzzed selector; the last slot uses the
// fuzzed status string itself (almost always refused).
var fuzzStatuses = []string{StatusOpen, StatusUpdated, StatusMerged, StatusClosed}

// foldTime maps any int64 into the representable range, so that most fuzzed
// alerts pass check and reach the encoders.
func foldTime(ms int64) int64 {
	const span = maxWireMs - minWireMs + 1
	if ms >= minWireMs && ms <= maxWireMs {
		return ms
	}
	r := ms % span
	if r < 0 {
		r += span
	}
	return minWireMs + r
}

func FuzzEncode(f *testing.F) {
	f.Add("fcbb6ffe4c70e9d58d7550aa08757d6c", uint8(0), "", "vibration-high", 0, 1, 3, "M-7", "", "",
		"", 0.0, int64(1767348000000), int64(1767348090000), int64(1767348060000), false,
		"e-1", "S-1", 7.5, int32(0), int64(12), uint8(3), false, "3 events (>= 7.1 mm/s)")
	f.Add("id", uint8(2), "other\u2028", "r\"\\", 7, -2, 0, "M <&>", "sensor_id", "S\t1",
		"max", -0.0, int64(math.MinInt64), int64(-1), int64(math.MinInt64), true,
		"e\x00\x1f", "s\xff", 1e-7, int32(-5), int64(-1), uint8(12), true, "reason\n\r\b\f")
	f.Add("x", uint8(3), "", "", 1<<40, 1<<40, 1<<40, "Grüße", "k", "v",
		"sum", 123456789.125, int64(minWireMs), int64(maxWireMs), int64(minWireMs), false,
		"\u2029", "🚨", 1e21, int32(math.MaxInt32), int64(math.MaxInt64), uint8(1), false, "")
	f.Add("x", uint8(4), "", "", 0, 0, 0, "", "", "",
		"", math.MaxFloat64, int64(0), int64(0), int64(0), false,
		"", "", 5e-324, int32(0), int64(0), uint8(0), true, "")
	f.Add("x", uint8(1), "", "", 1, 1, 1, "", "", "",
		"avg", math.NaN(), int64(0), int64(0), int64(0), false,
		"", "", math.Inf(-1), int32(0), int64(0), uint8(2), false, "")
	f.Fuzz(func(t *testing.T, id string, statusSel uint8, merged, rule string, rev, ver, count int,
		machine, keyField, key, fn string, aggValue float64, start, end, wm int64, late bool,
		eventID, sensorID string, value float64, partition int32, offset int64, nEvidence uint8,
		nilEvidence bool, reason string) {
		a := Alert{
			AlertID: id, Revision: rev, RuleID: rule, RuleVersion: ver, MachineID: machine,
			Start: foldTime(start), End: foldTime(end), Count: count, KeyField: keyField, Key: key,
			Late: late, Watermark: WatermarkNone, Reason: reason,
		}
		if int(statusSel) < len(fuzzStatuses) {
			a.Status = fuzzStatuses[statusSel]
			if a.Status == StatusMerged {
				a.MergedInto = merged
			}
		} else {
			a.Status, a.MergedInto = merged, merged // raw: exercises the refusals
		}
		if wm != math.MinInt64 {
			a.Watermark = foldTime(wm)
		}
		if fn != "" {
			a.Aggregate = &Aggregate{Fn: fn, Value: aggValue}
		}
		if n := int(nEvidence % 16); n > 0 || !nilEvidence {
			a.Evidence = make([]Evidence, n)
		}
		a.EvidenceOmitted = int(nEvidence/16) * count
		for i := range a.Evidence {
			v := value
			if i%2 == 1 {
				v = -value / float64(i)
			}
			a.Evidence[i] = Evidence{
				EventID: eventID + strings.Repeat("\u2028", i%3), SensorID: sensorID[:len(sensorID)*(i%2)],
				TS: foldTime(a.Start + int64(i)*offset), Value: v, Partition: partition + int32(i), Offset: offset,
			}
		}
		compareWithReference(t, a)
	})
}

// benchAlert is an alert of an aggregating sensor-keyed rule with 10
// evidence events: the processor's typical large alert.
func benchAlert() Alert {
	a := sample(StatusUpdated)
	a.KeyField, a.Key = "sensor_id", "S-1"
	a.Aggregate = &Aggregate{Fn: "avg", Value: 9.123456789}
	a.Evidence = a.Evidence[:0]
	for i := range 10 {
		a.Evidence = append(a.Evidence, Evidence{
			EventID:   fmt.Sprintf("0b8e2f52-5b7e-4c36-9d4e-6f1c2a7d9e%02d", i),
			SensorID:  "S-" + strconv.Itoa(i%3),
			TS:        a.Start + int64(i)*1_250,
			Value:     7.1 + float64(i)*0.37,
			Partition: 3,
			Offset:    1_000_000 + int64(i)*7,
		})
	}
	a.Count = len(a.Evidence)
	return a
}

// BenchmarkEncodeEvidence10 compares the encoding/json reference with the
// hand-written Encode on benchAlert. (BenchmarkEncode in alerts_test.go
// measures the smaller three-event sample.)
func BenchmarkEncodeEvidence10(b *testing.B) {
	a := benchAlert()
	for _, bm := range []struct {
		name   string
		encode func(Alert) ([]byte, error)
	}{
		{"reference", encodeReference},
		{"append", Alert.Encode},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bm.encode(a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// jsonString is s as encoding/json writes it without HTML escaping: the
// oracle of appendString.
func jsonString(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// stringPieces are what randomString strings together: plain ASCII, every
// byte appendString escapes or inspects, valid multi-byte runes (U+2028 and
// U+2029 among them) and invalid or truncated UTF-8.
var stringPieces = []string{
	"a", "Z", "0", " ", "-", "~", "\x7f", "<", ">", "&", "/",
	"\"", "\\", "\x00", "\x01", "\b", "\t", "\n", "\v", "\f", "\r", "\x1b", "\x1f",
	"é", "振", "🚨", "\u2028", "\u2029", "\u2027", "\u202a", "\ufffd",
	"\x80", "\xbf", "\xc0", "\xc3", "\xe2\x80", "\xe2\x82", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf0\x9f\x9a", "\xff",
}

// randomString is a string of up to 40 pieces, mostly plain ASCII so that
// escapes fall at every offset of the 8-byte words appendString scans.
func randomString(rng *rand.Rand) string {
	var b strings.Builder
	for range rng.IntN(41) {
		if rng.IntN(4) > 0 {
			b.WriteByte(byte(0x20 + rng.IntN(0x5f)))
			continue
		}
		b.WriteString(stringPieces[rng.IntN(len(stringPieces))])
	}
	return b.String()
}

// TestAppendStringMatchesReference compares appendString with encoding/json
// on random strings, on every byte value alone and on long plain runs with
// one special byte at each offset.
func TestAppendStringMatchesReference(t *testing.T) {
	check := func(s string) {
		t.Helper()
		if got, want := string(appendString(nil, s)), jsonString(t, s); got != want {
			t.Fatalf("appendString(%q) = %s, encoding/json %s", s, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 100_000 {
		check(randomString(rng))
	}
	for c := range 256 {
		check(string([]byte{byte(c)}))
		for _, at := range []int{0, 1, 7, 8, 9, 15, 16, 23} {
			s := []byte(strings.Repeat("abcdefgh", 3))
			s[at] = byte(c)
			check(string(s))
		}
	}
	for _, piece := range stringPieces {
		for at := range 17 {
			check(strings.Repeat("x", at) + piece + strings.Repeat("y", 17-at))
		}
	}
}

// jsonFloat is f as encoding/json writes it: the oracle of appendFloat.
func jsonFloat(t *testing.T, f float64) string {
	t.Helper()
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAppendFloatShortDecimals compares appendFloat with encoding/json on
// the numbers appendShortDecimal formats itself, n/10^k for integers n of
// every length and k up to two beyond maxShortFraction, on their float64
// neighbours (which have no short form) and on sensor-like values: three
// decimals, converted from in/s, averaged.
func TestAppendFloatShortDecimals(t *testing.T) {
	check := func(f float64) {
		t.Helper()
		if got, want := string(appendFloat(nil, f)), jsonFloat(t, f); got != want {
			t.Fatalf("appendFloat(%b) = %s, encoding/json %s", f, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 200_000 {
		n := float64(rng.Int64N(1 << rng.IntN(54)))
		k := rng.IntN(maxShortFraction + 3)
		f := n / math.Pow10(k)
		if rng.IntN(2) == 0 {
			f = -f
		}
		check(f)
		check(math.Nextafter(f, math.Inf(1)))
		check(math.Nextafter(f, math.Inf(-1)))
		v := math.Round(rng.Float64()*20_000) / 1000
		check(v)
		check(math.Round(v/25.4*1000) / 1000 * 25.4)
		check((v + 7.1 + 12.345) / 3)
	}
	for _, f := range []float64{1e-6, 1e-5, 0.1, 0.2, 0.3, 0.7, 1 << 50, 1<<50 - 1, 1<<50 - 0.5, 1<<49 + 0.25,
		(1<<50 - 1) / 1e8, 999_999.999_999_99, 7.62, 7.619999999999999, 25.4, 0.000_001_5, 0.000_000_99} {
		check(f)
		check(-f)
	}
}

// BenchmarkAppendFloat is appendFloat on sensor-like values: three
// decimals (the fast path), converted from in/s and averaged (mostly
// strconv's).
func BenchmarkAppendFloat(b *testing.B) {
	for _, bm := range []struct {
		name string
		v    float64
	}{{"3-decimals", 7.125}, {"integer", 12}, {"converted", 0.289 * 25.4}, {"average", 9.123456789}} {
		b.Run(bm.name, func(b *testing.B) {
			buf := make([]byte, 0, 32)
			for b.Loop() {
				buf = appendFloat(buf[:0], bm.v)
			}
		})
	}
}

// BenchmarkAppendTime is one wire time, as Encode writes one per evidence
// event.
func BenchmarkAppendTime(b *testing.B) {
	buf := make([]byte, 0, 32)
	ms := int64(1_767_348_045_500) // 2026-01-02T10:00:45.500Z
	for b.Loop() {
		buf = appendTime(buf[:0], ms)
	}
}

// TestAppendEncode checks that AppendEncode appends Encode's bytes to any
// buffer (empty, with room or without, with content) and on a refused alert
// returns the buffer unchanged with Encode's error.
func TestAppendEncode(t *testing.T) {
	for i, a := range append(handPickedAlerts(), refusedAlerts()...) {
		want, wantErr := a.Encode()
		for _, buf := range [][]byte{nil, make([]byte, 0, 4096), []byte("key:"), make([]byte, 3, 8)} {
			prefix := string(buf)
			got, err := a.AppendEncode(buf)
			if fmt.Sprint(err) != fmt.Sprint(wantErr) {
				t.Fatalf("alert %d: AppendEncode error %v, Encode error %v", i, err, wantErr)
			}
			if err != nil {
				want = nil
			}
			if string(got) != prefix+string(want) {
				t.Fatalf("alert %d: AppendEncode(%q) = %q, want the prefix then %q", i, prefix, got, want)
			}
		}
	}
}
