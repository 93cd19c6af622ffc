// Package codec holds the binary primitives of the pure packages' state
// encodings (window, aggwindow, dedup, watermark): append functions for the
// encoder and a Reader for the decoder. It knows nothing of any layout; each
// package documents its own (a version byte first, then its fields), in
// terms of these primitives:
//
//	u8       one byte
//	uvarint  unsigned LEB128, as encoding/binary.AppendUvarint writes it;
//	         1 to 10 bytes, minimal length
//	varint   a signed integer zig-zag mapped to unsigned, (v << 1) ^ (v >> 63),
//	         then written as a uvarint (encoding/binary.AppendVarint);
//	         minimal length
//	int32    a varint in [math.MinInt32, math.MaxInt32]
//	f64le    8 bytes, little-endian: the IEEE-754 bits of a float64
//	         (math.Float64bits), any bit pattern (NaN, ±Inf included)
//	string   uvarint byte length, then the bytes (not checked to be UTF-8)
//	count    a uvarint number of elements that follow, each at least some
//	         minimum number of bytes: a count the remaining bytes cannot hold
//	         is refused before anything is allocated for it
//
// Minimal length: a (u)varint of more than one byte whose last byte is 0
// (so that a shorter encoding of the same value exists) is refused, as is
// one longer than 10 bytes or above 2^64 - 1. Every value therefore has
// exactly one encoding, which lets the packages check that decoding then
// encoding gives back the same bytes.
//
// A Reader records the first error and turns every later read into a no-op
// returning the zero value, so a decoder reads a whole record and checks
// Err once. Version reads the leading format version byte (an unknown
// version gets the package's own sentinel, so that the caller can tell it
// from corruption); Fail records what a package checks beyond the
// primitives; Finish refuses trailing bytes. Errors wrap the sentinel the
// package passed to NewReader (say ErrCorrupt); those of the primitives name
// the field being read (the what argument) and the byte offset where it
// starts, for example "corrupt state: event_id length: non-minimal uvarint
// at byte 17". Whatever the bytes, no method panics or allocates more than
// the input can justify.
//
// The package imports only the standard library and keeps no mutable state:
// it is as pure as the packages that use it (internal/arch enforces both).
package codec
