// Package pipeline owns what one input record becomes: the pure sequence of
// SPEC.md section 4 (decode and validate, filter, deduplicate, lateness,
// apply, watermark, close) applied to one partition's window state, and the
// output records it yields (alerts, dead letters, too-late copies) with
// their exact keys, values and headers.
//
// It is pure: no Kafka client, no disk, no clock. Package consume runs it
// inside transactions; tests and reconciliation tools run it over a log in
// memory as the reference the real, crashing, rebalancing system must match.
package pipeline

import (
	"fmt"
	"strconv"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/window"
)

// Header names of the dead-letter and too-late outputs (SPEC.md section 3).
const (
	HeaderErrorReason     = "error.reason"
	HeaderErrorDetail     = "error.detail"
	HeaderSourceTopic     = "source.topic"
	HeaderSourcePartition = "source.partition"
	HeaderSourceOffset    = "source.offset"
	HeaderSourceTimestamp = "source.timestamp" // record timestamp, epoch milliseconds
	HeaderLateReason      = "late.reason"
	HeaderLateWatermark   = "late.watermark" // RFC 3339 UTC, milliseconds
	HeaderLatenessMs      = "late.lateness_ms"
)

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// Input is one input record.
type Input struct {
	Topic       string
	Partition   int32
	Offset      int64
	Key, Value  []byte
	TimestampMs int64 // Kafka record timestamp
	Headers     []Header
}

// Kind names an output's destination.
type Kind uint8

// Output kinds.
const (
	Alert Kind = iota + 1
	DeadLetter
	TooLate
)

// Output is one record to produce. Alerts are keyed by machine; dead
// letters and too-late copies keep the original key, value and headers.
type Output struct {
	Kind    Kind
	Key     []byte
	Value   []byte
	Headers []Header
	Status  string // alerts: the revision's status
	Reason  string // dead letters: the reason code
}

// Accounting counts what happened to a partition's records: every record is
// exactly one of processed, filtered, duplicate, dead-lettered or too late.
type Accounting struct {
	Version      int   `json:"v"`
	NextOffset   int64 `json:"next_offset"` // offset after the last record counted
	Records      int64 `json:"records"`
	Processed    int64 `json:"processed"`
	Filtered     int64 `json:"filtered"`
	Duplicate    int64 `json:"duplicate"`
	DeadLettered int64 `json:"dead_lettered"`
	TooLate      int64 `json:"too_late"`
}

// Balanced reports whether the accounting invariant holds.
func (a Accounting) Balanced() bool {
	return a.Processed+a.Filtered+a.Duplicate+a.DeadLettered+a.TooLate == a.Records
}

// Stage applies one rule to records.
type Stage struct {
	rule  config.Rule
	valid *event.Validator
	win   window.Config
}

// NewStage builds the stage of rule.
func NewStage(rule config.Rule) (*Stage, error) {
	win := window.Config{
		Threshold:      rule.Threshold,
		SizeMs:         rule.Window.Milliseconds(),
		DelayMs:        rule.WatermarkDelay.Milliseconds(),
		LatenessMs:     rule.AllowedLateness.Milliseconds(),
		DedupHorizonMs: rule.DedupHorizon.Milliseconds(),
		AlertID: func(key, first string) string {
			return alerts.ID(rule.ID, rule.Version, key, first)
		},
	}
	if err := win.Validate(); err != nil {
		return nil, fmt.Errorf("pipeline: rule %s: %w", rule.ID, err)
	}
	return &Stage{
		rule: rule,
		valid: event.NewValidator(event.JSONDecoder{}, event.Options{
			MaxFutureSkewMs: max(rule.MaxFutureSkew.Milliseconds(), 1),
		}),
		win: win,
	}, nil
}

// WindowConfig is the window configuration of the stage's rule.
func (s *Stage) WindowConfig() window.Config { return s.win }

// NewPartition returns empty window state for one input partition.
func (s *Stage) NewPartition() *window.Partition {
	p, err := window.NewPartition(s.win)
	if err != nil {
		panic(err) // the config was validated in NewStage
	}
	return p
}

