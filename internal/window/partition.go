package window

import (
	"fmt"
	"slices"
	"strings"
)

// Partition is the event-time state of one rule over one input partition:
// the watermark and, per key, the applied events, the remembered event ids
// and the open incidents. It is not safe for concurrent use.
type Partition struct {
	cfg     Config
	wm      int64
	delayMs int64 // D of step 6: cfg.DelayMs unless SetDelayMs changed it
	hold    bool  // SetHold: step 6 moves nothing

	keys   map[string]*keyState
	open   openIndex  // every open incident of the partition, by (end, alert_id)
	sweepQ sweepQueue // lazy prune deadlines of keys, by watermark

	dirtyKeys []string // may hold repeats; Dirty sorts and compacts
	dirtyMeta bool

	// The persisted buckets (encoding.go): their lengths, the generation
	// of the keys' dirty bucket marks (keyState.dirtyB, valid while their
	// dirtyGen equals it; ClearDirty starts a new one), and the keys
	// deleted since ClearDirty, whose marks name the buckets to delete.
	evB, ddB int64
	gen      uint64
	deleted  []*keyState

	// pending are the entries LoadKey and LoadBucket read, per key, until
	// FinishLoad checks and installs them.
	pending map[string]*pendingKey

	nEvents, nDedup int // for Stats

	// keepAll disables pruning inside Process, so that tests can compare
	// against a partition that forgets nothing unless Sweep runs.
	keepAll bool
}

// NewPartition returns an empty partition (watermark NoWatermark) for cfg.
func NewPartition(cfg Config) (*Partition, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Partition{cfg: cfg, wm: NoWatermark, delayMs: cfg.DelayMs, keys: make(map[string]*keyState), gen: 1}
	p.evB, p.ddB = cfg.bucketsMs()
	return p, nil
}

// SetDelayMs sets the watermark delay D that Process uses from the next
// record on (step 6: W = max(W, ts - D)), for a watermark strategy whose
// delay changes along the log (package watermark). It must be >= 0, like
// Config.DelayMs, which is the delay until SetDelayMs is called. W never
// decreases whatever the delays: a larger delay only makes W wait.
//
// The delay is not part of the encoded state (EncodeMeta, EncodeKey): a
// restored partition uses Config.DelayMs until the caller sets the delay
// again, which a caller with a changing delay does before every Process
// (it re-derives the delay from the log, as package watermark's Tracker
// does after its own restore). Nothing in the encoded state depends on the
// delay, so restore works whatever delays were used.
func (p *Partition) SetDelayMs(d int64) error {
	if d < 0 {
		return fmt.Errorf("%w: SetDelayMs(%d), must be >= 0 (milliseconds)", ErrInvalidConfig, d)
	}
	p.delayMs = d
	return nil
}

// SetHold makes step 6 move nothing from the next record on (hold true),
// as an infinite delay would, until SetHold(false): for a caller that has
// no watermark to give yet (a repartitioned rule before every source
// partition was heard of, docs/RULES.md). Like the delay it is not part of
// the encoded state: such a caller sets it before every Process.
func (p *Partition) SetHold(hold bool) { p.hold = hold }

// Watermark returns the partition watermark W (NoWatermark before any
// event).
func (p *Partition) Watermark() int64 { return p.wm }

// Process runs SPEC.md section 4 steps 2 to 7 for one record that passed
// decoding and validation (step 1). qualifies is the rule filter's verdict,
// computed by the caller. Step 6 (the watermark advance) and step 7 (closing)
// run for every record, whatever its outcome.
func (p *Partition) Process(ev Event, qualifies bool) Result {
	var res Result
	p.ProcessTo(&res, &ev, qualifies)
	return res
}

// ProcessTo is Process writing the result to *res (which it overwrites)
// and reading the event through a pointer, which it does not keep: for the
// caller that processes every record (package pipeline). Passing an Event
// or returning a Result by value copies it in 16-byte moves that read back
// the 8-byte stores of its fields before they are done, a store-forwarding
// stall per record (as in package aggwindow).
func (p *Partition) ProcessTo(res *Result, ev *Event, qualifies bool) {
	w := p.wm
	*res = Result{Watermark: w}
	if ev.TS < w {
		res.LatenessMs = subSat(w, ev.TS)
	}
	if !qualifies { // step 2
		res.Outcome = Filtered
	} else {
		res.Outcome, res.Revisions = p.qualifying(ev, w)
	}
	// Step 6: W = max(W, ts - D).
	if nw := subSat(ev.TS, p.delayMs); nw > p.wm && !p.hold {
		p.wm = nw
		p.dirtyMeta = true
	}
	// Step 7.
	if len(p.open) > 0 {
		res.Revisions = p.closeDue(res.Revisions)
	}
}

