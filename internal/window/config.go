package window

import (
	"errors"
	"fmt"
	"math"
)

// NoWatermark is the watermark before any event: minus infinity. At
// NoWatermark nothing is late, nothing is too late, nothing expires and
// nothing closes.
const NoWatermark int64 = math.MinInt64

// Defaults of the SPEC (section 4). Zero is a valid value for DelayMs and
// LatenessMs, so Config has no EnsureDefaults: the config package fills the
// defaults in.
const (
	DefaultDelayMs        int64 = 30_000    // D = 30s
	DefaultLatenessMs     int64 = 600_000   // L = 10m
	DefaultDedupHorizonMs int64 = 3_600_000 // H = 1h
)

// Config is the event-time configuration of one rule.
type Config struct {
	// Threshold is N, the number of qualifying events that fire; >= 1.
	// Vibration: 3.
	Threshold int
	// SizeMs is S, the window size in milliseconds: N events whose ts span
	// is <= S fire (inclusive); > 0. Vibration: 120000.
	SizeMs int64
	// DelayMs is D, the watermark delay in milliseconds: W = max(W, ts - D);
	// >= 0. Default DefaultDelayMs (30000).
	DelayMs int64
	// LatenessMs is L, the allowed lateness in milliseconds: an event with
	// ts < W - L is too late; >= 0. Default DefaultLatenessMs (600000).
	LatenessMs int64
	// DedupHorizonMs is H, in milliseconds: an event_id is remembered while
	// its ts >= W - H; must be > SizeMs + LatenessMs. Default
	// DefaultDedupHorizonMs (3600000).
	DedupHorizonMs int64
	// AlertID returns the deterministic alert id of an incident from its key
	// and the event_id of the first evidence event of revision 0. It must be
	// a pure function. Required (package alerts owns the hash).
	AlertID func(key, firstEventID string) string
}

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("window: invalid config")

// Validate reports the first invalid field, naming the field, its value and
// what would be valid.
func (c Config) Validate() error {
	bad := func(field string, value any, valid string) error {
		return fmt.Errorf("%w: %s = %v, must be %s", ErrInvalidConfig, field, value, valid)
	}
	switch {
	case c.Threshold < 1:
		return bad("Threshold", c.Threshold, ">= 1")
	case c.SizeMs <= 0:
		return bad("SizeMs", c.SizeMs, "> 0 (milliseconds)")
	case c.DelayMs < 0:
		return bad("DelayMs", c.DelayMs, ">= 0 (milliseconds)")
	case c.LatenessMs < 0:
		return bad("LatenessMs", c.LatenessMs, ">= 0 (milliseconds)")
	case c.DedupHorizonMs <= addSat(c.SizeMs, c.LatenessMs):
		return bad("DedupHorizonMs", c.DedupHorizonMs,
			fmt.Sprintf("> SizeMs + LatenessMs = %d (milliseconds)", addSat(c.SizeMs, c.LatenessMs)))
	case c.AlertID == nil:
		return fmt.Errorf("%w: AlertID is nil, must be set (the alerts package's id function)", ErrInvalidConfig)
	}
	return nil
}