// Process runs one record through SPEC.md section 4 against the partition's
// window state, counts it in acct and passes each output to emit, in order.
func (s *Stage) Process(w *window.Partition, in Input, acct *Accounting, emit func(Output)) {
	acct.Records++
	acct.NextOffset = in.Offset + 1
	ev, verr := s.valid.Check(in.Key, in.Value, in.TimestampMs)
	if verr != nil {
		acct.DeadLettered++
		emit(Output{
			Kind: DeadLetter, Key: in.Key, Value: in.Value, Reason: string(verr.Reason),
			Headers: copyHeaders(in, Header{HeaderErrorReason, []byte(verr.Reason)}, Header{HeaderErrorDetail, []byte(verr.Detail)}),
		})
		return
	}
	qualifies := ev.Value >= s.rule.MinValue && (s.rule.Quality == "" || ev.Quality == s.rule.Quality)
	res := w.Process(window.Event{
		Key:       ev.MachineID,
		EventID:   ev.EventID,
		SensorID:  ev.SensorID,
		TS:        ev.TS,
		Value:     ev.Value,
		Partition: in.Partition,
		Offset:    in.Offset,
	}, qualifies)
	switch res.Outcome {
	case window.Processed:
		acct.Processed++
	case window.Filtered:
		acct.Filtered++
	case window.Duplicate:
		acct.Duplicate++
	case window.TooLate:
		acct.TooLate++
		emit(Output{
			Kind: TooLate, Key: in.Key, Value: in.Value,
			Headers: copyHeaders(in,
				Header{HeaderLateReason, []byte("too_late")},
				Header{HeaderLateWatermark, []byte(alerts.FormatTime(res.Watermark))},
				Header{HeaderLatenessMs, strconv.AppendInt(nil, res.LatenessMs, 10)}),
		})
	}
	for _, rev := range res.Revisions {
		emit(s.alert(rev))
	}
}

func (s *Stage) alert(rev window.Revision) Output {
	a := alerts.Alert{
		AlertID:     rev.AlertID,
		Revision:    rev.Revision,
		Status:      rev.Status.String(),
		MergedInto:  rev.MergedInto,
		RuleID:      s.rule.ID,
		RuleVersion: s.rule.Version,
		MachineID:   rev.Key,
		Start:       rev.Start,
		End:         rev.End,
		Count:       rev.Count,
		Late:        rev.Late,
		Watermark:   rev.Watermark,
	}
	a.Evidence = make([]alerts.Evidence, 0, len(rev.Evidence))
	for _, e := range rev.Evidence {
		a.Evidence = append(a.Evidence, alerts.Evidence{
			EventID: e.EventID, SensorID: e.SensorID, TS: e.TS, Value: e.Value,
			Partition: e.Partition, Offset: e.Offset,
		})
	}
	a.Reason = alerts.ReasonSentence(a.Status, a.Count, s.rule.Description, a.MachineID, a.Start, a.End, a.MergedInto)
	val, err := a.Encode()
	if err != nil {
		// The window only emits well-formed revisions; if one ever is not,
		// the alert still goes out, marked, rather than vanishing.
		val = fmt.Appendf(nil, `{"alert_id":%q,"revision":%d,"encode_error":%q}`, a.AlertID, a.Revision, err.Error())
	}
	return Output{Kind: Alert, Key: []byte(rev.Key), Value: val, Status: a.Status}
}

// copyHeaders returns the original headers, then extra, then source.*.
func copyHeaders(in Input, extra ...Header) []Header {
	h := make([]Header, 0, len(in.Headers)+len(extra)+4)
	h = append(h, in.Headers...)
	h = append(h, extra...)
	return append(h,
		Header{HeaderSourceTopic, []byte(in.Topic)},
		Header{HeaderSourcePartition, strconv.AppendInt(nil, int64(in.Partition), 10)},
		Header{HeaderSourceOffset, strconv.AppendInt(nil, in.Offset, 10)},
		Header{HeaderSourceTimestamp, strconv.AppendInt(nil, in.TimestampMs, 10)},
	)
}
