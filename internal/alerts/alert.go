package alerts

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"strconv"
	"time"
)

// Alert statuses (SPEC section 4, Emission).
const (
	StatusOpen    = "open"
	StatusUpdated = "updated"
	StatusMerged  = "merged"
	StatusClosed  = "closed"
)

// WatermarkNone is Alert.Watermark when the partition has no watermark yet
// (minus infinity); it is written as JSON null.
const WatermarkNone int64 = math.MinInt64

// Evidence is one input event named by an alert.
type Evidence struct {
	EventID  string
	SensorID string
	// TS is the event time in milliseconds since the Unix epoch.
	TS int64
	// Value is in mm/s, after normalisation.
	Value float64
	// Partition and Offset locate the input record that carried the event.
	Partition int32
	Offset    int64
}

// Aggregate is an aggregating rule's aggregate: its function and value.
type Aggregate struct {
	Fn    string // count, sum, avg, min or max
	Value float64
}

// Alert is one revision of an alert, as written to the alerts topic. Encode
// and Decode convert it to and from its JSON value (see the package
// documentation for the schema); Alert has no struct tags on purpose, so
// that json.Marshal is not mistaken for the wire format.
type Alert struct {
	AlertID  string
	Revision int
	// Status is StatusOpen, StatusUpdated, StatusMerged or StatusClosed.
	Status string
	// MergedInto is the surviving alert's id; set exactly when Status is
	// StatusMerged.
	MergedInto  string
	RuleID      string
	RuleVersion int
	MachineID   string
	// Start and End bound the incident in event time, milliseconds since
	// the Unix epoch.
	Start, End int64
	Count      int
	// KeyField and Key name the rule's key when it is not machine_id (for
	// example sensor_id and its value); both empty for machine-keyed rules,
	// whose key is MachineID.
	KeyField, Key string
	// Aggregate is the window's aggregate for aggregating rules (tumbling,
	// hopping, session windows); nil for the record-aligned sliding rule.
	Aggregate *Aggregate
	Evidence  []Evidence
	// EvidenceOmitted is how many evidence events were left out of Evidence
	// to keep the revision's value under the producer's record limit: the
	// events kept are the first len(Evidence) of the full list, in order.
	// 0 when Evidence is whole (then the member is not written).
	EvidenceOmitted int
	// Late is true when the revision was caused by an event behind the
	// watermark.
	Late bool
	// Watermark is the partition watermark when the revision was emitted,
	// in milliseconds since the Unix epoch; WatermarkNone when there is none.
	Watermark int64
	// Reason is one human sentence (see ReasonSentence).
	Reason string
}

// ID returns the deterministic alert id: the lower-case hex of the first 16
// bytes (32 hex digits) of
//
//	SHA-256( lp(rule_id) || lp(decimal(rule_version)) || lp(key) || lp(first_event_id) )
//
// where lp(s) is len(s) as an 8-byte big-endian unsigned integer followed by
// the bytes of s, and decimal(v) is v in base 10 without leading zeros ("-"
// for negatives, as strconv.Itoa). The length prefixes make the encoding
// unambiguous: no two different 4-tuples hash the same bytes.
// first_event_id is the event_id of the first evidence event of revision 0.
// Equal inputs give equal ids on every run; a new rule version gives new
// ids.
func ID(ruleID string, ruleVersion int, key, firstEventID string) string {
	h := sha256.New()
	var n [8]byte
	for _, s := range [4]string{ruleID, strconv.Itoa(ruleVersion), key, firstEventID} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return hex.EncodeToString(sum[:16])
}

// timeLayout is RFC 3339 in UTC with exactly three fraction digits.
const timeLayout = "2006-01-02T15:04:05.000Z"

// Representable range of the wire time format (four-digit years).
const (
	minWireMs int64 = -62167219200000 // 0000-01-01T00:00:00.000Z
	maxWireMs int64 = 253402300799999 // 9999-12-31T23:59:59.999Z
)

// FormatTime renders epoch milliseconds as RFC 3339 UTC with exactly
// millisecond precision, e.g. 2026-01-02T03:04:05.000Z. Negative values
// count back from 1970 (-1 is 1969-12-31T23:59:59.999Z). It never panics;
// outside years 0000..9999 the result is not RFC 3339, and Encode refuses
// such times.
func FormatTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(timeLayout)
}

// parseTime is the inverse of FormatTime for the wire format.
func parseTime(s string) (int64, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return 0, err
	}
	return t.UnixMilli(), nil
}
