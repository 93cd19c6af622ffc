package rules

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Window types.
const (
	Sliding  = "sliding"  // record-aligned: N events within size (SPEC.md section 4)
	Tumbling = "tumbling" // [k*size, (k+1)*size)
	Hopping  = "hopping"  // [k*advance, k*advance+size)
	Session  = "session"  // events less than gap apart
)

// Aggregation functions.
const (
	FnCount = "count"
	FnSum   = "sum"
	FnAvg   = "avg"
	FnMin   = "min"
	FnMax   = "max"
)

// Watermark strategies.
const (
	// WatermarkFixed: W = max event time - delay.
	WatermarkFixed = "fixed"
	// WatermarkAdaptive: W = max event time - d, d the percentile of the
	// observed event delays (max event time seen - ts) over the last sample
	// events, clamped to [min, max]; delay until sample events were seen.
	// Computed from the log only, so replays compute the same watermarks.
	WatermarkAdaptive = "adaptive"
)

// Rule is one keyed, windowed alert rule. The YAML key of each field is in
// its tag; defaults.go states every default.
type Rule struct {
	// ID names the rule in alerts and alert ids: 1-200 characters of
	// [a-zA-Z0-9._-]. Required.
	ID string `yaml:"id"`
	// Version is bumped on every change of the rule, then the input is
	// replayed: alert ids of a new version never collide with the old ones.
	// >= 1. Required.
	Version int `yaml:"version"`
	// Description is the phrase used in alert reasons, for example
	// "high-vibration events". Default: "events of rule <id>".
	Description string `yaml:"description"`
	// Source is the input topic. Required.
	Source string `yaml:"source"`
	// Key is the event field the rule groups by: machine_id or sensor_id.
	// Default machine_id.
	Key string `yaml:"key"`
	// Repartition routes every record of the source through the rule's
	// internal repartition topic, keyed by the rule's key, so that all events
	// of one key meet the same state whatever the producers keyed the
	// records by (or if they sent no key). Implied when key is not
	// machine_id. Default false: records keyed by machine_id (or without a
	// key) are processed on the partition they arrive on.
	Repartition bool `yaml:"repartition"`
	// Filter is a boolean expression over the event (see Event); events for
	// which it is false are filtered. Default "true" (every event).
	Filter Expr `yaml:"filter"`
	// Window is the window type and its durations. Required.
	Window Window `yaml:"window"`
	// Aggregate is the aggregation over the window's events. Default
	// {fn: count, field: value}.
	Aggregate Aggregate `yaml:"aggregate"`
	// Threshold is a boolean expression over the aggregate (see Agg): the
	// window fires when it holds. Sliding windows need the form
	// `count >= N`. Required.
	Threshold Expr `yaml:"threshold"`
	// Watermark is how the partition watermark follows event time. Default
	// {strategy: fixed, delay: 30s}.
	Watermark Watermark `yaml:"watermark"`
	// AllowedLateness is L: an event with ts < W - L is too late. Default
	// 10m; 0s..720h.
	AllowedLateness Duration `yaml:"allowed_lateness"`
	// DedupHorizon is H: event ids are remembered while their ts >= W - H;
	// must exceed the window extent (size, or gap for sessions) +
	// allowed_lateness. Default 1h; at most 2160h.
	DedupHorizon Duration `yaml:"dedup_horizon"`
	// Cooldown, when > 0: after an alert of a key opens, no new alert opens
	// for that key until the watermark passes the alert's end + cooldown.
	// Default 0s (none); 0s..720h.
	Cooldown Duration `yaml:"cooldown"`
	// Outputs are the output topics.
	Outputs Outputs `yaml:"outputs"`

	file  string         // the file name Parse was given, for messages
	index int            // position in the file's rules list
	line  int            // line of the rule in the file, 0 if unknown
	pos   map[string]int // key path (window.size) -> line, for messages
}

