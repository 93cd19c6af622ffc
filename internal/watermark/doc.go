// Package watermark owns the watermark strategies of a rule over one input
// partition: how far behind the largest event time the partition watermark
// W trails, as a pure function of the log. It keeps the state that the
// adaptive strategy needs (a sliding sample of observed delays), follows the
// watermark that the fixed strategy would have computed (to count the
// "alerts at risk"), and owns the binary encoding of that state (encoding.go),
// which a store keeps as opaque bytes.
//
// The package computes delays; it does not own W. Packages window and
// aggwindow own the partition watermark and move it, for every record they
// process, to max(W, ts - d), where d is the delay the caller last set with
// their SetDelayMs. The caller takes d from a Tracker.
//
// # Per record (the caller's protocol)
//
// For every record that moves the partition watermark (every record that
// package window or aggwindow processes, except an aggwindow OutOfRange
// record, which moves nothing), in log order:
//
//  1. partition.SetDelayMs(tracker.DelayMs())
//  2. res := partition.Process(event, qualifies)
//  3. if the event's lateness was judged (a qualifying event that was not a
//     duplicate: res.Outcome is Processed or TooLate),
//     tracker.ObserveEvent(recordTs, event.TS, L, res.Watermark);
//     otherwise (filtered, duplicate) tracker.Observe(recordTs, event.TS).
//
// So the delay that record i is processed with, d_i, is a function of the
// records before it, i.e. of the log up to offset i-1. After a restore, the
// caller decodes the Tracker and the partition, and step 1 re-derives the
// delay: a partition does not persist it.
//
// # Definitions (normative)
//
// Times are int64 milliseconds. Records are numbered i = 0, 1, ... in log
// order; record i has the Kafka record timestamp r_i and the event time t_i.
//
//   - Observed delay of record i: o_i = clamp(max(0, r_i - t_i), Min, Max)
//     (the difference saturates instead of overflowing). Clamping before
//     taking the percentile gives the same result as clamping after, since
//     clamp is monotone; it bounds what the sample stores. r_i is the
//     record's Kafka timestamp, which is part of the log (so replays see the
//     same value): it measures how long an event took to reach the log only
//     if it is the broker's LogAppendTime or a producer CreateTime stamped at
//     send time; a gateway that stamps records with the original event time
//     makes every delay 0 and the adaptive delay Min.
//   - Sample before record i: the observed delays of the last
//     min(i, Sample) records before i, o_{i-Sample} .. o_{i-1}.
//   - Percentile (nearest rank): with P the configured percentile rounded
//     to the nearest millionth, p = round(P * 10^6), and n = Sample, the rank
//     is k = max(1, ceil(p * n / 10^8)) (exact integer arithmetic), and the
//     percentile of a full sample is its k-th smallest value. For P = 99 and
//     Sample = 1000, k = 990; for P = 100, the maximum; for P = 50 and an
//     even Sample, the lower median. It depends on the multiset of values in
//     the sample only.
//   - Delay at record i, d_i (Tracker.DelayMs before record i is observed):
//     fixed: d_i = D (Config.DelayMs) for every record;
//     adaptive: d_i = D while i < Sample (fewer than Sample observations),
//     else the percentile of the sample before record i (which lies in
//     [Min, Max], as every observed delay does). The delay is recomputed at
//     every observation; it is not smoothed and has no hysteresis.
//   - Watermark: W_i, the watermark after record i, is
//     max(W_{i-1}, t_i - d_i), W_{-1} = minus infinity: W never decreases,
//     and it equals max over j <= i of (t_j - d_j). Under the fixed strategy
//     this is the SPEC's max(W, ts - D).
//   - Fixed alternative: F_i = max(F_{i-1}, t_i - D), F_{-1} = minus
//     infinity, the watermark the fixed strategy with the same D would have
//     computed over the same records. Tracker.FixedWatermark returns it.
//   - At risk: an event whose lateness was judged is at risk when the fixed
//     alternative would have called it too late while the actual watermark
//     did not: t_i < F_{i-1} - L and t_i >= W_{i-1} - L (L the allowed
//     lateness; arithmetic saturates, so at minus infinity nothing is too
//     late). These are the events that the adaptive strategy applied and
//     the fixed delay D would have put on the late output: the alerts they
//     cause or change would have been lost under D.
//     Tracker.AtRiskTotal counts them over the log. Under the fixed strategy
//     W = F, so nothing is at risk. The count compares the lateness verdict
//     event by event and ignores second-order effects (under the fixed
//     alternative the dedup horizon W - H, and so the duplicates, could
//     differ).
//
// Every one of these is a function of the sequence of (r_i, t_i) and of the
// configuration only: replays compute the same delays, watermarks and
// counts, and a Tracker restored from its encoding continues exactly as an
// uninterrupted one.
//
// # Cost
//
// Observe is O(log Sample) worst case (usually O(1): an insertion into a
// binary heap rises only a few levels on average) and does not allocate once
// Sample observations were made. The sample is kept as two binary heaps
// around the rank k (the k smallest values in a max-heap, the others in a
// min-heap) with each value's heap position indexed by its ring slot, so the
// value that leaves the sliding sample is removed in place (no lazy
// deletion, memory bounded by Sample). Memory: 12 bytes per sample slot (12
// MB at Sample = 10^6). The fixed strategy keeps no sample.
//
// # Encoding
//
// See encoding.go: a version byte, the configuration the state was computed
// under (Decode refuses another one), F, the at-risk count, and the sample,
// oldest value first.
//
// # What it must never do
//
// It must never import anything but the standard library and
// internal/codec, never read the wall clock (package time is not imported),
// never start goroutines and never keep package-level state. A Tracker is not
// safe for concurrent use: the goroutine that owns an input partition owns
// its Trackers (one per rule). internal/arch's TestPurePackages enforces the
// imports.
package watermark
