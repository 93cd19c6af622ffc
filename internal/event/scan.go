package event

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
	"sync"
	"unicode/utf8"
)

// maxDepth is the deepest nesting of arrays and objects accepted anywhere in
// a value, the outermost container counting as level 1. It is
// encoding/json's limit, so that JSONDecoder accepts exactly the values
// json.Valid accepts.
const maxDepth = 10000

// scanner validates JSON text (RFC 8259) in a single forward pass over
// data, without building a tree and without recursion: open containers are
// kept on an explicit stack of one bit per level, so the Go stack does not
// grow with the nesting depth, and nesting beyond maxDepth is an error.
//
// Every method reads from pos and, on success, leaves pos just after what
// it read; whitespace is skipped only by skipWS and by value inside
// containers. The JSON grammar (RFC 8259's ABNF) is in the comments of the
// methods that scan each part.
//
// Invariants:
//   - data[:pos] has been scanned and is a viable prefix: some bytes could
//     follow it to make valid JSON. An error is reported at the first byte
//     where that stops being true, which is also where encoding/json
//     reports it.
//   - depth is the number of containers open at pos, 0 <= depth <= maxDepth.
//     The container at level k (1-based) is an object when bit k-1 of the
//     kind stack is set and an array when it is clear: levels 1..64 in
//     shallow, deeper levels in *deep, which comes from deepPool on first
//     use and goes back to it in release.
//   - Once a method has returned false, errAt and errWhat describe the first
//     error and the scanner must not be used for anything but err.
//
// The zero scanner with data set is ready to use. It allocates nothing
// (the deep stack is pooled).
type scanner struct {
	data  []byte
	pos   int
	depth int

	shallow uint64
	deep    *deepKinds

	errAt   int    // byte offset of the error; len(data) for unexpected end
	errWhat string // "in string literal", ...: where the bad byte was found
	errMsg  string // the whole message, when the error is not a bad byte
}

// deepKinds holds the kind bits of levels 65..maxDepth.
type deepKinds [(maxDepth - 64 + 63) / 64]uint64

var deepPool = sync.Pool{New: func() any { return new(deepKinds) }}

// release returns the deep kind stack, if any, to its pool. The scanner
// must not be used afterwards.
func (s *scanner) release() {
	if s.deep != nil {
		deepPool.Put(s.deep)
		s.deep = nil
	}
}

