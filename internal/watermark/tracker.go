package watermark

import (
	"fmt"
	"math"
)

// Tracker follows the watermark strategy of one rule over one input
// partition (see the package doc for the per-record protocol and the
// definitions). It is not safe for concurrent use.
type Tracker struct {
	cfg  Config
	rank int // k, adaptive only

	// The sliding sample (adaptive only): the observed delays of the last
	// min(observations, Sample) records, slot i holding observation number
	// i mod Sample; head is the slot of the oldest once the sample is full.
	q    kth
	head int

	delay   int64  // DelayMs
	fixedWM int64  // F: the fixed alternative's watermark
	atRisk  uint64 // AtRiskTotal
}

// NewTracker returns a tracker that has observed nothing: its delay is
// cfg.DelayMs and its fixed-alternative watermark NoWatermark.
func NewTracker(cfg Config) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Tracker{cfg: cfg, delay: cfg.DelayMs, fixedWM: NoWatermark}
	if cfg.Strategy == Adaptive {
		t.rank = cfg.rank()
		t.q.k = t.rank
	}
	return t, nil
}

// Config returns the configuration the tracker was built with.
func (t *Tracker) Config() Config { return t.cfg }

// DelayMs returns the delay d to process the next record with (call the
// partition's SetDelayMs with it before its Process): fixed, always
// Config.DelayMs; adaptive, Config.DelayMs while fewer than Sample records
// were observed, then the percentile of the observed delays of the last
// Sample records, within [MinMs, MaxMs]. Always within 0..MaxDelayMs. O(1).
func (t *Tracker) DelayMs() int64 { return t.delay }

// Observed returns how many observed delays the sample holds:
// min(records observed, Sample); 0 for the fixed strategy.
func (t *Tracker) Observed() int { return t.q.len() }

// FixedWatermark returns F, the watermark that the fixed strategy with
// delay Config.DelayMs would have computed over the records observed so far
// (NoWatermark before any).
func (t *Tracker) FixedWatermark() int64 { return t.fixedWM }

// AtRiskTotal returns how many events ObserveEvent reported at risk, over
// the whole log (it is part of the encoded state).
func (t *Tracker) AtRiskTotal() uint64 { return t.atRisk }

// Observe observes a record that moved the partition watermark but whose
// lateness was not judged (filtered, or a duplicate): recordTsMs is its
// Kafka record timestamp, eventTsMs its event time. Call it after the
// partition processed the record (see the package doc). O(log Sample); it
// does not allocate once Sample records were observed.
func (t *Tracker) Observe(recordTsMs, eventTsMs int64) {
	if nw := subSat(eventTsMs, t.cfg.DelayMs); nw > t.fixedWM {
		t.fixedWM = nw
	}
	if t.cfg.Strategy != Adaptive {
		return
	}
	d := min(max(0, subSat(recordTsMs, eventTsMs)), t.cfg.MaxMs)
	d = max(d, t.cfg.MinMs)
	if n := t.q.len(); n < t.cfg.Sample {
		t.q.add(d)
		if n+1 < t.cfg.Sample {
			return
		}
	} else {
		t.q.replace(t.head, d)
		if t.head++; t.head == t.cfg.Sample {
			t.head = 0
		}
	}
	t.delay = t.q.value()
}

// ObserveEvent observes a record whose lateness was judged (a qualifying
// event that was not a duplicate: the partition applied it or found it too
// late), like Observe, and reports whether the event is at risk: the fixed
// alternative would have called it too late, eventTsMs < F - latenessMs
// (F before this record), while the actual watermark did not,
// eventTsMs >= watermarkBeforeMs - latenessMs. watermarkBeforeMs is the
// partition watermark before the record (Result.Watermark of window and
// aggwindow) and latenessMs the allowed lateness L (>= 0). An event at risk
// is counted in AtRiskTotal. Call it after the partition processed the
// record.
func (t *Tracker) ObserveEvent(recordTsMs, eventTsMs, latenessMs, watermarkBeforeMs int64) (atRisk bool) {
	atRisk = eventTsMs < subSat(t.fixedWM, latenessMs) && eventTsMs >= subSat(watermarkBeforeMs, latenessMs)
	if atRisk {
		t.atRisk++
	}
	t.Observe(recordTsMs, eventTsMs)
	return atRisk
}

// String is for debugging.
func (t *Tracker) String() string {
	return fmt.Sprintf("watermark.Tracker{%s, delay: %d, observed: %d, F: %d, at risk: %d}",
		t.cfg.Strategy, t.delay, t.q.len(), t.fixedWM, t.atRisk)
}

// subSat returns a - b, saturated to the int64 range (b may be negative
// for a record timestamp minus an event time).
func subSat(a, b int64) int64 {
	r := a - b
	switch {
	case b > 0 && r > a:
		return math.MinInt64
	case b < 0 && r < a:
		return math.MaxInt64
	}
	return r
}
