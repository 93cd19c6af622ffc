package deliver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/avro"
)

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is one alerts-topic record as delivery sees it (no Kafka client
// types, so the lanes can be tested without Kafka).
type Record struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Key         []byte
	Value       []byte
	Headers     []Header
	// Timestamp is the record timestamp (the processor's produce time of
	// the revision): delivery latency is measured from it.
	Timestamp time.Time
}

// Delivery is one alert revision handed to a sink.
type Delivery struct {
	Record Record
	// Alert is the revision, decoded from Record.Value (leniently for
	// JSON; see DecodeFunc for Avro).
	Alert alerts.Alert
	// Body is the alert JSON a webhook posts and signs: Record.Value itself
	// for JSON alert values (byte for byte), the JSON encoding of Alert
	// (alerts.Alert.Encode) for Avro alert values. Dead letters keep
	// Record.Value.
	Body []byte
	// IdempotencyKey is "<alert_id>-<revision>": equal for every
	// redelivery of the revision, distinct for every other revision.
	IdempotencyKey string
}

// IdempotencyKey returns the key every delivery of one alert revision
// carries: "<alert_id>-<revision>", for example
// "fcbb6ffe4c70e9d58d7550aa08757d6c-3".
func IdempotencyKey(alertID string, revision int) string {
	return alertID + "-" + strconv.Itoa(revision)
}

// NewDelivery decodes a record's alert JSON value. An error means the value
// is not an alert revision (no sink can be given it: it is dead-lettered
// with reason "undecodable"). Body is the record value as is.
func NewDelivery(r Record) (Delivery, error) {
	a, err := decodeAlert(r.Value)
	if err != nil {
		return Delivery{}, err
	}
	return Delivery{Record: r, Alert: a, Body: r.Value, IdempotencyKey: IdempotencyKey(a.AlertID, a.Revision)}, nil
}

// decodeAlert reads the alert JSON value leniently (alerts.DecodeLenient:
// unknown members ignored, as the format asks of consumers, so a processor
// writing a later format version does not make its alerts undeliverable).
func decodeAlert(b []byte) (alerts.Alert, error) {
	a, err := alerts.DecodeLenient(b)
	if err != nil {
		return alerts.Alert{}, fmt.Errorf("deliver: %w", err)
	}
	return a, nil
}

// DecodeFunc reads one alerts-topic record value into an alert revision
// (Options.Decode; nil means the alert JSON format). Its errors are of two
// kinds:
//   - transient (avro.IsTransient: the schema registry is unavailable):
//     the value may decode later. The lane keeps the record and retries
//     with the retry backoff until the decode succeeds or the lane stops;
//     nothing is dead-lettered for it.
//   - any other: the value is not an alert revision. It is dead-lettered
//     with reason "undecodable" and the error as detail.
//
// It must be safe for concurrent use (every lane calls it).
type DecodeFunc func(ctx context.Context, value []byte) (alerts.Alert, error)

// NewAvroDecoder returns the DecodeFunc of Avro alert values: the Confluent
// wire format (magic byte 0, 4-byte big-endian schema id, Avro body) with a
// writer schema from reg that can be read as schemas/alert.avsc. It fetches
// a schema id it has not seen (reg.Resolve) before decoding; a registry
// that cannot answer is a transient error (avro.IsTransient). A value not
// in the wire format, a schema id the registry does not know, a schema that
// cannot be read as an alert and a malformed body are permanent errors.
func NewAvroDecoder(reg *avro.Registry) (DecodeFunc, error) {
	if reg == nil {
		return nil, errors.New("deliver: avro decoder: no schema registry")
	}
	dec, err := avro.NewAlertDecoder(reg)
	if err != nil {
		return nil, fmt.Errorf("deliver: %w", err)
	}
	return func(ctx context.Context, value []byte) (alerts.Alert, error) {
		for attempt := 0; ; attempt++ {
			if id, ok := avro.SchemaID(value); ok {
				if err := reg.Resolve(ctx, id); err != nil {
					return alerts.Alert{}, fmt.Errorf("deliver: schema id %d: %w", id, err)
				}
			}
			a, err := dec.DecodeAlert(value)
			// Not prepared: the id's "not found" answer was forgotten
			// between Resolve and the decode (the not-found cache is
			// bounded); ask again, a few times.
			if errors.Is(err, avro.ErrNotPrepared) && attempt < 2 {
				continue
			}
			if err != nil {
				return alerts.Alert{}, fmt.Errorf("deliver: %w", err)
			}
			return a, nil
		}
	}, nil
}