// peek returns the byte at pos, or 0 at the end of data. Callers peek only
// outside string literals, where a NUL byte is never valid either, so the
// end of data needs no test of its own.
func (s *scanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// skipWS skips insignificant whitespace: ws = *( %x20 / %x09 / %x0A / %x0D ).
func (s *scanner) skipWS() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// push opens a container at pos (data[pos] is '{' or '[') one level deeper.
// It fails when that would exceed maxDepth.
func (s *scanner) push(object bool) bool {
	if s.depth == maxDepth {
		s.errAt, s.errMsg = s.pos, fmt.Sprintf("nesting depth exceeds %d", maxDepth)
		return false
	}
	k := s.depth // 0-based level of the new container
	s.depth++
	s.pos++
	word, bit := &s.shallow, uint64(1)<<(k%64)
	if k >= 64 {
		if s.deep == nil {
			s.deep = deepPool.Get().(*deepKinds)
		}
		word = &s.deep[(k-64)/64]
	}
	if object {
		*word |= bit
	} else {
		*word &^= bit
	}
	return true
}

// inObject reports whether the innermost open container is an object
// (depth > 0).
func (s *scanner) inObject() bool {
	k := s.depth - 1
	if k < 64 {
		return s.shallow&(1<<k) != 0
	}
	return s.deep[(k-64)/64]&(1<<((k-64)%64)) != 0
}

// value scans one JSON value at pos (leading whitespace already skipped)
// and leaves pos just after it, with depth back where it was:
//
//	value  = object / array / string / number / "true" / "false" / "null"
//	object = '{' ws [ member *( ws ',' ws member ) ] ws '}'
//	member = string ws ':' ws value
//	array  = '[' ws [ value *( ws ',' ws value ) ] ws ']'
//
// Containers are walked with the kind stack, not recursion. The loop
// alternates two phases: scan one value, or the opening of a container and
// its first member name; then, once a value is complete, close containers
// or step over a ',' to the next member or element.
func (s *scanner) value() bool {
	base := s.depth
	for {
		// Phase 1: a value starts at pos.
		switch c := s.peek(); {
		case c == '{':
			if !s.push(true) {
				return false
			}
			s.skipWS()
			if s.peek() != '}' {
				if !s.memberName() {
					return false
				}
				continue // the member's value starts at pos
			}
			s.pos++
			s.depth--
		case c == '[':
			if !s.push(false) {
				return false
			}
			s.skipWS()
			if s.peek() != ']' {
				continue // the first element starts at pos
			}
			s.pos++
			s.depth--
		case c == '"':
			if _, ok := s.str(); !ok {
				return false
			}
		case c == '-' || isDigit(c):
			if !s.number() {
				return false
			}
		case c == 't':
			if !s.literal("true") {
				return false
			}
		case c == 'f':
			if !s.literal("false") {
				return false
			}
		case c == 'n':
			if !s.literal("null") {
				return false
			}
		default:
			return s.fail(s.pos, "looking for beginning of value")
		}

		// Phase 2: a value is complete. Close every container that ends
		// here; stop at base, or continue with the next member or element.
		for {
			if s.depth == base {
				return true
			}
			s.skipWS()
			obj := s.inObject()
			switch c := s.peek(); {
			case c == ',':
				s.pos++
				s.skipWS()
				if obj && !s.memberName() {
					return false
				}
			case c == '}' && obj, c == ']' && !obj:
				s.pos++
				s.depth--
				continue
			case obj:
				return s.fail(s.pos, "after object key:value pair")
			default:
				return s.fail(s.pos, "after array element")
			}
			break // back to phase 1 for the next value
		}
	}
}

// memberName scans the name of an object member, the colon after it and
// the whitespace around the colon: string ws ':' ws.
func (s *scanner) memberName() bool {
	_, _, ok := s.name()
	return ok
}

// name is memberName that also returns the name's literal (quotes
// included) and whether it contains escapes.
func (s *scanner) name() (lit []byte, escaped, ok bool) {
	if s.peek() != '"' {
		return nil, false, s.fail(s.pos, "looking for beginning of object key string")
	}
	start := s.pos
	if escaped, ok = s.str(); !ok {
		return nil, false, false
	}
	lit = s.data[start:s.pos]
	s.skipWS()
	if s.peek() != ':' {
		return nil, false, s.fail(s.pos, "after object key")
	}
	s.pos++
	s.skipWS()
	return lit, escaped, true
}

// plain[c] reports a byte that stands for itself inside a string literal
// and needs no further check: printable ASCII (DEL included) except '"' and
// '\'. Control characters, '"', '\' and the bytes of multi-byte UTF-8
// sequences (>= 0x80) take the slow path in str.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// specialBytes finds the bytes of w, 8 bytes of a string literal read
// little-endian, that are not plain, with SWAR ("SIMD within a register")
// arithmetic. For a byte below 0x80, subtracting n sets its top bit exactly
// when the byte is below n; so the top bits of
//
//	(w - 0x20 each) | (w^'"' - 1 each) | (w^'\' - 1 each) | w
//
// flag the control characters, '"', '\' and the bytes that are not ASCII
// (the last term). A borrow out of a flagged byte may flag the byte above
// it too, but never a byte below the first flagged one: the lowest flag
// (the result is 0 when there is none) marks the first byte that is not
// plain.
func specialBytes(w uint64) uint64 {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	ctl := w - 0x20*ones                // top bit set in bytes < 0x20
	quote := (w ^ '"'*ones) - ones      // ... in bytes == '"'
	backslash := (w ^ '\\'*ones) - ones // ... in bytes == '\\'
	return (ctl | quote | backslash | w) & tops
}

// str scans the string literal at pos (data[pos] == '"'); escaped reports
// whether it contains a backslash escape.
//
//	string    = '"' *char '"'
//	char      = unescaped / '\' ( '"' / '\' / '/' / 'b' / 'f' / 'n' / 'r' / 't' / 'u' 4HEXDIG )
//	unescaped = any character but '"', '\' and U+0000..U+001F
//
// Characters are UTF-8: an invalid sequence (overlong, a surrogate, beyond
// U+10FFFF, truncated) is an error. A \u escape may name any code unit,
// including a lone surrogate such as \ud800: the grammar allows it and
// encoding/json accepts it (decoding it to U+FFFD).
func (s *scanner) str() (escaped, ok bool) {
	b := s.data
	i := s.pos + 1
	for {
		// Skip plain bytes: 8 at a time while 8 remain, then one by one.
		for i+8 <= len(b) {
			if m := specialBytes(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) / 8 // the first byte that is not plain
				break
			}
			i += 8
		}
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i == len(b) {
			return escaped, s.fail(i, "in string literal")
		}
		switch c := b[i]; {
		case c == '"':
			s.pos = i + 1
			return escaped, true
		case c == '\\':
			escaped = true
			if i+1 == len(b) {
				return escaped, s.fail(i+1, "in string escape code")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k == len(b) || !isHex(b[k]) {
						return escaped, s.fail(k, `in \u hexadecimal character escape`)
					}
				}
				i += 6
			default:
				return escaped, s.fail(i+1, "in string escape code")
			}
		case c < 0x20:
			return escaped, s.fail(i, "in string literal")
		default: // c >= 0x80: a multi-byte UTF-8 sequence starts here
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return escaped, s.fail(i, "in string literal (invalid UTF-8)")
			}
			i += n
		}
	}
}

