package event

import (
	"fmt"
	"strconv"
)

// Decoder is the codec seam: it turns one record value into Fields, the
// codec-neutral view of the contract's fields, and applies no contract rule
// beyond "this is a record of my codec". JSONDecoder is the JSON codec; an
// Avro decoder (Confluent wire format) plugs in here later.
//
// Decode returns a *Error with ReasonDecodeError when value cannot be
// decoded. Any other error is reported by Validator.Check as decode_error
// with the error's text as detail.
//
// The contract's rules (which fields are required, their types and ranges,
// the reason-code order) live in Validator, once for all codecs, because the
// order of SPEC section 3 needs schema_version judged before any other field.
type Decoder interface {
	Decode(value []byte) (Fields, error)
}

// Kind is the type of a decoded field value.
type Kind uint8

const (
	KindAbsent Kind = iota // the field is not in the record
	KindNull               // JSON null (or an Avro null union branch)
	KindBool
	KindNumber
	KindString
	KindObject
	KindArray
)

func (k Kind) String() string {
	switch k {
	case KindAbsent:
		return "absent"
	case KindNull:
		return "null"
	case KindBool:
		return "boolean"
	case KindNumber:
		return "number"
	case KindString:
		return "string"
	case KindObject:
		return "object"
	case KindArray:
		return "array"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Field is one decoded field value. Text and Raw may alias the value passed
// to Decode: a Field must not be used after that buffer is reused, and must
// not be modified.
type Field struct {
	Kind Kind
	// Text is the decoded string of a KindString field (UTF-8).
	Text []byte
	// Num is the value of a KindNumber field rounded to the nearest float64;
	// ±Inf when the number is beyond the float64 range.
	Num float64
	// IsInt reports that a KindNumber field is an exact integer within the
	// int64 range, whatever its notation (1, 1.0, 1e2 and 100.00 are
	// integers; 1.5 and 1e-2 are not). Int is then its value.
	IsInt bool
	Int   int64
	// Raw is the codec's text of the value, used in error details.
	Raw []byte
}

// Fields are the contract's fields of one record, as decoded. Fields that
// the contract does not name are not kept.
type Fields struct {
	SchemaVersion Field
	EventID       Field
	MachineID     Field
	SensorID      Field
	TS            Field
	Seq           Field
	Value         Field
	Unit          Field
	Quality       Field
	Clock         Field
}

// Field names of the contract, as they appear in records and in Error.Field.
const (
	FieldSchemaVersion = "schema_version"
	FieldEventID       = "event_id"
	FieldMachineID     = "machine_id"
	FieldSensorID      = "sensor_id"
	FieldTS            = "ts"
	FieldSeq           = "seq"
	FieldValue         = "value"
	FieldUnit          = "unit"
	FieldQuality       = "quality"
	FieldClock         = "clock"
)

// field returns the slot of the contract field named name, or nil.
func (f *Fields) field(name []byte) *Field {
	switch string(name) {
	case FieldSchemaVersion:
		return &f.SchemaVersion
	case FieldEventID:
		return &f.EventID
	case FieldMachineID:
		return &f.MachineID
	case FieldSensorID:
		return &f.SensorID
	case FieldTS:
		return &f.TS
	case FieldSeq:
		return &f.Seq
	case FieldValue:
		return &f.Value
	case FieldUnit:
		return &f.Unit
	case FieldQuality:
		return &f.Quality
	case FieldClock:
		return &f.Clock
	}
	return nil
}

func decodeError(format string, args ...any) *Error {
	return &Error{Reason: ReasonDecodeError, Detail: fmt.Sprintf(format, args...)}
}
