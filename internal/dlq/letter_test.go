package dlq

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
)

func TestExcerpt(t *testing.T) {
	long := strings.Repeat("x", 500)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", `{"event_id":"e1"}`, `{"event_id":"e1"}`},
		{"empty", "", ""},
		{"controls", "a\nb\tc\x00d\x1b", `a\nb\tc\u0000d\u001b`},
		{"invalid utf-8", "ok\xff\xfe", `ok\xff\xfe`},
		{"backslash", `a\b`, `a\\b`},
		{"unicode kept", "Grüße ✓", "Grüße ✓"},
		{"long", long, strings.Repeat("x", 200) + "... (500 bytes)"},
		{"cut at a character", strings.Repeat("é", 150), strings.Repeat("é", 100) + "... (300 bytes)"},
		{"cut before an escape", strings.Repeat("x", 198) + "\x00yyy", strings.Repeat("x", 198) + "... (202 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Excerpt([]byte(tc.in), 200); got != tc.want {
				t.Fatalf("Excerpt(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// Whatever the bytes, an excerpt is valid, printable UTF-8 and bounded.
func TestExcerptAnyBytes(t *testing.T) {
	seed := []byte("\x00\x01\xff\xc3\xa9\xe2\x9c\x93a\n\\\u2028\U0001F600")
	for n := 0; n < 600; n += 7 {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed[(i*31+n)%len(seed)]
		}
		got := Excerpt(b, 200)
		body, _, _ := strings.Cut(got, "... (")
		if !utf8.ValidString(got) || len(body) > 200 {
			t.Fatalf("Excerpt of %d bytes: invalid or too long (%d): %q", n, len(body), got)
		}
		for _, r := range got {
			if !unicode.IsPrint(r) {
				t.Fatalf("Excerpt of %d bytes holds unprintable %U: %q", n, r, got)
			}
		}
	}
}

func TestParseAndReplayRecord(t *testing.T) {
	cfg := config.Default()
	// The original record carries its own header named source.topic: only
	// the processor's (the last) occurrence is dropped.
	l := letter{reason: "key_mismatch", partition: 2, offset: 41, key: "M-1",
		headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t1")}, {Key: "source.topic", Value: []byte("gateway-7")}}}
	rec := l.record(cfg)
	rec.Partition, rec.Offset, rec.Timestamp = 1, 17, time.UnixMilli(5000)
	got := Parse(rec)
	if got.Reason != "key_mismatch" || got.Detail != "detail of key_mismatch" || !got.SourceOK ||
		got.SourceTopic != cfg.Topics.Input || got.SourcePartition != 2 || got.SourceOffset != 41 ||
		!got.SourceTimestamp.Equal(l.sourceTime()) || got.Replayed() {
		t.Fatalf("Parse = %+v", got)
	}
	if len(got.Headers) != 2 || got.Headers[1].Key != "source.topic" || string(got.Headers[1].Value) != "gateway-7" {
		t.Fatalf("original headers = %v", got.Headers)
	}
	if got.Position() != cfg.Topics.DLQ+"/1@17" || got.Source() != cfg.Topics.Input+"/2@41" {
		t.Fatalf("positions %s %s", got.Position(), got.Source())
	}

	out := got.ReplayRecord("in")
	want := []string{"trace=t1", "source.topic=gateway-7",
		"dlq.original.topic=" + cfg.Topics.Input, "dlq.original.partition=2", "dlq.original.offset=41",
		"dlq.original.timestamp=" + itoa(l.sourceTime().UnixMilli()),
		"dlq.replayed=1", "dlq.replayed.from=" + cfg.Topics.DLQ + "/1@17"}
	if hs := headerList(out); strings.Join(hs, " ") != strings.Join(want, " ") {
		t.Fatalf("replay headers\n got %v\nwant %v", hs, want)
	}
	if out.Topic != "in" || out.Partition != 2 || string(out.Key) != "M-1" || string(out.Value) != string(l.value()) ||
		!out.Timestamp.Equal(l.sourceTime()) {
		t.Fatalf("replay record %+v", out)
	}

	// The replay fails again: the processor dead-letters it with its headers
	// (as pipeline does: the record's headers, then error.*, then source.*).
	// A second replay keeps the first origin and names the new dead letter.
	again := &kgo.Record{Topic: cfg.Topics.DLQ, Partition: 0, Offset: 99, Key: out.Key, Value: out.Value,
		Headers: append(slices.Clone(out.Headers), letter{reason: "key_mismatch", partition: 2, offset: 500}.record(cfg).Headers...)}
	g2 := Parse(again)
	if !g2.Replayed() || g2.ReplayedFrom != cfg.Topics.DLQ+"/1@17" || g2.SourceOffset != 500 {
		t.Fatalf("re-dead-lettered replay not recognised: %+v", g2)
	}
	hs := headerList(g2.ReplayRecord("in"))
	want2 := append(want[:len(want)-1:len(want)-1], "dlq.replayed.from="+cfg.Topics.DLQ+"/0@99")
	if strings.Join(hs, " ") != strings.Join(want2, " ") {
		t.Fatalf("second replay headers\n got %v\nwant %v", hs, want2)
	}

	// A record without the processor's headers.
	bare := Parse(&kgo.Record{Topic: "d", Value: []byte("x")})
	if bare.SourceOK || bare.Reason != "" || bare.Source() != "unknown" {
		t.Fatalf("bare = %+v", bare)
	}
	if r := bare.ReplayRecord("in"); r.Partition != -1 || len(r.Headers) != 2 {
		t.Fatalf("bare replay = %+v", r)
	}
}

// The processor's dlq.rules (after its error.reason) is parsed and is not
// an original header: a replay does not carry it back into the input. An
// original header of that name (before error.reason, on a letter of an
// older processor) is the record's own.
func TestParseRulesHeader(t *testing.T) {
	cfg := config.Default()
	l := letter{reason: "decode_error", partition: 1, offset: 3, rules: "machine-avg@3,vibration-high@2",
		headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t1")}}}
	got := Parse(l.record(cfg))
	if !got.HasRules || got.Rules != "machine-avg@3,vibration-high@2" || got.Reason != "decode_error" || !got.SourceOK {
		t.Fatalf("Parse = %+v", got)
	}
	if hs := headerList(&kgo.Record{Headers: got.Headers}); strings.Join(hs, " ") != "trace=t1" {
		t.Fatalf("original headers %v", hs)
	}
	for _, h := range got.ReplayRecord("in").Headers {
		if h.Key == pipeline.HeaderDeadLetterRules {
			t.Fatalf("the replay carries %s=%s", h.Key, h.Value)
		}
	}
	s := &Summary{ByReason: map[string]int{}, BySource: map[string]int{}, ByRule: map[string]int{}, samples: map[string][]Letter{}}
	s.add(got, 1)

	old := letter{reason: "decode_error", partition: 1, offset: 4,
		headers: []kgo.RecordHeader{{Key: pipeline.HeaderDeadLetterRules, Value: []byte("stale@1")}}}
	g2 := Parse(old.record(cfg))
	if g2.HasRules || g2.Rules != "" || len(g2.Headers) != 1 || string(g2.Headers[0].Value) != "stale@1" {
		t.Fatalf("a letter of an older processor: %+v", g2)
	}
	s.add(g2, 1)
	if fmt.Sprint(s.ByRule) != "map[(none):1 machine-avg@3:1 vibration-high@2:1]" {
		t.Fatalf("by rule version: %v", s.ByRule)
	}
	if r := rulesExcerpt(g2); r != noRules {
		t.Fatalf("sample rules of an older letter: %q", r)
	}
}

func TestSelection(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := Letter{Partition: 1, Offset: 10, Reason: "decode_error", SourceOK: true, SourcePartition: 2, SourceTimestamp: base}
	for _, tc := range []struct {
		name string
		s    Selection
		want bool
	}{
		{"zero", Selection{}, true},
		{"reason", Selection{Reasons: []string{"clock_ahead", "decode_error"}}, true},
		{"other reason", Selection{Reasons: []string{"clock_ahead"}}, false},
		{"source partition", Selection{SourcePartitions: []int32{2}}, true},
		{"other source partition", Selection{SourcePartitions: []int32{0}}, false},
		{"dlq partition", Selection{DLQPartitions: []int32{0}}, false},
		{"offsets", Selection{FromOffset: 10, ToOffset: 11}, true},
		{"offsets end exclusive", Selection{FromOffset: 5, ToOffset: 10}, false},
		{"time", Selection{From: base, To: base.Add(time.Millisecond)}, true},
		{"time end exclusive", Selection{To: base}, false},
	} {
		if err := tc.s.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := tc.s.Match(l); got != tc.want {
			t.Errorf("%s: Match = %v", tc.name, got)
		}
	}
	for _, bad := range []Selection{
		{Reasons: []string{"decode-error"}},
		{SourcePartitions: []int32{-1}},
		{FromOffset: 5, ToOffset: 5},
		{From: base, To: base},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

func headerList(r *kgo.Record) []string {
	var out []string
	for _, h := range r.Headers {
		out = append(out, h.Key+"="+string(h.Value))
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A letter the processor wrote without its value (too large) says so: Parse
// reads what was left out (the header is the processor's, not an original
// one), and such a letter is never replayed.
func TestParseOmittedLetter(t *testing.T) {
	cfg := config.Default()
	rec := letter{reason: "too_large", partition: 0, offset: 3, key: "M-1"}.record(cfg)
	rec.Value = nil
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: pipeline.HeaderOmitted, Value: []byte("value")},
		kgo.RecordHeader{Key: pipeline.HeaderOriginalBytes, Value: []byte("1048700")})
	got := Parse(rec)
	if got.Omitted != "value" || len(got.Headers) != 0 {
		t.Fatalf("Parse: omitted %q, original headers %v", got.Omitted, got.Headers)
	}
	if Parse(letter{reason: "too_large"}.record(cfg)).Omitted != "" {
		t.Fatal("a whole letter parsed as omitted")
	}
	// An original header of that name (before the processor's) is the
	// original's: the letter is whole.
	orig := letter{reason: "decode_error", key: "M-1",
		headers: []kgo.RecordHeader{{Key: pipeline.HeaderOmitted, Value: []byte("value")}}}.record(cfg)
	if got := Parse(orig); got.Omitted != "" || len(got.Headers) != 1 {
		t.Fatalf("an original dlq.omitted header: omitted %q, original headers %v", got.Omitted, got.Headers)
	}
}
