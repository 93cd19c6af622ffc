package aggwindow

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// NoWatermark is the watermark before any event: minus infinity. At
// NoWatermark nothing is late or too late and nothing closes.
const NoWatermark int64 = math.MinInt64

// Bounds. Event times outside [MinTS, MaxTS] are refused (OutOfRange), and
// durations above MaxDurationMs are invalid, so that no window bound
// overflows int64. The input contract's range (years 1970..9999) is far
// inside.
const (
	MinTS         int64 = -1 << 61
	MaxTS         int64 = 1 << 61
	MaxDurationMs int64 = 1 << 40 // about 34.8 years
	// MaxWindowsPerEvent bounds the windows a hopping window's event
	// belongs to, ceil(size/advance): each event updates that many.
	MaxWindowsPerEvent = 1000
	// MaxPanesPerWindow bounds size/gcd(size, advance), the panes a fixed
	// window is kept in (panes.go): each revision combines them, and each
	// pane is one changelog entry.
	MaxPanesPerWindow = 1000
	// MaxEvidence bounds Config.EvidenceLimit.
	MaxEvidence = 1000
)

// Kind is a window type.
type Kind uint8

// Window kinds.
const (
	Tumbling Kind = iota + 1
	Hopping
	Session
)

// String returns the rule-schema name of the kind.
func (k Kind) String() string {
	switch k {
	case Tumbling:
		return "tumbling"
	case Hopping:
		return "hopping"
	case Session:
		return "session"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Fn is an aggregation function over the event value.
type Fn uint8

// Aggregations.
const (
	Count Fn = iota + 1
	Sum
	Avg
	Min
	Max
)

// String returns the rule-schema name of the function.
func (f Fn) String() string {
	switch f {
	case Count:
		return "count"
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Min:
		return "min"
	case Max:
		return "max"
	}
	return "Fn(" + strconv.Itoa(int(f)) + ")"
}

// Config is the configuration of one aggregating rule. There are no
// defaults here: package rules owns them and fills every field.
type Config struct {
	// Kind is the window type.
	Kind Kind
	// SizeMs is the window size in ms (Tumbling, Hopping); 1..MaxDurationMs.
	// Must be 0 for Session.
	SizeMs int64
	// AdvanceMs is the hop in ms (Hopping only; 1..SizeMs with
	// SizeMs/AdvanceMs <= MaxWindowsPerEvent). Must be 0 for Tumbling and
	// Session.
	AdvanceMs int64
	// GapMs is the session gap in ms (Session only; 1..MaxDurationMs): events
	// less than GapMs apart are in one session. Must be 0 otherwise.
	GapMs int64
	// Fn is the aggregation over Event.Value.
	Fn Fn
	// DelayMs is D: Process moves W to max(W, ts - D); 0..MaxDurationMs.
	DelayMs int64
	// LatenessMs is L: an event with ts < W - L is too late, and a window
	// closes when W - L >= its end; 0..MaxDurationMs.
	LatenessMs int64
	// EvidenceLimit is how many events a window names as evidence;
	// 0..MaxEvidence.
	EvidenceLimit int
	// Fires is the threshold predicate over a window's aggregate and count.
	// It must be a pure function. Required.
	Fires func(agg float64, count int) bool
	// FiresIgnoresCount says that Fires does not depend on count (a
	// threshold that names only the aggregate): a window that has not
	// fired is then not judged again until its aggregate changes, since
	// Fires would give the false it gave before. Optional.
	FiresIgnoresCount bool
	// AlertID returns the deterministic alert id of a window from the key
	// and the window's start (see the package doc). It must be a pure
	// function and should include the rule id and version. Required.
	AlertID func(key string, start int64) string
}

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("aggwindow: invalid config")

// Validate reports every invalid field, naming the field, its value and
// what would be valid.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, value any, valid string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v, must be %s", ErrInvalidConfig, field, value, valid))
	}
	dur := func(field string, v int64, lo int64) {
		if v < lo || v > MaxDurationMs {
			bad(field, v, fmt.Sprintf("%d..%d (milliseconds)", lo, MaxDurationMs))
		}
	}
	switch c.Kind {
	case Tumbling, Hopping:
		dur("SizeMs", c.SizeMs, 1)
		if c.GapMs != 0 {
			bad("GapMs", c.GapMs, "0 (only session windows have a gap)")
		}
		if c.Kind == Tumbling && c.AdvanceMs != 0 {
			bad("AdvanceMs", c.AdvanceMs, "0 (tumbling windows advance by their size)")
		}
		if c.Kind == Hopping {
			if c.AdvanceMs < 1 || c.AdvanceMs > c.SizeMs {
				bad("AdvanceMs", c.AdvanceMs, fmt.Sprintf("1..SizeMs (%d)", c.SizeMs))
			} else if (c.SizeMs+c.AdvanceMs-1)/c.AdvanceMs > MaxWindowsPerEvent {
				bad("AdvanceMs", c.AdvanceMs, fmt.Sprintf("such that ceil(SizeMs/AdvanceMs) <= %d (each event updates that many windows)", MaxWindowsPerEvent))
			} else if c.SizeMs/c.paneMs() > MaxPanesPerWindow {
				bad("AdvanceMs", c.AdvanceMs, fmt.Sprintf("such that SizeMs/gcd(SizeMs, AdvanceMs) <= %d (a window is kept in panes of gcd(SizeMs, AdvanceMs) = %d ms)", MaxPanesPerWindow, c.paneMs()))
			}
		}
	case Session:
		dur("GapMs", c.GapMs, 1)
		if c.SizeMs != 0 {
			bad("SizeMs", c.SizeMs, "0 (session windows are bounded by their gap)")
		}
		if c.AdvanceMs != 0 {
			bad("AdvanceMs", c.AdvanceMs, "0 (only hopping windows advance)")
		}
	default:
		bad("Kind", c.Kind, "Tumbling, Hopping or Session")
	}
	if c.Fn < Count || c.Fn > Max {
		bad("Fn", c.Fn, "Count, Sum, Avg, Min or Max")
	}
	dur("DelayMs", c.DelayMs, 0)
	dur("LatenessMs", c.LatenessMs, 0)
	if c.EvidenceLimit < 0 || c.EvidenceLimit > MaxEvidence {
		bad("EvidenceLimit", c.EvidenceLimit, fmt.Sprintf("0..%d", MaxEvidence))
	}
	if c.Fires == nil {
		errs = append(errs, fmt.Errorf("%w: Fires is nil, must be the threshold predicate", ErrInvalidConfig))
	}
	if c.AlertID == nil {
		errs = append(errs, fmt.Errorf("%w: AlertID is nil, must be the alert id function", ErrInvalidConfig))
	}
	return errors.Join(errs...)
}

// advance is the hop of fixed windows (size for tumbling).
func (c *Config) advance() int64 {
	if c.Kind == Tumbling {
		return c.SizeMs
	}
	return c.AdvanceMs
}

// paneMs is the pane length of fixed windows, gcd(size, advance): the
// largest length that cuts every window into whole panes (panes.go). 0 for
// sessions.
func (c *Config) paneMs() int64 {
	if c.Kind == Session {
		return 0
	}
	a, b := c.SizeMs, c.advance()
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
