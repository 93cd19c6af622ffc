package codec

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"
)

var errTest = errors.New("corrupt test state")

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAppendMatchesBinary: the append functions write what the packages
// wrote with encoding/binary before this package existed (their formats
// are specified in those terms).
func TestAppendMatchesBinary(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 300, 1<<32 - 1, 1<<63 - 1, 1 << 63, math.MaxUint64} {
		if got, want := AppendUvarint([]byte{9}, v), binary.AppendUvarint([]byte{9}, v); !bytes.Equal(got, want) {
			t.Errorf("AppendUvarint(%d) = %x, want %x", v, got, want)
		}
	}
	for _, v := range []int64{0, 1, -1, 63, -64, 64, -65, math.MaxInt64, math.MinInt64} {
		if got, want := AppendVarint(nil, v), binary.AppendVarint(nil, v); !bytes.Equal(got, want) {
			t.Errorf("AppendVarint(%d) = %x, want %x", v, got, want)
		}
	}
	if got := AppendString([]byte{1}, "abc"); !bytes.Equal(got, []byte{1, 3, 'a', 'b', 'c'}) {
		t.Errorf("AppendString = %x", got)
	}
	if got := AppendString(nil, strings.Repeat("x", 200))[:2]; !bytes.Equal(got, []byte{0xc8, 0x01}) {
		t.Errorf("AppendString of 200 bytes starts %x", got)
	}
	if got := AppendFloat64(nil, 1.5); !bytes.Equal(got, mustHex(t, "000000000000f83f")) {
		t.Errorf("AppendFloat64(1.5) = %x", got)
	}
}

func TestReadRoundTrip(t *testing.T) {
	var b []byte
	b = append(b, 7)
	b = AppendUvarint(b, math.MaxUint64)
	b = AppendVarint(b, math.MinInt64)
	b = AppendVarint(b, -3)
	b = AppendVarint(b, math.MinInt32)
	b = AppendString(b, "")
	b = AppendString(b, "héllo")
	b = AppendFloat64(b, math.Inf(-1))
	b = AppendFloat64(b, math.Copysign(0, -1))
	b = AppendUvarint(b, 2) // a count of two 1-byte elements
	b = append(b, 1, 2)
	r := NewReader(b, errTest)
	if v := r.Byte("u8"); v != 7 {
		t.Errorf("Byte = %d", v)
	}
	if v := r.Uvarint("u"); v != math.MaxUint64 {
		t.Errorf("Uvarint = %d", v)
	}
	if v := r.Varint("v"); v != math.MinInt64 {
		t.Errorf("Varint = %d", v)
	}
	if v := r.Varint("v"); v != -3 {
		t.Errorf("Varint = %d", v)
	}
	if v := r.Int32("i"); v != math.MinInt32 {
		t.Errorf("Int32 = %d", v)
	}
	if v := r.String("s"); v != "" {
		t.Errorf("String = %q", v)
	}
	if v := r.String("s"); v != "héllo" {
		t.Errorf("String = %q", v)
	}
	if v := r.Float64("f"); !math.IsInf(v, -1) {
		t.Errorf("Float64 = %v", v)
	}
	if v := r.Float64("f"); math.Float64bits(v) != 1<<63 {
		t.Errorf("Float64 = %v, want -0", v)
	}
	if n := r.Count("x", 1); n != 2 {
		t.Errorf("Count = %d", n)
	}
	if off := r.Offset(); off != len(b)-2 || r.Len() != 2 {
		t.Errorf("Offset %d, Len %d of %d", off, r.Len(), len(b))
	}
	r.Byte("x")
	r.Byte("x")
	if err := r.Finish(); err != nil {
		t.Fatal(err)
	}
}

// TestReaderErrors: what each primitive refuses, and the message, which
// names the field and where it started.
func TestReaderErrors(t *testing.T) {
	for _, tc := range []struct {
		name, hex string
		read      func(r *Reader)
		want      string
	}{
		{"byte truncated", "", func(r *Reader) { r.Byte("kind") }, "kind: truncated at byte 0"},
		{"uvarint empty", "", func(r *Reader) { r.Uvarint("delay") }, "delay: truncated uvarint at byte 0"},
		{"uvarint truncated", "0180", func(r *Reader) { r.Byte("v"); r.Uvarint("delay") }, "delay: truncated uvarint at byte 1"},
		{"uvarint non-minimal", "8000", func(r *Reader) { r.Uvarint("delay") }, "delay: non-minimal uvarint at byte 0"},
		{"uvarint non-minimal 10 bytes", "80808080808080808000", func(r *Reader) { r.Uvarint("delay") }, "delay: non-minimal uvarint at byte 0"},
		{"uvarint overflow", "ffffffffffffffffff02", func(r *Reader) { r.Uvarint("delay") }, "delay: uvarint overflows 64 bits at byte 0"},
		{"uvarint 11 bytes", "8080808080808080808001", func(r *Reader) { r.Uvarint("delay") }, "delay: uvarint overflows 64 bits at byte 0"},
		{"varint non-minimal", "8100", func(r *Reader) { r.Varint("ts") }, "ts: non-minimal varint at byte 0"},
		{"varint truncated", "ff", func(r *Reader) { r.Varint("ts") }, "ts: truncated varint at byte 0"},
		{"int32 range", "80808080 10", func(r *Reader) { r.Int32("partition") }, "partition 2147483648 out of int32 range"},
		{"int32 range low", "8180808010", func(r *Reader) { r.Int32("partition") }, "partition -2147483649 out of int32 range"},
		{"float truncated", "00000000000000", func(r *Reader) { r.Float64("value") }, "value: truncated f64le at byte 0"},
		{"string length", "8001", func(r *Reader) { r.String("event_id") }, "event_id length 128 exceeds the remaining 0 bytes"},
		{"string length non-minimal", "800061", func(r *Reader) { r.String("event_id") }, "event_id length: non-minimal uvarint at byte 0"},
		{"count empty", "", func(r *Reader) { r.Count("event", 13) }, "event count: truncated uvarint at byte 0"},
		{"count bound", "0200000000", func(r *Reader) { r.Count("event", 3) }, "event count 2 exceeds the remaining 4 bytes"},
		{"huge count", "ffffffffffffffffff01", func(r *Reader) { r.Count("id", 1) }, "id count 18446744073709551615 exceeds the remaining 0 bytes"},
		{"trailing", "0000", func(r *Reader) { r.Byte("x") }, "1 trailing bytes"},
		{"fail", "00", func(r *Reader) { r.Fail("entry %d not after entry %d", 2, 1) }, "entry 2 not after entry 1"},
		{"first error sticks", "", func(r *Reader) { r.Uvarint("a"); r.Byte("b"); r.Fail("c") }, "a: truncated uvarint at byte 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(mustHex(t, strings.ReplaceAll(tc.hex, " ", "")), errTest)
			tc.read(&r)
			err := r.Finish()
			if !errors.Is(err, errTest) {
				t.Fatalf("err = %v, want one wrapping %v", err, errTest)
			}
			if want := errTest.Error() + ": " + tc.want; err.Error() != want {
				t.Fatalf("err = %q, want %q", err, want)
			}
		})
	}
}

