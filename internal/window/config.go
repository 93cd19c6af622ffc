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

	// EventBucketMs and DedupBucketMs are the time buckets of the persisted
	// state (encoding.go): a key's kept events with ts in [b*B, (b+1)*B)
	// are one entry, and so are its remembered ids, so that a commit
	// rewrites the buckets that changed, not the key's whole state. They
	// are part of the persisted format (a state written with other
	// buckets is refused, ErrUnknownVersion); 0 means the default,
	// DefaultEventBucketMs and DefaultDedupBucketMs, which is what the
	// processor uses. Tests set them small. >= 0.
	EventBucketMs int64
	DedupBucketMs int64
}

// DefaultEventBucketMs is the event bucket of a rule: a 64th of L + S, at
// least 1 s. The kept events of a key span about D + L + S of event time
// (those with ts >= W - L - S), so a key keeps about 64 event buckets, and
// a commit rewrites the newest one (the events a batch applies) and the
// oldest one (when pruning cut into it): about a 32nd of the key's events
// instead of all of them, with a bounded number of entries per key. (At
// the defaults, 11.25 s.)
func DefaultEventBucketMs(latenessMs, sizeMs int64) int64 {
	return max(1000, addSat(latenessMs, sizeMs)/64)
}

// DefaultDedupBucketMs is the dedup bucket of a rule: a 64th of H, at least
// 1 s, as the aggregating rules' buckets of remembered ids
// (pipeline.DedupBucketMs): a key keeps about 64 of them. (At the default
// H = 1h, 56.25 s.)
func DefaultDedupBucketMs(horizonMs int64) int64 { return max(1000, horizonMs/64) }

// bucketsMs returns the bucket lengths c resolves to.
func (c Config) bucketsMs() (events, dedup int64) {
	events, dedup = c.EventBucketMs, c.DedupBucketMs
	if events == 0 {
		events = DefaultEventBucketMs(c.LatenessMs, c.SizeMs)
	}
	if dedup == 0 {
		dedup = DefaultDedupBucketMs(c.DedupHorizonMs)
	}
	return events, dedup
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
	case c.EventBucketMs < 0:
		return bad("EventBucketMs", c.EventBucketMs, ">= 0 (milliseconds; 0: the default)")
	case c.DedupBucketMs < 0:
		return bad("DedupBucketMs", c.DedupBucketMs, ">= 0 (milliseconds; 0: the default)")
	case c.AlertID == nil:
		return fmt.Errorf("%w: AlertID is nil, must be set (the alerts package's id function)", ErrInvalidConfig)
	}
	return nil
}
