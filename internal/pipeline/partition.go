package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/vibeline/processor/internal/aggwindow"
	"github.com/vibeline/processor/internal/dedup"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/internal/watermark"
	"github.com/vibeline/processor/internal/window"
)

// Partition is one rule's state over one input partition: the window state
// (record-aligned sliding incidents, or aggregating windows plus the event
// ids remembered for deduplication) and the rule's expression evaluators.
// It is not safe for concurrent use: the goroutine that owns the input
// partition owns it.
//
// Its persisted form is a set of named entries (Dirty, EncodeKey, LoadKey),
// for sliding rules a second set of named bucket entries (DirtyBuckets,
// EncodeBucket, LoadBucket; the caller keeps the two name spaces apart),
// plus one meta entry (EncodeMeta, LoadMeta); a load ends with FinishLoad.
// Names of a sliding rule are its keys (package window's key entry) and,
// for its bucket entries, "e" or "d" + 8-byte bucket + key (package
// window's events and dedup buckets, see bucketName); names of an
// aggregating rule are "w" + key (package aggwindow's key encoding), "p" +
// 8-byte pane start + key (its pane encoding, tumbling and hopping windows,
// see paneName) and "d" + 8-byte bucket + key (package dedup's bucketed
// encoding, see dedupName), the last only while no DedupKeeper persists
// the rule's dedup set (keeper.go): a keeper writes entries of those names
// for all the rules of its group, and the rule none.
type Partition struct {
	// What every record reads comes first (one cache line).
	filter *rules.Filter
	slide  *window.Partition
	agg    *aggwindow.Partition
	dd     *dedup.Set
	tr     *watermark.Tracker // of an adaptive watermark (see atRisk)

	thr  *rules.Threshold
	env  rules.Event
	keys []string // scratch for Dirty

	// ref, if refKey is the key of the record applied, is its cached
	// state lookup (UseKeyRef).
	ref    *aggwindow.KeyRef
	refKey string
	// pair, if set, is the caller's cache of the dedup lookup of the
	// record applied (UseDedupPair).
	pair *dedup.Pair

	// Of a repartitioned rule: what it knows of each source partition and
	// how many there are (see alignTarget).
	src        map[int32]srcState
	srcN       int
	extraDirty bool

	// Of an adaptive watermark: with the tracker of observed delays (tr),
	// the events it found at risk since the last TakeAtRisk.
	atRisk int

	// Of a rule with a cooldown: per key, until when no new alert may open
	// and the alerts whose opening was suppressed (see pass).
	cool map[string]*coolState

	// Of an aggregating rule: kept is set once a DedupKeeper persists its
	// dedup set (Dirty then lists no dedup entries); ownDedup are the
	// names of the dedup entries of its own that it loaded (OwnDedup).
	kept     bool
	ownDedup []string
}

// coolState is one key's cooldown.
type coolState struct {
	until  int64           // event time the watermark must reach
	hidden map[string]bool // suppressed alert ids, until their final revision
}

