package avro

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The Confluent wire format of a record value: the magic byte 0, the schema
// id as a 4-byte big-endian integer, then the Avro binary body written with
// that schema.
const (
	// MagicByte is the first byte of a wire-format value.
	MagicByte byte = 0
	// HeaderSize is the length of the magic byte and the schema id.
	HeaderSize = 5
	// MaxSchemaID is the largest schema id a Confluent-compatible registry
	// assigns (ids are positive Java ints). A larger id in a header is not
	// asked of the registry: it is not found.
	MaxSchemaID = math.MaxInt32
)

// AppendHeader appends the wire-format header for schema id to dst.
func AppendHeader(dst []byte, id uint32) []byte {
	return binary.BigEndian.AppendUint32(append(dst, MagicByte), id)
}

// ParseHeader splits a wire-format value into its schema id and Avro body
// (which aliases value). It fails when value is shorter than HeaderSize or
// does not start with MagicByte; the error is a *HeaderError.
func ParseHeader(value []byte) (id uint32, body []byte, err error) {
	if len(value) < HeaderSize {
		return 0, nil, &HeaderError{Len: len(value), First: -1}
	}
	if value[0] != MagicByte {
		return 0, nil, &HeaderError{Len: len(value), First: int(value[0])}
	}
	return binary.BigEndian.Uint32(value[1:HeaderSize]), value[HeaderSize:], nil
}

// SchemaID returns the schema id of a wire-format value, and false when
// value is not in the wire format.
func SchemaID(value []byte) (uint32, bool) {
	id, _, err := ParseHeader(value)
	return id, err == nil
}

// HeaderError reports a value that is not in the wire format.
type HeaderError struct {
	// Len is the value's length in bytes.
	Len int
	// First is the value's first byte, or -1 when the value is too short.
	First int
}

func (e *HeaderError) Error() string {
	if e.First < 0 {
		if e.Len == 0 {
			return "value is empty, want the Confluent wire format (magic byte 0, 4-byte schema id, Avro body)"
		}
		return fmt.Sprintf("value is %d bytes, shorter than the 5-byte Confluent wire-format header (magic byte 0, 4-byte schema id)", e.Len)
	}
	hint := ""
	if e.First == '{' || e.First == '[' || e.First == ' ' || e.First == '\n' {
		hint = " (it looks like JSON: is the source's format json?)"
	}
	return fmt.Sprintf("first byte is 0x%02x, want the magic byte 0x00 of the Confluent wire format%s", e.First, hint)
}
