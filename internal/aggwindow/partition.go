package aggwindow

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Partition is the windowed state of one rule over one input partition:
// the watermark and, per key, the windows that can still change. It is not
// safe for concurrent use.
type Partition struct {
	cfg    Config
	adv    int64   // hop of fixed windows
	paneMs int64   // pane length of fixed windows (panes.go)
	order  evOrder // evidence order of cfg.Fn
	// extOnly: min or max of fixed windows under a predicate that ignores
	// the count. All that judge reads of a window is then its extreme, the
	// extreme of its panes' extremes, which an event changes only if it
	// changes its pane's: applyFixed skips the windows of the other events
	// (most, in a busy pane), and a window's count is the sum of its
	// panes' (count) rather than its aggregate's, which counts only the
	// events that did not skip it (> 0 all the same).
	extOnly bool

	wm   int64
	keys map[string]*keyState
	due  dueQueue // every live window, by (a lower bound of) its end

	delayMs int64 // D: cfg.DelayMs unless SetDelayMs changed it
	hold    bool  // SetHold: records move no watermark

	dirtyKeys  []string // keys whose key entry changed; may hold repeats, Dirty sorts and compacts
	dirtyPanes []*pane  // panes changed or dropped, each once (pane.dirty)
	dirtyMeta  bool

	nWindows, nFired int // for Stats

	// evScratch are windowEvidence's merge buffers (capacity
	// EvidenceLimit, allocated on first use, cleared after each use).
	// Nothing they hold is ever handed out: a revision gets a copy.
	evScratch [2][]Evidence
}

// keyState is the state of one key.
type keyState struct {
	// hot is the pane of the key's latest event, and one the window of its
	// latest event with a single window (tumbling): where the next event
	// most likely goes, found without reading panes and wins. Caches: hot
	// is nil after panes changed otherwise, one may be dead or another
	// window (its start tells).
	hot *pane
	one *win

	key     string
	dropped bool // no longer p.keys[key]: a KeyRef holding it is stale
	// wins are the key's live windows sorted by start. Fixed windows have
	// distinct starts aligned to the hop; sessions are disjoint with
	// next.start >= previous.last + gap (else they would have merged).
	wins []*win
	// panes are the non-empty panes of fixed windows sorted by start: every
	// pane that a live window contains (panes.go). Sessions have none.
	panes []*pane
	dirty bool // listed in Partition.dirtyKeys
}

// win is one live window (or session). The fields an event reads come
// first, in the first 64 bytes of a 128-byte object (Go aligns the objects
// of that size class to 128 bytes): one cache line per window and event.
type win struct {
	start  int64
	agg    aggState
	fired  bool
	queued bool // has an entry in Partition.due ...
	dead   bool // closed or merged away; its queue entry is stale
	ks     *keyState

	last     int64      // sessions: ts of the latest event; unused by fixed windows
	evidence []Evidence // sessions only (fixed windows build theirs from their panes): sorted by the evidence order, at most EvidenceLimit
	alertID  string     // when fired
	rev      int        // when fired: the last emitted revision
	qAt      int64      // ... at this end (<= the window's end), when queued
}

// NewPartition returns an empty partition (watermark NoWatermark) for cfg.
func NewPartition(cfg Config) (*Partition, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Partition{
		cfg:     cfg,
		adv:     cfg.advance(),
		paneMs:  cfg.paneMs(),
		order:   evidenceOrder(cfg.Fn),
		extOnly: cfg.Kind != Session && (cfg.Fn == Min || cfg.Fn == Max) && cfg.FiresIgnoresCount,
		wm:      NoWatermark,
		delayMs: cfg.DelayMs,
		keys:    make(map[string]*keyState),
	}, nil
}

// SetDelayMs sets the watermark delay D that Process uses from the next
// record on (W = max(W, ts - D)), for a watermark strategy whose delay
// changes along the log (package watermark). It must be within
// 0..MaxDurationMs, like Config.DelayMs, which is the delay until
// SetDelayMs is called. W never decreases whatever the delays.
//
// The delay is not part of the encoded state (EncodeMeta, EncodeKey,
// EncodePane): a restored partition uses Config.DelayMs until the caller
// sets the delay again, which a caller with a changing delay does before
// every Process (it re-derives the delay from the log, as package
// watermark's Tracker does after its own restore). Nothing in the encoded
// state depends on the delay, so restore works whatever delays were used.
func (p *Partition) SetDelayMs(d int64) error {
	if d < 0 || d > MaxDurationMs {
		return fmt.Errorf("%w: SetDelayMs(%d), must be 0..%d (milliseconds)", ErrInvalidConfig, d, MaxDurationMs)
	}
	p.delayMs = d
	return nil
}

