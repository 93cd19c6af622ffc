package avro

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	hamba "github.com/hamba/avro/v2"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/schemas"
)

// TopicValueSubject is the subject of a topic's record values under the
// Confluent TopicNameStrategy: "<topic>-value".
func TopicValueSubject(topic string) string { return topic + "-value" }

// alertRecord is an alert as schemas/alert.avsc lays it out.
type alertRecord struct {
	AlertID     string           `avro:"alert_id"`
	Revision    int64            `avro:"revision"`
	Status      string           `avro:"status"`
	MergedInto  *string          `avro:"merged_into"`
	RuleID      string           `avro:"rule_id"`
	RuleVersion int64            `avro:"rule_version"`
	MachineID   string           `avro:"machine_id"`
	Start       int64            `avro:"start"`
	End         int64            `avro:"end"`
	Count       int64            `avro:"count"`
	Evidence    []evidenceRecord `avro:"evidence"`
	Late        bool             `avro:"late"`
	Watermark   *int64           `avro:"watermark"`
	Reason      string           `avro:"reason"`
	KeyField    *string          `avro:"key_field"` // since alert schema version 2
	Key         *string          `avro:"key"`
	Aggregate   *aggregateRecord `avro:"aggregate"`
	// EvidenceOmitted: since alert schema version 3; a value of an earlier
	// version reads as 0 (the field's default).
	EvidenceOmitted int64 `avro:"evidence_omitted"`
}

type aggregateRecord struct {
	Fn    string  `avro:"fn"`
	Value float64 `avro:"value"`
}

type evidenceRecord struct {
	EventID   string  `avro:"event_id"`
	SensorID  string  `avro:"sensor_id"`
	TS        int64   `avro:"ts"`
	Value     float64 `avro:"value"`
	Partition int32   `avro:"partition"`
	Offset    int64   `avro:"offset"`
}

// AlertEncoder writes alert revisions in the Avro output format: the wire
// format with the id of schemas/alert.avsc in the registry. It is safe for
// concurrent use.
type AlertEncoder struct {
	id     uint32
	schema hamba.Schema
	api    hamba.API
}

// RegisterAlertSchema registers schemas/alert.avsc under subject (use
// TopicValueSubject(alerts topic)) once, at start-up, and returns the
// encoder bound to the id the registry gave it. Registering again returns
// the same id. Errors wrap ErrRegistryUnavailable when worth retrying; a
// subject whose compatibility rule refuses the schema is permanent.
//
// The schema is cached under its id, so an AlertDecoder on r reads the
// encoder's values without a fetch.
func (r *Registry) RegisterAlertSchema(ctx context.Context, subject string) (*AlertEncoder, error) {
	id, err := r.Register(ctx, subject, schemas.Alert())
	if err != nil {
		return nil, fmt.Errorf("avro: alert schema: %w", err)
	}
	return NewAlertEncoder(id)
}

// NewAlertEncoder returns an encoder that writes schema id id in the header
// (an id the alert schema has elsewhere, e.g. in tests or with a registry
// managed by other means).
func NewAlertEncoder(id uint32) (*AlertEncoder, error) {
	s, err := parseSchema(schemas.Alert())
	if err != nil {
		return nil, fmt.Errorf("avro: alert schema schemas/alert.avsc: %w", err)
	}
	return &AlertEncoder{id: id, schema: s, api: newAPI()}, nil
}

// SchemaID returns the schema id written in every header.
func (e *AlertEncoder) SchemaID() uint32 { return e.id }

// EncodeAlert returns a's Avro value in the wire format. It refuses, naming
// the field, what the alert JSON refuses too (alerts.Alert.Encode): an
// unknown status, merged_into without status merged or missing with it, an
// empty alert_id, a negative revision, count or evidence_omitted, key_field
// without key or the reverse, an aggregate without fn or with a non-finite
// value, a non-finite evidence value.
func (e *AlertEncoder) EncodeAlert(a alerts.Alert) ([]byte, error) {
	if err := checkAlert(&a); err != nil {
		return nil, fmt.Errorf("avro: encode alert %s rev %d: %w", a.AlertID, a.Revision, err)
	}
	rec := alertRecord{
		AlertID: a.AlertID, Revision: int64(a.Revision), Status: a.Status,
		RuleID: a.RuleID, RuleVersion: int64(a.RuleVersion), MachineID: a.MachineID,
		Start: a.Start, End: a.End, Count: int64(a.Count),
		Evidence: make([]evidenceRecord, len(a.Evidence)),
		Late:     a.Late, Reason: a.Reason, EvidenceOmitted: int64(a.EvidenceOmitted),
	}
	if a.MergedInto != "" {
		rec.MergedInto = &a.MergedInto
	}
	if a.Watermark != alerts.WatermarkNone {
		rec.Watermark = &a.Watermark
	}
	if a.KeyField != "" {
		rec.KeyField, rec.Key = &a.KeyField, &a.Key
	}
	if a.Aggregate != nil {
		rec.Aggregate = &aggregateRecord{Fn: a.Aggregate.Fn, Value: a.Aggregate.Value}
	}
	for i, ev := range a.Evidence {
		rec.Evidence[i] = evidenceRecord{EventID: ev.EventID, SensorID: ev.SensorID, TS: ev.TS, Value: ev.Value, Partition: ev.Partition, Offset: ev.Offset}
	}
	body, err := e.api.Marshal(e.schema, &rec)
	if err != nil {
		return nil, fmt.Errorf("avro: encode alert %s rev %d: %w", a.AlertID, a.Revision, err)
	}
	out := make([]byte, 0, HeaderSize+len(body))
	return append(AppendHeader(out, e.id), body...), nil
}