// qualifying runs steps 3 to 5 for a qualifying event; w is W before it.
func (p *Partition) qualifying(ev *Event, w int64) (Outcome, []Revision) {
	ks := p.keys[ev.Key]
	if ks == nil {
		ks = &keyState{key: ev.Key, seen: make(map[string]int64)}
		p.keys[ev.Key] = ks
	} else if !p.keepAll && p.prune(ks, w) {
		// Pruning the touched key here is free (its fronts are hot) and,
		// like Sweep, invisible in the output.
		p.markDirty(ks)
	}

	// Step 3. After the prune above every remembered ts is >= W - H, but
	// the comparison stays so that correctness does not rest on it.
	if r, ok := ks.seen[ev.EventID]; ok && r >= subSat(w, p.cfg.DedupHorizonMs) {
		p.reschedule(ks)
		return Duplicate, nil
	}
	p.remember(ks, ev.EventID, ev.TS)
	p.markDirty(ks)

	// Step 4: ts < W - L is too late (remembered above all the same);
	// W - L <= ts < W is late but applied.
	out, revs := TooLate, []Revision(nil)
	if ev.TS >= subSat(w, p.cfg.LatenessMs) {
		out = Processed
		revs = p.apply(ks, ev, w) // step 5
	}
	p.reschedule(ks)
	return out, revs
}

// remember records event id -> ts for deduplication, replacing an expired
// entry of the same id.
func (p *Partition) remember(ks *keyState, id string, ts int64) {
	if old, ok := ks.seen[id]; ok {
		i, found := slices.BinarySearchFunc(ks.seenBy, seenEntry{ts: old, id: id}, cmpSeen)
		if found {
			ks.seenBy = slices.Delete(ks.seenBy, i, i+1)
			p.nDedup--
			p.markBucket(ks, DedupBucket, old)
		}
	}
	ks.seen[id] = ts
	e := seenEntry{ts: ts, id: id}
	if n := len(ks.seenBy); n == 0 || cmpSeen(ks.seenBy[n-1], e) < 0 {
		ks.seenBy = append(ks.seenBy, e)
	} else {
		i, _ := slices.BinarySearchFunc(ks.seenBy, e, cmpSeen)
		ks.seenBy = slices.Insert(ks.seenBy, i, e)
	}
	p.nDedup++
	p.markBucket(ks, DedupBucket, ts)
}

// closeDue runs step 7: it closes every open incident with W - L > end + S,
// in (end, alert_id) order, appending the Closed revisions to revs.
//
// Why a closed incident never changes again: it closed at some W' with
// W' - L > end + S. Every event applied later has ts >= W - L >= W' - L
// (W never decreases), so ts - S > end. A firing window that contains that
// event spans at most S, so it starts after end: it neither overlaps nor
// touches the closed incident, and windows without the new event are the
// same event sets as before. (incident.go shows that only windows containing
// the new event can change the firing spans.) Hence removing the incident
// from the state loses nothing.
func (p *Partition) closeDue(revs []Revision) []Revision {
	thr := subSat(p.wm, p.cfg.LatenessMs)
	for len(p.open) > 0 {
		inc := p.open[0]
		if thr <= addSat(inc.end, p.cfg.SizeMs) {
			break
		}
		p.open.remove(inc)
		inc.rev++
		revs = append(revs, inc.revision(Closed, "", false, p.wm))
		ks := inc.ks
		ks.removeOpen(inc)
		p.markDirty(ks)
		// The prune deadline does not depend on open incidents; this only
		// matters for a loaded key left empty (which Process never builds).
		p.reschedule(ks)
	}
	return revs
}

func (p *Partition) markDirty(ks *keyState) {
	if !ks.dirty {
		ks.dirty = true
		p.dirtyKeys = append(p.dirtyKeys, ks.key)
	}
}

