package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// ref decodes the primitives as the packages did before they shared this
// one (uvarintLen-based minimality): the behaviour the Reader must keep.
type ref struct{ b []byte }

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func (d *ref) uvarint() (uint64, bool) {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n != uvarintLen(v) {
		return 0, false
	}
	d.b = d.b[n:]
	return v, true
}

func (d *ref) varint() (int64, bool) {
	v, n := binary.Varint(d.b)
	if n <= 0 || n != uvarintLen(uint64(v<<1)^uint64(v>>63)) {
		return 0, false
	}
	d.b = d.b[n:]
	return v, true
}

// read performs primitive op on d and returns its value as bits (the
// string's bytes as s) and whether it succeeded.
func (d *ref) read(op byte) (v uint64, s string, ok bool) {
	switch op % 7 {
	case 0:
		if len(d.b) == 0 {
			return 0, "", false
		}
		v, d.b = uint64(d.b[0]), d.b[1:]
		return v, "", true
	case 1:
		v, ok := d.uvarint()
		return v, "", ok
	case 2:
		x, ok := d.varint()
		return uint64(x), "", ok
	case 3:
		x, ok := d.varint()
		if !ok || x < math.MinInt32 || x > math.MaxInt32 {
			return 0, "", false
		}
		return uint64(x), "", true
	case 4:
		if len(d.b) < 8 {
			return 0, "", false
		}
		v, d.b = binary.LittleEndian.Uint64(d.b), d.b[8:]
		return v, "", true
	case 5:
		n, ok := d.uvarint()
		if !ok || n > uint64(len(d.b)) {
			return 0, "", false
		}
		s, d.b = string(d.b[:n]), d.b[n:]
		return 0, s, true
	default:
		n, ok := d.uvarint()
		if !ok || n > uint64(len(d.b)/max(int(op>>3)%16, 1)) {
			return 0, "", false
		}
		return n, "", true
	}
}

func readOp(r *Reader, op byte) (uint64, string) {
	switch op % 7 {
	case 0:
		return uint64(r.Byte("u8")), ""
	case 1:
		return r.Uvarint("uvarint"), ""
	case 2:
		return uint64(r.Varint("varint")), ""
	case 3:
		return uint64(r.Int32("int32")), ""
	case 4:
		return math.Float64bits(r.Float64("f64le")), ""
	case 5:
		return 0, r.String("string")
	default:
		return uint64(r.Count("count", int(op>>3)%16)), ""
	}
}

func appendOp(b []byte, op byte, v uint64, s string) []byte {
	switch op % 7 {
	case 0:
		return append(b, byte(v))
	case 1, 6:
		return AppendUvarint(b, v)
	case 2, 3:
		return AppendVarint(b, int64(v))
	case 4:
		return AppendFloat64(b, math.Float64frombits(v))
	default:
		return AppendString(b, s)
	}
}

// FuzzReader: a sequence of reads (one primitive per byte of ops) over
// arbitrary data never panics, accepts and refuses exactly what the
// packages' own decoders did, returns what they returned, consumes
// nothing once failed, and what it accepts re-encodes to the same bytes.
func FuzzReader(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6}, AppendUvarint(AppendString(AppendFloat64(AppendVarint(AppendVarint(AppendUvarint([]byte{1}, 300), -5), 7), 2.5), "id"), 0))
	f.Add([]byte{1}, []byte{0x80, 0x00})
	f.Add([]byte{2}, []byte{0x81, 0x00})
	f.Add([]byte{5}, []byte{0x05, 'a'})
	f.Add([]byte{6 + 7*8}, []byte{0x02, 0, 0, 0})
	f.Fuzz(func(t *testing.T, ops, data []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		r := NewReader(data, errTest)
		d := ref{b: data}
		var re []byte
		failed := false
		for i, op := range ops {
			before := r.Len()
			v, s := readOp(&r, op)
			if failed {
				if v != 0 || s != "" || r.Len() != before {
					t.Fatalf("op %d (%d) after an error: %d %q, consumed %d bytes", i, op%7, v, s, before-r.Len())
				}
				continue
			}
			wv, ws, ok := d.read(op)
			if ok != (r.Err() == nil) {
				t.Fatalf("op %d (%d) at byte %d of %x: reference ok %v, Reader error %v", i, op%7, len(data)-before, data, ok, r.Err())
			}
			if !ok {
				failed = true
				if !errors.Is(r.Err(), errTest) || v != 0 || s != "" {
					t.Fatalf("op %d: failed read returned %d %q, error %v", i, v, s, r.Err())
				}
				continue
			}
			if v != wv || s != ws || r.Len() != len(d.b) {
				t.Fatalf("op %d (%d): got %d %q with %d left, reference %d %q with %d left", i, op%7, v, s, r.Len(), wv, ws, len(d.b))
			}
			re = appendOp(re, op, v, s)
		}
		if !failed && !bytes.Equal(re, data[:r.Offset()]) {
			t.Fatalf("read %x, re-encodes as %x", data[:r.Offset()], re)
		}
		if err := r.Finish(); (err == nil) != (!failed && r.Len() == 0) {
			t.Fatalf("Finish = %v with %d bytes left, failed %v", err, r.Len(), failed)
		}
	})
}