// SetHold makes Process move no watermark from the next record on (hold
// true), as an infinite delay would, until SetHold(false): for a caller
// that has no watermark to give yet (a repartitioned rule before every
// source partition was heard of, docs/RULES.md). Like the delay it is not
// part of the encoded state: such a caller sets it before every Process.
// Advance is not affected.
func (p *Partition) SetHold(hold bool) { p.hold = hold }

// Watermark returns the partition watermark W (NoWatermark before any
// record).
func (p *Partition) Watermark() int64 { return p.wm }

// Process handles one record that passed decoding and validation, in the
// SPEC's order: lateness, apply, watermark, close. qualifies is the filter's
// verdict, computed by the caller; the caller also deduplicates, and passes a
// duplicate with qualifies = false (counting it as a duplicate, not as
// Filtered): every record moves the watermark, W = max(W, ts - D), and then
// every window with W - L >= end closes.
//
// A qualifying event with ts < W - L (W before the record) is TooLate and
// changes no window; otherwise it is applied to its windows (late when
// ts < W). An event with ts outside [MinTS, MaxTS] or a value that is not
// finite is OutOfRange and changes nothing.
func (p *Partition) Process(ev Event, qualifies bool) Result {
	var res Result
	p.ProcessTo(&res, &ev, qualifies)
	return res
}

// ProcessTo is Process writing the result to *res (which it overwrites)
// and reading the event through a pointer, which it does not keep: for the
// caller that processes every record. A Result is too large for the
// compiler to keep in registers, so a caller of Process stores the
// returned fields one by one and then copies them in wider loads, and that
// store-forwarding stall costs as much as a good part of Process;
// ProcessTo's stores and the caller's loads of the fields match.
func (p *Partition) ProcessTo(res *Result, ev *Event, qualifies bool) {
	w := p.wm
	var late int64
	if ev.TS < w {
		late = subSat(w, ev.TS)
	}
	res.Watermark, res.LatenessMs = w, late
	if ev.TS < MinTS || ev.TS > MaxTS || math.IsNaN(ev.Value) || math.IsInf(ev.Value, 0) {
		res.Outcome, res.Revisions = OutOfRange, nil
		return
	}
	var revs []Revision
	switch {
	case !qualifies:
		res.Outcome = Filtered
	case ev.TS < subSat(w, p.cfg.LatenessMs):
		res.Outcome = TooLate
	default:
		res.Outcome = Processed
		revs = p.apply(ev, w)
	}
	if nw := ev.TS - p.delayMs; nw > p.wm && !p.hold { // no overflow: see the bounds
		p.wm = nw
		p.dirtyMeta = true
	}
	if p.due.headAt() <= subSat(p.wm, p.cfg.LatenessMs) {
		revs = p.closeDue(revs) // not called for most records: its frame is large
	}
	res.Revisions = revs
}

// Advance moves the watermark to w if that is later (W never decreases)
// and closes every window with W - L >= end, returning the Closed
// revisions. Use it at the end of input (Advance(math.MaxInt64) closes
// everything), for idle partitions, or for a watermark strategy computed
// outside.
func (p *Partition) Advance(w int64) []Revision {
	if w > p.wm {
		p.wm = w
		p.dirtyMeta = true
	}
	return p.closeDue(nil)
}

// apply adds a qualifying event to its key's windows and returns the
// revisions that causes; w is W before the record.
func (p *Partition) apply(ev *Event, w int64) []Revision {
	var ks *keyState
	if r := ev.Ref; r != nil && r.ks != nil && !r.ks.dropped {
		ks = r.ks
	} else {
		ks = p.keyFor(ev.Key)
		if r != nil {
			r.ks = ks
		}
	}
	late := ev.TS < w
	// Field by field: a composite literal is built in a temporary and
	// copied in wider loads than its stores, which stalls.
	var e Evidence
	e.EventID, e.SensorID, e.TS, e.Value, e.Partition, e.Offset = ev.EventID, ev.SensorID, ev.TS, ev.Value, ev.Partition, ev.Offset
	if p.cfg.Kind == Session {
		return p.applySession(ks, &e, late, w)
	}
	return p.applyFixed(ks, &e, late, w)
}

