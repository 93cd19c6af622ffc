package deliver

import (
	"encoding/json"
	"errors"
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

// decodeAlert reads the alert JSON value (docs/ARCHITECTURE.md, format
// version 1) leniently: unknown members are ignored, as the format asks of
// consumers, so a processor writing a later format version does not make
// its alerts undeliverable. (alerts.Decode is strict on purpose, to catch
// drift in the processor's own tests.) Required: alert_id, revision,
// status, rule_id, rule_version, machine_id, start, end.
func decodeAlert(b []byte) (alerts.Alert, error) {
	var w struct {
		AlertID     *string `json:"alert_id"`
		Revision    *int    `json:"revision"`
		Status      *string `json:"status"`
		MergedInto  string  `json:"merged_into"`
		RuleID      *string `json:"rule_id"`
		RuleVersion *int    `json:"rule_version"`
		MachineID   *string `json:"machine_id"`
		Start       *string `json:"start"`
		End         *string `json:"end"`
		Count       int     `json:"count"`
		Evidence    []struct {
			EventID   string  `json:"event_id"`
			SensorID  string  `json:"sensor_id"`
			TS        string  `json:"ts"`
			Value     float64 `json:"value"`
			Partition int32   `json:"partition"`
			Offset    int64   `json:"offset"`
		} `json:"evidence"`
		Late      bool    `json:"late"`
		Watermark *string `json:"watermark"`
		Reason    string  `json:"reason"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return alerts.Alert{}, fmt.Errorf("deliver: decode alert: %w", err)
	}
	missing := func(m string) (alerts.Alert, error) {
		return alerts.Alert{}, fmt.Errorf("deliver: decode alert: member %q missing or null", m)
	}
	switch {
	case w.AlertID == nil:
		return missing("alert_id")
	case w.Revision == nil:
		return missing("revision")
	case w.Status == nil:
		return missing("status")
	case w.RuleID == nil:
		return missing("rule_id")
	case w.RuleVersion == nil:
		return missing("rule_version")
	case w.MachineID == nil:
		return missing("machine_id")
	case w.Start == nil:
		return missing("start")
	case w.End == nil:
		return missing("end")
	}
	if *w.AlertID == "" {
		return alerts.Alert{}, errors.New("deliver: decode alert: empty alert_id")
	}
	if *w.Revision < 0 {
		return alerts.Alert{}, fmt.Errorf("deliver: decode alert: revision %d, want >= 0", *w.Revision)
	}
	a := alerts.Alert{
		AlertID: *w.AlertID, Revision: *w.Revision, Status: *w.Status, MergedInto: w.MergedInto,
		RuleID: *w.RuleID, RuleVersion: *w.RuleVersion, MachineID: *w.MachineID,
		Count: w.Count, Late: w.Late, Reason: w.Reason, Watermark: alerts.WatermarkNone,
	}
	var err error
	if a.Start, err = parseMs("start", *w.Start); err != nil {
		return alerts.Alert{}, err
	}
	if a.End, err = parseMs("end", *w.End); err != nil {
		return alerts.Alert{}, err
	}
	if w.Watermark != nil {
		if a.Watermark, err = parseMs("watermark", *w.Watermark); err != nil {
			return alerts.Alert{}, err
		}
	}
	for i, e := range w.Evidence {
		ts, err := parseMs(fmt.Sprintf("evidence[%d].ts", i), e.TS)
		if err != nil {
			return alerts.Alert{}, err
		}
		a.Evidence = append(a.Evidence, alerts.Evidence{
			EventID: e.EventID, SensorID: e.SensorID, TS: ts, Value: e.Value, Partition: e.Partition, Offset: e.Offset,
		})
	}
	return a, nil
}

func parseMs(member, s string) (int64, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("deliver: decode alert: %s: %w", member, err)
	}
	return t.UnixMilli(), nil
}
