package alerts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// Encode returns the alert's JSON value (SPEC section 3): one line, no
// trailing newline, members in the documented order, times as RFC 3339 UTC
// with milliseconds, values in their shortest round-tripping decimal form,
// and no HTML escaping (">=" stays ">="); invalid UTF-8 in a string is
// written as U+FFFD (encoding/json's rule). It fails, naming the field, on an
// alert that the schema cannot express: an unknown status, merged_into
// present without status merged or missing with it, a negative revision,
// count or evidence_omitted, a time outside years 0000..9999, or a
// non-finite evidence value.
//
// The encoder is hand-written (append-based, one allocation for the output)
// because encoding/json's reflection showed up at ~5% of the processor's CPU.
// Its output is byte-identical to what encoding/json wrote for the former
// struct-tag types, not merely equivalent JSON: replays and the determinism
// tests compare alert bytes with those of earlier runs, so any change in
// escaping, number form or member order would read as a different alert.
// wire_diff_test.go keeps the encoding/json version as the reference and
// compares both, by hand-picked cases and by fuzzing.
func (a Alert) Encode() ([]byte, error) {
	return a.AppendEncode(nil)
}

// AppendEncode appends the alert's JSON value (Encode) to b and returns the
// extended buffer, or b and the error Encode would return. b is grown at
// most once (to sizeHint's bound) unless a string needs escapes. With a
// stack or reused buffer of a few kilobytes, the caller can copy the value
// into an allocation of exactly its size, where Encode allocates an upper
// bound of it.
func (a *Alert) AppendEncode(b []byte) ([]byte, error) {
	if err := a.check(); err != nil {
		return b, fmt.Errorf("alerts: encode %s rev %d: %w", a.AlertID, a.Revision, err)
	}
	// After check nothing can fail: every float is finite and every time is
	// in the four-digit-year range appendTime handles.
	if n := a.sizeHint(); cap(b)-len(b) < n {
		// (Not slices.Grow: with -race it allocates twice.)
		b = append(make([]byte, 0, len(b)+n), b...)
	}
	return a.appendJSON(b), nil
}

// Upper bounds of the unquoted pieces whose length depends on the value.
const (
	maxIntLen   = len("-9223372036854775808")
	maxInt32Len = len("-2147483648")
	// The longest encoding/json float64: 17 significant digits in 'f' form
	// just above 1e-6 ("-0.0000010000000000000002") or in 'e' form
	// ("-1.7976931348623157e+308").
	maxFloatLen = len("-0.0000010000000000000002")
	timeLen     = len(timeLayout)
)

// The constant parts of an alert and of one evidence object, with every
// optional member present; sizeHint adds the variable parts to them.
const (
	alertSkeleton = `{"alert_id":"","revision":,"status":"","merged_into":"","rule_id":"",` +
		`"rule_version":,"machine_id":"","start":"","end":"","count":,"key_field":"","key":"",` +
		`"aggregate":{"fn":"","value":},"evidence":[],"evidence_omitted":,"late":false,"watermark":"","reason":""}`
	evidenceSkeleton = `{"event_id":"","sensor_id":"","ts":"","value":,"partition":,"offset":},`
)

// sizeHint is an upper bound of the encoded length when no string needs an
// escape, so that Encode allocates its output once; escapes (rare in
// practice) only cost a regrowth.
func (a *Alert) sizeHint() int {
	n := len(alertSkeleton) + 4*maxIntLen + 3*timeLen + maxFloatLen +
		len(a.AlertID) + len(a.Status) + len(a.MergedInto) + len(a.RuleID) +
		len(a.MachineID) + len(a.KeyField) + len(a.Key) + len(a.Reason)
	if a.Aggregate != nil {
		n += len(a.Aggregate.Fn)
	}
	for i := range a.Evidence {
		e := &a.Evidence[i]
		n += len(evidenceSkeleton) + timeLen + maxFloatLen + maxInt32Len + maxIntLen +
			len(e.EventID) + len(e.SensorID)
	}
	return n
}

