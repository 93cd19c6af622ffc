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
	var b strings.Builder
	b.WriteString(strconv.Itoa(count))
	b.WriteByte(' ')
	b.WriteString(what)
	b.WriteString(" on ")
	b.WriteString(noun)
	b.WriteByte(' ')
	b.WriteString(key)
	b.WriteString(" within ")
	b.WriteString(formatSpan(end - start))
	b.WriteString(", from ")
	from, to := FormatTime(start), FormatTime(end)
	b.WriteString(from)
	b.WriteString(" to ")
	if len(from) == len(timeLayout) && len(to) == len(timeLayout) && from[:11] == to[:11] {
		to = to[11:] // same date: time of day only
	}
	b.WriteString(to)
	switch status {
	case StatusUpdated:
		b.WriteString(" (revised)")
	case StatusMerged:
		b.WriteString(", merged into alert ")
		b.WriteString(mergedInto)
	case StatusClosed:
		b.WriteString(", closed")
	}
	return b.String()
}

// formatSpan renders a span of milliseconds as a Go duration ("1m30s",
// "2.5s", "0s"); spans beyond time.Duration's range as milliseconds.
func formatSpan(ms int64) string {
	const limit = int64(1<<63-1) / int64(time.Millisecond)
	if ms > limit || ms < -limit {
		return strconv.FormatInt(ms, 10) + "ms"
	}
	return (time.Duration(ms) * time.Millisecond).String()
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