// applyFixed adds e to its pane (aggregate and evidence) and to the
// aggregate of every tumbling or hopping window that contains it, judging
// each in order of start. All of them are live: a window closes at
// W - L >= end, and e has ts >= W - L and ts < end.
func (p *Partition) applyFixed(ks *keyState, e *Evidence, late bool, w int64) []Revision {
	if p.addToPane(ks, e) {
		return nil // no window changes (extOnly)
	}
	kLo, kHi := floorDiv(e.TS-p.cfg.SizeMs, p.adv)+1, floorDiv(e.TS, p.adv)
	if kLo == kHi {
		// One window per event (tumbling), most often the key's latest.
		start := kLo * p.adv
		wn := ks.one
		if wn == nil || wn.dead || wn.start != start {
			wn = p.winAt(ks, firstWinFrom(ks.wins, start, 1), start)
			ks.one = wn
		}
		return p.addToWin(wn, e, late, w, nil)
	}
	var revs []Revision
	i := firstWinFrom(ks.wins, kLo*p.adv, int(kHi-kLo+1))
	for k := kLo; k <= kHi; k++ {
		revs = p.addToWin(p.winAt(ks, i, k*p.adv), e, late, w, revs)
		i++
	}
	return revs
}

// winAt returns ks.wins[i] if it starts at start, else a new window
// starting at start, inserted at i (i is where it belongs).
func (p *Partition) winAt(ks *keyState, i int, start int64) *win {
	if i < len(ks.wins) && ks.wins[i].start == start {
		return ks.wins[i]
	}
	wn := &win{ks: ks, start: start}
	ks.wins = slices.Insert(ks.wins, i, wn)
	p.nWindows++
	p.queue(wn)
	return wn
}

// addToWin adds e to the aggregate of the fixed window wn and judges it.
// judge reads whether the aggregate changed only for a fired window or a
// predicate that ignores the count: otherwise the value before the event
// is not computed (an average's exact sum, at every event of a window
// that has not fired), and changed is true.
func (p *Partition) addToWin(wn *win, e *Evidence, late bool, w int64, revs []Revision) []Revision {
	track := wn.agg.count > 0 && (wn.fired || p.cfg.FiresIgnoresCount)
	var before float64
	if track {
		before = wn.agg.value(p.cfg.Fn)
	}
	wn.agg.add(p.cfg.Fn, e.Value)
	after := wn.agg.value(p.cfg.Fn)
	return p.judge(wn, after, !track || math.Float64bits(before) != math.Float64bits(after), late, w, revs)
}

// firstWinFrom returns the index of the first of wins (fixed windows,
// sorted by start) that starts at or after lo, the first of the nw
// windows that hold an event. The windows of an event in order are the
// newest ones (all nw of them, or all but the newest, which it starts):
// checking there first avoids a binary search through windows it would
// not touch otherwise.
func firstWinFrom(wins []*win, lo int64, nw int) int {
	n := len(wins)
	switch i := n - nw; {
	case i >= 0 && wins[i].start == lo:
		return i
	case i+1 >= 0 && i+1 < n && wins[i+1].start == lo:
		return i + 1
	case n == 0 || wins[n-1].start < lo:
		return n
	}
	i, _ := slices.BinarySearchFunc(wins, lo, cmpWinStart)
	return i
}

