package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/rules"
)

// largestDeadLetterRules is a dlq.rules value of at most
// MaxDeadLetterRulesBytes, as long as rules with ids of the longest valid
// length make it.
func largestDeadLetterRules(t testing.TB) []byte {
	t.Helper()
	var rs []RuleVersion
	for i := 0; ; i++ {
		next := append(slices.Clone(rs), RuleVersion{ID: fmt.Sprintf("%0200d", i), Version: 1 << 62})
		if len(EncodeDeadLetterRules(next)) > MaxDeadLetterRulesBytes {
			break
		}
		rs = next
	}
	b := EncodeDeadLetterRules(rs)
	if len(b) < MaxDeadLetterRulesBytes-250 {
		t.Fatalf("largest dlq.rules value: %d bytes", len(b))
	}
	return b
}

// The header value: sorted by id, then numerically by version, each once;
// it parses back to the same list, and only its canonical spelling parses.
func TestDeadLetterRulesEncoding(t *testing.T) {
	in := []RuleVersion{{"machine-avg", 3}, {"vibration-high", 10}, {"vibration-high", 9}, {"a.b_c-D", 1}, {"machine-avg", 3}}
	got := EncodeDeadLetterRules(in)
	const want = "a.b_c-D@1,machine-avg@3,vibration-high@9,vibration-high@10"
	if string(got) != want {
		t.Fatalf("encoded %q, want %q", got, want)
	}
	back, err := ParseDeadLetterRules(got)
	if err != nil {
		t.Fatal(err)
	}
	if w := []RuleVersion{{"a.b_c-D", 1}, {"machine-avg", 3}, {"vibration-high", 9}, {"vibration-high", 10}}; !slices.Equal(back, w) {
		t.Fatalf("parsed %v, want %v", back, w)
	}
	if b := EncodeDeadLetterRules(nil); b == nil || len(b) != 0 {
		t.Fatalf("no rules: %q (nil %v), want an empty, non-nil value", b, b == nil)
	}
	if rs, err := ParseDeadLetterRules(nil); err != nil || len(rs) != 0 {
		t.Fatalf("empty value: %v %v", rs, err)
	}
	// The same list one way only: anything else is refused.
	for _, bad := range []string{
		"a", "a@", "@1", "a@0", "a@-1", "a@01", "a@+1", "a@1,", ",a@1", "a@1,,b@1",
		"b@1,a@1",      // not sorted
		"a@2,a@10,a@3", // versions sorted as text
		"a@1,a@1",      // twice
		"a b@1", "a@1@2", "a,b@1", strings.Repeat("x", 201) + "@1", "a@99999999999999999999",
	} {
		if rs, err := ParseDeadLetterRules([]byte(bad)); err == nil {
			t.Errorf("%q parsed as %v, want an error", bad, rs)
		}
	}
}

// Every valid rule id round-trips: the rule id charset has neither '@' nor
// ','. (Checked against the rules package's own validation.)
func TestDeadLetterRulesIDCharset(t *testing.T) {
	var ids []string
	for c := 0; c < 256; c++ {
		ids = append(ids, "x"+string(rune(c))+"y")
	}
	ids = append(ids, strings.Repeat("z", 200), strings.Repeat("z", 201), "")
	for _, id := range ids {
		r := rules.DefaultRule()
		r.ID = id
		ruleOK := !hasFieldError(r.Validate(), "id")
		if validRuleID([]byte(id)) != ruleOK {
			t.Errorf("id %q: valid here %v, for the rules package %v", id, validRuleID([]byte(id)), ruleOK)
		}
		if ruleOK {
			b := EncodeDeadLetterRules([]RuleVersion{{id, 7}, {"other", 1}})
			if rs, err := ParseDeadLetterRules(b); err != nil || len(rs) != 2 {
				t.Errorf("id %q: %q parses as %v, %v", id, b, rs, err)
			}
		}
	}
}

