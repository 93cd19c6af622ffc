package alerts

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ReasonSentence builds an alert's reason deterministically from its parts
// (no wall clock, no locale):
//
//	<count> <what> on machine <key> within <span>, from <start> to <end><suffix>
//
// where what describes the qualifying events (for the vibration rule
// "high-vibration events (>= 7.1 mm/s)"), span is end-start as a Go duration
// ("1m30s"), start is FormatTime(start) and end is FormatTime(end), shortened
// to the time of day when it falls on start's UTC date. The suffix depends on
// status: none for open, " (revised)" for updated, ", merged into alert
// <mergedInto>" for merged, ", closed" for closed. For example:
//
//	3 high-vibration events (>= 7.1 mm/s) on machine M-7 within 1m30s, from 2026-01-02T10:00:00.000Z to 10:01:30.000Z
func ReasonSentence(status string, count int, what string, key string, start, end int64, mergedInto string) string {
	return ReasonSentenceKeyed(status, count, what, "machine", key, start, end, mergedInto)
}

// ReasonSentenceKeyed is ReasonSentence for a rule whose key identifies
// something other than a machine: "on <noun> <key>" (for example "on sensor
// S-1").
func ReasonSentenceKeyed(status string, count int, what, noun, key string, start, end int64, mergedInto string) string {
	r := Reason{Status: status, Count: count, What: what, Noun: noun, Key: key, Start: start, End: end, MergedInto: mergedInto}
	return r.String()
}

// Reason holds the parts of an alert's reason sentence (ReasonSentence):
// Append and String build it without intermediate strings, for the
// processor's alert path.
type Reason struct {
	Status string
	Count  int
	// What describes the qualifying events. Aggregate, when not nil, is
	// named after it as " (<fn> <value>)", the value in %g form with 6
	// significant digits: "readings (max 13.37)".
	What      string
	Aggregate *Aggregate
	// Noun is what the key identifies ("machine", "sensor").
	Noun, Key  string
	Start, End int64
	MergedInto string
}

// String is the reason sentence.
func (r *Reason) String() string {
	var buf [256]byte // most sentences fit: then the string is the only allocation
	return string(r.Append(buf[:0]))
}

// Append appends the reason sentence to b.
func (r *Reason) Append(b []byte) []byte {
	b = strconv.AppendInt(b, int64(r.Count), 10)
	b = append(b, ' ')
	b = append(b, r.What...)
	if g := r.Aggregate; g != nil {
		b = append(b, " ("...)
		b = append(b, g.Fn...)
		b = append(b, ' ')
		b = strconv.AppendFloat(b, g.Value, 'g', 6, 64)
		b = append(b, ')')
	}
	b = append(b, " on "...)
	b = append(b, r.Noun...)
	b = append(b, ' ')
	b = append(b, r.Key...)
	b = append(b, " within "...)
	b = appendSpan(b, r.End-r.Start)
	b = append(b, ", from "...)
	b = appendFromTo(b, r.Start, r.End)
	switch r.Status {
	case StatusUpdated:
		b = append(b, " (revised)"...)
	case StatusMerged:
		b = append(b, ", merged into alert "...)
		b = append(b, r.MergedInto...)
	case StatusClosed:
		b = append(b, ", closed"...)
	}
	return b
}

// appendFromTo appends "<start> to <end>", end shortened to the time of day
// when it falls on start's UTC date (both FormatTime).
func appendFromTo(b []byte, start, end int64) []byte {
	if !timeInRange(start) || !timeInRange(end) {
		// FormatTime's forms beyond years 0000..9999, as ever.
		from, to := FormatTime(start), FormatTime(end)
		if len(from) == len(timeLayout) && len(to) == len(timeLayout) && from[:11] == to[:11] {
			to = to[11:]
		}
		b = append(b, from...)
		b = append(b, " to "...)
		return append(b, to...)
	}
	var t [len(timeLayout)]byte
	to := appendTime(t[:0], end)
	n := len(b)
	b = appendTime(b, start)
	if string(b[n:n+11]) == string(to[:11]) {
		to = to[11:] // same date: time of day only
	}
	b = append(b, " to "...)
	return append(b, to...)
}

