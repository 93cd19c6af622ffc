package dlq

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vibeline/processor/internal/event"
)

// Selection chooses dead letters. The zero value chooses every one; each
// set field narrows it (all conditions must hold).
type Selection struct {
	// Reasons are error.reason codes (event.Reasons); empty: every reason.
	Reasons []string
	// SourcePartitions are partitions of the source topic; empty: every.
	// A letter without source headers matches no partition.
	SourcePartitions []int32
	// DLQPartitions are partitions of the dead-letter topic; empty: every.
	DLQPartitions []int32
	// FromOffset and ToOffset bound the dead letter's own offset to
	// [FromOffset, ToOffset) in every chosen DLQ partition; ToOffset 0 means
	// no upper bound.
	FromOffset, ToOffset int64
	// From and To bound the original record's timestamp (source.timestamp;
	// the dead letter's own timestamp without source headers) to [From, To);
	// zero means no bound.
	From, To time.Time
}

// Validate checks the selection; its errors name the field and what is valid.
func (s Selection) Validate() error {
	var errs []error
	known := event.Reasons()
	for _, r := range s.Reasons {
		if !slices.Contains(known, event.Reason(r)) {
			names := make([]string, len(known))
			for i, k := range known {
				names[i] = string(k)
			}
			errs = append(errs, fmt.Errorf("dlq: reason %q is unknown: one of %s", r, strings.Join(names, ", ")))
		}
	}
	for _, p := range slices.Concat(s.SourcePartitions, s.DLQPartitions) {
		if p < 0 {
			errs = append(errs, fmt.Errorf("dlq: partition %d is invalid: a partition number >= 0", p))
		}
	}
	if s.FromOffset < 0 || s.ToOffset < 0 {
		errs = append(errs, fmt.Errorf("dlq: offsets [%d, %d) are invalid: offsets are >= 0", s.FromOffset, s.ToOffset))
	} else if s.ToOffset > 0 && s.ToOffset <= s.FromOffset {
		errs = append(errs, fmt.Errorf("dlq: offsets [%d, %d) are empty: the to-offset is exclusive and must exceed the from-offset", s.FromOffset, s.ToOffset))
	}
	if !s.From.IsZero() && !s.To.IsZero() && !s.From.Before(s.To) {
		errs = append(errs, fmt.Errorf("dlq: time range [%s, %s) is empty: from must be before to", formatTime(s.From), formatTime(s.To)))
	}
	return errors.Join(errs...)
}

// Match reports whether the selection chooses l.
func (s Selection) Match(l Letter) bool {
	if len(s.Reasons) > 0 && !slices.Contains(s.Reasons, l.Reason) {
		return false
	}
	if len(s.SourcePartitions) > 0 && (!l.SourceOK || !slices.Contains(s.SourcePartitions, l.SourcePartition)) {
		return false
	}
	if len(s.DLQPartitions) > 0 && !slices.Contains(s.DLQPartitions, l.Partition) {
		return false
	}
	if l.Offset < s.FromOffset || (s.ToOffset > 0 && l.Offset >= s.ToOffset) {
		return false
	}
	t := l.Time()
	if (!s.From.IsZero() && t.Before(s.From)) || (!s.To.IsZero() && !t.Before(s.To)) {
		return false
	}
	return true
}

// String describes the selection for people.
func (s Selection) String() string {
	var parts []string
	if len(s.Reasons) > 0 {
		parts = append(parts, "reason "+strings.Join(s.Reasons, ", "))
	}
	if len(s.SourcePartitions) > 0 {
		parts = append(parts, fmt.Sprintf("source partition %v", s.SourcePartitions))
	}
	if len(s.DLQPartitions) > 0 {
		parts = append(parts, fmt.Sprintf("dlq partition %v", s.DLQPartitions))
	}
	if s.FromOffset > 0 || s.ToOffset > 0 {
		to := "end"
		if s.ToOffset > 0 {
			to = fmt.Sprint(s.ToOffset)
		}
		parts = append(parts, fmt.Sprintf("dlq offsets [%d, %s)", s.FromOffset, to))
	}
	if !s.From.IsZero() || !s.To.IsZero() {
		from, to := "-inf", "+inf"
		if !s.From.IsZero() {
			from = formatTime(s.From)
		}
		if !s.To.IsZero() {
			to = formatTime(s.To)
		}
		parts = append(parts, fmt.Sprintf("source time [%s, %s)", from, to))
	}
	if len(parts) == 0 {
		return "every dead letter"
	}
	return strings.Join(parts, "; ")
}

// formatTime renders t as RFC 3339 UTC with milliseconds, like every time
// the processor writes.
func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
