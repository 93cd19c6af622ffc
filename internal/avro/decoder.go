package avro

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	hamba "github.com/hamba/avro/v2"

	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/schemas"
)

// DecoderOptions configure a Decoder. The zero value means every default.
type DecoderOptions struct {
	// Metrics counts decodes of ids that were never prepared. Default nil.
	Metrics *Metrics
}

// Decoder implements event.Decoder for Avro values: the Confluent wire
// format with writer schemas from a Source (NewDecoder), or bare Avro
// bodies written with one local schema (NewBareDecoder). Every writer
// schema is resolved against the reader schema schemas/event.avsc with
// Avro's schema resolution, so writers may evolve as Avro allows (added
// fields ignored, removed fields with a reader default, promoted types).
//
// Decode does no I/O: it reads the Source's cache only. Its errors are
// *event.Error values with the contract's reason codes:
//
//   - decode_error: not the wire format (too short, magic byte not 0), or
//     a body that is not exactly one value of its writer schema;
//   - schema_unknown: the schema id is not in the registry ("schema id 42
//     not found in the registry"), its schema is not Avro, or it cannot be
//     resolved against the reader schema (a missing field without default,
//     a type that does not promote, ts in other units than milliseconds).
//
// Everything else (ids, ranges, enum-like strings, finite values) is left
// to event.Validator, which sees Fields of the same kinds as JSON gives.
// The one error that is not an *event.Error wraps ErrNotPrepared: the
// caller decoded a value whose id Prepare never fetched.
//
// A Decoder is safe for concurrent use; it caches the resolution of each
// writer schema.
type Decoder struct {
	src    Source
	bare   *plan // the plan of every value when values are bare bodies
	reader *hamba.RecordSchema
	compat *hamba.SchemaCompatibility
	api    hamba.API
	m      *Metrics

	mu    sync.Mutex
	plans sync.Map // hamba.Schema (the writer, as the Source returns it) -> *plan
}

// plan is how values of one writer schema are read. Plans are keyed by
// the writer schema, not by id, so that their number is bounded by the
// schemas the Source holds (a LocalSource serving any id has one).
type plan struct {
	writer   hamba.Schema // checks bodies (checkBody)
	resolved hamba.Schema // decodes them into eventRecord (or nullableRecord)
	nullable bool         // the writer has nullable fields: decode into nullableRecord
	problem  string       // non-empty: the writer cannot be read (schema_unknown)
}

// eventRecord receives a value decoded with a resolved schema. Field names
// are those of schemas/event.avsc.
type eventRecord struct {
	EventID       string  `avro:"event_id"`
	MachineID     string  `avro:"machine_id"`
	SensorID      string  `avro:"sensor_id"`
	TS            any     `avro:"ts"` // int64, time.Time or string
	Seq           int64   `avro:"seq"`
	Value         float64 `avro:"value"`
	Unit          string  `avro:"unit"`
	SchemaVersion int64   `avro:"schema_version"`
	Quality       string  `avro:"quality"`
	Clock         *string `avro:"clock"`
}

// nullableRecord receives a value of a writer with nullable fields (a
// union with null where schemas/event.avsc has none, as Avro producers
// often declare optional fields): every field may be nil, which the
// validator then reports as it reports a JSON null (invalid_field naming
// the field). Values have the Go types hamba gives an interface: int64
// or int, float64 or float32, string, time.Time (timestamp-millis).
type nullableRecord struct {
	EventID       any     `avro:"event_id"`
	MachineID     any     `avro:"machine_id"`
	SensorID      any     `avro:"sensor_id"`
	TS            any     `avro:"ts"`
	Seq           any     `avro:"seq"`
	Value         any     `avro:"value"`
	Unit          any     `avro:"unit"`
	SchemaVersion any     `avro:"schema_version"`
	Quality       any     `avro:"quality"`
	Clock         *string `avro:"clock"`
}

// NewDecoder returns a Decoder of wire-format values whose writer schemas
// come from src (a *Registry or a *LocalSource).
func NewDecoder(src Source, o DecoderOptions) (*Decoder, error) {
	if src == nil {
		return nil, errors.New("avro: decoder: no schema source")
	}
	return newDecoder(src, o)
}

// NewBareDecoder returns a Decoder of bare Avro bodies (no wire-format
// header) all written with writer, for sources without a registry whose
// producers write plain Avro. A writer that cannot be resolved against the
// reader schema is an error here, at start-up.
func NewBareDecoder(writer hamba.Schema, o DecoderOptions) (*Decoder, error) {
	d, err := newDecoder(nil, o)
	if err != nil {
		return nil, err
	}
	d.bare = d.newPlan(writer)
	if d.bare.problem != "" {
		return nil, fmt.Errorf("avro: the local schema %s", d.bare.problem)
	}
	return d, nil
}

