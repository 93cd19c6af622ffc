package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrCorrupt is what a Reader's errors wrap when NewReader was given no
// sentinel of the caller's own.
var ErrCorrupt = errors.New("corrupt encoding")

// AppendUvarint appends v as a uvarint.
func AppendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

// AppendVarint appends v as a (zig-zag) varint.
func AppendVarint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

// AppendString appends s as a string: its uvarint length, then its bytes.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendFloat64 appends f as an f64le: its IEEE-754 bits, little-endian.
func AppendFloat64(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// A Reader reads primitives from the front of a byte slice. The first
// error sticks: every later read returns the zero value and changes
// nothing. The zero Reader reads an empty input.
type Reader struct {
	b       []byte // what is left
	size    int    // the input's length, for offsets in messages
	err     error
	corrupt error
}

// NewReader returns a Reader of b whose errors wrap corrupt (ErrCorrupt if
// nil). It does not copy b; strings it reads are copies.
func NewReader(b []byte, corrupt error) Reader {
	if corrupt == nil {
		corrupt = ErrCorrupt
	}
	return Reader{b: b, size: len(b), corrupt: corrupt}
}

// Err returns the first error, or nil.
func (r *Reader) Err() error { return r.err }

// Len returns the number of bytes not yet read.
func (r *Reader) Len() int { return len(r.b) }

// Offset returns the number of bytes read so far.
func (r *Reader) Offset() int { return r.size - len(r.b) }

// Fail records the error "<corrupt>: <format % args>" unless an error is
// already recorded. Decoders call it for what the primitives cannot check.
func (r *Reader) Fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{r.sentinel()}, args...)...)
	}
}

func (r *Reader) sentinel() error {
	if r.corrupt == nil {
		return ErrCorrupt // the zero Reader
	}
	return r.corrupt
}

// Finish refuses trailing bytes and returns the first error.
func (r *Reader) Finish() error {
	if r.err == nil && len(r.b) != 0 {
		r.Fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

// Version reads the format version byte, which must be want, and returns
// the first error: "<corrupt>: empty" for an empty input, and for another
// version an error wrapping unknown (not corrupt; the corrupt sentinel if
// unknown is nil): "<unknown> <version>".
func (r *Reader) Version(want byte, unknown error) error {
	if unknown == nil {
		unknown = r.sentinel()
	}
	switch {
	case r.err != nil:
	case len(r.b) == 0:
		r.Fail("empty")
	case r.b[0] != want:
		r.err = fmt.Errorf("%w %d", unknown, r.b[0])
	default:
		r.b = r.b[1:]
	}
	return r.err
}

// Byte reads a u8.
func (r *Reader) Byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.Fail("%s: truncated at byte %d", what, r.Offset())
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// Uvarint reads a uvarint of minimal length.
func (r *Reader) Uvarint(what string) uint64 { return r.uvarint(what, plainUvarint) }

// Varint reads a varint of minimal length.
func (r *Reader) Varint(what string) int64 {
	u := r.uvarint(what, plainVarint)
	return int64(u>>1) ^ -int64(u&1) // zig-zag, as encoding/binary.Varint
}

// role says what a uvarint being read is, for the message if it is bad.
type role uint8

const (
	plainUvarint role = iota
	plainVarint
	stringLength
	elementCount
)

// uvarint decodes a minimal uvarint: the loop of encoding/binary.Uvarint,
// refusing at the last byte what is non-minimal or above 2^64 - 1 (what
// binary.Uvarint reports as overflow). What is wrong is worked out only
// when something is (badUvarint), which keeps this path short.
func (r *Reader) uvarint(what string, as role) uint64 {
	if r.err != nil {
		return 0
	}
	b := r.b
	var v uint64
	var s uint
	for i, c := range b {
		if c < 0x80 {
			if i > 0 && (c == 0 || i == binary.MaxVarintLen64-1 && c > 1) {
				break
			}
			r.b = b[i+1:]
			return v | uint64(c)<<s
		}
		if i == binary.MaxVarintLen64-1 {
			break
		}
		v |= uint64(c&0x7f) << s
		s += 7
	}
	r.badUvarint(what, as)
	return 0
}

// badUvarint records why the uvarint at the front of r.b was refused.
func (r *Reader) badUvarint(what string, as role) {
	kind, field := "uvarint", what
	switch as {
	case plainVarint:
		kind = "varint"
	case stringLength:
		field += " length"
	case elementCount:
		field += " count"
	}
	problem := "non-minimal " + kind
	switch _, n := binary.Uvarint(r.b); {
	case n == 0:
		problem = "truncated " + kind
	case n < 0:
		problem = kind + " overflows 64 bits"
	}
	r.Fail("%s: %s at byte %d", field, problem, r.Offset())
}

// Int32 reads a varint in the int32 range.
func (r *Reader) Int32(what string) int32 {
	v := r.Varint(what)
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.Fail("%s %d out of int32 range", what, v)
		return 0
	}
	return int32(v)
}

// Float64 reads an f64le (any bits: callers that need a finite value check).
func (r *Reader) Float64(what string) float64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 8 {
		r.Fail("%s: truncated f64le at byte %d", what, r.Offset())
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

// String reads a string.
func (r *Reader) String(what string) string {
	n := r.uvarint(what, stringLength)
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.Fail("%s length %d exceeds the remaining %d bytes", what, n, len(r.b))
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// Count reads a uvarint count of elements that take at least minBytes
// bytes each (1 if minBytes < 1) and refuses one the remaining bytes
// cannot hold, which bounds what a decoder allocates for hostile input.
func (r *Reader) Count(what string, minBytes int) int {
	v := r.uvarint(what, elementCount)
	if r.err != nil {
		return 0
	}
	if v > uint64(len(r.b)/max(minBytes, 1)) {
		r.Fail("%s count %d exceeds the remaining %d bytes", what, v, len(r.b))
		return 0
	}
	return int(v)
}
