package deliver

import (
	"bytes"
	"strconv"
	"testing"
)

func headerValue(hs []Header, key string) (string, bool) {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// A dead letter whose revision is near the producer's record limit is
// written without its value (then key, then original headers), saying so,
// instead of failing its produce on every retry and stalling the lane.
func TestDeadLetterFitsTheRecordLimit(t *testing.T) {
	big := bytes.Repeat([]byte("x"), MaxDeadLetterBytes)
	cases := []struct {
		name    string
		rec     Record
		omitted string
	}{
		{"small", Record{Key: []byte("M-1"), Value: []byte(`{"alert_id":"a"}`)}, ""},
		{"value", Record{Key: []byte("M-1"), Value: big[:MaxDeadLetterBytes-100]}, "value"},
		{"value,key", Record{Key: big[:MaxDeadLetterBytes-50], Value: []byte("v")}, "value,key"},
		{"value,key,headers", Record{Key: []byte("k"), Value: []byte("v"), Headers: []Header{{"h", big}}}, "value,key,headers"},
	}
	for _, c := range cases {
		dl := DeadLetter{Record: c.rec, Sink: "hook", Reason: ReasonRejected, Detail: "400 Bad Request", Attempts: 1, LastStatus: 400, IdempotencyKey: "a:1"}
		key, value, hs := dl.Fit()
		if size := len(key) + len(value) + headersBytes(hs); size > MaxDeadLetterBytes {
			t.Errorf("%s: %d bytes, want <= %d", c.name, size, MaxDeadLetterBytes)
		}
		got, ok := headerValue(hs, HeaderOmitted)
		if got != c.omitted || ok != (c.omitted != "") {
			t.Errorf("%s: %s = %q (present %v), want %q", c.name, HeaderOmitted, got, ok, c.omitted)
		}
		if c.omitted == "" {
			if !bytes.Equal(key, c.rec.Key) || !bytes.Equal(value, c.rec.Value) {
				t.Errorf("%s: key/value changed", c.name)
			}
			continue
		}
		orig, _ := headerValue(hs, HeaderOriginalBytes)
		if n, err := strconv.Atoi(orig); err != nil || n <= MaxDeadLetterBytes {
			t.Errorf("%s: %s = %q, want the full size", c.name, HeaderOriginalBytes, orig)
		}
		if r, _ := headerValue(hs, HeaderReason); r != ReasonRejected {
			t.Errorf("%s: %s = %q, the letter's own headers must stay", c.name, HeaderReason, r)
		}
	}
}
