package avro

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	hamba "github.com/hamba/avro/v2"
)

// Limits of checkBody.
const (
	// maxDepth bounds the nesting of schemas walked for one value.
	maxDepth = 100
	// maxEmptyItems bounds the array items and map entries of zero encoded
	// size (null, empty records) in one value, which cost no input bytes.
	maxEmptyItems = 1 << 16
)

// checkBody walks body against the writer schema s and reports the first
// way in which body is not exactly one value of s: truncation, trailing
// bytes, a varint longer than its type allows, a boolean other than 0 or 1,
// an enum or union index out of range, a negative or oversized length,
// invalid UTF-8 in a string, or a block byte size that does not match its
// items.
//
// It runs before hamba decodes a value, so that hamba only ever sees
// well-formed input: its array and map skippers loop once per declared
// item (2^62 declared items of type null would never end). Every loop here
// is bounded by the bytes of body, plus maxEmptyItems items that consume
// none, so checkBody is linear in len(body).
func checkBody(s hamba.Schema, body []byte) error {
	c := checker{buf: body, empty: maxEmptyItems}
	if err := c.value(s, 0); err != nil {
		return fmt.Errorf("at byte %d of the Avro body: %w", c.pos, err)
	}
	if c.pos != len(body) {
		return fmt.Errorf("%d bytes after the record (the body is %d bytes)", len(body)-c.pos, len(body))
	}
	return nil
}

type checker struct {
	buf   []byte
	pos   int
	empty int // items of zero size still allowed
}

var errTruncated = errors.New("unexpected end of the body")

func (c *checker) left() int { return len(c.buf) - c.pos }

// varint reads a zig-zag varint of at most maxBytes bytes: 5 for an int
// (whose value must fit 32 bits), 10 for a long.
func (c *checker) varint(maxBytes int, what string) (int64, error) {
	var u uint64
	for i := range maxBytes {
		if c.pos == len(c.buf) {
			return 0, errTruncated
		}
		b := c.buf[c.pos]
		c.pos++
		if i == 9 && b > 1 {
			return 0, fmt.Errorf("%s overflows 64 bits", what)
		}
		u |= uint64(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			v := int64(u>>1) ^ -int64(u&1)
			if maxBytes == 5 && (v < math.MinInt32 || v > math.MaxInt32) {
				return 0, fmt.Errorf("%s overflows 32 bits", what)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("%s is longer than %d bytes", what, maxBytes)
}

func (c *checker) long(what string) (int64, error) { return c.varint(10, what) }

func (c *checker) skip(n int64) error {
	if n < 0 || n > int64(c.left()) {
		return errTruncated
	}
	c.pos += int(n)
	return nil
}

// length reads a bytes or string length.
func (c *checker) length(what string) (int, error) {
	n, err := c.long("length")
	if errors.Is(err, errTruncated) {
		return 0, err
	}
	if err != nil {
		return 0, fmt.Errorf("%s %w", what, err)
	}
	if n < 0 {
		return 0, fmt.Errorf("%s length %d is negative", what, n)
	}
	if n > int64(c.left()) {
		return 0, errTruncated
	}
	return int(n), nil
}

func (c *checker) value(s hamba.Schema, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("schema nesting deeper than %d", maxDepth)
	}
	switch s.Type() {
	case hamba.Ref:
		return c.value(s.(*hamba.RefSchema).Schema(), depth+1)
	case hamba.Null:
		return nil
	case hamba.Boolean:
		if c.left() == 0 {
			return errTruncated
		}
		if b := c.buf[c.pos]; b > 1 {
			return fmt.Errorf("boolean byte is %d, want 0 or 1", b)
		}
		c.pos++
		return nil
	case hamba.Int:
		_, err := c.varint(5, "int")
		return err
	case hamba.Long:
		_, err := c.long("long")
		return err
	case hamba.Float:
		return c.skip(4)
	case hamba.Double:
		return c.skip(8)
	case hamba.Bytes:
		n, err := c.length("bytes")
		if err != nil {
			return err
		}
		c.pos += n
		return nil
	case hamba.String:
		return c.str("string")
	case hamba.Fixed:
		return c.skip(int64(s.(*hamba.FixedSchema).Size()))
	case hamba.Enum:
		i, err := c.varint(5, "enum index")
		if err != nil {
			return err
		}
		if n := len(s.(*hamba.EnumSchema).Symbols()); i < 0 || i >= int64(n) {
			return fmt.Errorf("enum index %d out of range [0, %d)", i, n)
		}
		return nil
	case hamba.Union:
		types := s.(*hamba.UnionSchema).Types()
		i, err := c.long("union index")
		if err != nil {
			return err
		}
		if i < 0 || i >= int64(len(types)) {
			return fmt.Errorf("union index %d out of range [0, %d)", i, len(types))
		}
		return c.value(types[i], depth+1)
	case hamba.Record:
		for _, f := range s.(*hamba.RecordSchema).Fields() {
			if err := c.value(f.Type(), depth+1); err != nil {
				return fmt.Errorf("field %s: %w", f.Name(), err)
			}
		}
		return nil
	case hamba.Array:
		return c.blocks(s.(*hamba.ArraySchema).Items(), false, depth)
	case hamba.Map:
		return c.blocks(s.(*hamba.MapSchema).Values(), true, depth)
	}
	return fmt.Errorf("unsupported schema type %s", s.Type())
}

// blocks walks the blocks of an array (or map: each item is a string key
// and a value).
func (c *checker) blocks(item hamba.Schema, isMap bool, depth int) error {
	for {
		n, err := c.long("block count")
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		size := int64(-1)
		if n < 0 {
			if n == math.MinInt64 {
				return errors.New("block count overflows")
			}
			n = -n
			if size, err = c.long("block size"); err != nil {
				return err
			}
			if size < 0 || size > int64(c.left()) {
				return fmt.Errorf("block size %d does not fit the %d bytes left", size, c.left())
			}
		}
		if n > int64(c.left())+int64(c.empty) {
			return fmt.Errorf("block count %d cannot fit the %d bytes left", n, c.left())
		}
		start := c.pos
		for range n {
			at := c.pos
			if isMap {
				if err := c.str("map key"); err != nil {
					return fmt.Errorf("map key: %w", err)
				}
			}
			if err := c.value(item, depth+1); err != nil {
				return err
			}
			if c.pos == at {
				if c.empty--; c.empty < 0 {
					return fmt.Errorf("more than %d items of zero size", maxEmptyItems)
				}
			}
		}
		if size >= 0 && int64(c.pos-start) != size {
			return fmt.Errorf("block size %d, but its items take %d bytes", size, c.pos-start)
		}
	}
}

// str reads a string: a length and that many bytes of valid UTF-8.
func (c *checker) str(what string) error {
	n, err := c.length(what)
	if err != nil {
		return err
	}
	if !utf8.Valid(c.buf[c.pos : c.pos+n]) {
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	c.pos += n
	return nil
}
