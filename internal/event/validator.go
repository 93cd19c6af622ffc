package event

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Defaults of Options, in one place.
const (
	// DefaultMaxFutureSkewMs is SPEC's max_future_skew: 5 minutes.
	DefaultMaxFutureSkewMs int64 = 5 * 60 * 1000
	// DefaultMaxBytes is the largest record value decoded: 900,000 bytes,
	// so that the copies of a valid record (too-late output, repartition
	// topic), with their headers, fit in the producer's records of about
	// 1 MB (franz-go's 1,000,012-byte batches).
	DefaultMaxBytes = 900_000
)

// DefaultKnownVersions returns the schema versions known by default: {1}.
func DefaultKnownVersions() []int { return []int{SchemaVersion1} }

// Options configure a Validator. The zero value means every default.
type Options struct {
	// MaxFutureSkewMs is how far, in milliseconds, an event's ts may be
	// ahead of its Kafka record timestamp before the record is rejected as
	// clock_ahead. Default DefaultMaxFutureSkewMs (300000 = 5m); zero or
	// negative means the default.
	MaxFutureSkewMs int64
	// KnownVersions lists the accepted schema_version values; any other
	// integer is schema_unknown. Default {1}; empty means the default. Every
	// known version is validated with the version 1 field rules: listing a
	// version here is a promise that it is a compatible superset of 1.
	KnownVersions []int
	// MaxBytes is the largest record value, in bytes, that is decoded; a
	// larger value is decode_error without being parsed. Default
	// DefaultMaxBytes (900,000 bytes); zero or negative means the default.
	MaxBytes int
}

// EnsureDefaults fills every unset field with its default and returns o.
// KnownVersions is copied, so the caller may reuse its slice.
func (o *Options) EnsureDefaults() *Options {
	if o.MaxFutureSkewMs <= 0 {
		o.MaxFutureSkewMs = DefaultMaxFutureSkewMs
	}
	if len(o.KnownVersions) == 0 {
		o.KnownVersions = DefaultKnownVersions()
	} else {
		o.KnownVersions = append([]int(nil), o.KnownVersions...)
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	return o
}

// Validator applies the input contract (SPEC sections 2 and 3) to Kafka
// records. It holds no mutable state and is safe for concurrent use.
type Validator struct {
	dec   Decoder
	opts  Options
	known string // KnownVersions for details, e.g. "1, 2"
}

// NewValidator returns a Validator decoding with dec (JSONDecoder when nil)
// and opts with defaults applied.
func NewValidator(dec Decoder, opts Options) *Validator {
	if dec == nil {
		dec = JSONDecoder{}
	}
	opts.EnsureDefaults()
	known := make([]string, len(opts.KnownVersions))
	for i, v := range opts.KnownVersions {
		known[i] = strconv.Itoa(v)
	}
	return &Validator{dec: dec, opts: opts, known: strings.Join(known, ", ")}
}

// Options returns the validator's options, defaults applied.
func (v *Validator) Options() Options {
	o := v.opts
	o.KnownVersions = append([]int(nil), o.KnownVersions...)
	return o
}

// Check runs step 1 of SPEC section 4 on one Kafka record: decode, validate,
// normalise, compare the key, and test the clock skew. It returns the event,
// or the first failure in the order of SPEC section 3:
//
//  0. too_large: value is larger than MaxBytes (it is not parsed);
//  1. decode_error: value is empty or not decodable
//     (for JSON: not exactly one JSON object in valid UTF-8);
//  2. invalid_field: schema_version is missing, null or not an integer;
//  3. schema_unknown: schema_version is not in KnownVersions;
//  4. invalid_field: the first bad field in the order event_id, machine_id,
//     sensor_id, ts, seq, value, unit, quality, clock (null counts as the
//     wrong type, except for the optional clock, where null means absent);
//  5. key_mismatch: key is non-empty and differs from machine_id, byte for
//     byte (a nil or empty key means "no key" and is accepted);
//  6. clock_ahead: ts > recordTSMs + MaxFutureSkewMs. A negative recordTSMs
//     (Kafka's "no timestamp", -1) skips this test.
//
// Integer fields (schema_version, seq, ts as epoch milliseconds) accept any
// JSON number that is exactly an integer: 100, 100.0 and 1e2 are accepted,
// 1.5 is invalid_field.
//
// The error is returned as *Error, not error: test it against nil before
// storing it in an error variable (a nil *Error in an error is not nil).
func (v *Validator) Check(key, value []byte, recordTSMs int64) (Event, *Error) {
	if len(value) > v.opts.MaxBytes {
		return Event{}, &Error{Reason: ReasonTooLarge,
			Detail: fmt.Sprintf("value is %d bytes, larger than the limit of %d bytes", len(value), v.opts.MaxBytes)}
	}
	f, err := v.dec.Decode(value)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return Event{}, e
		}
		return Event{}, decodeError("%s", sanitize(err.Error()))
	}

	// schema_version first: it decides which rules apply to the rest.
	sv := &f.SchemaVersion
	if sv.Kind != KindNumber || !sv.IsInt {
		return Event{}, invalid(FieldSchemaVersion, sv, "an integer")
	}
	if !v.knows(sv.Int) {
		return Event{}, &Error{
			Reason: ReasonSchemaUnknown,
			Field:  FieldSchemaVersion,
			Detail: fmt.Sprintf("field %q is %d, a schema version this processor does not know; known versions: %s", FieldSchemaVersion, sv.Int, v.known),
		}
	}

	ev, e := fromFields(&f)
	if e != nil {
		return Event{}, e
	}
	ev.SchemaVersion = int(sv.Int)

	if len(key) > 0 && string(key) != ev.MachineID {
		return Event{}, &Error{
			Reason: ReasonKeyMismatch,
			Field:  FieldMachineID,
			Detail: fmt.Sprintf("record key %s does not match field %q %s; want them equal, or no key", quote(key), FieldMachineID, quote([]byte(ev.MachineID))),
		}
	}

	skew := v.opts.MaxFutureSkewMs
	if recordTSMs >= 0 && recordTSMs <= math.MaxInt64-skew && ev.TS > recordTSMs+skew {
		return Event{}, &Error{
			Reason: ReasonClockAhead,
			Field:  FieldTS,
			Detail: fmt.Sprintf("field %q is %s (%d), %d ms ahead of the record timestamp %s (%d); want at most %d ms ahead",
				FieldTS, formatMs(ev.TS), ev.TS, ev.TS-recordTSMs, formatMs(recordTSMs), recordTSMs, skew),
		}
	}
	return ev, nil
}

