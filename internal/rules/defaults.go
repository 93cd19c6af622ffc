package rules

import "time"

// Defaults, in one place. Parse starts every rule from DefaultRule, so a
// key left out of the YAML keeps its default; EnsureDefaults then fills the
// defaults that depend on other fields. Zero is a valid value for several
// durations (allowed_lateness, watermark.delay, cooldown), so EnsureDefaults
// never touches durations: a Rule built in Go should start from
// DefaultRule().
const (
	DefaultKey             = "machine_id"
	DefaultFilter          = "true" // every event qualifies
	DefaultFn              = FnCount
	DefaultField           = "value"
	DefaultStrategy        = WatermarkFixed
	DefaultDelay           = 30 * time.Second // D
	DefaultAllowedLateness = 10 * time.Minute // L
	DefaultDedupHorizon    = time.Hour        // H
	DefaultCooldown        = 0                // none

	// Adaptive watermark defaults (only with strategy adaptive).
	DefaultPercentile = 99.0
	DefaultMinDelay   = 0
	DefaultMaxDelay   = 10 * time.Minute
	DefaultSample     = 1000

	// DLQ and late topics default to the source topic plus these suffixes;
	// the description to "events of rule " + id.
	DefaultDLQSuffix         = ".dlq"
	DefaultLateSuffix        = ".late"
	DefaultDescriptionPrefix = "events of rule "
)

// DefaultRule returns a rule with every default that does not depend on
// other fields. Required fields (id, version, source, window, threshold,
// outputs.alerts) are empty.
func DefaultRule() Rule {
	return Rule{
		Key:             DefaultKey,
		Filter:          DefaultFilter,
		Aggregate:       Aggregate{Fn: DefaultFn, Field: DefaultField},
		Watermark:       Watermark{Strategy: DefaultStrategy, Delay: Duration(DefaultDelay)},
		AllowedLateness: Duration(DefaultAllowedLateness),
		DedupHorizon:    Duration(DefaultDedupHorizon),
		Cooldown:        DefaultCooldown,
	}
}

// EnsureDefaults fills the empty fields whose default depends on other
// fields or whose zero value is invalid: key, filter, aggregate, watermark
// strategy, the adaptive watermark's percentile, max and sample (only with
// strategy adaptive), outputs.dlq, outputs.late and description.
func (r *Rule) EnsureDefaults() {
	if r.Key == "" {
		r.Key = DefaultKey
	}
	if r.Filter == "" {
		r.Filter = DefaultFilter
	}
	if r.Aggregate.Fn == "" {
		r.Aggregate.Fn = DefaultFn
	}
	if r.Aggregate.Field == "" {
		r.Aggregate.Field = DefaultField
	}
	if r.Watermark.Strategy == "" {
		r.Watermark.Strategy = DefaultStrategy
	}
	if r.Watermark.Strategy == WatermarkAdaptive {
		if r.Watermark.Percentile == 0 {
			r.Watermark.Percentile = DefaultPercentile
		}
		if r.Watermark.Max == 0 {
			r.Watermark.Max = Duration(DefaultMaxDelay)
		}
		if r.Watermark.Sample == 0 {
			r.Watermark.Sample = DefaultSample
		}
	}
	if r.Outputs.DLQ == "" && r.Source != "" {
		r.Outputs.DLQ = r.Source + DefaultDLQSuffix
	}
	if r.Outputs.Late == "" && r.Source != "" {
		r.Outputs.Late = r.Source + DefaultLateSuffix
	}
	if r.Description == "" && r.ID != "" {
		r.Description = DefaultDescriptionPrefix + r.ID
	}
}
