package event

import (
	"math"
	"strconv"
)

// Field values fixed by the input contract, schema version 1.
const (
	// SchemaVersion1 is the only schema version this package can validate.
	SchemaVersion1 = 1

	// UnitMMPerSec is the canonical unit of Event.Value.
	UnitMMPerSec = "mm/s"
	// UnitInPerSec is accepted on input and normalised to mm/s.
	UnitInPerSec = "in/s"
	// MMPerInch converts in/s to mm/s (exact by the definition of the inch).
	MMPerInch = 25.4

	QualityGood      = "good"
	QualityUncertain = "uncertain"
	QualityBad       = "bad"

	ClockSynced   = "synced"
	ClockUnsynced = "unsynced"
	// DefaultClock is the clock value of an event that does not send one.
	DefaultClock = ClockSynced

	// MinTSMs and MaxTSMs bound Event.TS: 1970-01-01T00:00:00.000Z to
	// 9999-12-31T23:59:59.999Z, the range RFC 3339 and non-negative epoch
	// milliseconds have in common.
	MinTSMs int64 = 0
	MaxTSMs int64 = 253402300799999
)

// Event is one validated, normalised input event. Every Event returned
// without error by Validator.Check satisfies the contract: the three ids are
// non-empty, MinTSMs <= TS <= MaxTSMs, Seq >= 0, Value and RawValue are
// finite, Unit, Quality and Clock hold one of their constants above, and
// SchemaVersion is one of the validator's known versions.
type Event struct {
	EventID   string
	MachineID string
	SensorID  string
	// TS is the event time in milliseconds since the Unix epoch (UTC). Digits
	// of an RFC 3339 timestamp below the millisecond are truncated.
	TS  int64
	Seq int64
	// Value is the vibration velocity RMS in mm/s, after normalisation.
	Value float64
	// RawValue is the value as sent, in Unit.
	RawValue float64
	// Unit is the unit as sent: UnitMMPerSec or UnitInPerSec.
	Unit          string
	SchemaVersion int
	// Quality is QualityGood, QualityUncertain or QualityBad.
	Quality string
	// Clock is ClockSynced or ClockUnsynced; DefaultClock when not sent.
	Clock string
}

// Normalise converts raw, measured in unit, to mm/s. It reports false when
// unit is not a contract unit or the result is not finite.
//
// in/s is converted with a single rounding: the result is the float64
// nearest to the exact product of 25.4 and the shortest decimal form of raw
// (the number as the sender wrote it, for any sender using at most 17
// significant digits). So 0.3 in/s is 7.62 mm/s, not the
// 7.619999999999999 that the float64 product 0.3*25.4 gives: a value on a
// rule threshold stays on it, and evidence shows the number a person would
// compute.
func Normalise(raw float64, unit string) (float64, bool) {
	var v float64
	switch unit {
	case UnitMMPerSec:
		v = raw
	case UnitInPerSec:
		v = inchToMM(raw)
	default:
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}

// inchToMM returns the float64 nearest to shortestDecimal(raw) × 25.4,
// without allocating: the decimal digits are multiplied by 254 by hand.
func inchToMM(raw float64) float64 {
	if math.IsNaN(raw) || math.IsInf(raw, 0) {
		return raw
	}
	var in [32]byte
	s := strconv.AppendFloat(in[:0], raw, 'e', -1, 64) // [-]d[.ddd]e±dd
	var out [48]byte
	o := len(out)
	// Exponent: copied through, then lowered by one (254 = 25.4 × 10).
	e := len(s) - 1
	for s[e] != 'e' {
		e--
	}
	exp, _ := strconv.Atoi(string(s[e+1:]))
	mant := s[:e]
	neg := mant[0] == '-'
	if neg {
		mant = mant[1:]
	}
	frac := 0
	if len(mant) > 1 { // d.ddd
		frac = len(mant) - 2
	}
	exp -= frac + 1
	// out = digits(mant) × 254, right to left.
	carry := 0
	for k := len(mant) - 1; k >= 0; k-- {
		if mant[k] == '.' {
			continue
		}
		p := int(mant[k]-'0')*254 + carry
		o--
		out[o] = byte('0' + p%10)
		carry = p / 10
	}
	for carry > 0 {
		o--
		out[o] = byte('0' + carry%10)
		carry /= 10
	}
	num := in[:0] // reuse in: s is no longer needed
	if neg {
		num = append(num, '-')
	}
	num = append(num, out[o:]...)
	num = append(num, 'e')
	num = strconv.AppendInt(num, int64(exp), 10)
	v, _ := strconv.ParseFloat(string(num), 64) // ErrRange yields ±Inf
	return v
}