func (v *Validator) knows(version int64) bool {
	for _, k := range v.opts.KnownVersions {
		if int64(k) == version {
			return true
		}
	}
	return false
}

// fromFields applies the version 1 field rules, in the documented order.
func fromFields(f *Fields) (Event, *Error) {
	var ev Event
	var e *Error
	if ev.EventID, e = nonEmpty(FieldEventID, &f.EventID); e != nil {
		return ev, e
	}
	if ev.MachineID, e = nonEmpty(FieldMachineID, &f.MachineID); e != nil {
		return ev, e
	}
	if ev.SensorID, e = nonEmpty(FieldSensorID, &f.SensorID); e != nil {
		return ev, e
	}
	if ev.TS, e = timestamp(&f.TS); e != nil {
		return ev, e
	}
	if s := &f.Seq; s.Kind != KindNumber || !s.IsInt || s.Int < 0 {
		return ev, invalid(FieldSeq, s, "an integer >= 0")
	}
	ev.Seq = f.Seq.Int
	val := &f.Value
	if val.Kind != KindNumber || math.IsInf(val.Num, 0) || math.IsNaN(val.Num) {
		return ev, invalid(FieldValue, val, "a finite number")
	}
	ev.RawValue = val.Num
	if ev.Unit, e = oneOf(FieldUnit, &f.Unit, UnitMMPerSec, UnitInPerSec); e != nil {
		return ev, e
	}
	if ev.Quality, e = oneOf(FieldQuality, &f.Quality, QualityGood, QualityUncertain, QualityBad); e != nil {
		return ev, e
	}
	if c := &f.Clock; c.Kind == KindAbsent || c.Kind == KindNull {
		ev.Clock = DefaultClock
	} else if ev.Clock, e = oneOf(FieldClock, c, ClockSynced, ClockUnsynced); e != nil {
		return ev, e
	}
	var ok bool
	if ev.Value, ok = Normalise(ev.RawValue, ev.Unit); !ok {
		return ev, &Error{
			Reason: ReasonInvalidField,
			Field:  FieldValue,
			Detail: fmt.Sprintf("field %q is %s %s, which is not finite in %s; want a finite number", FieldValue, show(val), ev.Unit, UnitMMPerSec),
		}
	}
	return ev, nil
}

