package event

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeMatchesStdlib is the differential test of JSONDecoder: for every
// value it must accept and reject exactly what refDecode (the decoder as it
// was, built on json.Valid) accepts and rejects, extract the same Fields
// when it accepts, give the same kind of detail when it rejects, and point
// at the byte where encoding/json finds the syntax error.
func FuzzDecodeMatchesStdlib(f *testing.F) {
	for _, s := range decodeSeeds() {
		f.Add([]byte(s))
	}
	// The FuzzCheck corpus: its second line is the record value.
	dir := filepath.Join("testdata", "fuzz", "FuzzCheck")
	entries, err := os.ReadDir(dir)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		v, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[2], "[]byte("), ")"))
		if err != nil {
			f.Fatalf("%s: %v", e.Name(), err)
		}
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		checkDecodeMatches(t, value)
	})
}

// decodeSeeds are the tricky inputs of the differential test (every one is
// also run by TestDecodeMatchesStdlibSeeds).
func decodeSeeds() []string {
	seeds := []string{
		// empty and whitespace variants
		"", " ", " \t\r\n", "{}", " {} ", "\t{\r\n\"a\"\t:\n1\r}\n ", "{\v}", "\v{}", "\f{}", "\u00a0{}", "{}\x00", "\x00{}",
		"{\"a\":1}\r\n\r\n", "{\"a\" : [ 1 , 2 ] , \"b\" :{ } }",
		// numbers
		`{"v":-0}`, `{"value":-0}`, `{"value":-0.0}`, `{"seq":0}`, `{"seq":1e+}`, `{"seq":1e}`, `{"seq":1e-}`, `{"seq":01}`,
		`{"seq":-01}`, `{"seq":00}`, `{"seq":.5}`, `{"seq":1.}`, `{"seq":1.e5}`, `{"seq":-}`, `{"seq":--1}`, `{"seq":+1}`,
		`{"seq":1e5}`, `{"seq":1E-5}`, `{"seq":-0.0e+0}`, `{"seq":1e400}`, `{"seq":123456789012345678901234567890}`,
		`{"seq":0x10}`, `{"seq":1_000}`, `{"seq":Infinity}`, `{"seq":NaN}`, `{"seq":-Infinity}`, `{"seq":1.5e3.2}`, `{"seq":1ee2}`,
		`[-0]`, `-0`, `01`, `.5`, `1e+`, `-`, `1 `, ` 1 2`,
		// literals
		`{"a":true}`, `{"a":false}`, `{"a":null}`, `{"a":tru}`, `{"a":truex}`, `{"a":nul}`, `{"a":falsey}`, `{"a":True}`,
		`{"a":nulll}`, `{"clock":null}`, `{"a":t}`, `true`, `nul`, `null `, `nullx`,
		// strings and escapes
		`{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12G4"}`, `{"a":"\U0041"}`, `{"a":"\u004"}`, `{"a":"\`, `{"a":"\u`, `{"a":"`,
		`{"event_id":"\ud800"}`, `{"event_id":"\udc00\ud800"}`, `{"event_id":"\ud83d\ude00"}`, `{"event_id":"\ud83d\u0041"}`,
		`{"event_id":"\ud83d"}`, `{"event_id":"\ud83d\"}`, `{"event_id":"\ud83d\\ude00"}`, `{"event_id":"\uDBFF\uDFFF"}`,
		`{"event_id":"\/\b\f\n\r\t\"\\"}`, `{"event\u005fid":"x"}`, `{"event_id\u0000":"x"}`, `{"\u0065vent_id":"\u0000"}`,
		`{"event_id":"a\'b"}`, `{'a':1}`, `{a:1}`, `{"a":'x'}`,
		"{\"a\":\"\x01\"}", "{\"a\":\"\x1f\"}", "{\"a\":\"\x7f\"}", "{\"a\":\"\t\"}", "{\"a\":\"\n\"}", "{\"a\":\"\x00\"}",
		"{\"a\x01\":1}",
		// UTF-8 inside strings
		"{\"a\":\"\xff\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xf4\x90\x80\x80\"}",
		"{\"a\":\"\xe2\x82\"}", "{\"a\":\"\xe2\x82\xac\xf0\x9f\x98\x80\"}", "{\"event_id\":\"€😀\"}", "{\"\xff\":1}",
		"{\"a\":\"\xef\xbf\xbd\"}", "{\"a\":\"\xf0\x9f\x98\"}", "{\"a\":\"x\x80\"}",
		// UTF-8 outside strings
		"{\xff}", "{\"a\":1}\xff", "{\"a\":\xc3\xa9}", "\xef\xbb\xbf{}", "{}\xc3", "[\"\xff\"", "\xff",
		// structure and trailing garbage
		`{} x`, `{}{}`, `{},`, `{}]`, `{"a":1}}`, `{"a":1,}`, `{,}`, `{"a" 1}`, `{"a":1 "b":2}`, `{"a"}`, `{"a":}`, `{"a"::1}`,
		`{"a":1,,"b":2}`, `{1:2}`, `{"a":[1,]}`, `{"a":[1 2]}`, `{"a":[,1]}`, `{"a":[}`, `{"a":{]}`, `{"a":{"b"}}`, `{"a":{"b":1,}}`,
		`{"a":[[]]]}`, `{"a":[{}}`, `{"a":{"b":[1,{"c":[true,null,"}"]}]}}`, `{`, `{"`, `{"a`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,`,
		`[]`, `[1,2]`, `[1,]`, `[1 2]`, `[`, `]`, `}`, `"x"`, `"x`, `"x" "y"`, `[] []`,
		// contract members of every kind, repeated members
		`{"schema_version":1,"event_id":"e","machine_id":{"a":[1]},"sensor_id":[1,"x"],"ts":true,"seq":null,"value":-1.5e-3,"unit":"mm/s","quality":"\u0067ood","clock":false}`,
		`{"seq":-1,"seq":2,"seq":"x"}`, `{"seq":1,"seq":}`, `{"event_id":"a","event_id":"\u00e9"}`,
		// nesting around the inline kind stack (64 levels) and beyond
		nest("[", "]", 62), nest("[", "]", 63), nest("[", "]", 64), nest("[", "]", 65), nest("[", "]", 127), nest("[", "]", 128),
		nest(`{"a":`, "}", 63), nest(`{"a":`, "}", 64), nest(`{"a":`, "}", 65), nest(`{"a":`, "}", 129),
		nest(`[{"a":`, "}]", 40), nest(`{"a":[`, "]}", 70),
		`{"x":` + strings.Repeat("[", 70) + "}" + strings.Repeat("]", 69) + "}",
		`{"x":` + strings.Repeat(`{"a":`, 70) + "]" + strings.Repeat("}", 69) + "}",
		`{"x":` + strings.Repeat("[", 64) + strings.Repeat(`{"a":`, 64) + "1" + strings.Repeat("}", 64) + strings.Repeat("]", 64) + "}",
		`{"x":` + strings.Repeat("[", 64) + strings.Repeat(`{"a":`, 64) + "1" + strings.Repeat("]", 64) + strings.Repeat("}", 64) + "}",
		strings.Repeat("[", 100),
	}
	for _, r := range [][]byte{record(nil), record(o{"ts": `1767323045678`, "unit": `"in/s"`, "clock": `"unsynced"`}), record(o{"seq": `1e2`})} {
		seeds = append(seeds, string(r))
	}
	return seeds
}

// nest returns {"x": open^n 1 close^n } (n levels below the top object).
func nest(open, close string, n int) string {
	return `{"x":` + strings.Repeat(open, n) + "1" + strings.Repeat(close, n) + "}"
}

func TestDecodeMatchesStdlibSeeds(t *testing.T) {
	for _, s := range decodeSeeds() {
		checkDecodeMatches(t, []byte(s))
	}
}

// TestDecodeNestingLimit checks the depth limit at its edge (the top-level
// object is level 1; encoding/json allows 10000 levels) and that nothing
// recurses: 100000 levels are rejected with the goroutine stack capped far
// below what a recursive walk of 10000 levels would need.
func TestDecodeNestingLimit(t *testing.T) {
	shapes := []struct{ open, close string }{{"[", "]"}, {`{"a":`, "}"}, {`[{"":`, "}]"}}
	for _, sh := range shapes {
		for _, levels := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
			// Nest containers below the top-level object up to levels in all
			// (a pair of the third shape is two levels).
			per := strings.Count(sh.open, "[") + strings.Count(sh.open, "{")
			n := (levels - 1) / per
			v := []byte(nest(sh.open, sh.close, n))
			_, err := JSONDecoder{}.Decode(v)
			if ok := 1+n*per <= maxDepth; ok != (err == nil) {
				t.Errorf("%s × %d (%d levels): err = %v", sh.open, n, 1+n*per, err)
			}
			checkDecodeMatches(t, v)
			// The same nesting at the top level: an array, not an object.
			top := []byte(strings.Repeat("[", levels) + strings.Repeat("]", levels))
			checkDecodeMatches(t, top)
		}
	}

	deep := []byte(`{"x":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `}`)
	old := debug.SetMaxStack(256 << 10) // a fatal error, not a test failure, if exceeded
	_, err := JSONDecoder{}.Decode(deep)
	debug.SetMaxStack(old)
	var e *Error
	if !errors.As(err, &e) || e.Reason != ReasonDecodeError || !strings.Contains(e.Detail, "depth") ||
		!strings.Contains(e.Detail, "offset "+strconv.Itoa(5+maxDepth-1)) {
		t.Fatalf("100000 levels: %v", err)
	}
	checkDecodeMatches(t, deep)
}

func TestDecodeErrorDetails(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "value is empty, want a JSON object"},
		{" \n", "value is empty, want a JSON object"},
		{`[1]`, "value is a JSON array, want a JSON object"},
		{` "x" `, "value is a JSON string, want a JSON object"},
		{"{\"a\":\"\xff\"}", "value is not valid UTF-8 (first bad byte at offset 6), want a JSON object"},
		{"{\"a\":1}}\xff", "value is not valid UTF-8 (first bad byte at offset 8), want a JSON object"},
		{`{"seq":01}`, `value is not valid JSON (invalid character '1' after object key:value pair at offset 8), want a JSON object`},
		{`{"seq":.5}`, `value is not valid JSON (invalid character '.' looking for beginning of value at offset 7), want a JSON object`},
		{`{"seq":1.}`, `value is not valid JSON (invalid character '}' after decimal point in numeric literal at offset 9), want a JSON object`},
		{`{"seq":1e+}`, `value is not valid JSON (invalid character '}' in exponent of numeric literal at offset 10), want a JSON object`},
		{`{"a":[1,]}`, `value is not valid JSON (invalid character ']' looking for beginning of value at offset 8), want a JSON object`},
		{`{"a":"\x"}`, `value is not valid JSON (invalid character 'x' in string escape code at offset 7), want a JSON object`},
		{`{"a":"\u12G4"}`, `value is not valid JSON (invalid character 'G' in \u hexadecimal character escape at offset 10), want a JSON object`},
		{"{\"a\":\"\x01\"}", `value is not valid JSON (invalid character '\x01' in string literal at offset 6), want a JSON object`},
		{`{"a":nul}`, `value is not valid JSON (invalid character '}' in literal null at offset 8), want a JSON object`},
		{`{"a":1`, `value is not valid JSON (unexpected end of input at offset 6), want a JSON object`},
		{`{"a":1} x`, `value is not valid JSON (invalid character 'x' after top-level value at offset 8), want a JSON object`},
		{`[1] x`, `value is not valid JSON (invalid character 'x' after top-level value at offset 4), want a JSON object`},
		{`{"a":é}`, `value is not valid JSON (invalid character 'é' looking for beginning of value at offset 5), want a JSON object`},
		{"{\"a\":\u202e}", `value is not valid JSON (invalid character '\u202e' looking for beginning of value at offset 5), want a JSON object`},
	}
	for _, tc := range tests {
		_, err := JSONDecoder{}.Decode([]byte(tc.in))
		var e *Error
		if !errors.As(err, &e) || e.Detail != tc.want {
			t.Errorf("Decode(%q) = %v\nwant detail %s", tc.in, err, tc.want)
			continue
		}
		checkDetailSafe(t, e)
	}
}

// TestDecodeAllocs: decoding allocates only to unescape strings, whatever
// the nesting depth (the deep kind stack is pooled).
func TestDecodeAllocs(t *testing.T) {
	for _, s := range []string{string(record(nil)), nest("[", "]", 63), nest("[", "]", 64), nest("[", "]", 5000), nest(`{"a":`, "}", maxDepth-1)} {
		v := []byte(s)
		if n := testing.AllocsPerRun(20, func() { _, _ = JSONDecoder{}.Decode(v) }); n != 0 {
			t.Errorf("Decode(%.40q...) allocates %v times", v, n)
		}
	}
}

var offsetRE = regexp.MustCompile(` at offset (\d+)\), want a JSON object$`)

// checkDecodeMatches compares JSONDecoder with refDecode on value.
func checkDecodeMatches(t testing.TB, value []byte) {
	t.Helper()
	got, gotErr := JSONDecoder{}.Decode(value)
	want, wantErr := refDecode(value)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("Decode(%.200q): error %v, reference error %v", value, gotErr, wantErr)
	}
	if gotErr != nil {
		var g, w *Error
		if !errors.As(gotErr, &g) || !errors.As(wantErr, &w) || g.Reason != ReasonDecodeError || g.Field != "" {
			t.Fatalf("Decode(%.200q): error %#v, reference %#v", value, gotErr, wantErr)
		}
		checkDetailSafe(t, g)
		const notJSON = "value is not valid JSON ("
		if strings.HasPrefix(w.Detail, notJSON) {
			if !strings.HasPrefix(g.Detail, notJSON) {
				t.Fatalf("Decode(%.200q): detail %q, reference %q", value, g.Detail, w.Detail)
			}
			// The offset is where encoding/json stops too.
			var se *json.SyntaxError
			var raw json.RawMessage
			if !errors.As(json.Unmarshal(value, &raw), &se) {
				t.Fatalf("Decode(%.200q): encoding/json gives no syntax error", value)
			}
			// encoding/json's Offset is just after the bad byte; at the end
			// of the input it is the length, and the error either says so
			// or blames the space it feeds its scanner there.
			at := se.Offset - 1
			if se.Error() == "unexpected end of JSON input" ||
				se.Offset == int64(len(value)) && value[len(value)-1] != ' ' && strings.HasPrefix(se.Error(), "invalid character ' '") {
				at = se.Offset
			}
			m := offsetRE.FindStringSubmatch(g.Detail)
			if m == nil || m[1] != strconv.FormatInt(at, 10) {
				t.Fatalf("Decode(%.200q): detail %q, encoding/json: %v at %d", value, g.Detail, se, at)
			}
		} else if g.Detail != w.Detail {
			// Empty, invalid UTF-8, or valid JSON but not an object:
			// the same sentence as before.
			t.Fatalf("Decode(%.200q): detail %q, reference %q", value, g.Detail, w.Detail)
		}
		return
	}
	for _, fd := range []struct {
		name      string
		got, want *Field
	}{
		{FieldSchemaVersion, &got.SchemaVersion, &want.SchemaVersion},
		{FieldEventID, &got.EventID, &want.EventID},
		{FieldMachineID, &got.MachineID, &want.MachineID},
		{FieldSensorID, &got.SensorID, &want.SensorID},
		{FieldTS, &got.TS, &want.TS},
		{FieldSeq, &got.Seq, &want.Seq},
		{FieldValue, &got.Value, &want.Value},
		{FieldUnit, &got.Unit, &want.Unit},
		{FieldQuality, &got.Quality, &want.Quality},
		{FieldClock, &got.Clock, &want.Clock},
	} {
		g, w := fd.got, fd.want
		if g.Kind != w.Kind || !bytes.Equal(g.Text, w.Text) || math.Float64bits(g.Num) != math.Float64bits(w.Num) ||
			g.IsInt != w.IsInt || g.Int != w.Int || !bytes.Equal(g.Raw, w.Raw) || (g.Text == nil) != (w.Text == nil) {
			t.Fatalf("Decode(%.200q): field %s = %+v, reference %+v", value, fd.name, *g, *w)
		}
	}
}

// refDecode is JSONDecoder.Decode as it was before the single-pass scanner:
// utf8.Valid, then json.Valid, then a walk of the top-level object that
// relies on the value being valid. It is the reference of
// FuzzDecodeMatchesStdlib; keep it as it is.
func refDecode(value []byte) (Fields, error) {
	var f Fields
	if len(bytes.TrimLeft(value, " \t\r\n")) == 0 {
		return f, decodeError("value is empty, want a JSON object")
	}
	if !utf8.Valid(value) {
		return f, decodeError("value is not valid UTF-8 (first bad byte at offset %d), want a JSON object", invalidUTF8At(value))
	}
	if !json.Valid(value) {
		var raw json.RawMessage
		err := json.Unmarshal(value, &raw)
		msg := "syntax error"
		if err != nil {
			msg = err.Error()
		}
		return f, decodeError("value is not valid JSON (%s), want a JSON object", sanitize(msg))
	}
	i := refSkipWS(value, 0)
	if value[i] != '{' {
		return f, decodeError("value is a JSON %s, want a JSON object", kindOf(value[i]))
	}
	i = refSkipWS(value, i+1)
	if value[i] == '}' {
		return f, nil
	}
	for {
		end := refSkipString(value, i)
		name := value[i+1 : end-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			name = unescape(value[i:end])
		}
		i = refSkipWS(value, end)
		i = refSkipWS(value, i+1)
		end = refSkipValue(value, i)
		if slot := f.field(name); slot != nil {
			*slot = refJSONField(value[i:end])
		}
		i = refSkipWS(value, end)
		if value[i] == '}' {
			return f, nil
		}
		i = refSkipWS(value, i+1)
	}
}

func refJSONField(raw []byte) Field {
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

func refSkipWS(b []byte, i int) int {
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

func refSkipString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i++
		}
	}
}

func refSkipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return refSkipString(b, i)
	case '{', '[':
		depth := 0
		for {
			switch b[i] {
			case '"':
				i = refSkipString(b, i)
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
	default:
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

// TestSpecialBytes checks the SWAR test of str against the byte table:
// every byte value at every position among fillers at the edges of the
// ranges, and random words.
func TestSpecialBytes(t *testing.T) {
	check := func(w [8]byte) {
		first := 8 // the first byte that is not plain, or 8
		for k, c := range w {
			if !plain[c] {
				first = k
				break
			}
		}
		m := specialBytes(binary.LittleEndian.Uint64(w[:]))
		if got := bits.TrailingZeros64(m) / 8; got != first || m&^0x8080808080808080 != 0 {
			t.Fatalf("specialBytes(% x) = %#x: first at %d, want %d", w, m, got, first)
		}
	}
	for _, filler := range []byte{'a', ' ', 0x21, '"' + 1, '\\' + 1, 0x7f, 0x1f, 0x80, 0xff, '"', '\\', 0} {
		for pos := 0; pos < 8; pos++ {
			for c := 0; c < 256; c++ {
				var w [8]byte
				for k := range w {
					w[k] = filler
				}
				w[pos] = byte(c)
				check(w)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		var w [8]byte
		for k := range w {
			w[k] = byte(r.IntN(0x90)) // mostly ASCII, so that all-plain words occur
		}
		check(w)
	}
}