func checkAlert(a *alerts.Alert) error {
	switch a.Status {
	case alerts.StatusOpen, alerts.StatusUpdated, alerts.StatusClosed:
		if a.MergedInto != "" {
			return fmt.Errorf("merged_into %q with status %q, want it only with %q", a.MergedInto, a.Status, alerts.StatusMerged)
		}
	case alerts.StatusMerged:
		if a.MergedInto == "" {
			return fmt.Errorf("status %q without merged_into", alerts.StatusMerged)
		}
	default:
		return fmt.Errorf("status %q, want one of open, updated, merged, closed", a.Status)
	}
	switch {
	case a.AlertID == "":
		return errors.New("empty alert_id")
	case a.Revision < 0:
		return fmt.Errorf("revision %d, want >= 0", a.Revision)
	case a.Count < 0:
		return fmt.Errorf("count %d, want >= 0", a.Count)
	case a.EvidenceOmitted < 0:
		return fmt.Errorf("evidence_omitted %d, want >= 0", a.EvidenceOmitted)
	case (a.KeyField == "") != (a.Key == ""):
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
	for i, ev := range a.Evidence {
		if math.IsNaN(ev.Value) || math.IsInf(ev.Value, 0) {
			return fmt.Errorf("evidence[%d].value %v, want a finite number", i, ev.Value)
		}
	}
	return nil
}

// AlertDecoder reads alert values in the Avro output format back into
// alerts.Alert, for tests and tools. The writer schema of each value comes
// from a Source (prepare a Registry with the values first) and is resolved
// against schemas/alert.avsc, so values of other alert schema versions
// decode too. It is safe for concurrent use.
type AlertDecoder struct {
	src    Source
	reader hamba.Schema
	compat *hamba.SchemaCompatibility
	api    hamba.API
	plans  sync.Map // uint32 -> *alertPlan
}

type alertPlan struct{ writer, resolved hamba.Schema }

// NewAlertDecoder returns a decoder whose writer schemas come from src.
func NewAlertDecoder(src Source) (*AlertDecoder, error) {
	r, err := parseSchema(schemas.Alert())
	if err != nil {
		return nil, fmt.Errorf("avro: alert schema schemas/alert.avsc: %w", err)
	}
	return &AlertDecoder{src: src, reader: r, compat: hamba.NewSchemaCompatibility(), api: newAPI()}, nil
}

// DecodeAlert parses one alert value. It is strict: the value must be the
// wire format with a known schema id, the body exactly one alert, and the
// alert one that EncodeAlert would write.
func (d *AlertDecoder) DecodeAlert(value []byte) (alerts.Alert, error) {
	id, body, err := ParseHeader(value)
	if err != nil {
		return alerts.Alert{}, fmt.Errorf("avro: decode alert: %w", err)
	}
	var p *alertPlan
	if v, ok := d.plans.Load(id); ok {
		p = v.(*alertPlan)
	} else {
		w, err := d.src.Schema(id)
		if err != nil {
			return alerts.Alert{}, fmt.Errorf("avro: decode alert: %w", err)
		}
		resolved, err := d.compat.Resolve(d.reader, w)
		if err != nil {
			return alerts.Alert{}, fmt.Errorf("avro: decode alert: schema id %d cannot be read as an alert: %w", id, err)
		}
		p = &alertPlan{writer: w, resolved: resolved}
		d.plans.Store(id, p)
	}
	if err := checkBody(p.writer, body); err != nil {
		return alerts.Alert{}, fmt.Errorf("avro: decode alert: schema id %d: %w", id, err)
	}
	var rec alertRecord
	rd := hamba.NewReader(nil, 0, hamba.WithReaderConfig(d.api)).Reset(body)
	rd.ReadVal(p.resolved, &rec)
	if rd.Error != nil {
		return alerts.Alert{}, fmt.Errorf("avro: decode alert: schema id %d: %w", id, rd.Error)
	}
	a := alerts.Alert{
		AlertID: rec.AlertID, Revision: int(rec.Revision), Status: rec.Status,
		RuleID: rec.RuleID, RuleVersion: int(rec.RuleVersion), MachineID: rec.MachineID,
		Start: rec.Start, End: rec.End, Count: int(rec.Count),
		Late: rec.Late, Watermark: alerts.WatermarkNone, Reason: rec.Reason,
		EvidenceOmitted: int(rec.EvidenceOmitted),
	}
	if rec.MergedInto != nil {
		a.MergedInto = *rec.MergedInto
	}
	if rec.Watermark != nil {
		a.Watermark = *rec.Watermark
	}
	if rec.KeyField != nil {
		a.KeyField = *rec.KeyField
	}
	if rec.Key != nil {
		a.Key = *rec.Key
	}
	if rec.Aggregate != nil {
		a.Aggregate = &alerts.Aggregate{Fn: rec.Aggregate.Fn, Value: rec.Aggregate.Value}
	}
	if len(rec.Evidence) > 0 {
		a.Evidence = make([]alerts.Evidence, len(rec.Evidence))
		for i, ev := range rec.Evidence {
			a.Evidence[i] = alerts.Evidence{EventID: ev.EventID, SensorID: ev.SensorID, TS: ev.TS, Value: ev.Value, Partition: ev.Partition, Offset: ev.Offset}
		}
	}
	if err := checkAlert(&a); err != nil {
		return alerts.Alert{}, fmt.Errorf("avro: decode alert: %w", err)
	}
	return a, nil
}