// Window is a rule's window.
type Window struct {
	// Type is sliding, tumbling, hopping or session. Required.
	Type string `yaml:"type"`
	// Size is the window size (sliding: the span N events must fall within,
	// inclusive); not for session. 1ms..720h.
	Size Duration `yaml:"size"`
	// Advance is the hop of hopping windows, 1ms..size (and size/advance <=
	// 1000); only for hopping.
	Advance Duration `yaml:"advance"`
	// Gap is the session gap: events less than gap apart are one session;
	// only for session. 1ms..720h.
	Gap Duration `yaml:"gap"`
}

// Aggregate is a rule's aggregation.
type Aggregate struct {
	// Fn is count, sum, avg, min or max. Default count.
	Fn string `yaml:"fn"`
	// Field is the aggregated event field; only value (mm/s) is numeric
	// and meaningful. Default value.
	Field string `yaml:"field"`
}

// Watermark is a rule's watermark strategy.
type Watermark struct {
	// Strategy is fixed or adaptive. Default fixed.
	Strategy string `yaml:"strategy"`
	// Delay is D for fixed (default 30s, 0s..720h); for adaptive the delay
	// used until sample events were seen.
	Delay Duration `yaml:"delay"`
	// Percentile of the observed delays, adaptive only: (0, 100]. Default 99.
	Percentile float64 `yaml:"percentile"`
	// Min and Max clamp the adaptive delay. Defaults 0s and 10m.
	Min Duration `yaml:"min"`
	Max Duration `yaml:"max"`
	// Sample is how many recent events the adaptive percentile is taken
	// over: 1..1000000. Default 1000.
	Sample int `yaml:"sample"`
}

// Outputs are a rule's output topics.
type Outputs struct {
	// Alerts receives alert revisions. Required.
	Alerts string `yaml:"alerts"`
	// DLQ receives dead letters. Default "<source>.dlq".
	DLQ string `yaml:"dlq"`
	// Late receives too-late records. Default "<source>.late".
	Late string `yaml:"late"`
}

// Duration is a YAML duration: a string such as "2m", "30s", "1h30m" or
// "250ms" (Go's time.ParseDuration units from ms up), a whole number of
// milliseconds, not negative. A bare number other than 0 is refused: its
// unit would be a guess.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Ms returns d in milliseconds.
func (d Duration) Ms() int64 { return time.Duration(d).Milliseconds() }

// String renders d without zero units: 2m, 1h30m, 1s500ms, 0s.
func (d Duration) String() string { return formatDuration(time.Duration(d)) }

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return fmt.Errorf("line %d: want a duration such as 2m, 30s or 1h", n.Line)
	}
	v, err := time.ParseDuration(n.Value)
	switch {
	case err != nil:
		return fmt.Errorf("line %d: %q is not a duration: want a number with a unit, such as 2m, 30s, 1h or 250ms", n.Line, n.Value)
	case v < 0:
		return fmt.Errorf("line %d: duration %s is negative", n.Line, n.Value)
	case v%time.Millisecond != 0:
		return fmt.Errorf("line %d: duration %s is not a whole number of milliseconds", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// formatDuration renders d as h, m, s and ms parts without zero parts;
// time.ParseDuration reads it back.
func formatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	var b strings.Builder
	if d < 0 {
		b.WriteByte('-')
		d = -d
	}
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}, {time.Nanosecond, "ns"}} {
		if n := d / u.unit; n > 0 {
			b.WriteString(strconv.FormatInt(int64(n), 10))
			b.WriteString(u.name)
			d -= n * u.unit
		}
	}
	return b.String()
}

// Expr is the source text of an expression. In YAML any scalar is taken
// as written, so `filter: true` and `threshold: count >= 3` need no quotes.
type Expr string

// UnmarshalYAML implements yaml.Unmarshaler.
func (e *Expr) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return fmt.Errorf("line %d: want an expression, such as value >= 7.1", n.Line)
	}
	*e = Expr(n.Value)
	return nil
}