func newDecoder(src Source, o DecoderOptions) (*Decoder, error) {
	r, err := parseSchema(schemas.Event())
	if err != nil {
		return nil, fmt.Errorf("avro: reader schema schemas/event.avsc: %w", err)
	}
	rec, ok := r.(*hamba.RecordSchema)
	if !ok {
		return nil, fmt.Errorf("avro: reader schema schemas/event.avsc is a %s, want a record", r.Type())
	}
	return &Decoder{
		src:    src,
		reader: rec,
		compat: hamba.NewSchemaCompatibility(),
		api:    newAPI(),
		m:      o.Metrics,
	}, nil
}

// newAPI is the hamba configuration of one codec: its own codec caches (no
// package-level state shared between codecs).
func newAPI() hamba.API {
	return hamba.Config{
		TagKey:            "avro",
		MaxByteSliceSize:  event.DefaultMaxBytes,
		MaxSliceAllocSize: event.DefaultMaxBytes,
	}.Freeze()
}

// Decode implements event.Decoder.
func (d *Decoder) Decode(value []byte) (f event.Fields, err error) {
	defer func() {
		// hamba is a third-party decoder fed with hostile bytes: a panic
		// in it must dead-letter the record, not kill the partition.
		if p := recover(); p != nil {
			f, err = event.Fields{}, decodeErr("Avro decoder failed: %s", clean(fmt.Sprint(p)))
		}
	}()
	p, body := d.bare, value
	var id uint32
	if p == nil {
		var herr error
		if id, body, herr = ParseHeader(value); herr != nil {
			return event.Fields{}, &event.Error{Reason: event.ReasonDecodeError, Detail: herr.Error()}
		}
		if p, err = d.plan(id); err != nil {
			return event.Fields{}, err
		}
	}
	if p.problem != "" {
		subject := "the local schema"
		if d.bare == nil {
			subject = fmt.Sprintf("schema id %d", id)
		}
		return event.Fields{}, &event.Error{Reason: event.ReasonSchemaUnknown, Detail: subject + " " + p.problem}
	}
	if cerr := checkBody(p.writer, body); cerr != nil {
		return event.Fields{}, decodeErr("%sAvro body does not match its writer schema: %s", idPrefix(d.bare, id), clean(cerr.Error()))
	}
	rd := hamba.NewReader(nil, 0, hamba.WithReaderConfig(d.api)).Reset(body)
	if p.nullable {
		var rec nullableRecord
		rd.ReadVal(p.resolved, &rec)
		if rd.Error != nil {
			return event.Fields{}, decodeErr("%sAvro body does not decode: %s", idPrefix(d.bare, id), clean(rd.Error.Error()))
		}
		return rec.fields(), nil
	}
	var rec eventRecord
	rd.ReadVal(p.resolved, &rec)
	if rd.Error != nil {
		return event.Fields{}, decodeErr("%sAvro body does not decode: %s", idPrefix(d.bare, id), clean(rd.Error.Error()))
	}
	return rec.fields(), nil
}

func idPrefix(bare *plan, id uint32) string {
	if bare != nil {
		return ""
	}
	return fmt.Sprintf("schema id %d: ", id)
}

func decodeErr(format string, args ...any) *event.Error {
	return &event.Error{Reason: event.ReasonDecodeError, Detail: fmt.Sprintf(format, args...)}
}

// plan returns the plan of id's writer schema, resolving it on first use.
// Resolution is pure computation on a schema the Source already holds.
func (d *Decoder) plan(id uint32) (*plan, error) {
	w, err := d.src.Schema(id)
	if err != nil {
		var se *SchemaError
		if errors.As(err, &se) {
			return nil, &event.Error{Reason: event.ReasonSchemaUnknown, Detail: clean(se.Error())}
		}
		if errors.Is(err, ErrNotPrepared) {
			d.m.unpreparedDecode()
		}
		return nil, fmt.Errorf("avro: decode: %w", err)
	}
	if p, ok := d.plans.Load(w); ok {
		return p.(*plan), nil
	}
	d.mu.Lock() // one resolution per schema, even under concurrent first use
	defer d.mu.Unlock()
	if p, ok := d.plans.Load(w); ok {
		return p.(*plan), nil
	}
	p := d.newPlan(w)
	d.plans.Store(w, p)
	return p, nil
}

