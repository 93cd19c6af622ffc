package event

import (
	"encoding/json"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzCheck feeds arbitrary records to Check. It must never panic; an
// accepted record must satisfy every invariant of Event and be a JSON object
// by encoding/json's judgement too; a rejected one must carry a safe detail,
// and decode_error exactly when encoding/json cannot read an object (the
// seed corpus is in testdata/fuzz/FuzzCheck).
func FuzzCheck(f *testing.F) {
	f.Add([]byte("M-7"), record(nil), recordTS)
	f.Add([]byte(nil), record(o{"ts": `1767323045678`, "unit": `"in/s"`, "clock": `"unsynced"`}), recordTS)
	f.Add([]byte("M-8"), record(o{"seq": `1e2`}), int64(-1))
	f.Add([]byte(nil), []byte(`[1,2]`), int64(0))
	v := NewValidator(nil, Options{MaxBytes: 4096})
	f.Fuzz(func(t *testing.T, key, value []byte, recordTSMs int64) {
		ev, err := v.Check(key, value, recordTSMs)
		var obj map[string]json.RawMessage
		jsonErr := json.Unmarshal(value, &obj)
		if obj == nil && jsonErr == nil {
			jsonErr = strconv.ErrSyntax // "null"
		}
		if err != nil {
			checkDetailSafe(t, err)
			if ev != (Event{}) {
				t.Fatalf("rejected with a non-zero event: %+v", ev)
			}
			if err.Reason == ReasonDecodeError && jsonErr == nil && len(value) <= 4096 && validUTF8(value) {
				t.Fatalf("decode_error (%s) for a JSON object encoding/json reads", err.Detail)
			}
			// Over MaxBytes a value is too_large without being parsed,
			// whatever it holds.
			if err.Reason == ReasonTooLarge && len(value) <= 4096 {
				t.Fatalf("too_large for a value of %d bytes (MaxBytes 4096)", len(value))
			}
			if err.Reason != ReasonDecodeError && err.Reason != ReasonTooLarge && jsonErr != nil {
				t.Fatalf("%s for a value encoding/json rejects (%v)", err.Reason, jsonErr)
			}
			return
		}
		if jsonErr != nil {
			t.Fatalf("accepted a value encoding/json rejects: %v", jsonErr)
		}
		checkInvariants(t, v, key, recordTSMs, ev)
	})
}

func validUTF8(b []byte) bool { return invalidUTF8At(b) < 0 }

// FuzzParseNumber checks the exact-integer judgement against math/big.
func FuzzParseNumber(f *testing.F) {
	for _, s := range []string{"0", "-0", "1", "1.0", "1e2", "1.5", "15e-1", "9223372036854775807", "9223372036854775808",
		"-9223372036854775808", "-9223372036854775809", "1e19", "0.00001e5", "1.0000000000000000001", "1e999999999", "123.456e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) || len(s) > 400 {
			return
		}
		var n json.Number
		if json.Unmarshal([]byte(s), &n) != nil {
			return // not a number
		}
		num, i, isInt := parseNumber([]byte(s))
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			return // exponent too large for big.Rat; nothing to compare
		}
		wantInt := r.IsInt() && r.Num().IsInt64()
		if isInt != wantInt || isInt && i != r.Num().Int64() {
			t.Fatalf("parseNumber(%q) = %d, %v; want %v, %v", s, i, isInt, r.Num(), wantInt)
		}
		want, _ := strconv.ParseFloat(s, 64)
		if num != want && !(math.IsNaN(num) && math.IsNaN(want)) {
			t.Fatalf("parseNumber(%q) float = %v, want %v", s, num, want)
		}
	})
}

// FuzzParseRFC3339 checks the timestamp parser against time.Parse wherever
// both should agree.
func FuzzParseRFC3339(f *testing.F) {
	for _, s := range []string{"2026-01-02T03:04:05Z", "2026-01-02T03:04:05.678+02:00", "2026-01-02T03:04:05.1234567891-00:30",
		"2026-01-02T03:04:05", "2024-02-29T23:59:59.999Z", "0000-01-01T00:00:00+23:59", "9999-12-31T23:59:59.999-23:59"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ms, problem := parseRFC3339([]byte(s))
		tt, err := time.Parse(time.RFC3339Nano, s)
		if problem == "" {
			if err != nil {
				// time.Parse refuses more than 9 fraction digits and lower-case t/z.
				return
			}
			if want := tt.UnixMilli(); ms != want {
				t.Fatalf("parseRFC3339(%q) = %d, time.Parse says %d", s, ms, want)
			}
		}
	})
}

// TestFuzzCheckSeeds keeps the checked-in seed corpus honest: files named
// valid_* must be accepted, every other seed rejected.
func TestFuzzCheckSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzCheck")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	v := NewValidator(nil, Options{MaxBytes: 4096})
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 4 || lines[0] != "go test fuzz v1" {
			t.Fatalf("%s: not a FuzzCheck seed", e.Name())
		}
		arg := func(line, prefix string) string {
			s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(line, prefix+"("), ")"))
			if err != nil {
				t.Fatalf("%s: %q: %v", e.Name(), line, err)
			}
			return s
		}
		key, value := arg(lines[1], "[]byte"), arg(lines[2], "[]byte")
		ts, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(lines[3], "int64("), ")"), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		_, cerr := v.Check([]byte(key), []byte(value), ts)
		if valid := strings.HasPrefix(e.Name(), "valid_"); valid != (cerr == nil) {
			t.Errorf("%s: Check error = %v", e.Name(), cerr)
		}
	}
}