// pass applies a rule's per-key cooldown to one revision: after an alert of
// a key opens, no new alert of that key opens until the watermark reaches
// the alert's end + cooldown (the latest end of the key's emitted alerts,
// as their revisions move it). A suppressed alert stays suppressed with all
// its revisions. Decided on the watermark after the record, so it depends
// on the log only. (A visible alert merged into a suppressed one keeps its
// merged revision, naming the suppressed id.)
func (w *Partition) pass(cooldown int64, key, id string, open, final bool, end int64) bool {
	if cooldown <= 0 {
		return true
	}
	if w.cool == nil {
		w.cool = map[string]*coolState{}
	}
	cs := w.cool[key]
	if cs != nil && cs.hidden[id] {
		if final {
			delete(cs.hidden, id)
			w.extraDirty = true
		}
		return false
	}
	if open && cs != nil && w.Watermark() < cs.until {
		if cs.hidden == nil {
			cs.hidden = map[string]bool{}
		}
		cs.hidden[id] = true
		w.extraDirty = true
		return false
	}
	if cs == nil {
		cs = &coolState{until: math.MinInt64}
		w.cool[key] = cs
	}
	if u := satAdd(end, cooldown); u > cs.until {
		cs.until = u
		w.extraDirty = true
	}
	return true
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// sweepCool forgets the cooldowns that have passed.
func (w *Partition) sweepCool() {
	wm := w.Watermark()
	for k, cs := range w.cool {
		if wm >= cs.until && len(cs.hidden) == 0 {
			delete(w.cool, k)
			w.extraDirty = true
		}
	}
}

// NewPartition returns empty state for one input partition.
func (s *Stage) NewPartition() *Partition { return s.NewPartitionShared(nil) }

// DedupShare holds, per sharing key, a dedup Set of one input partition
// whose store the aggregating rules over that partition share: each event
// id is then held once with the rules that remember it, and a record costs
// one hash lookup for all of them instead of one per rule (the largest
// cost of ten rules over one topic, docs/BENCHMARKS.md). Every rule keeps
// the verdicts and the persisted entries of a set of its own (package
// dedup, Set.NewView). The zero value (nil) shares nothing.
type DedupShare map[string]*dedup.Set

// dedupShareKey is DedupShareKey of the stage's rule.
func (s *Stage) dedupShareKey() string { return DedupShareKey(s.c) }

// NewPartitionShared is NewPartition for a rule that shares its dedup
// store with the other rules of share over the same input partition (an
// aggregating rule joins or starts the group of its dedupShareKey; a
// sliding rule deduplicates inside its window state). share may be nil.
func (s *Stage) NewPartitionShared(share DedupShare) *Partition {
	w := &Partition{filter: s.c.NewFilter()}
	var err error
	if s.wm != nil {
		if w.tr, err = watermark.NewTracker(*s.wm); err != nil {
			panic(err) // validated in NewRuleStage
		}
	}
	if s.Sliding() {
		w.slide, err = window.NewPartition(s.win)
	} else {
		w.thr = s.c.NewThreshold()
		cfg := s.agg
		cfg.Fires = w.thr.Predicate()
		if w.agg, err = aggwindow.NewPartition(cfg); err == nil {
			w.dd, err = s.newDedup(share)
		}
	}
	if err != nil {
		panic(err) // the configuration was validated in NewRuleStage
	}
	return w
}

// newDedup returns the rule's dedup Set: a view of share's store for its
// key, or a Set of its own, then shared under the key (also when the
// key's store is full: the next rules share the new one, DedupGroups).
func (s *Stage) newDedup(share DedupShare) (*dedup.Set, error) {
	key := s.dedupShareKey()
	if base := share[key]; base != nil {
		if v, err := base.NewView(); err == nil {
			return v, nil
		} // more rules than a store takes: this one starts another
	}
	set, err := dedup.NewBucketed(s.c.DedupHorizonMs, DedupBucketMs(s.c.DedupHorizonMs))
	if err == nil && share != nil {
		share[key] = set
	}
	return set, err
}

// srcState is what a repartition partition knows of one source
// partition: the largest event time it forwarded, and whether its
// forwarder reported it caught up (idle).
type srcState struct {
	max  int64
	idle bool
}

// alignTarget is the aligned watermark of a repartitioned rule: a
// repartition partition merges the records of every source partition,
// whose progress in event time differs by however far apart their
// consumers are, so its watermark is that of its slowest input (Flink's
// rule for merged streams): min over the source partitions of their largest
// event time, minus d. Idle source partitions (caught up, as their
// forwarders report) do not hold it back, unless all are idle, when the
// largest counts. Until every source partition has been heard of (a record
// or a marker), there is no watermark: ok is false.
func (w *Partition) alignTarget(d int64) (target int64, ok bool) {
	if w.srcN == 0 || len(w.src) < w.srcN {
		return 0, false
	}
	lo, hi, active := int64(math.MaxInt64), int64(math.MinInt64), false
	for _, st := range w.src {
		hi = max(hi, st.max)
		if !st.idle {
			lo, active = min(lo, st.max), true
		}
	}
	if !active {
		lo = hi
	}
	if lo == window.NoWatermark {
		return 0, false
	}
	return lo - d, true
}

// setDelay sets the delay the next event moves the watermark by.
func (w *Partition) setDelay(d int64) {
	d = max(0, min(d, aggwindow.MaxDurationMs))
	if w.slide != nil {
		_ = w.slide.SetDelayMs(d)
	} else {
		_ = w.agg.SetDelayMs(d)
	}
}

// DelayMs is the watermark delay the next event will use (the adaptive
// tracker's, or ok false for a fixed delay).
func (w *Partition) DelayMs() (d int64, ok bool) {
	if w.tr == nil {
		return 0, false
	}
	return w.tr.DelayMs(), true
}

// TakeAtRisk returns how many events the adaptive watermark applied that
// the fixed delay would have called too late, since the last call.
func (w *Partition) TakeAtRisk() int {
	n := w.atRisk
	w.atRisk = 0
	return n
}

// alignDelay records an event of source partition src and sets the delay
// that makes the event move the watermark to exactly alignTarget (or not
// at all while there is none).
func (w *Partition) alignDelay(src int32, ts, d int64) {
	if w.src == nil {
		w.src = map[int32]srcState{}
	}
	if st, ok := w.src[src]; !ok || ts > st.max || st.idle {
		if !ok || ts > st.max {
			st.max = ts
		}
		st.idle = false
		w.src[src], w.extraDirty = st, true
	}
	target, ok := w.alignTarget(d)
	if w.slide != nil {
		w.slide.SetHold(!ok) // no watermark yet: W stays (NoWatermark at first)
	} else {
		w.agg.SetHold(!ok)
	}
	if ok {
		// W moves to max(W, ts - eff): eff = ts - target gives target.
		w.setDelay(ts - target)
	}
}

// marker applies a forwarder's report on one source partition (largest
// event time forwarded, idle) and moves the watermark to the aligned one.
func (w *Partition) marker(src int32, n int, maxTS int64, idle bool, d int64) ([]window.Revision, []aggwindow.Revision) {
	if w.src == nil {
		w.src = map[int32]srcState{}
	}
	old, seen := w.src[src]
	st := srcState{max: max(maxTS, old.max), idle: idle}
	if !seen {
		st.max = maxTS
	}
	if !seen || st != old || n != w.srcN {
		w.src[src], w.srcN, w.extraDirty = st, n, true
	}
	target, ok := w.alignTarget(d)
	if !ok || target <= w.Watermark() {
		return nil, nil
	}
	if w.slide != nil {
		return w.slide.Advance(target), nil
	}
	revs := w.agg.Advance(target)
	w.dd.Advance(w.agg.Watermark())
	return nil, revs
}

// ExtraDirty reports whether the extra entry (EncodeExtra) changed since
// ClearDirty.
func (w *Partition) ExtraDirty() bool { return w.extraDirty }

// EncodeExtra encodes the state that is neither a key's nor the window
// meta: for a repartitioned rule, what it knows of the source partitions.
// Format: byte 1 (version), uvarint source partition count, uvarint n, then
// n times: varint source partition, varint largest event time, byte idle
// (0 or 1), in ascending partition order; then uvarint m and m bytes of the
// adaptive watermark tracker's encoding (package watermark; m = 0 for a
// fixed delay); then uvarint c and c cooldowns in ascending key order:
// string key, varint end (the event time the watermark must reach),
// uvarint h and h strings (suppressed alert ids, ascending). A string is a
// uvarint length and the bytes. Empty when there is nothing to keep.
func (w *Partition) EncodeExtra() []byte {
	if len(w.src) == 0 && w.srcN == 0 && w.tr == nil && len(w.cool) == 0 {
		return nil
	}
	ps := make([]int32, 0, len(w.src))
	for p := range w.src {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	b := []byte{1}
	b = binary.AppendUvarint(b, uint64(w.srcN))
	b = binary.AppendUvarint(b, uint64(len(ps)))
	for _, p := range ps {
		st := w.src[p]
		b = binary.AppendVarint(b, int64(p))
		b = binary.AppendVarint(b, st.max)
		idle := byte(0)
		if st.idle {
			idle = 1
		}
		b = append(b, idle)
	}
	var tr []byte
	if w.tr != nil {
		tr = w.tr.AppendEncode(nil)
	}
	b = binary.AppendUvarint(b, uint64(len(tr)))
	b = append(b, tr...)
	keys := make([]string, 0, len(w.cool))
	for k := range w.cool {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		cs := w.cool[k]
		b = appendString(b, k)
		b = binary.AppendVarint(b, cs.until)
		ids := make([]string, 0, len(cs.hidden))
		for id := range cs.hidden {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		b = binary.AppendUvarint(b, uint64(len(ids)))
		for _, id := range ids {
			b = appendString(b, id)
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// extraReader reads EncodeExtra's bytes.
type extraReader struct {
	b   []byte
	err error
}

func (r *extraReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.err = fmt.Errorf("pipeline: extra state: bad %s", what)
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *extraReader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Varint(r.b)
	if k <= 0 {
		r.err = fmt.Errorf("pipeline: extra state: bad %s", what)
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *extraReader) string(what string) string {
	n := r.uvarint(what)
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("pipeline: extra state: %s longer than the data", what)
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// LoadExtra restores EncodeExtra's bytes.
func (w *Partition) LoadExtra(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if data[0] != 1 {
		return fmt.Errorf("pipeline: extra state version %d, want 1", data[0])
	}
	data = data[1:]
	srcN, k0 := binary.Uvarint(data)
	if k0 <= 0 || srcN > math.MaxInt32 {
		return errors.New("pipeline: extra state: bad partition count")
	}
	data = data[k0:]
	n, k := binary.Uvarint(data)
	if k <= 0 || n > uint64(len(data)) {
		return errors.New("pipeline: extra state: bad count")
	}
	data = data[k:]
	m := make(map[int32]srcState, n)
	for i := uint64(0); i < n; i++ {
		p, k1 := binary.Varint(data)
		if k1 <= 0 || p < 0 || p > math.MaxInt32 {
			return errors.New("pipeline: extra state: bad partition")
		}
		data = data[k1:]
		ts, k2 := binary.Varint(data)
		if k2 <= 0 || len(data) < k2+1 || data[k2] > 1 {
			return errors.New("pipeline: extra state: bad entry")
		}
		m[int32(p)] = srcState{max: ts, idle: data[k2] == 1}
		data = data[k2+1:]
	}
	tn, k3 := binary.Uvarint(data)
	if k3 <= 0 || tn > uint64(len(data)-k3) {
		return errors.New("pipeline: extra state: bad watermark tracker length")
	}
	if tn > 0 {
		if w.tr == nil {
			return errors.New("pipeline: extra state holds an adaptive watermark, the rule has a fixed one (a rule change without a version bump?)")
		}
		if err := w.tr.Decode(data[k3 : k3+int(tn)]); err != nil {
			return fmt.Errorf("pipeline: extra state: %w", err)
		}
	}
	r := extraReader{b: data[k3+int(tn):]}
	nc := r.uvarint("cooldown count")
	if nc > uint64(len(r.b)) {
		return errors.New("pipeline: extra state: bad cooldown count")
	}
	var cool map[string]*coolState
	if nc > 0 {
		cool = make(map[string]*coolState, nc)
	}
	for i := uint64(0); i < nc && r.err == nil; i++ {
		k := r.string("cooldown key")
		cs := &coolState{until: r.varint("cooldown end")}
		nh := r.uvarint("suppressed count")
		if nh > uint64(len(r.b)) {
			return errors.New("pipeline: extra state: bad suppressed count")
		}
		for j := uint64(0); j < nh && r.err == nil; j++ {
			if cs.hidden == nil {
				cs.hidden = map[string]bool{}
			}
			cs.hidden[r.string("suppressed id")] = true
		}
		cool[k] = cs
	}
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return errors.New("pipeline: extra state: trailing bytes")
	}
	w.src, w.srcN, w.cool = m, int(srcN), cool
	return nil
}

// applyAgg runs steps 2 to 7 of an aggregating rule: filter, deduplicate,
// lateness, apply, watermark, close.
func (w *Partition) applyAgg(key string, r *Rec, qualifies bool) (window.Outcome, int64, int64, []aggwindow.Revision) {
	// Field by field, not a composite literal: the compiler builds a
	// literal in a temporary and copies it over in 16-byte moves that
	// read its 8-byte stores back before they are done (a store-forwarding
	// stall, 2 % of a 10-rule processor's CPU).
	var e aggwindow.Event
	e.Key, e.EventID, e.SensorID, e.TS, e.Value = key, r.EventID, r.SensorID, r.TS, r.Value
	e.Partition, e.Offset = r.Partition, r.Offset
	if w.ref != nil && w.refKey == key {
		e.Ref = w.ref
	}
	var dup bool
	switch {
	case !qualifies:
	case w.pair != nil:
		dup = w.dd.SeenPair(w.pair, key, r.EventID, r.TS)
	default:
		dup = w.dd.Seen(key, r.EventID, r.TS)
	}
	var res aggwindow.Result
	w.agg.ProcessTo(&res, &e, qualifies && !dup) // not Process: see ProcessTo
	w.dd.Advance(w.agg.Watermark())
	out := window.Filtered
	switch {
	case dup:
		out = window.Duplicate
	case res.Outcome == aggwindow.Processed:
		out = window.Processed
	case res.Outcome == aggwindow.TooLate:
		out = window.TooLate
	}
	return out, res.Watermark, res.LatenessMs, res.Revisions
}

// PrepareDedupPair prepares p for the dedup lookups of an event of key
// with eventID by the rules that share this rule's dedup store
// (dedup.Set.PreparePair; UseDedupPair). A sliding rule has nothing to
// prepare.
func (w *Partition) PrepareDedupPair(p *dedup.Pair, key, eventID string) {
	if w.dd != nil {
		w.dd.PreparePair(p, key, eventID)
	}
}

// UseDedupPair makes the records applied next use p as the cached dedup
// lookup of their (key, event_id) (dedup.Set.SeenPair), until it is
// called again: a caller that takes a chunk of records through one rule
// after the other keeps one Pair per record and shared dedup store, and
// sets it before each record of each rule of that store. It changes no
// result.
func (w *Partition) UseDedupPair(p *dedup.Pair) { w.pair = p }

// Aggregating reports whether the rule's windows are aggregating ones
// (tumbling, hopping, session), whose key lookups UseKeyRef can share.
func (w *Partition) Aggregating() bool { return w.agg != nil }

// UseKeyRef makes the records of key use r as the cached lookup of the
// key's state in the aggregating windows, until it is called again: a
// caller that holds one KeyRef per rule and key (package consume, for the
// rules of one input partition) looks a record's key up once for all of
// them. r must stay with this Partition and key. It changes no result.
func (w *Partition) UseKeyRef(key string, r *aggwindow.KeyRef) { w.refKey, w.ref = key, r }

// Watermark is the partition watermark (window.NoWatermark before any
// event; the two window packages use the same minus infinity).
func (w *Partition) Watermark() int64 {
	if w.slide != nil {
		return w.slide.Watermark()
	}
	return w.agg.Watermark()
}

// Sweep forgets what can no longer matter (sliding rules; the aggregating
// windows forget as they close).
func (w *Partition) Sweep() {
	if w.slide != nil {
		w.slide.Sweep()
	}
	if len(w.cool) > 0 {
		w.sweepCool()
	}
}

// Dirty returns the names of the entries changed since ClearDirty, and
// whether the meta entry changed.
func (w *Partition) Dirty() (names []string, meta bool) {
	if w.slide != nil {
		return w.slide.Dirty()
	}
	keys, meta := w.agg.Dirty()
	names = w.keys[:0]
	for _, k := range keys {
		names = append(names, "w"+k)
	}
	for _, r := range w.agg.DirtyPanes() {
		names = append(names, paneName(r))
	}
	if !w.kept {
		for _, r := range w.dd.DirtyBuckets() {
			names = append(names, dedupName(r))
		}
	}
	w.keys = names
	return names, meta
}

// ClearDirty forgets what Dirty reported.
func (w *Partition) ClearDirty() {
	w.extraDirty = false
	if w.slide != nil {
		w.slide.ClearDirty()
		return
	}
	w.agg.ClearDirty()
	w.dd.ClearDirty()
}

// ClearLoaded forgets what loading the persisted state marked dirty, except
// the dedup entries that the load found expired: with a dedup store shared
// by rules whose watermarks differed, a rule's persisted buckets can still
// hold ids that expired for it, and their rewrite (or tombstone) must reach
// the changelog at the next commit. (With a set of its own, a rule's load
// marks nothing: it persisted its buckets after every expiry.) A sliding
// rule's load marks only the keys it read in window format version 1, to be
// rewritten in version 2 at the next commit (package window, FinishLoad):
// those stay dirty.
func (w *Partition) ClearLoaded() {
	w.extraDirty = false
	if w.slide != nil {
		return
	}
	w.agg.ClearDirty()
}

// FinishLoad ends a load (after every LoadKey and LoadBucket): a sliding
// rule checks the entries of each key together and installs them (package
// window); an aggregating rule has nothing to do.
func (w *Partition) FinishLoad() error {
	if w.slide != nil {
		return w.slide.FinishLoad()
	}
	return nil
}

// DirtyBuckets returns the names of the bucket entries changed since
// ClearDirty (sliding rules: package window's events and dedup buckets;
// none for aggregating rules). A name whose EncodeBucket is empty is
// deleted.
func (w *Partition) DirtyBuckets() []string {
	if w.slide == nil {
		return nil
	}
	refs := w.slide.DirtyBuckets()
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = bucketName(r)
	}
	return names
}

// EncodeBucket encodes the named bucket entry (empty: deleted).
func (w *Partition) EncodeBucket(name string) []byte {
	r, ok := parseBucketName(name)
	if w.slide == nil || !ok {
		return nil
	}
	return w.slide.EncodeBucket(r)
}

// LoadBucket restores the named bucket entry (to be finished by
// FinishLoad).
func (w *Partition) LoadBucket(name string, data []byte) error {
	if w.slide == nil {
		return fmt.Errorf("pipeline: bucket entry %q: an aggregating rule has none (state of a sliding rule?)", name)
	}
	r, ok := parseBucketName(name)
	if !ok {
		return fmt.Errorf("pipeline: bucket entry %q: a bucket entry name is e or d, 8 bytes of bucket and the key", name)
	}
	return w.slide.LoadBucket(r, data)
}

// bucketName is the name of a sliding rule's bucket entry: the kind
// (window.EventsBucket "e", window.DedupBucket "d"), the bucket, then the
// key (timedName).
func bucketName(r window.BucketRef) string { return timedName(r.Kind, r.Bucket, r.Key) }

func parseBucketName(name string) (window.BucketRef, bool) {
	if name == "" || name[0] != window.EventsBucket && name[0] != window.DedupBucket {
		return window.BucketRef{}, false
	}
	key, b, ok := parseTimedName(name[0], name)
	return window.BucketRef{Kind: name[0], Key: key, Bucket: b}, ok
}

// EncodeKey encodes the named entry (empty: the entry is deleted).
func (w *Partition) EncodeKey(name string) []byte {
	if w.slide != nil {
		return w.slide.EncodeKey(name)
	}
	if name == "" {
		return nil
	}
	switch name[0] {
	case 'w':
		return w.agg.EncodeKey(name[1:])
	case 'p':
		r, ok := parsePaneName(name)
		if !ok {
			return nil
		}
		return w.agg.EncodePane(r.Key, r.Start)
	}
	r, ok := parseDedupName(name)
	if !ok {
		return nil
	}
	return w.dd.EncodeBucket(r.Key, r.Bucket)
}

// DedupBucketMs is the time bucket of an aggregating rule's persisted
// event ids: a 64th of the dedup horizon, at least 1 s, so that a commit
// rewrites about a 64th of a key's ids, not all of them. (A sliding rule's
// ids use the same buckets: window.DefaultDedupBucketMs.)
func DedupBucketMs(horizonMs int64) int64 { return max(1000, horizonMs/64) }

// dedupName is the entry name of a dedup bucket: "d", the bucket, then the
// key (timedName).
func dedupName(r dedup.BucketRef) string { return timedName('d', r.Bucket, r.Key) }

func parseDedupName(name string) (dedup.BucketRef, bool) {
	key, b, ok := parseTimedName('d', name)
	return dedup.BucketRef{Key: key, Bucket: b}, ok
}

// paneName is the entry name of one pane of an aggregating rule's tumbling
// or hopping windows (package aggwindow persists them per pane, so that a
// commit rewrites the panes that changed, not every window of the key):
// "p", the pane start, then the key (timedName).
func paneName(r aggwindow.PaneRef) string { return timedName('p', r.Start, r.Key) }

func parsePaneName(name string) (aggwindow.PaneRef, bool) {
	key, start, ok := parseTimedName('p', name)
	return aggwindow.PaneRef{Key: key, Start: start}, ok
}

// timedName is an entry name of one key at one time: the kind byte, t as 8
// bytes big-endian with the sign bit flipped (so names of a kind sort by
// time), then the key.
func timedName(kind byte, t int64, key string) string {
	b := make([]byte, 9, 9+len(key))
	b[0] = kind
	binary.BigEndian.PutUint64(b[1:], uint64(t)^(1<<63))
	return string(append(b, key...))
}

func parseTimedName(kind byte, name string) (key string, t int64, ok bool) {
	if len(name) < 9 || name[0] != kind {
		return "", 0, false
	}
	return name[9:], int64(binary.BigEndian.Uint64([]byte(name[1:9])) ^ (1 << 63)), true
}

// LoadKey restores the named entry.
func (w *Partition) LoadKey(name string, data []byte) error {
	if w.slide != nil {
		return w.slide.LoadKey(name, data)
	}
	switch {
	case len(name) > 0 && name[0] == 'w':
		return w.agg.LoadKey(name[1:], data)
	case len(name) > 0 && name[0] == 'p':
		r, ok := parsePaneName(name)
		if !ok {
			return fmt.Errorf("pipeline: state entry %q: a pane entry name is p, 8 bytes of pane start and the key", name)
		}
		return w.agg.LoadPane(r.Key, r.Start, data)
	case len(name) > 0 && name[0] == 'd':
		r, ok := parseDedupName(name)
		if !ok {
			return fmt.Errorf("pipeline: state entry %q: a dedup entry name is d, 8 bytes of bucket and the key", name)
		}
		if err := w.dd.LoadBucket(r.Key, r.Bucket, data); err != nil {
			return err
		}
		w.ownDedup = append(w.ownDedup, name)
		return nil
	}
	return fmt.Errorf("pipeline: state entry %q: want a name starting with w, p or d", name)
}

// EncodeMeta encodes the meta entry (the watermark).
func (w *Partition) EncodeMeta() []byte {
	if w.slide != nil {
		return w.slide.EncodeMeta()
	}
	return w.agg.EncodeMeta()
}

// LoadMeta restores the meta entry.
func (w *Partition) LoadMeta(data []byte) error {
	if w.slide != nil {
		return w.slide.LoadMeta(data)
	}
	if err := w.agg.LoadMeta(data); err != nil {
		return err
	}
	w.dd.Advance(w.agg.Watermark())
	return nil
}

// Stats counts the state.
type Stats struct {
	Keys          int // keys with state
	Events        int // events (sliding) or windows (aggregating) kept
	Dedup         int // remembered event ids
	OpenIncidents int // open alerts
}

// Stats counts the partition's state.
func (w *Partition) Stats() Stats {
	if w.slide != nil {
		st := w.slide.Stats()
		return Stats{Keys: st.Keys, Events: st.Events, Dedup: st.Dedup, OpenIncidents: st.OpenIncidents}
	}
	st := w.agg.Stats()
	return Stats{Keys: st.Keys, Events: st.Windows, OpenIncidents: st.Fired}
}

// Window is the sliding rule's window state (nil for aggregating rules),
// for tests and tools.
func (w *Partition) Window() *window.Partition { return w.slide }
