package event

import (
	"bytes"
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

// Decode implements Decoder. It first checks the whole value with
// json.Valid (iterative, so deep nesting cannot exhaust the stack), then
// walks the top-level object once without building any tree: values of
// unknown members are skipped, values of contract members are sliced out of
// the input.
func (JSONDecoder) Decode(value []byte) (Fields, error) {
	var f Fields
	if len(bytes.TrimLeft(value, " \t\r\n")) == 0 {
		return f, decodeError("value is empty, want a JSON object")
	}
	if !utf8.Valid(value) {
		return f, decodeError("value is not valid UTF-8 (first bad byte at offset %d), want a JSON object", invalidUTF8At(value))
	}
	if !json.Valid(value) {
		// Error path only: let encoding/json say what is wrong and where.
		var raw json.RawMessage
		err := json.Unmarshal(value, &raw)
		msg := "syntax error"
		if err != nil {
			msg = err.Error()
		}
		return f, decodeError("value is not valid JSON (%s), want a JSON object", sanitize(msg))
	}
	i := skipWS(value, 0)
	if value[i] != '{' {
		return f, decodeError("value is a JSON %s, want a JSON object", kindOf(value[i]))
	}
	// The value is valid JSON: the walk below needs no error handling.
	i = skipWS(value, i+1)
	if value[i] == '}' {
		return f, nil
	}
	for {
		end := skipString(value, i)
		name := value[i+1 : end-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			name = unescape(value[i:end])
		}
		i = skipWS(value, end) // at ':'
		i = skipWS(value, i+1) // at the value
		end = skipValue(value, i)
		if slot := f.field(name); slot != nil {
			*slot = jsonField(value[i:end])
		}
		i = skipWS(value, end)
		if value[i] == '}' {
			return f, nil
		}
		i = skipWS(value, i+1) // after ','
	}
}

// jsonField classifies one valid JSON value.
func jsonField(raw []byte) Field {
	fd := Field{Raw: raw}
	switch raw[0] {
	case '"':
		fd.Kind = KindString
		fd.Text = raw[1 : len(raw)-1]
		if bytes.IndexByte(fd.Text, '\\') >= 0 {
			fd.Text = unescape(raw)
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
	return fd
}

// unescape decodes a valid JSON string literal that contains escapes (rare:
// the common case slices the input instead).
func unescape(lit []byte) []byte {
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		// Unreachable for a literal taken from a json.Valid document.
		return lit[1 : len(lit)-1]
	}
	return []byte(s)
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just after the string literal starting at
// b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i++ // skip the escaped byte; \uXXXX digits are plain
		}
	}
}

// skipValue returns the index just after the valid JSON value starting at
// b[i]. Nested containers are skipped with a depth counter, not recursion.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
	default: // number, true, false, null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return i
			}
			i++
		}
		return i
	}
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