// formatSpan renders a span of milliseconds as a Go duration ("1m30s",
// "2.5s", "0s"); spans beyond time.Duration's range as milliseconds.
func formatSpan(ms int64) string {
	return string(appendSpan(nil, ms))
}

// maxSpanMs is the longest span (either sign) that time.Duration holds.
const maxSpanMs = int64(1<<63-1) / int64(time.Millisecond)

// appendSpan appends formatSpan(ms): time.Duration's String form, which for
// whole milliseconds is "<n>ms" below a second and otherwise
// [<h>h][<m>m]<s>[.<fraction>]s, minutes written whenever hours are and the
// fraction without trailing zeros; spans beyond time.Duration's range as
// "<ms>ms".
func appendSpan(b []byte, ms int64) []byte {
	if ms > maxSpanMs || ms < -maxSpanMs {
		b = strconv.AppendInt(b, ms, 10)
		return append(b, "ms"...)
	}
	if ms == 0 {
		return append(b, "0s"...)
	}
	u := uint64(ms)
	if ms < 0 {
		b = append(b, '-')
		u = uint64(-ms)
	}
	if u < 1000 {
		b = strconv.AppendUint(b, u, 10)
		return append(b, "ms"...)
	}
	sec, milli := u/1000, u%1000
	if h := sec / 3600; h > 0 {
		b = strconv.AppendUint(b, h, 10)
		b = append(b, 'h')
	}
	if sec >= 60 {
		b = strconv.AppendUint(b, sec/60%60, 10)
		b = append(b, 'm')
	}
	b = strconv.AppendUint(b, sec%60, 10)
	if milli != 0 {
		d := [4]byte{'.', byte('0' + milli/100), byte('0' + milli/10%10), byte('0' + milli%10)}
		n := len(d)
		for d[n-1] == '0' {
			n--
		}
		b = append(b, d[:n]...)
	}
	return append(b, 's')
}

// Human renders one revision for people (processor demo, logs of the
// reconcile tool), on several lines, each evidence sample on its own line:
//
//	alert 5c1d…  rev 1  updated  late
//	  rule       vibration-high v1
//	  machine    M-7
//	  window     2026-01-02T10:00:00.000Z .. 2026-01-02T10:01:30.000Z (1m30s)
//	  count      3
//	  watermark  2026-01-02T10:00:45.000Z
//	  reason     3 high-vibration events ...
//	  evidence   3 samples
//	    1. sensor S-1  ts 2026-01-02T10:00:00.000Z  value 7.5 mm/s  partition 0 offset 12  event e-1
//
// The layout is for reading, not parsing: use Encode for machines. The
// result ends with a newline.
func Human(a Alert) string {
	var b strings.Builder
	fmt.Fprintf(&b, "alert %s  rev %d  %s", a.AlertID, a.Revision, a.Status)
	if a.Late {
		b.WriteString("  late")
	}
	b.WriteByte('\n')
	line := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "  %-10s "+format+"\n", append([]any{label}, args...)...)
	}
	line("rule", "%s v%d", a.RuleID, a.RuleVersion)
	line("machine", "%s", a.MachineID)
	line("window", "%s .. %s (%s)", FormatTime(a.Start), FormatTime(a.End), formatSpan(a.End-a.Start))
	line("count", "%d", a.Count)
	if a.Watermark == WatermarkNone {
		line("watermark", "none")
	} else {
		line("watermark", "%s", FormatTime(a.Watermark))
	}
	if a.Status == StatusMerged || a.MergedInto != "" {
		line("merged", "into %s", a.MergedInto)
	}
	line("reason", "%s", a.Reason)
	omitted := ""
	if a.EvidenceOmitted > 0 {
		omitted = fmt.Sprintf(" (%d more left out: evidence_omitted)", a.EvidenceOmitted)
	}
	switch len(a.Evidence) {
	case 1:
		line("evidence", "1 sample%s", omitted)
	default:
		line("evidence", "%d samples%s", len(a.Evidence), omitted)
	}
	for i, e := range a.Evidence {
		fmt.Fprintf(&b, "    %d. sensor %s  ts %s  value %s mm/s  partition %d offset %d  event %s\n",
			i+1, e.SensorID, FormatTime(e.TS), strconv.FormatFloat(e.Value, 'g', -1, 64), e.Partition, e.Offset, e.EventID)
	}
	return b.String()
}
