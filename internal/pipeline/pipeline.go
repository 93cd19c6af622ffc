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
	"strconv"
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
	HeaderLateRule        = "late.rule"         // the rule that found the record too late
	HeaderLateRuleVersion = "late.rule_version" // and its version
	// Of a dead letter too large to be written whole (MaxDeadLetterBytes):
	// what was left out ("value", "value,key" or "value,key,headers", the
	// original headers) and the full letter's size (key, value, headers).
	HeaderOmitted       = "dlq.omitted"
	HeaderOriginalBytes = "dlq.original_bytes"
)

// MaxDeadLetterBytes bounds a dead letter's key, value and headers: the
// producer writes records of at most about 1 MB (franz-go's batch limit,
// 1,000,012 bytes, under the broker's default 1 MiB message limit), and an
// input record near that size plus the letter's headers would not fit:
// its produce would fail and abort every retry of the batch, stalling the
// partition. Such a letter is written without its value (then key, then
// original headers) and says so (HeaderOmitted); the original stays in the
// input topic at source.offset.
const MaxDeadLetterBytes = 990_000

// MaxAlertBytes bounds an alert revision's value, for the same reason: a
// sliding rule's alert names its N firing events (N up to 1000, ids up to
// 1024 bytes, which JSON escapes can make six times longer: up to about
// 12 MB), and a revision the producer cannot write would abort its batch
// on every retry. A revision whose value would be larger goes out with its
// evidence cut to the longest prefix that fits, evidence_omitted saying how
// many events were left out (Stage.encode); count and every other field
// are unchanged. The record key (at most 1024 bytes, event.MaxIDBytes) and
// the record's framing fit in the remaining 10 KB.
const MaxAlertBytes = 990_000

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
	// JSON is an alert's JSON value when Value is in another format (Avro
	// alerts), for displays that show JSON; nil when Value is JSON.
	JSON []byte
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