// applySession adds e to the session(s) whose interval [start, last+gap)
// overlaps [ts, ts+gap): none (a new session), one (extended), or two
// (bridged and merged; with disjoint sessions at least gap apart one event
// cannot reach three).
func (p *Partition) applySession(ks *keyState, e *Evidence, late bool, w int64) []Revision {
	p.markDirty(ks) // a session key's entry holds its whole state
	gap, fn, t := p.cfg.GapMs, p.cfg.Fn, e.TS
	wins := ks.wins
	// Sessions are disjoint, so sorted by last as well as by start.
	i0, _ := slices.BinarySearchFunc(wins, t, func(x *win, t int64) int {
		if x.last+gap > t {
			return 1
		}
		return -1
	})
	i1 := i0
	for i1 < len(wins) && wins[i1].start < t+gap {
		i1++
	}
	if i1 == i0 {
		wn := &win{ks: ks, start: t, last: t}
		wn.agg.add(fn, e.Value)
		wn.evidence = addEvidence(wn.evidence, e, p.cfg.EvidenceLimit, p.order)
		ks.wins = slices.Insert(ks.wins, i0, wn)
		p.nWindows++
		p.queue(wn)
		return p.judge(wn, wn.agg.value(fn), true, late, w, nil)
	}

	group := slices.Clone(wins[i0:i1])
	// The survivor is the earliest fired session, else the earliest.
	sv := group[0]
	for _, g := range group {
		if g.fired {
			sv = g
			break
		}
	}
	before, oldStart := sv.agg.value(fn), sv.start
	var absorbedFired []*win
	for _, g := range group {
		if g == sv {
			continue
		}
		sv.agg.merge(fn, &g.agg)
		sv.evidence = mergeEvidence(sv.evidence, g.evidence, p.cfg.EvidenceLimit, p.order)
		sv.start = min(sv.start, g.start)
		sv.last = max(sv.last, g.last)
		g.dead = true
		p.nWindows--
		if g.fired {
			absorbedFired = append(absorbedFired, g)
		}
	}
	sv.agg.add(fn, e.Value)
	sv.evidence = addEvidence(sv.evidence, e, p.cfg.EvidenceLimit, p.order)
	sv.start = min(sv.start, t)
	sv.last = max(sv.last, t)
	if len(group) > 1 {
		ks.wins = slices.Replace(ks.wins, i0, i1, sv)
	}
	p.queue(sv)

	if len(absorbedFired) == 0 {
		after := sv.agg.value(fn)
		return p.judge(sv, after, sv.start != oldStart || math.Float64bits(before) != math.Float64bits(after), late, w, nil)
	}
	// Two or more fired sessions chained: the survivor always reports the
	// union, then each absorbed one is merged into it.
	sv.rev++
	revs := []Revision{p.revision(sv, Updated, "", late, w)}
	for _, g := range absorbedFired {
		g.rev++
		revs = append(revs, p.revision(g, Merged, sv.alertID, late, w))
		p.nFired--
	}
	return revs
}

// judge emits what a change to wn causes: Open when it fires for the first
// time, Updated when a fired window changed and still fires. agg is wn's
// aggregate. Either changes the key entry (the fired windows' alert ids
// and revisions).
func (p *Partition) judge(wn *win, agg float64, changed, late bool, w int64, revs []Revision) []Revision {
	if !changed && (wn.fired || p.cfg.FiresIgnoresCount) {
		// Fired: neither Open nor Updated, whatever Fires says. Not
		// fired: Fires(agg, count-1) was false, and the aggregate did
		// not change.
		return revs
	}
	fires := p.cfg.Fires(agg, p.count(wn))
	switch {
	case !wn.fired && fires:
		wn.fired, wn.rev = true, 0
		wn.alertID = p.cfg.AlertID(wn.ks.key, wn.start)
		p.nFired++
		p.markDirty(wn.ks)
		revs = append(revs, p.revision(wn, Open, "", late, w))
	case wn.fired && changed && fires:
		wn.rev++
		p.markDirty(wn.ks)
		revs = append(revs, p.revision(wn, Updated, "", late, w))
	}
	return revs
}

// count returns the number of events of wn (see extOnly). Small enough
// to inline: judge calls it for every window it judges.
func (p *Partition) count(wn *win) int {
	if p.extOnly {
		return p.paneCount(wn)
	}
	return wn.agg.count
}

// paneCount is the sum of the counts of the panes of the fixed window wn.
func (p *Partition) paneCount(wn *win) int {
	n := 0
	for _, pn := range wn.ks.panesIn(wn.start, wn.start+p.cfg.SizeMs) {
		n += pn.agg.count
	}
	return n
}

func (p *Partition) end(wn *win) int64 {
	if p.cfg.Kind == Session {
		return wn.last + p.cfg.GapMs
	}
	return wn.start + p.cfg.SizeMs
}

func (p *Partition) revision(wn *win, st Status, mergedInto string, late bool, wm int64) Revision {
	var ev []Evidence
	switch {
	case p.cfg.Kind != Session:
		ev = p.windowEvidence(wn)
	case len(wn.evidence) > 0:
		ev = slices.Clone(wn.evidence)
	}
	var agg float64 // 0 for a fired placeholder whose panes never came (installFired): no NaN average
	if wn.agg.count > 0 {
		agg = wn.agg.value(p.cfg.Fn)
	}
	return Revision{
		AlertID:    wn.alertID,
		Revision:   wn.rev,
		Status:     st,
		MergedInto: mergedInto,
		Key:        wn.ks.key,
		Start:      wn.start,
		End:        p.end(wn),
		Agg:        agg,
		Count:      p.count(wn),
		Evidence:   ev,
		Late:       late,
		Watermark:  wm,
	}
}