// appendJSON appends the alert's JSON value. Members, their order and the
// omitempty rules are those of the former encoding/json struct tags:
// merged_into, key_field and key are omitted when empty, aggregate when nil;
// evidence is always an array ([] when nil or empty) and watermark is null
// when it is WatermarkNone. evidence_omitted, added later, is written only
// when it is not 0, so that the values of whole alerts did not change.
func (a *Alert) appendJSON(b []byte) []byte {
	b = append(b, `{"alert_id":`...)
	b = appendString(b, a.AlertID)
	b = append(b, `,"revision":`...)
	b = strconv.AppendInt(b, int64(a.Revision), 10)
	b = append(b, `,"status":`...)
	b = appendString(b, a.Status)
	b = appendOptionalString(b, `,"merged_into":`, a.MergedInto)
	b = append(b, `,"rule_id":`...)
	b = appendString(b, a.RuleID)
	b = append(b, `,"rule_version":`...)
	b = strconv.AppendInt(b, int64(a.RuleVersion), 10)
	b = append(b, `,"machine_id":`...)
	b = appendString(b, a.MachineID)
	b = append(b, `,"start":`...)
	b = appendQuotedTime(b, a.Start)
	b = append(b, `,"end":`...)
	b = appendQuotedTime(b, a.End)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, int64(a.Count), 10)
	b = appendOptionalString(b, `,"key_field":`, a.KeyField)
	b = appendOptionalString(b, `,"key":`, a.Key)
	b = appendAggregate(b, a.Aggregate)
	b = appendEvidence(b, a.Evidence)
	if a.EvidenceOmitted != 0 {
		b = append(b, `,"evidence_omitted":`...)
		b = strconv.AppendInt(b, int64(a.EvidenceOmitted), 10)
	}
	b = append(b, `,"late":`...)
	b = strconv.AppendBool(b, a.Late)
	b = append(b, `,"watermark":`...)
	if a.Watermark == WatermarkNone {
		b = append(b, "null"...)
	} else {
		b = appendQuotedTime(b, a.Watermark)
	}
	b = append(b, `,"reason":`...)
	b = appendString(b, a.Reason)
	return append(b, '}')
}

// appendOptionalString appends member (its leading comma, name and colon)
// and the string s, or nothing when s is empty (omitempty).
func appendOptionalString(b []byte, member, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, member...)
	return appendString(b, s)
}

// appendAggregate appends the aggregate member, or nothing when g is nil.
func appendAggregate(b []byte, g *Aggregate) []byte {
	if g == nil {
		return b
	}
	b = append(b, `,"aggregate":{"fn":`...)
	b = appendString(b, g.Fn)
	b = append(b, `,"value":`...)
	b = appendFloat(b, g.Value)
	return append(b, '}')
}

