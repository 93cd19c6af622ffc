package event

import (
	"encoding/json"
	"unicode/utf8"
)

// JSONDecoder decodes record values that are JSON objects.
//
// The value must be valid UTF-8 and exactly one JSON object (whitespace
// around it allowed); anything else, including a top-level array, string,
// number or null, trailing data after the object, and nesting deeper than
// encoding/json's limit of 10000 levels anywhere in the value, is
// decode_error.
//
// Member names are matched exactly (case-sensitive, after unescaping), unlike
// encoding/json's case-insensitive struct matching: "Event_ID" is an unknown
// member and is ignored like every other unknown member. When a member name
// appears more than once, the last occurrence wins (as in encoding/json).
//
// The zero JSONDecoder is ready to use and safe for concurrent use.
type JSONDecoder struct{}

// Decode implements Decoder. It reads the value once, with a scanner that
// validates all of it (RFC 8259, UTF-8, nesting depth) while it walks the
// top-level object without building any tree: values of unknown members are
// only validated, values of contract members are sliced out of the input.
// Deep nesting cannot exhaust the stack: the scanner does not recurse.
func (JSONDecoder) Decode(value []byte) (f Fields, err error) {
	// Decode is small enough to be inlined into the wrapper that calls it
	// through the Decoder interface, which then copies no Fields.
	if e := decodeJSON(value, &f); e != nil {
		return Fields{}, e
	}
	return f, nil
}

// decodeJSON is Decode, filling *f, which must be zero.
func decodeJSON(value []byte, f *Fields) *Error {
	s := scanner{data: value}
	defer s.release()
	// JSON-text = ws value ws, and the value must be an object.
	if s.skipWS(); s.pos == len(value) {
		return decodeError("value is empty, want a JSON object")
	}
	if value[s.pos] != '{' {
		// Name what the value is, if it is JSON at all.
		first := value[s.pos]
		if !s.value() {
			return s.err()
		}
		if s.skipWS(); s.pos != len(value) {
			s.fail(s.pos, "after top-level value")
			return s.err()
		}
		return decodeError("value is a JSON %s, want a JSON object", kindOf(first))
	}
	// object = '{' ws [ member *( ws ',' ws member ) ] ws '}'
	s.push(true) // level 1 of maxDepth: cannot fail
	s.skipWS()
	if s.peek() == '}' {
		s.pos++
	} else {
		for {
			lit, escaped, ok := s.name()
			if !ok {
				return s.err()
			}
			name := lit[1 : len(lit)-1]
			if escaped {
				name = unescape(lit)
			}
			// member = string ws ':' ws value: scan (and validate) the value
			// whatever it is; keep it if the contract names the member.
			start := s.pos
			slot := f.field(name)
			escaped = false
			if slot != nil && s.peek() == '"' {
				escaped, ok = s.str() // setJSON unescapes only if needed
			} else {
				ok = s.value()
			}
			if !ok {
				return s.err()
			}
			if slot != nil {
				slot.setJSON(value[start:s.pos], escaped)
			}
			s.skipWS()
			if c := s.peek(); c == '}' {
				s.pos++
				break
			} else if c != ',' {
				s.fail(s.pos, "after object key:value pair")
				return s.err()
			}
			s.pos++
			s.skipWS()
		}
	}
	s.depth--
	// Only whitespace may follow the object.
	if s.skipWS(); s.pos != len(value) {
		s.fail(s.pos, "after top-level value")
		return s.err()
	}
	return nil
}

// setJSON sets fd to the valid JSON value raw, replacing what fd held (a
// repeated member's last occurrence wins); escaped reports a string literal
// with escapes. It writes fd in place, saving the copy of a returned Field.
func (fd *Field) setJSON(raw []byte, escaped bool) {
	*fd = Field{Raw: raw}
	switch raw[0] {
	case '"':
		fd.Kind = KindString
		if escaped {
			fd.Text = unescape(raw)
		} else {
			fd.Text = raw[1 : len(raw)-1]
		}
	case '{':
		fd.Kind = KindObject
	case '[':
		fd.Kind = KindArray
	case 't', 'f':
		fd.Kind = KindBool
	case 'n':
		fd.Kind = KindNull
	default:
		fd.Kind = KindNumber
		fd.Num, fd.Int, fd.IsInt = parseNumber(raw)
	}
}

// unescape decodes a valid JSON string literal that contains escapes (rare:
// the common case slices the input instead).
func unescape(lit []byte) []byte {
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		// Unreachable for a literal the scanner accepted.
		return lit[1 : len(lit)-1]
	}
	return []byte(s)
}

func kindOf(c byte) string {
	switch c {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}