// queue makes sure wn has an entry in the due queue at or before its end.
// Ends only grow, so an existing entry stays valid; closeDue re-queues a
// window whose entry came due before its end.
func (p *Partition) queue(wn *win) {
	if !wn.queued {
		wn.queued, wn.qAt = true, p.end(wn)
		p.due.push(dueEntry{at: wn.qAt, w: wn})
	}
}

// closeDue closes every window with W - L >= end: fired ones emit Closed
// in order of (end, alert_id), the others are dropped. The state then
// holds only windows that an applicable event can still reach.
func (p *Partition) closeDue(revs []Revision) []Revision {
	thr := subSat(p.wm, p.cfg.LatenessMs)
	var closing []*win
	for len(p.due) > 0 && p.due[0].at <= thr {
		e := p.due.pop()
		wn := e.w
		if wn.dead || !wn.queued || wn.qAt != e.at {
			continue // stale
		}
		wn.queued = false
		if end := p.end(wn); end > thr {
			p.queue(wn) // the window grew since it was queued
			continue
		}
		closing = append(closing, wn)
	}
	if len(closing) == 0 {
		return revs
	}
	slices.SortFunc(closing, func(a, b *win) int {
		if c := cmp.Compare(p.end(a), p.end(b)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.alertID, b.alertID); c != 0 {
			return c
		}
		if c := cmp.Compare(a.ks.key, b.ks.key); c != 0 {
			return c
		}
		return cmp.Compare(a.start, b.start)
	})
	for _, wn := range closing {
		if wn.fired {
			wn.rev++
			revs = append(revs, p.revision(wn, Closed, "", false, p.wm))
			p.nFired--
		}
		p.remove(wn, true)
	}
	return revs
}

// remove deletes a closed window from its key, with the panes no live
// window contains any more (the panes in [start, start+advance), of which
// it was the last window), and the key when it has no window left. mark
// records the entries that changed for Dirty: the key entry (a session key,
// or a fired fixed window) and the dropped panes.
func (p *Partition) remove(wn *win, mark bool) {
	wn.dead = true
	ks := wn.ks
	if i, ok := slices.BinarySearchFunc(ks.wins, wn.start, cmpWinStart); ok && ks.wins[i] == wn {
		ks.wins = slices.Delete(ks.wins, i, i+1)
		p.nWindows--
	}
	if mark && (p.cfg.Kind == Session || wn.fired) {
		p.markDirty(ks)
	}
	if p.cfg.Kind != Session {
		p.dropPanes(ks, wn.start+p.adv, mark)
	}
	if len(ks.wins) == 0 {
		p.dropPanes(ks, math.MaxInt64, mark) // none in a consistent state
		delete(p.keys, ks.key)
		ks.dropped = true
	}
}

func (p *Partition) markDirty(ks *keyState) {
	if !ks.dirty {
		ks.dirty = true
		p.dirtyKeys = append(p.dirtyKeys, ks.key)
	}
}

// Dirty returns the keys whose key entry (EncodeKey) changed since the last
// ClearDirty, sorted, and whether the partition meta (the watermark)
// changed. A returned key whose EncodeKey is nil has no entry any more (the
// key was deleted, or no window of a fixed-window key is fired). The panes
// of fixed windows that changed are reported by DirtyPanes.
func (p *Partition) Dirty() (keys []string, meta bool) {
	keys = slices.Clone(p.dirtyKeys)
	slices.Sort(keys)
	return slices.Compact(keys), p.dirtyMeta
}

// ClearDirty forgets what Dirty reported (call it after persisting).
func (p *Partition) ClearDirty() {
	for _, k := range p.dirtyKeys {
		if ks := p.keys[k]; ks != nil {
			ks.dirty = false
		}
	}
	clear(p.dirtyKeys)
	p.dirtyKeys = p.dirtyKeys[:0]
	for _, pn := range p.dirtyPanes {
		pn.dirty = false
	}
	clear(p.dirtyPanes)
	p.dirtyPanes = p.dirtyPanes[:0]
	p.dirtyMeta = false
}

// Stats counts the partition's state.
type Stats struct {
	Keys    int // keys with at least one live window
	Windows int // live windows (sessions)
	Fired   int // live windows that fired: open alerts
}

// Stats returns the current counts. O(1).
func (p *Partition) Stats() Stats {
	return Stats{Keys: len(p.keys), Windows: p.nWindows, Fired: p.nFired}
}

// String is for debugging.
func (p *Partition) String() string {
	return fmt.Sprintf("aggwindow.Partition{%s, W: %d, keys: %d, windows: %d}", p.cfg.Kind, p.wm, len(p.keys), p.nWindows)
}