func nonEmpty(name string, f *Field) (string, *Error) {
	if f.Kind != KindString || len(f.Text) == 0 {
		return "", invalid(name, f, "a non-empty string")
	}
	if len(f.Text) > MaxIDBytes {
		return "", &Error{Reason: ReasonInvalidField, Field: name,
			Detail: fmt.Sprintf("field %q is a string of %d bytes; want at most %d bytes", name, len(f.Text), MaxIDBytes)}
	}
	return string(f.Text), nil
}

// MaxIDBytes bounds event_id, machine_id and sensor_id (SPEC.md says only
// "non-empty"): they become state keys, alert keys and evidence, and a
// record of a valid event is copied whole to the too-late output and the
// repartition topics, so an id of a megabyte would make copies larger than
// the producer can write. Real ids (UUIDs, serial numbers, paths of a few
// segments) are far shorter.
const MaxIDBytes = 1024

// oneOf returns the allowed constant equal to f (no allocation).
func oneOf(name string, f *Field, allowed ...string) (string, *Error) {
	if f.Kind == KindString {
		for _, a := range allowed {
			if string(f.Text) == a {
				return a, nil
			}
		}
	}
	want := make([]string, len(allowed))
	for i, a := range allowed {
		want[i] = strconv.Quote(a)
	}
	return "", invalid(name, f, "one of "+strings.Join(want, ", "))
}

func timestamp(f *Field) (int64, *Error) {
	const want = "an RFC 3339 date-time with a zone (e.g. \"2026-01-02T03:04:05.678Z\") or integer epoch milliseconds"
	var ms int64
	switch {
	case f.Kind == KindString:
		var problem string
		if ms, problem = parseRFC3339(f.Text); problem != "" {
			return 0, &Error{
				Reason: ReasonInvalidField,
				Field:  FieldTS,
				Detail: fmt.Sprintf("field %q is %s (%s); want %s", FieldTS, show(f), problem, want),
			}
		}
	case f.Kind == KindNumber && f.IsInt:
		ms = f.Int
	default:
		return 0, invalid(FieldTS, f, want)
	}
	if ms < MinTSMs || ms > MaxTSMs {
		return 0, &Error{
			Reason: ReasonInvalidField,
			Field:  FieldTS,
			Detail: fmt.Sprintf("field %q is %s (%d ms since the epoch), out of range; want a time from %s to %s",
				FieldTS, show(f), ms, formatMs(MinTSMs), formatMs(MaxTSMs)),
		}
	}
	return ms, nil
}

// invalid builds an invalid_field error for a missing or ill-typed field.
func invalid(name string, f *Field, want string) *Error {
	var d string
	if f.Kind == KindAbsent {
		d = fmt.Sprintf("field %q is missing; want %s", name, want)
	} else {
		d = fmt.Sprintf("field %q is %s; want %s", name, show(f), want)
	}
	return &Error{Reason: ReasonInvalidField, Field: name, Detail: d}
}

// maxShown bounds how much of a bad value a detail repeats.
const maxShown = 64

// show renders a field value for a detail: a string quoted, anything else as
// its raw text, quoted too unless it is short printable ASCII. The result is
// always printable, control-character-free UTF-8.
func show(f *Field) string {
	if f.Kind == KindString {
		return quote(f.Text)
	}
	if len(f.Raw) <= maxShown && printableASCII(f.Raw) {
		return string(f.Raw)
	}
	return quote(f.Raw)
}

// quote returns b Go-quoted (escaping control, invisible and invalid bytes),
// truncated to maxShown bytes at a rune boundary with the full length noted.
func quote(b []byte) string {
	if len(b) <= maxShown {
		return strconv.Quote(string(b))
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return strconv.Quote(string(b[:cut])) + fmt.Sprintf("... (%d bytes)", len(b))
}

func printableASCII(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// sanitize makes foreign error text safe for a detail: printable, one line,
// bounded.
func sanitize(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, s)
	if len(s) > 4*maxShown {
		cut := 4 * maxShown
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

// formatMs renders epoch milliseconds as RFC 3339 UTC with milliseconds.
func formatMs(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}