// newPlan resolves writer against the reader schema.
func (d *Decoder) newPlan(writer hamba.Schema) *plan {
	unknown := func(format string, args ...any) *plan {
		return &plan{problem: clean(fmt.Sprintf(format, args...))}
	}
	w, ok := deref(writer).(*hamba.RecordSchema)
	if !ok {
		return unknown("is a %s schema, want a record with the fields of schemas/event.avsc", writer.Type())
	}
	if problem := tsProblem(w); problem != "" {
		return unknown("cannot be read as an event: %s", problem)
	}
	// The writer's record may have any name: the reader takes it on, so
	// that only fields decide compatibility.
	fields, nullable, err := d.readerFields(w)
	if err != nil {
		return unknown("cannot be read as an event: %v", err)
	}
	reader, err := hamba.NewRecordSchema(w.Name(), w.Namespace(), fields)
	if err != nil {
		return unknown("cannot be read as an event: %v", err)
	}
	resolved, err := d.compat.Resolve(reader, w)
	if err != nil {
		return unknown("cannot be read as an event (Avro schema resolution against schemas/event.avsc): %v", err)
	}
	for _, f := range w.Fields() {
		if !d.readerHas(f.Name()) && hasBareNull(f.Type(), map[string]bool{}) {
			return unknown("cannot be read as an event: field %s, which the reader ignores, has type null outside a union, which the decoder cannot skip", f.Name())
		}
	}
	return &plan{writer: w, resolved: resolved, nullable: nullable}
}

// readerFields returns the reader's fields for resolving writer w: those
// of schemas/event.avsc, except that a field the writer declares as a
// union with null (an optional field, as Avro producers often declare
// them) is read as that union of null and the reader's type(s). Avro's
// resolution would refuse the whole schema (the reader's type lacks the
// writer's null branch) and dead-letter every record as schema_unknown;
// this way a record whose field is present decodes as usual and one whose
// field is null is invalid_field, as a JSON null is. nullable reports
// whether any field was widened.
func (d *Decoder) readerFields(w *hamba.RecordSchema) ([]*hamba.Field, bool, error) {
	writerNullable := map[string]bool{}
	for _, f := range w.Fields() {
		if u, ok := deref(f.Type()).(*hamba.UnionSchema); ok && u.Nullable() {
			writerNullable[f.Name()] = true
		}
	}
	fields := d.reader.Fields()
	widened := false
	out := make([]*hamba.Field, len(fields))
	for i, f := range fields {
		out[i] = f
		if !writerNullable[f.Name()] {
			continue
		}
		types := []hamba.Schema{f.Type()}
		if u, ok := f.Type().(*hamba.UnionSchema); ok {
			if u.Nullable() {
				continue // clock: already optional
			}
			types = u.Types()
		}
		u, err := hamba.NewUnionSchema(append([]hamba.Schema{hamba.NewNullSchema()}, types...))
		if err != nil {
			return nil, false, fmt.Errorf("field %s: %w", f.Name(), err)
		}
		if out[i], err = hamba.NewField(f.Name(), u); err != nil {
			return nil, false, fmt.Errorf("field %s: %w", f.Name(), err)
		}
		widened = true
	}
	return out, widened, nil
}

func (d *Decoder) readerHas(name string) bool {
	for _, f := range d.reader.Fields() {
		if f.Name() == name {
			return true
		}
	}
	return false
}

// hasBareNull reports whether s contains the type null other than as a
// union branch: hamba cannot skip such a value (v2.31.0 has no skip decoder
// for null), so a writer field of that type must not be one the reader
// ignores.
func hasBareNull(s hamba.Schema, seen map[string]bool) bool {
	switch t := s.(type) {
	case *hamba.RefSchema:
		return hasBareNull(t.Schema(), seen)
	case *hamba.NullSchema:
		return true
	case *hamba.RecordSchema:
		if seen[t.FullName()] {
			return false
		}
		seen[t.FullName()] = true
		for _, f := range t.Fields() {
			if hasBareNull(f.Type(), seen) {
				return true
			}
		}
	case *hamba.ArraySchema:
		return hasBareNull(t.Items(), seen)
	case *hamba.MapSchema:
		return hasBareNull(t.Values(), seen)
	case *hamba.UnionSchema:
		for _, b := range t.Types() {
			if b.Type() != hamba.Null && hasBareNull(b, seen) {
				return true
			}
		}
	}
	return false
}

func deref(s hamba.Schema) hamba.Schema {
	if r, ok := s.(*hamba.RefSchema); ok {
		return r.Schema()
	}
	return s
}