// appendEvidence appends the evidence member; it is never null, since
// encoding/json was given a non-nil slice even for a nil Evidence.
func appendEvidence(b []byte, evidence []Evidence) []byte {
	b = append(b, `,"evidence":[`...)
	for i := range evidence {
		if i > 0 {
			b = append(b, ',')
		}
		e := &evidence[i]
		b = append(b, `{"event_id":`...)
		b = appendString(b, e.EventID)
		b = append(b, `,"sensor_id":`...)
		b = appendString(b, e.SensorID)
		b = append(b, `,"ts":`...)
		b = appendQuotedTime(b, e.TS)
		b = append(b, `,"value":`...)
		b = appendFloat(b, e.Value)
		b = append(b, `,"partition":`...)
		b = strconv.AppendInt(b, int64(e.Partition), 10)
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, e.Offset, 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string exactly as encoding/json does with
// SetEscapeHTML(false): '"' and '\\' are backslash-escaped, \b \f \n \r \t
// use their short escapes, other bytes below 0x20 become \u00xx (lower-case
// hex), each invalid UTF-8 byte becomes \ufffd, and U+2028 and U+2029 become
// \u2028 and \u2029 (for JSONP). Everything else, including '<', '>', '&'
// and DEL, is copied as is.
//
// Runs of bytes that need no escape (the whole string, almost always) are
// found eight bytes at a time (plainWord) and copied in one append; only an
// escape or a non-ASCII byte takes the byte-wise path.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] is pending: copied in one append when an escape comes
	for i := 0; i < len(s); {
		i += plainPrefix(s[i:])
		if i == len(s) {
			break
		}
		if c := s[i]; c < utf8.RuneSelf {
			if plainASCII[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			b = appendEscapedByte(b, c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// plainASCII[c] is true for the ASCII bytes appendString copies as is:
// all but the control characters, '"' and '\\'.
var plainASCII = func() (t [utf8.RuneSelf]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

// Byte-wise masks of a 64-bit word: 0x01 and 0x80 in every byte.
const (
	lowBits  = 0x0101010101010101
	highBits = 0x8080808080808080
)

// plainPrefix returns the length of the longest prefix of s made of whole
// 8-byte words in which no byte needs appendString's attention (plainWord).
func plainPrefix(s string) int {
	n := 0
	for ; n+8 <= len(s); n += 8 {
		w := s[n : n+8]
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		if !plainWord(x) {
			break
		}
	}
	return n
}

// plainWord reports whether none of the 8 bytes of x is below 0x20, '"',
// '\\' or non-ASCII (>= 0x80). It tests the bytes in parallel: for x
// without high bits, (x - n*lowBits) &^ x has a high bit set in the lowest
// byte below n and in none when there is no such byte (the borrow may mark
// bytes after it, which only matters for locating a byte, not for whether
// there is one); a byte equal to c is a zero byte of x ^ c*lowBits, a byte
// below 1.
func plainWord(x uint64) bool {
	control := (x - 0x20*lowBits) &^ x
	quote := x ^ '"'*lowBits
	quote = (quote - lowBits) &^ quote
	backslash := x ^ '\\'*lowBits
	backslash = (backslash - lowBits) &^ backslash
	return (x|control|quote|backslash)&highBits == 0
}

// appendEscapedByte appends the escape of an ASCII byte that JSON (or
// encoding/json) does not write as is: '"', '\\' or a control character.
func appendEscapedByte(b []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(b, '\\', c)
	case '\b':
		return append(b, '\\', 'b')
	case '\f':
		return append(b, '\\', 'f')
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	return append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
}

// appendFloat appends a finite f as encoding/json writes a float64 (ES6
// number-to-string): the shortest decimal that reads back as f, in 'f' form
// unless |f| < 1e-6 or |f| >= 1e21, where it uses 'e' form with the
// exponent's leading zero dropped (1e-07 becomes 1e-7). Negative zero is
// written "-0", as encoding/json does.
func appendFloat(b []byte, f float64) []byte {
	if d, ok := appendShortDecimal(b, f); ok {
		return d
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// A two-digit negative exponent "e-0d" becomes "e-d".
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// maxShortFraction is the most fraction digits appendShortDecimal tries:
// sensor values are written with up to three decimals (a few more after a
// unit conversion), and each digit tried costs a float division on the way
// to strconv for the values that have none such form.
const maxShortFraction = 8

// pow10 holds the powers of ten up to 10^maxShortFraction, exact in both
// types.
var (
	pow10Float = [maxShortFraction + 1]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8}
	pow10Int   = [maxShortFraction + 1]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8}
)

// appendShortDecimal appends f as appendFloat does when f is the float64
// nearest to n/10^k for an integer n < 2^50 and k <= maxShortFraction (most
// sensor values and aggregates: 7.5, 12, 9.125), and reports false, having
// appended nothing, otherwise. It is the fast path of strconv's shortest
// formatting for such numbers:
//
//   - If f reads back from some n/10^k, abs*10^k rounds to n: f is within
//     half an ulp (at most abs*2^-53) of n/10^k and the product adds at
//     most as much again, together less than 1/4 when n < 2^50. So the loop
//     stops at the fewest fraction digits of any such decimal of f, which
//     for a given f is also the fewest significant digits.
//   - It is the only decimal with k fraction digits that reads back as f:
//     its neighbours are 10^-k away, more than four ulps of f when
//     n < 2^50, so strconv has no closer one to choose instead.
//   - n/10^k == abs in float64 is exactly "reads back as f": n and 10^k are
//     exact and the division rounds to nearest, ties to even, as ParseFloat
//     does.
//
// 1e-6 <= |f| < 2^50 keeps the number in appendFloat's 'f' form, and leaves
// out 0 and -0 (strconv's "0" and "-0").
func appendShortDecimal(b []byte, f float64) ([]byte, bool) {
	abs := math.Abs(f)
	if !(abs >= 1e-6 && abs < 1<<50) {
		return b, false
	}
	for k, p := range pow10Float {
		n := math.Round(abs * p)
		if n >= 1<<50 {
			return b, false
		}
		if n/p == abs {
			if f < 0 {
				b = append(b, '-')
			}
			return appendFixed(b, uint64(n), k), true
		}
	}
	return b, false
}

// appendFixed appends n/10^k in decimal with exactly k fraction digits
// (none and no point for k = 0).
func appendFixed(b []byte, n uint64, k int) []byte {
	b = strconv.AppendUint(b, n/pow10Int[k], 10)
	if k == 0 {
		return b
	}
	var digits [maxShortFraction]byte
	frac := n % pow10Int[k]
	for i := k - 1; i >= 0; i-- {
		digits[i] = byte('0' + frac%10)
		frac /= 10
	}
	b = append(b, '.')
	return append(b, digits[:k]...)
}

// appendQuotedTime appends FormatTime(ms) as a JSON string; its characters
// never need an escape.
func appendQuotedTime(b []byte, ms int64) []byte {
	b = append(b, '"')
	b = appendTime(b, ms)
	return append(b, '"')
}

const (
	msPerDay = 24 * 60 * 60 * 1000
	// daysPer400Years is the length of the Gregorian cycle.
	daysPer400Years = 146097
	// daysJanFeb0000 is the number of days in January and February of year
	// 0000 (a leap year): appendTime counts years from 1 March.
	daysJanFeb0000 = 31 + 29
)

// appendTime appends FormatTime(ms) without allocating. It is exact only for
// minWireMs <= ms <= maxWireMs (years 0000..9999), the only times check lets
// through; wire_diff_test.go compares it with FormatTime over that range.
func appendTime(b []byte, ms int64) []byte {
	sinceYear0 := ms - minWireMs // >= 0; minWireMs is a midnight
	days, msOfDay := sinceYear0/msPerDay, sinceYear0%msPerDay
	year, month, day := civilDate(days)
	// Filled in place in a copy of the layout, then appended at once.
	t := [len(timeLayout)]byte{'0', '0', '0', '0', '-', '0', '0', '-', '0', '0', 'T',
		'0', '0', ':', '0', '0', ':', '0', '0', '.', '0', '0', '0', 'Z'}
	putPair(t[0:2], uint64(year)/100)
	putPair(t[2:4], uint64(year)%100)
	putPair(t[5:7], uint64(month))
	putPair(t[8:10], uint64(day))
	sec, milli := uint64(msOfDay)/1000, uint64(msOfDay)%1000
	putPair(t[11:13], sec/3600)
	putPair(t[14:16], sec/60%60)
	putPair(t[17:19], sec%60)
	t[20] = byte('0' + milli/100)
	putPair(t[21:23], milli%100)
	return append(b, t[:]...)
}

// digitPairs holds "00" to "99": the two digits of v at digitPairs[2v:].
const digitPairs = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" +
	"30313233343536373839" + "40414243444546474849" + "50515253545556575859" +
	"60616263646566676869" + "70717273747576777879" + "80818283848586878889" +
	"90919293949596979899"

// putPair writes v (< 100) as two decimal digits into dst[0:2].
func putPair(dst []byte, v uint64) {
	dst[1], dst[0] = digitPairs[2*v+1], digitPairs[2*v]
}

// civilDate converts days since 0000-01-01 (proleptic Gregorian, >= 0) to a
// year, month and day, after Howard Hinnant's civil_from_days: years start on
// 1 March so that the leap day ends them. The count is shifted by one
// 400-year cycle to keep every division on non-negative numbers (January and
// February of year 0000 belong to the March-based year -1).
func civilDate(days int64) (year, month, day int64) {
	z := days - daysJanFeb0000 + daysPer400Years // days since -0400-03-01
	era, doe := z/daysPer400Years, z%daysPer400Years
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // [0, 399]
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // [0, 365], from 1 March
	mp := (5*doy + 2) / 153                                // [0, 11], March = 0
	day = doy - (153*mp+2)/5 + 1
	month = mp + 3
	year = yoe + (era-1)*400
	if month > 12 {
		month -= 12
		year++
	}
	return year, month, day
}

// check reports the first field the JSON schema cannot express.
func (a *Alert) check() error {
	switch a.Status {
	case StatusOpen, StatusUpdated, StatusClosed:
		if a.MergedInto != "" {
			return fmt.Errorf("merged_into %q with status %q, want it only with %q", a.MergedInto, a.Status, StatusMerged)
		}
	case StatusMerged:
		if a.MergedInto == "" {
			return fmt.Errorf("status %q without merged_into", StatusMerged)
		}
	default:
		return fmt.Errorf("status %q, want one of open, updated, merged, closed", a.Status)
	}
	if a.AlertID == "" {
		return errors.New("empty alert_id")
	}
	if a.Revision < 0 {
		return fmt.Errorf("revision %d, want >= 0", a.Revision)
	}
	if a.Count < 0 {
		return fmt.Errorf("count %d, want >= 0", a.Count)
	}
	if a.EvidenceOmitted < 0 {
		return fmt.Errorf("evidence_omitted %d, want >= 0", a.EvidenceOmitted)
	}
	if (a.KeyField == "") != (a.Key == "") {
		return fmt.Errorf("key_field %q with key %q, want both or neither", a.KeyField, a.Key)
	}
	if g := a.Aggregate; g != nil {
		if g.Fn == "" {
			return errors.New("aggregate without fn")
		}
		if math.IsNaN(g.Value) || math.IsInf(g.Value, 0) {
			return fmt.Errorf("aggregate.value %v, want a finite number", g.Value)
		}
	}
	if err := checkTime("start", a.Start); err != nil {
		return err
	}
	if err := checkTime("end", a.End); err != nil {
		return err
	}
	if a.Watermark != WatermarkNone {
		if err := checkTime("watermark", a.Watermark); err != nil {
			return err
		}
	}
	for i, e := range a.Evidence {
		// The field name is formatted only on failure: Sprintf on every
		// event cost one allocation each on Encode's hot path.
		if !timeInRange(e.TS) {
			return checkTime(fmt.Sprintf("evidence[%d].ts", i), e.TS)
		}
		if math.IsNaN(e.Value) || math.IsInf(e.Value, 0) {
			return fmt.Errorf("evidence[%d].value %v, want a finite number", i, e.Value)
		}
	}
	return nil
}

func checkTime(field string, ms int64) error {
	if !timeInRange(ms) {
		return fmt.Errorf("%s %d ms is outside years 0000..9999", field, ms)
	}
	return nil
}

// timeInRange reports whether ms is in years 0000..9999, the range of the
// wire time format.
func timeInRange(ms int64) bool {
	return ms >= minWireMs && ms <= maxWireMs
}

// wireIn is the alert JSON value as read: pointers tell a missing or null
// member from a zero one.
type wireIn struct {
	AlertID     *string `json:"alert_id"`
	Revision    *int    `json:"revision"`
	Status      *string `json:"status"`
	MergedInto  *string `json:"merged_into"`
	RuleID      *string `json:"rule_id"`
	RuleVersion *int    `json:"rule_version"`
	MachineID   *string `json:"machine_id"`
	Start       *string `json:"start"`
	End         *string `json:"end"`
	Count       *int    `json:"count"`
	KeyField    *string `json:"key_field"`
	Key         *string `json:"key"`
	Aggregate   *struct {
		Fn    *string  `json:"fn"`
		Value *float64 `json:"value"`
	} `json:"aggregate"`
	Evidence *[]struct {
		EventID   *string  `json:"event_id"`
		SensorID  *string  `json:"sensor_id"`
		TS        *string  `json:"ts"`
		Value     *float64 `json:"value"`
		Partition *int32   `json:"partition"`
		Offset    *int64   `json:"offset"`
	} `json:"evidence"`
	EvidenceOmitted *int            `json:"evidence_omitted"`
	Late            *bool           `json:"late"`
	Watermark       json.RawMessage `json:"watermark"`
	Reason          *string         `json:"reason"`
}

// Decode parses an alert JSON value written by Encode. It is strict: every
// member must be present (merged_into exactly with status merged,
// evidence_omitted only when not 0), unknown members and trailing data are
// errors, and times must be in Encode's format. An empty evidence list
// decodes as nil.
func Decode(b []byte) (Alert, error) {
	var w wireIn
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Alert{}, fmt.Errorf("alerts: decode: %w", err)
	}
	if dec.More() {
		return Alert{}, errors.New("alerts: decode: data after the JSON value")
	}
	if _, err := dec.Token(); err == nil {
		return Alert{}, errors.New("alerts: decode: data after the JSON value")
	}
	missing := func(name string) (Alert, error) {
		return Alert{}, fmt.Errorf("alerts: decode: member %q missing or null", name)
	}
	if name := w.missingIdentity(); name != "" {
		return missing(name)
	}
	switch {
	case w.Count == nil:
		return missing("count")
	case w.Evidence == nil:
		return missing("evidence")
	case w.Late == nil:
		return missing("late")
	case w.Watermark == nil:
		return missing("watermark")
	case w.Reason == nil:
		return missing("reason")
	}
	a, err := w.alert(parseTime)
	if err != nil {
		return Alert{}, err
	}
	if a.MergedInto == "" && w.MergedInto != nil {
		return Alert{}, errors.New("alerts: decode: empty merged_into")
	}
	if w.EvidenceOmitted != nil && *w.EvidenceOmitted == 0 {
		return Alert{}, errors.New("alerts: decode: evidence_omitted 0 (the member is written only when not 0)")
	}
	if err := a.check(); err != nil {
		return Alert{}, fmt.Errorf("alerts: decode: %w", err)
	}
	return a, nil
}

// DecodeLenient parses an alert JSON value as a consumer of the format
// should (docs/ARCHITECTURE.md): unknown members are ignored, so that a
// processor writing a later format version does not make its alerts
// unreadable; only the identity members are required (alert_id non-empty,
// revision >= 0, status, rule_id, rule_version, machine_id, start, end),
// the others default to their zero value (watermark to WatermarkNone);
// times may be any RFC 3339 form. Delivery (package deliver) reads alerts
// with it; Decode is the strict twin that catches drift in the processor's
// own tests.
func DecodeLenient(b []byte) (Alert, error) {
	var w wireIn
	if err := json.Unmarshal(b, &w); err != nil {
		return Alert{}, fmt.Errorf("alerts: decode: %w", err)
	}
	if name := w.missingIdentity(); name != "" {
		return Alert{}, fmt.Errorf("alerts: decode: member %q missing or null", name)
	}
	if *w.AlertID == "" {
		return Alert{}, errors.New("alerts: decode: empty alert_id")
	}
	if *w.Revision < 0 {
		return Alert{}, fmt.Errorf("alerts: decode: revision %d, want >= 0", *w.Revision)
	}
	return w.alert(func(s string) (int64, error) {
		t, err := time.Parse(time.RFC3339Nano, s)
		return t.UnixMilli(), err
	})
}

// missingIdentity returns the first missing member that identifies the
// revision, or "".
func (w *wireIn) missingIdentity() string {
	switch {
	case w.AlertID == nil:
		return "alert_id"
	case w.Revision == nil:
		return "revision"
	case w.Status == nil:
		return "status"
	case w.RuleID == nil:
		return "rule_id"
	case w.RuleVersion == nil:
		return "rule_version"
	case w.MachineID == nil:
		return "machine_id"
	case w.Start == nil:
		return "start"
	case w.End == nil:
		return "end"
	}
	return ""
}

// alert converts w (identity members present) with parse for times.
// Optional members that are missing or null take their zero value.
func (w *wireIn) alert(parse func(string) (int64, error)) (Alert, error) {
	a := Alert{
		AlertID:         *w.AlertID,
		Revision:        *w.Revision,
		Status:          *w.Status,
		MergedInto:      orZero(w.MergedInto),
		RuleID:          *w.RuleID,
		RuleVersion:     *w.RuleVersion,
		MachineID:       *w.MachineID,
		Count:           orZero(w.Count),
		KeyField:        orZero(w.KeyField),
		Key:             orZero(w.Key),
		EvidenceOmitted: orZero(w.EvidenceOmitted),
		Late:            orZero(w.Late),
		Watermark:       WatermarkNone,
		Reason:          orZero(w.Reason),
	}
	if g := w.Aggregate; g != nil {
		if g.Fn == nil || g.Value == nil {
			return Alert{}, errors.New("alerts: decode aggregate: a member is missing or null")
		}
		a.Aggregate = &Aggregate{Fn: *g.Fn, Value: *g.Value}
	}
	var err error
	if a.Start, err = parse(*w.Start); err != nil {
		return Alert{}, fmt.Errorf("alerts: decode start: %w", err)
	}
	if a.End, err = parse(*w.End); err != nil {
		return Alert{}, fmt.Errorf("alerts: decode end: %w", err)
	}
	if len(w.Watermark) > 0 && string(w.Watermark) != "null" {
		var s string
		if err := json.Unmarshal(w.Watermark, &s); err != nil {
			return Alert{}, fmt.Errorf("alerts: decode watermark: %w", err)
		}
		if a.Watermark, err = parse(s); err != nil {
			return Alert{}, fmt.Errorf("alerts: decode watermark: %w", err)
		}
	}
	if w.Evidence == nil {
		return a, nil
	}
	for i, e := range *w.Evidence {
		if e.EventID == nil || e.SensorID == nil || e.TS == nil || e.Value == nil || e.Partition == nil || e.Offset == nil {
			return Alert{}, fmt.Errorf("alerts: decode evidence[%d]: a member is missing or null", i)
		}
		ts, err := parse(*e.TS)
		if err != nil {
			return Alert{}, fmt.Errorf("alerts: decode evidence[%d].ts: %w", i, err)
		}
		a.Evidence = append(a.Evidence, Evidence{
			EventID: *e.EventID, SensorID: *e.SensorID, TS: ts,
			Value: *e.Value, Partition: *e.Partition, Offset: *e.Offset,
		})
	}
	return a, nil
}

// orZero is *p, or the zero value when p is nil (an optional member that
// is missing or null).
func orZero[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
