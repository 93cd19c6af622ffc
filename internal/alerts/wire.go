package alerts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// wireAlert is the JSON value, members in their documented order.
type wireAlert struct {
	AlertID     string         `json:"alert_id"`
	Revision    int            `json:"revision"`
	Status      string         `json:"status"`
	MergedInto  string         `json:"merged_into,omitempty"`
	RuleID      string         `json:"rule_id"`
	RuleVersion int            `json:"rule_version"`
	MachineID   string         `json:"machine_id"`
	Start       string         `json:"start"`
	End         string         `json:"end"`
	Count       int            `json:"count"`
	KeyField    string         `json:"key_field,omitempty"`
	Key         string         `json:"key,omitempty"`
	Aggregate   *wireAggregate `json:"aggregate,omitempty"`
	Evidence    []wireEvidence `json:"evidence"`
	Late        bool           `json:"late"`
	Watermark   *string        `json:"watermark"`
	Reason      string         `json:"reason"`
}

// wireAggregate is the optional aggregate member of aggregating rules.
type wireAggregate struct {
	Fn    string  `json:"fn"`
	Value float64 `json:"value"`
}

type wireEvidence struct {
	EventID   string  `json:"event_id"`
	SensorID  string  `json:"sensor_id"`
	TS        string  `json:"ts"`
	Value     float64 `json:"value"`
	Partition int32   `json:"partition"`
	Offset    int64   `json:"offset"`
}

