package watermark

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// NoWatermark is the watermark before any record: minus infinity (the same
// value as window.NoWatermark and aggwindow.NoWatermark).
const NoWatermark int64 = math.MinInt64

// Bounds.
const (
	// MaxDelayMs bounds every delay of the configuration (about 34.8
	// years; package aggwindow accepts delays up to the same bound, the
	// rules up to 720h).
	MaxDelayMs int64 = 1 << 40
	// MaxSample bounds Config.Sample.
	MaxSample = 1_000_000
)

// Strategy is a watermark strategy.
type Strategy uint8

// Strategies.
const (
	// Fixed: the delay is always Config.DelayMs.
	Fixed Strategy = iota + 1
	// Adaptive: the delay is a percentile of the observed delays over a
	// sliding sample, clamped to [MinMs, MaxMs]; Config.DelayMs until the
	// sample is full.
	Adaptive
)

// String returns the rule-schema name of the strategy.
func (s Strategy) String() string {
	switch s {
	case Fixed:
		return "fixed"
	case Adaptive:
		return "adaptive"
	}
	return "Strategy(" + strconv.Itoa(int(s)) + ")"
}

// Config is the watermark configuration of one rule. There are no defaults
// here: package rules owns them and fills every field.
type Config struct {
	// Strategy is Fixed or Adaptive.
	Strategy Strategy
	// DelayMs is D in ms, 0..MaxDelayMs: the delay of the fixed strategy;
	// for the adaptive strategy, the delay used until Sample observations
	// were made (then within [MinMs, MaxMs]). It is also the delay of the
	// fixed alternative that the at-risk count compares with.
	DelayMs int64
	// Percentile of the observed delays, adaptive only: (0, 100], used
	// rounded to the nearest millionth (nearest rank; see the package
	// doc). Must be 0 for Fixed.
	Percentile float64
	// MinMs and MaxMs clamp the adaptive delay, in ms:
	// 0 <= MinMs <= MaxMs <= MaxDelayMs. Must be 0 for Fixed.
	MinMs, MaxMs int64
	// Sample is how many of the latest observations the adaptive
	// percentile is taken over: 1..MaxSample. Must be 0 for Fixed.
	Sample int
}

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("watermark: invalid config")

// Validate reports every invalid field, naming the field, its value and
// what would be valid.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, value any, valid string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v, must be %s", ErrInvalidConfig, field, value, valid))
	}
	if c.DelayMs < 0 || c.DelayMs > MaxDelayMs {
		bad("DelayMs", c.DelayMs, fmt.Sprintf("0..%d (milliseconds)", MaxDelayMs))
	}
	switch c.Strategy {
	case Fixed:
		if c.Percentile != 0 {
			bad("Percentile", c.Percentile, "0 (only the adaptive strategy uses it)")
		}
		if c.MinMs != 0 {
			bad("MinMs", c.MinMs, "0 (only the adaptive strategy uses it)")
		}
		if c.MaxMs != 0 {
			bad("MaxMs", c.MaxMs, "0 (only the adaptive strategy uses it)")
		}
		if c.Sample != 0 {
			bad("Sample", c.Sample, "0 (only the adaptive strategy uses it)")
		}
	case Adaptive:
		if !(c.Percentile > 0 && c.Percentile <= 100) {
			bad("Percentile", c.Percentile, "in (0, 100], such as 99")
		}
		minOK := c.MinMs >= 0 && c.MinMs <= MaxDelayMs
		if !minOK {
			bad("MinMs", c.MinMs, fmt.Sprintf("0..%d (milliseconds)", MaxDelayMs))
		}
		if c.MaxMs < max(c.MinMs, 0) || c.MaxMs > MaxDelayMs {
			bad("MaxMs", c.MaxMs, fmt.Sprintf("MinMs (%d)..%d (milliseconds)", c.MinMs, MaxDelayMs))
		} else if minOK && (c.DelayMs < c.MinMs || c.DelayMs > c.MaxMs) {
			bad("DelayMs", c.DelayMs, fmt.Sprintf("within [MinMs, MaxMs] = [%d, %d] (milliseconds) with the adaptive strategy", c.MinMs, c.MaxMs))
		}
		if c.Sample < 1 || c.Sample > MaxSample {
			bad("Sample", c.Sample, fmt.Sprintf("1..%d", MaxSample))
		}
	default:
		bad("Strategy", c.Strategy, "Fixed or Adaptive")
	}
	return errors.Join(errs...)
}

// percentileMillionths is round(Percentile * 10^6): 1..10^8 for a valid
// adaptive config (0 for a percentile below half a millionth, which ranks
// as 1).
func (c Config) percentileMillionths() int64 {
	return int64(math.Round(c.Percentile * 1e6))
}

// rank is the nearest rank k = max(1, ceil(p * n / 10^8)) of the
// percentile in a sample of n = Sample values (see the package doc).
func (c Config) rank() int {
	const hundredMillion = 100_000_000
	p, n := c.percentileMillionths(), int64(c.Sample)
	return int(max(1, (p*n+hundredMillion-1)/hundredMillion)) // p*n <= 10^14
}
