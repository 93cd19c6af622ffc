package event

// Reason is the stable code of a rejected record. It is written to the
// dead-letter header error.reason and used as a metric label; its values
// never change meaning.
type Reason string

// The reason codes, in the order Validator.Check tests them (invalid_field is
// tested twice: once for schema_version alone, then for every other field).
const (
	// ReasonTooLarge: the value is larger than Options.MaxBytes; it is not
	// parsed at all, so memory stays bounded whatever arrives.
	ReasonTooLarge Reason = "too_large"
	// ReasonDecodeError: the value is not a JSON object (or, for other
	// codecs, not decodable) or is empty.
	ReasonDecodeError Reason = "decode_error"
	// ReasonInvalidField: a field is missing, of the wrong type or out of
	// range.
	ReasonInvalidField Reason = "invalid_field"
	// ReasonSchemaUnknown: schema_version is an integer this processor does
	// not know.
	ReasonSchemaUnknown Reason = "schema_unknown"
	// ReasonKeyMismatch: the record has a key and it differs from machine_id.
	ReasonKeyMismatch Reason = "key_mismatch"
	// ReasonClockAhead: ts is more than Options.MaxFutureSkewMs ahead of the
	// Kafka record timestamp.
	ReasonClockAhead Reason = "clock_ahead"
)

// Reasons returns every reason code, in check order, for example to
// initialise per-reason metrics.
func Reasons() []Reason {
	return []Reason{ReasonTooLarge, ReasonDecodeError, ReasonInvalidField, ReasonSchemaUnknown, ReasonKeyMismatch, ReasonClockAhead}
}

// Error is a rejected record. Reason is the stable dead-letter code; Field
// names the offending field ("" when the problem is not one field's); Detail
// is one human sentence naming the field, the bad value (truncated to 64
// bytes and quoted, so it is always printable UTF-8 without control
// characters) and what would be valid. Detail is meant for people: its
// wording may change between releases, Reason does not.
type Error struct {
	Reason Reason
	Field  string
	Detail string
}

func (e *Error) Error() string {
	return "event: " + string(e.Reason) + ": " + e.Detail
}