// markBucket records that the bucket entry of kind of ks at ts changed (and
// so did its key entry, which counts what the buckets hold). The marks are
// kept with the key, a few per commit (the newest bucket, where events
// arrive, and the oldest, which pruning cuts), so marking costs a short
// scan, no hashing.
func (p *Partition) markBucket(ks *keyState, kind byte, ts int64) {
	blen := p.evB
	if kind == DedupBucket {
		blen = p.ddB
	}
	m := bucketMark{kind: kind, b: floorDiv(ts, blen)}
	if ks.dirtyGen != p.gen {
		if cap(ks.dirtyB) > 8 {
			ks.dirtyB = nil // after a bulk prune or an upgrade: not kept for every key
		}
		ks.dirtyB, ks.dirtyGen = ks.dirtyB[:0], p.gen
	}
	for i := len(ks.dirtyB) - 1; i >= 0; i-- {
		if ks.dirtyB[i] == m {
			return
		}
	}
	ks.dirtyB = append(ks.dirtyB, m)
	p.markDirty(ks)
}

// markAllBuckets marks every bucket entry ks has.
func (p *Partition) markAllBuckets(ks *keyState) {
	for i := range ks.events {
		p.markBucket(ks, EventsBucket, ks.events[i].TS)
	}
	for _, e := range ks.seenBy {
		p.markBucket(ks, DedupBucket, e.ts)
	}
}

// floorDiv returns floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// Dirty returns the keys whose key entry (EncodeKey) changed since the last
// ClearDirty, sorted, and whether the partition meta (the watermark)
// changed. A returned key whose EncodeKey is nil was deleted. Every change
// of a key's events, remembered ids or open incidents makes its key entry
// dirty (it holds their counts); DirtyBuckets lists the bucket entries.
func (p *Partition) Dirty() (keys []string, meta bool) {
	keys = slices.Clone(p.dirtyKeys)
	slices.Sort(keys)
	return slices.Compact(keys), p.dirtyMeta
}

// DirtyBuckets returns the bucket entries changed since the last
// ClearDirty, sorted by kind, bucket and key. One whose EncodeBucket is nil
// holds nothing any more (its events or ids were pruned, or moved to
// another bucket): the caller deletes it.
func (p *Partition) DirtyBuckets() []BucketRef {
	var out []BucketRef
	add := func(ks *keyState) {
		if ks.dirtyGen != p.gen {
			return
		}
		for _, m := range ks.dirtyB {
			out = append(out, BucketRef{Kind: m.kind, Key: ks.key, Bucket: m.b})
		}
	}
	for _, ks := range p.deleted {
		add(ks)
	}
	for _, k := range p.dirtyKeys {
		if ks := p.keys[k]; ks != nil && ks.dirty {
			add(ks)
		}
	}
	slices.SortFunc(out, cmpBucketRef)
	return slices.CompactFunc(out, func(a, b BucketRef) bool { return cmpBucketRef(a, b) == 0 })
}

func cmpBucketRef(a, b BucketRef) int {
	if a.Kind != b.Kind {
		return int(a.Kind) - int(b.Kind)
	}
	if a.Bucket != b.Bucket {
		if a.Bucket < b.Bucket {
			return -1
		}
		return 1
	}
	return strings.Compare(a.Key, b.Key)
}

// ClearDirty forgets what Dirty and DirtyBuckets reported (call it after
// persisting).
func (p *Partition) ClearDirty() {
	for _, k := range p.dirtyKeys {
		if ks := p.keys[k]; ks != nil {
			ks.dirty = false
		}
	}
	clear(p.dirtyKeys)
	p.dirtyKeys = p.dirtyKeys[:0]
	p.dirtyMeta = false
	clear(p.deleted)
	p.deleted = p.deleted[:0]
	p.gen++
}

// Stats counts the partition's state.
//
// Events are the applied events kept for future firing sets and counts:
// those with ts >= W - L - S, plus older ones not pruned yet (pruning runs
// on the touched key in Process and on due keys in Sweep). Open incidents do
// not hold events back: an incident open for hours keeps only its events of
// the last D + L + S of event time and counts the older ones.
type Stats struct {
	Keys          int // keys with any state
	Events        int // applied events kept (see above)
	Dedup         int // remembered event ids
	OpenIncidents int
}

// Stats returns the current counts. O(1).
func (p *Partition) Stats() Stats {
	return Stats{Keys: len(p.keys), Events: p.nEvents, Dedup: p.nDedup, OpenIncidents: len(p.open)}
}

// String is for debugging.
func (p *Partition) String() string {
	return fmt.Sprintf("window.Partition{W: %d, keys: %d, open: %d}", p.wm, len(p.keys), len(p.open))
}
