package deliver

import (
	"fmt"
	"strconv"
	"time"

	"github.com/vibeline/processor/internal/alerts"
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
	// Alert is the revision, decoded leniently from Record.Value.
	Alert alerts.Alert
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

// NewDelivery decodes a record's alert. An error means the value is not an
// alert revision (no sink can be given it: it is dead-lettered with reason
// "undecodable").
func NewDelivery(r Record) (Delivery, error) {
	a, err := decodeAlert(r.Value)
	if err != nil {
		return Delivery{}, err
	}
	return Delivery{Record: r, Alert: a, IdempotencyKey: IdempotencyKey(a.AlertID, a.Revision)}, nil
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