// DeadLetterRules names the rules of a source whose dead-letter topic is
// the one asked for, in place or repartitioned.
func TestDeadLetterRulesOfASource(t *testing.T) {
	mk := func(id string, version int, source, dlq string, key string) *rules.Compiled {
		r := config.Default().LegacyRule()
		r.ID, r.Version, r.Source, r.Key = id, version, source, key
		r.Outputs = rules.Outputs{Alerts: "alerts", DLQ: dlq, Late: "late"}
		c, err := rules.Compile(r)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	rs := []*rules.Compiled{
		mk("high", 2, "in", "in.dlq", "machine_id"),
		mk("avg", 3, "in", "in.dlq", "machine_id"),
		mk("peak", 1, "in", "in.dlq", "sensor_id"), // repartitioned: its letters of the source are these too
		mk("own", 1, "in", "own.dlq", "machine_id"),
		mk("elsewhere", 1, "other", "in.dlq", "machine_id"),
	}
	for _, tc := range []struct{ topic, dlq, want string }{
		{"in", "in.dlq", "avg@3,high@2,peak@1"},
		{"in", "own.dlq", "own@1"},
		{"other", "in.dlq", "elsewhere@1"},
		{"other", "own.dlq", ""},
	} {
		if got := DeadLetterRules(rs, tc.topic, tc.dlq); string(got) != tc.want || got == nil {
			t.Errorf("%s -> %s: %q, want %q", tc.topic, tc.dlq, got, tc.want)
		}
	}
}

// A letter's dlq.rules is set, not added: a record that carries one (a
// re-injected dead letter, by hand or by an older dlq replay) gets a
// letter naming only the rules that wrote it, found as the processor's by
// DeadLetterRulesHeader; nil writes the letter of older processors.
func TestDeadLetterRulesHeaderIsSet(t *testing.T) {
	verr := &event.Error{Reason: event.ReasonDecodeError, Detail: "not JSON"}
	in := Input{Topic: "in", Partition: 1, Offset: 5, TimestampMs: 9, Key: []byte("k"), Value: []byte("v"),
		Headers: []Header{{"trace", []byte("t1")}, {HeaderDeadLetterRules, []byte("old@1")}, {HeaderDeadLetterRules, []byte("older@1")}}}
	out := DeadLetterOutput(in, verr, []byte("new@2"))
	var keys []string
	for _, h := range out.Headers {
		keys = append(keys, h.Key+"="+string(h.Value))
	}
	want := []string{"trace=t1", "error.reason=decode_error", "error.detail=not JSON", "dlq.rules=new@2",
		"source.topic=in", "source.partition=1", "source.offset=5", "source.timestamp=9"}
	if !slices.Equal(keys, want) {
		t.Fatalf("headers %q, want %q", keys, want)
	}
	if v, ok := DeadLetterRulesHeader(out.Headers); !ok || string(v) != "new@2" {
		t.Fatalf("processor's dlq.rules: %q %v", v, ok)
	}
	if len(in.Headers) != 3 || string(in.Headers[1].Value) != "old@1" {
		t.Fatalf("the input's headers were changed: %v", in.Headers)
	}
	// Without a value: the letter of an older processor, originals kept;
	// the header found is none (it precedes error.reason: an original).
	legacy := DeadLetterOutput(in, verr, nil)
	if len(legacy.Headers) != 3+6 {
		t.Fatalf("legacy letter headers: %v", legacy.Headers)
	}
	if v, ok := DeadLetterRulesHeader(legacy.Headers); ok {
		t.Fatalf("legacy letter: dlq.rules %q found as the processor's", v)
	}
	// A Stage names its own rule unless told otherwise.
	st := stage(t)
	if v, _ := DeadLetterRulesHeader(st.DeadLetter(in, verr).Headers); string(v) != "vibration-high@1" {
		t.Fatalf("stage's own letter names %q", v)
	}
}

// The header counts towards the letter's size bound: a record that fits
// without it but not with it leaves out its value, and no letter exceeds
// MaxDeadLetterBytes with the largest header.
func TestDeadLetterRulesCountTowardsTheBound(t *testing.T) {
	named := largestDeadLetterRules(t)
	verr := &event.Error{Reason: event.ReasonTooLarge, Detail: "big"}
	in := Input{Topic: strings.Repeat("t", 249), Partition: 1, Offset: 1 << 62, TimestampMs: -1 << 62, Key: []byte("m-1")}
	without := DeadLetterOutput(in, verr, nil)
	room := MaxDeadLetterBytes - len(in.Key) - headersBytes(without.Headers)
	in.Value = bytes.Repeat([]byte("v"), room) // exactly fits without dlq.rules
	if out := DeadLetterOutput(in, verr, nil); out.Value == nil {
		t.Fatal("the fixture does not fit without the header")
	}
	out := DeadLetterOutput(in, verr, named)
	size := len(out.Key) + len(out.Value) + headersBytes(out.Headers)
	omitted, _ := lastHeaderOf(out.Headers, HeaderOmitted)
	if out.Value != nil || omitted != "value" || size > MaxDeadLetterBytes {
		t.Fatalf("with dlq.rules: %d value bytes, omitted %q, %d bytes", len(out.Value), omitted, size)
	}
	// The smallest letter (value, key and original headers left out) with
	// the largest header and the longest source topic is far below it.
	in.Headers = []Header{{"h", bytes.Repeat([]byte("h"), MaxDeadLetterBytes)}}
	out = DeadLetterOutput(in, verr, named)
	if size := len(out.Key) + len(out.Value) + headersBytes(out.Headers); size > 20_000 {
		t.Fatalf("smallest letter: %d bytes", size)
	}
}

func lastHeaderOf(hs []Header, key string) (string, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return string(hs[i].Value), true
		}
	}
	return "", false
}

// hasFieldError reports whether err (joined errors) holds a
// *rules.FieldError of key.
func hasFieldError(err error, key string) bool {
	var fe *rules.FieldError
	if errors.As(err, &fe) && fe.Key == key {
		return true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if hasFieldError(e, key) {
				return true
			}
		}
	}
	return false
}