// TestBoundaries: the largest values of each length are accepted and the
// count bound is inclusive.
func TestBoundaries(t *testing.T) {
	for _, tc := range []struct {
		hex  string
		want uint64
	}{
		{"7f", 127}, {"8001", 128}, {"ff7f", 1<<14 - 1}, {"ffffffffffffffffff01", math.MaxUint64}, {"80808080808080808001", 1 << 63},
	} {
		r := NewReader(mustHex(t, tc.hex), nil)
		if v := r.Uvarint("v"); v != tc.want || r.Finish() != nil {
			t.Errorf("%s: %d, %v; want %d", tc.hex, v, r.Err(), tc.want)
		}
	}
	r := NewReader([]byte{3, 0, 0, 0, 0, 0, 0}, nil)
	if n := r.Count("x", 2); n != 3 || r.Err() != nil {
		t.Errorf("Count = %d, %v; want 3", n, r.Err())
	}
	r = NewReader([]byte{1, 0}, nil)
	if n := r.Count("x", 0); n != 1 || r.Err() != nil {
		t.Errorf("Count with minBytes 0 = %d, %v", n, r.Err())
	}
	r = NewReader([]byte{0x80, 0x80, 0x80, 0x80, 0x10}, nil)
	if v := r.Int32("x"); v != 0 || !errors.Is(r.Err(), ErrCorrupt) {
		t.Errorf("Int32 out of range = %d, %v", v, r.Err())
	}
	var z Reader // the zero Reader reads an empty input
	if z.Byte("x"); !errors.Is(z.Err(), ErrCorrupt) || z.Len() != 0 || z.Offset() != 0 {
		t.Errorf("zero Reader: %v", z.Err())
	}
}

// TestAfterErrorNoop: once an error is recorded, reads return zero values
// and consume nothing.
func TestAfterErrorNoop(t *testing.T) {
	r := NewReader([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, errTest)
	r.Fail("stop")
	if r.Byte("a") != 0 || r.Uvarint("b") != 0 || r.Varint("c") != 0 || r.Int32("d") != 0 ||
		r.Float64("e") != 0 || r.String("f") != "" || r.Count("g", 1) != 0 || r.Len() != 10 {
		t.Fatal("a read after an error returned something or consumed bytes")
	}
	if err := r.Finish(); err == nil || err.Error() != errTest.Error()+": stop" {
		t.Fatalf("Finish = %v", err)
	}
}

func TestReadAllocs(t *testing.T) {
	b := AppendVarint(AppendUvarint(AppendFloat64(nil, 2), 1<<40), -1<<40)
	allocs := testing.AllocsPerRun(100, func() {
		r := NewReader(b, errTest)
		r.Float64("f")
		r.Uvarint("u")
		r.Varint("v")
		if r.Finish() != nil {
			t.Fatal(r.Err())
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per successful read", allocs)
	}
}

func TestVersion(t *testing.T) {
	errVersion := errors.New("unknown test format version")
	for _, tc := range []struct {
		data    []byte
		want    string
		corrupt bool
	}{
		{nil, "corrupt test state: empty", true},
		{[]byte{2, 1}, "unknown test format version 2", false},
		{[]byte{0}, "unknown test format version 0", false},
		{[]byte{1, 7}, "", false},
	} {
		r := NewReader(tc.data, errTest)
		err := r.Version(1, errVersion)
		if tc.want == "" {
			if err != nil || r.Byte("next") != 7 || r.Finish() != nil {
				t.Errorf("%x: %v, then %v", tc.data, err, r.Err())
			}
			continue
		}
		if err == nil || err.Error() != tc.want || errors.Is(err, errTest) != tc.corrupt || errors.Is(err, errVersion) == tc.corrupt {
			t.Errorf("%x: %v, want %q (corrupt %v)", tc.data, err, tc.want, tc.corrupt)
		}
		if r.Len() != len(tc.data) || r.Err() != err {
			t.Errorf("%x: a refused version consumed bytes or was not recorded", tc.data)
		}
	}
	r := NewReader([]byte{1}, errTest)
	r.Fail("earlier")
	if err := r.Version(1, errors.New("x")); err == nil || err.Error() != "corrupt test state: earlier" || r.Len() != 1 {
		t.Errorf("Version after an error: %v", err)
	}
}