// tsProblem rejects a writer ts whose numbers are not epoch milliseconds:
// Avro resolution ignores logical types, so a timestamp-micros long would
// silently read as milliseconds 1000 times too far in the future.
func tsProblem(w *hamba.RecordSchema) string {
	for _, f := range w.Fields() {
		if f.Name() != event.FieldTS {
			continue
		}
		types := []hamba.Schema{deref(f.Type())}
		if u, ok := types[0].(*hamba.UnionSchema); ok {
			types = u.Types()
		}
		for _, t := range types {
			p, ok := deref(t).(*hamba.PrimitiveSchema)
			if !ok || p.Type() == hamba.String || p.Type() == hamba.Bytes {
				continue
			}
			if p.Logical() == nil {
				// A logical type the Avro library does not know
				// (timestamp-nanos, Avro 1.12) is kept as a property only:
				// nanoseconds would read as milliseconds.
				if lt, ok := p.Prop("logicalType").(string); ok && lt != "" {
					return fmt.Sprintf("field ts is %s with logical type %s, want epoch milliseconds (long, timestamp-millis) or a string", p.Type(), lt)
				}
				continue
			}
			if lt := p.Logical().Type(); lt != hamba.TimestampMillis {
				return fmt.Sprintf("field ts is %s with logical type %s, want epoch milliseconds (long, timestamp-millis) or a string", p.Type(), lt)
			}
		}
	}
	return ""
}

// fields converts a decoded record to the codec-neutral Fields, with the
// kinds JSON would give: strings KindString, numbers KindNumber (longs
// exact integers), a null clock KindNull.
func (r *eventRecord) fields() event.Fields {
	f := event.Fields{
		SchemaVersion: intField(r.SchemaVersion),
		EventID:       strField(r.EventID),
		MachineID:     strField(r.MachineID),
		SensorID:      strField(r.SensorID),
		Seq:           intField(r.Seq),
		Value:         floatField(r.Value),
		Unit:          strField(r.Unit),
		Quality:       strField(r.Quality),
		Clock:         event.Field{Kind: event.KindNull, Raw: []byte("null")},
	}
	if r.Clock != nil {
		f.Clock = strField(*r.Clock)
	}
	switch ts := r.TS.(type) {
	case int64:
		f.TS = intField(ts)
	case time.Time:
		f.TS = intField(ts.UnixMilli())
	case string:
		f.TS = strField(ts)
	case nil:
		f.TS = event.Field{Kind: event.KindNull, Raw: []byte("null")}
	default: // unreachable with the reader schema's union
		f.TS = event.Field{Kind: event.KindObject, Raw: fmt.Appendf(nil, "%v", ts)}
	}
	return f
}

// fields converts a value of a writer with nullable fields, as
// eventRecord.fields does; a nil field is a null (KindNull).
func (r *nullableRecord) fields() event.Fields {
	f := event.Fields{
		SchemaVersion: anyField(r.SchemaVersion),
		EventID:       anyField(r.EventID),
		MachineID:     anyField(r.MachineID),
		SensorID:      anyField(r.SensorID),
		TS:            anyField(r.TS),
		Seq:           anyField(r.Seq),
		Value:         anyField(r.Value),
		Unit:          anyField(r.Unit),
		Quality:       anyField(r.Quality),
		Clock:         event.Field{Kind: event.KindNull, Raw: []byte("null")},
	}
	if r.Clock != nil {
		f.Clock = strField(*r.Clock)
	}
	return f
}

// anyField is the Field of a value hamba decoded into an interface.
func anyField(v any) event.Field {
	switch x := v.(type) {
	case nil:
		return event.Field{Kind: event.KindNull, Raw: []byte("null")}
	case string:
		return strField(x)
	case int64:
		return intField(x)
	case int:
		return intField(int64(x))
	case int32:
		return intField(int64(x))
	case float64:
		return floatField(x)
	case float32:
		return floatField(float64(x))
	case time.Time:
		return intField(x.UnixMilli())
	default: // unreachable with the reader's types
		return event.Field{Kind: event.KindObject, Raw: fmt.Appendf(nil, "%v", x)}
	}
}

func strField(s string) event.Field {
	b := []byte(s)
	return event.Field{Kind: event.KindString, Text: b, Raw: b}
}

func intField(v int64) event.Field {
	return event.Field{Kind: event.KindNumber, Num: float64(v), IsInt: true, Int: v, Raw: strconv.AppendInt(nil, v, 10)}
}

func floatField(v float64) event.Field {
	f := event.Field{Kind: event.KindNumber, Num: v, Raw: strconv.AppendFloat(nil, v, 'g', -1, 64)}
	// An integral double is an integer, as 7.0 is in JSON.
	if v == math.Trunc(v) && v >= -(1<<63) && v < 1<<63 {
		f.IsInt, f.Int = true, int64(v)
	}
	return f
}