// Encode returns the alert's JSON value (SPEC section 3): one line, no
// trailing newline, members in the documented order, times as RFC 3339 UTC
// with milliseconds, values in their shortest round-tripping decimal form,
// and no HTML escaping (">=" stays ">="); invalid UTF-8 in a string is
// written as U+FFFD (encoding/json's rule). It fails, naming the field, on an
// alert that the schema cannot express: an unknown status, merged_into
// present without status merged or missing with it, a negative revision or
// count, a time outside years 0000..9999, or a non-finite evidence value.
func (a Alert) Encode() ([]byte, error) {
	if err := a.check(); err != nil {
		return nil, fmt.Errorf("alerts: encode %s rev %d: %w", a.AlertID, a.Revision, err)
	}
	w := wireAlert{
		AlertID:     a.AlertID,
		Revision:    a.Revision,
		Status:      a.Status,
		MergedInto:  a.MergedInto,
		RuleID:      a.RuleID,
		RuleVersion: a.RuleVersion,
		MachineID:   a.MachineID,
		Start:       FormatTime(a.Start),
		End:         FormatTime(a.End),
		Count:       a.Count,
		KeyField:    a.KeyField,
		Key:         a.Key,
		Evidence:    make([]wireEvidence, len(a.Evidence)),
		Late:        a.Late,
		Reason:      a.Reason,
	}
	for i, e := range a.Evidence {
		w.Evidence[i] = wireEvidence{
			EventID: e.EventID, SensorID: e.SensorID, TS: FormatTime(e.TS),
			Value: e.Value, Partition: e.Partition, Offset: e.Offset,
		}
	}
	if a.Aggregate != nil {
		w.Aggregate = &wireAggregate{Fn: a.Aggregate.Fn, Value: a.Aggregate.Value}
	}
	if a.Watermark != WatermarkNone {
		s := FormatTime(a.Watermark)
		w.Watermark = &s
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&w); err != nil {
		return nil, fmt.Errorf("alerts: encode %s rev %d: %w", a.AlertID, a.Revision, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// check reports the first field the JSON schema cannot express.
func (a *Alert) check() error {
	switch a.Status {
	case StatusOpen, StatusUpdated, StatusClosed:
		if a.MergedInto != "" {
			return fmt.Errorf("merged_into %q with status %q, want it only with %q", a.MergedInto, a.Status, StatusMerged)
		}
	case StatusMerged:
		if a.MergedInto == "" {
			return fmt.Errorf("status %q without merged_into", StatusMerged)
		}
	default:
		return fmt.Errorf("status %q, want one of open, updated, merged, closed", a.Status)
	}
	if a.AlertID == "" {
		return errors.New("empty alert_id")
	}
	if a.Revision < 0 {
		return fmt.Errorf("revision %d, want >= 0", a.Revision)
	}
	if a.Count < 0 {
		return fmt.Errorf("count %d, want >= 0", a.Count)
	}
	if (a.KeyField == "") != (a.Key == "") {
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
	if err := checkTime("start", a.Start); err != nil {
		return err
	}
	if err := checkTime("end", a.End); err != nil {
		return err
	}
	if a.Watermark != WatermarkNone {
		if err := checkTime("watermark", a.Watermark); err != nil {
			return err
		}
	}
	for i, e := range a.Evidence {
		if err := checkTime(fmt.Sprintf("evidence[%d].ts", i), e.TS); err != nil {
			return err
		}
		if math.IsNaN(e.Value) || math.IsInf(e.Value, 0) {
			return fmt.Errorf("evidence[%d].value %v, want a finite number", i, e.Value)
		}
	}
	return nil
}

func checkTime(field string, ms int64) error {
	if ms < minWireMs || ms > maxWireMs {
		return fmt.Errorf("%s %d ms is outside years 0000..9999", field, ms)
	}
	return nil
}

// Decode parses an alert JSON value written by Encode. It is strict: every
// member must be present (merged_into exactly with status merged), unknown
// members and trailing data are errors, and times must be in Encode's
// format. An empty evidence list decodes as nil.
func Decode(b []byte) (Alert, error) {
	var w struct {
		AlertID     *string `json:"alert_id"`
		Revision    *int    `json:"revision"`
		Status      *string `json:"status"`
		MergedInto  *string `json:"merged_into"`
		RuleID      *string `json:"rule_id"`
		RuleVersion *int    `json:"rule_version"`
		MachineID   *string `json:"machine_id"`
		Start       *string `json:"start"`
		End         *string `json:"end"`
		Count       *int    `json:"count"`
		KeyField    *string `json:"key_field"`
		Key         *string `json:"key"`
		Aggregate   *struct {
			Fn    *string  `json:"fn"`
			Value *float64 `json:"value"`
		} `json:"aggregate"`
		Evidence *[]struct {
			EventID   *string  `json:"event_id"`
			SensorID  *string  `json:"sensor_id"`
			TS        *string  `json:"ts"`
			Value     *float64 `json:"value"`
			Partition *int32   `json:"partition"`
			Offset    *int64   `json:"offset"`
		} `json:"evidence"`
		Late      *bool           `json:"late"`
		Watermark json.RawMessage `json:"watermark"`
		Reason    *string         `json:"reason"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Alert{}, fmt.Errorf("alerts: decode: %w", err)
	}
	if dec.More() {
		return Alert{}, errors.New("alerts: decode: data after the JSON value")
	}
	if _, err := dec.Token(); err == nil {
		return Alert{}, errors.New("alerts: decode: data after the JSON value")
	}
	missing := func(name string) (Alert, error) {
		return Alert{}, fmt.Errorf("alerts: decode: member %q missing or null", name)
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
	case w.Count == nil:
		return missing("count")
	case w.Evidence == nil:
		return missing("evidence")
	case w.Late == nil:
		return missing("late")
	case w.Watermark == nil:
		return missing("watermark")
	case w.Reason == nil:
		return missing("reason")
	}
	a := Alert{
		AlertID:     *w.AlertID,
		Revision:    *w.Revision,
		Status:      *w.Status,
		RuleID:      *w.RuleID,
		RuleVersion: *w.RuleVersion,
		MachineID:   *w.MachineID,
		Count:       *w.Count,
		Late:        *w.Late,
		Reason:      *w.Reason,
		Watermark:   WatermarkNone,
	}
	if w.KeyField != nil {
		a.KeyField = *w.KeyField
	}
	if w.Key != nil {
		a.Key = *w.Key
	}
	if g := w.Aggregate; g != nil {
		if g.Fn == nil || g.Value == nil {
			return Alert{}, errors.New("alerts: decode aggregate: a member is missing or null")
		}
		a.Aggregate = &Aggregate{Fn: *g.Fn, Value: *g.Value}
	}
	if w.MergedInto != nil {
		a.MergedInto = *w.MergedInto
		if a.MergedInto == "" {
			return Alert{}, errors.New("alerts: decode: empty merged_into")
		}
	}
	var err error
	if a.Start, err = parseTime(*w.Start); err != nil {
		return Alert{}, fmt.Errorf("alerts: decode start: %w", err)
	}
	if a.End, err = parseTime(*w.End); err != nil {
		return Alert{}, fmt.Errorf("alerts: decode end: %w", err)
	}
	if string(w.Watermark) != "null" {
		var s string
		if err := json.Unmarshal(w.Watermark, &s); err != nil {
			return Alert{}, fmt.Errorf("alerts: decode watermark: %w", err)
		}
		if a.Watermark, err = parseTime(s); err != nil {
			return Alert{}, fmt.Errorf("alerts: decode watermark: %w", err)
		}
	}
	for i, e := range *w.Evidence {
		if e.EventID == nil || e.SensorID == nil || e.TS == nil || e.Value == nil || e.Partition == nil || e.Offset == nil {
			return Alert{}, fmt.Errorf("alerts: decode evidence[%d]: a member is missing or null", i)
		}
		ts, err := parseTime(*e.TS)
		if err != nil {
			return Alert{}, fmt.Errorf("alerts: decode evidence[%d].ts: %w", i, err)
		}
		a.Evidence = append(a.Evidence, Evidence{
			EventID: *e.EventID, SensorID: *e.SensorID, TS: ts,
			Value: *e.Value, Partition: *e.Partition, Offset: *e.Offset,
		})
	}
	if err := a.check(); err != nil {
		return Alert{}, fmt.Errorf("alerts: decode: %w", err)
	}
	return a, nil
}