// number scans the number at pos (data[pos] is '-' or a digit).
//
//	number = [ '-' ] int [ frac ] [ exp ]
//	int    = '0' / ( %x31-39 *DIGIT )          ; no leading zero: "01" is 0 then 1
//	frac   = '.' 1*DIGIT                       ; ".5" and "1." are invalid
//	exp    = ( 'e' / 'E' ) [ '+' / '-' ] 1*DIGIT  ; "1e" and "1e+" are invalid
//
// The byte after the number is left to the caller, which allows only
// whitespace, ',', ']', '}' or the end there: so "01" fails at the '1', and
// "1x" at the 'x'.
func (s *scanner) number() bool {
	b := s.data
	i := s.pos
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return s.fail(i, "in numeric literal")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i == len(b) || !isDigit(b[i]) {
			return s.fail(i, "after decimal point in numeric literal")
		}
		i = skipDigits(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i == len(b) || !isDigit(b[i]) {
			return s.fail(i, "in exponent of numeric literal")
		}
		i = skipDigits(b, i+1)
	}
	s.pos = i
	return true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

func isHex(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// literal scans lit ("true", "false" or "null") at pos. As for numbers, the
// byte after it is the caller's: "truex" fails at the 'x'.
func (s *scanner) literal(lit string) bool {
	rest := s.data[s.pos:]
	if len(rest) >= len(lit) && string(rest[:len(lit)]) == lit {
		s.pos += len(lit)
		return true
	}
	k := 0
	for k < len(rest) && k < len(lit) && rest[k] == lit[k] {
		k++
	}
	return s.fail(s.pos+k, "in literal "+lit)
}

// fail records a bad byte at offset at (len(data) for an unexpected end),
// found where says ("in string literal"), and returns false.
func (s *scanner) fail(at int, where string) bool {
	s.errAt, s.errWhat = at, where
	return false
}

// err returns the decode_error for the recorded error: what is wrong and
// at which byte offset, printable and bounded. Invalid UTF-8 anywhere in
// the value is reported as such, whatever the scanner stopped at.
func (s *scanner) err() *Error {
	if at := invalidUTF8At(s.data); at >= 0 {
		return decodeError("value is not valid UTF-8 (first bad byte at offset %d), want a JSON object", at)
	}
	var msg string
	switch {
	case s.errMsg != "":
		msg = s.errMsg
	case s.errAt >= len(s.data):
		msg = "unexpected end of input"
	default:
		r, _ := utf8.DecodeRune(s.data[s.errAt:])
		msg = "invalid character " + strconv.QuoteRune(r) + " " + s.errWhat
	}
	return decodeError("value is not valid JSON (%s at offset %d), want a JSON object", sanitize(msg), s.errAt)
}
