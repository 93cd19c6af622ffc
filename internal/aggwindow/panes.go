package aggwindow

import (
	"cmp"
	"math"
	"slices"
)

// Panes.
//
// Fixed windows (tumbling, hopping) share their events through panes: event
// time is cut into panes of P = gcd(size, advance) ms aligned to the epoch,
// so that every window is the union of size/P whole panes (tumbling: one
// pane, P = size). A key keeps its non-empty panes, each with its aggregate
// and its own evidence: the first EvidenceLimit of its events in the fn's
// evidence order. Because that order is total, a window's evidence (the
// first EvidenceLimit of its events) is the first EvidenceLimit of the
// union of its panes' evidence; because sums are exact, its aggregate is the
// merge of its panes' aggregates in any order. So an event updates the
// evidence of one pane, not of every window that holds it; a window keeps
// only its aggregate (maintained per event, for judging) and builds its
// evidence from its panes when it emits a revision. (A min or max under a
// predicate on the aggregate alone goes further: an event that leaves its
// pane's extreme leaves every window's, and skips them; see
// Partition.extOnly.) Panes are also what is
// persisted (EncodePane): a commit rewrites the panes that changed, not
// every window of the key.
//
// A pane lives while a window containing it can still change: it is
// dropped when the last of them closes, the window starting at
// floor(pane start / advance) * advance. Windows of one key close in order
// of start, so that drops the panes in [start, start + advance) of each
// closing window. Hence the live windows of a key are exactly the hop
// windows that contain one of its panes and have not closed, which is what
// a restore rebuilds (installPane).

// PaneRef names one pane of a key by its start, a multiple of the pane
// length (the entry name of EncodePane's value).
type PaneRef struct {
	Key   string
	Start int64
}

// pane is one non-empty pane of a key. The fields an event reads come
// first, in the first 64 bytes of a 128-byte object (64-byte aligned, as
// the objects of that size class are): one cache line per pane and event.
type pane struct {
	start int64
	agg   aggState
	// full says that the evidence holds EvidenceLimit events, and cut is
	// the evidence order's leading key of the last of them (evOrder.lead):
	// an event beyond it cannot enter, which addToPane sees without
	// reading the evidence.
	cut   int64
	full  bool
	dirty bool // listed in Partition.dirtyPanes

	evidence []Evidence // sorted by the evidence order, at most EvidenceLimit
	ks       *keyState
	_        [32]byte // to 128 bytes
}

func cmpWinStart(x *win, s int64) int   { return cmp.Compare(x.start, s) }
func cmpPaneStart(x *pane, s int64) int { return cmp.Compare(x.start, s) }

func cmpPaneRef(a, b PaneRef) int {
	if c := cmp.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	return cmp.Compare(a.Start, b.Start)
}

// paneAt returns the key's pane starting at start, inserting an empty one
// when there is none.
func (ks *keyState) paneAt(start int64) *pane {
	if pn := ks.hot; pn != nil && pn.start == start {
		return pn // in-order events hit the pane of the previous one
	}
	var pn *pane
	if n := len(ks.panes); n > 0 && ks.panes[n-1].start == start {
		pn = ks.panes[n-1]
	} else if i, ok := slices.BinarySearchFunc(ks.panes, start, cmpPaneStart); ok {
		pn = ks.panes[i]
	} else {
		pn = &pane{ks: ks, start: start}
		ks.panes = slices.Insert(ks.panes, i, pn)
	}
	ks.hot = pn
	return pn
}

// panesIn returns the key's panes with lo <= start < hi (shared, not a copy).
func (ks *keyState) panesIn(lo, hi int64) []*pane {
	i, _ := slices.BinarySearchFunc(ks.panes, lo, cmpPaneStart)
	j := i
	for j < len(ks.panes) && ks.panes[j].start < hi {
		j++
	}
	return ks.panes[i:j]
}

// addToPane adds e to the aggregate and evidence of its pane. It reports
// whether the windows containing the pane skip e: under extOnly, when the
// pane had events (so every window containing it exists) and its extreme
// did not change.
func (p *Partition) addToPane(ks *keyState, e *Evidence) (skip bool) {
	pn := ks.paneAt(floorDiv(e.TS, p.paneMs) * p.paneMs)
	had, ext := pn.agg.count > 0, pn.agg.ext
	pn.agg.add(p.cfg.Fn, e.Value)
	if limit := p.cfg.EvidenceLimit; limit > 0 && !(pn.full && p.order.beyond(pn.cut, e)) {
		pn.evidence = addEvidence(pn.evidence, e, limit, p.order)
		if pn.full = len(pn.evidence) == limit; pn.full {
			pn.cut = p.order.lead(&pn.evidence[limit-1])
		}
	}
	p.markPaneDirty(pn)
	return p.extOnly && had && math.Float64bits(ext) == math.Float64bits(pn.agg.ext)
}

// windowEvidence returns a fresh copy of the evidence of fixed window wn:
// the first EvidenceLimit events of the union of its panes' evidence (nil
// when none). A pane whose first event does not beat the last one chosen so
// far adds nothing, which for count, sum and avg (ordered by time, as the
// panes are) skips every pane after the first ones. The panes are merged
// in the partition's two scratch buffers, in turn (a window of one
// contributing pane reads its evidence directly); only the result is
// allocated, at its length.
func (p *Partition) windowEvidence(wn *win) []Evidence {
	limit := p.cfg.EvidenceLimit
	var cur []Evidence // the first events so far: a pane's evidence (read only) or p.evScratch[1-k]
	k := 0             // p.evScratch[k] is free
	for _, pn := range wn.ks.panesIn(wn.start, wn.start+p.cfg.SizeMs) {
		ev := pn.evidence
		switch {
		case len(ev) == 0 || (len(cur) == limit && p.order.cmp(&cur[limit-1], &ev[0]) <= 0):
		case len(cur) == 0:
			cur = ev
		default:
			if p.evScratch[k] == nil {
				p.evScratch[k] = make([]Evidence, 0, limit)
			}
			cur = mergeInto(p.evScratch[k][:0], cur, ev, limit, p.order)
			k = 1 - k
		}
	}
	out := slices.Clone(cur)
	clear(p.evScratch[0][:cap(p.evScratch[0])]) // hold no event ids
	clear(p.evScratch[1][:cap(p.evScratch[1])])
	return out
}

// dropPanes deletes the key's panes that start before end (the panes no
// live window contains any more); mark records them for DirtyPanes (their
// entries are deleted).
func (p *Partition) dropPanes(ks *keyState, end int64, mark bool) {
	n := 0
	for n < len(ks.panes) && ks.panes[n].start < end {
		if mark {
			p.markPaneDirty(ks.panes[n])
		}
		n++
	}
	if n > 0 {
		ks.panes = slices.Delete(ks.panes, 0, n)
		if ks.hot != nil && ks.hot.start < end {
			ks.hot = nil
		}
	}
}

func (p *Partition) markPaneDirty(pn *pane) {
	if !pn.dirty {
		pn.dirty = true
		p.dirtyPanes = append(p.dirtyPanes, pn)
	}
}

// DirtyPanes returns the panes of fixed windows that changed or were
// dropped since the last ClearDirty, sorted by key and start. A returned
// pane whose EncodePane is nil was dropped. Sessions have no panes.
func (p *Partition) DirtyPanes() []PaneRef {
	if len(p.dirtyPanes) == 0 {
		return nil
	}
	refs := make([]PaneRef, len(p.dirtyPanes))
	for i, pn := range p.dirtyPanes {
		refs[i] = PaneRef{Key: pn.ks.key, Start: pn.start}
	}
	slices.SortFunc(refs, cmpPaneRef)
	return slices.Compact(refs) // a pane replaced by LoadPane may be listed twice
}

// Restoring fixed windows. The entries of a key (its panes and its key
// entry, the fired windows' alert ids and revisions) and the meta come in
// any order; after the last of them the key's windows are those of the
// persisted partition, with the same aggregates (merged from the panes) and
// fired state:
//
//   - installPane creates (or completes) the windows containing the pane
//     that are not closed at the watermark known so far;
//   - installFired marks the listed windows fired, creating a placeholder
//     (count 0) for one whose panes are still to come;
//   - pruneClosed (LoadMeta) drops the unfired windows the restored
//     watermark has closed: the persisted partition had closed them before
//     the panes they share with later windows were created.

// firedMeta is one fired window of a key entry.
type firedMeta struct {
	start   int64
	alertID string
	rev     int
}

// windowAt returns the key's fixed window starting at start, creating an
// empty unfired one (queued for closing) when there is none.
func (p *Partition) windowAt(ks *keyState, start int64) *win {
	i, ok := slices.BinarySearchFunc(ks.wins, start, cmpWinStart)
	if ok {
		return ks.wins[i]
	}
	wn := &win{ks: ks, start: start}
	ks.wins = slices.Insert(ks.wins, i, wn)
	p.nWindows++
	p.queue(wn)
	return wn
}

// keyFor returns key's state, creating it.
func (p *Partition) keyFor(key string) *keyState {
	ks := p.keys[key]
	if ks == nil {
		ks = &keyState{key: key}
		p.keys[key] = ks
	}
	return ks
}

// installPane adds a decoded pane to its key, replacing the pane of the
// same start if there is one, and merges it into the windows that contain
// it and have not closed. A pane all of whose windows have closed is
// ignored: the persisted partition had dropped it.
func (p *Partition) installPane(key string, pn *pane) {
	thr := subSat(p.wm, p.cfg.LatenessMs)
	var live []int64 // starts of the windows containing pn that have not closed
	for k := floorDiv(pn.start-p.cfg.SizeMs, p.adv) + 1; k <= floorDiv(pn.start, p.adv); k++ {
		if start := k * p.adv; start+p.cfg.SizeMs > thr {
			live = append(live, start)
		}
	}
	if len(live) == 0 {
		return
	}
	ks := p.keyFor(key)
	pn.ks = ks
	i, replace := slices.BinarySearchFunc(ks.panes, pn.start, cmpPaneStart)
	if replace {
		ks.panes[i] = pn
		ks.hot = nil
	} else {
		ks.panes = slices.Insert(ks.panes, i, pn)
	}
	for _, start := range live {
		wn := p.windowAt(ks, start)
		if replace {
			p.rebuildAgg(wn) // the old pane's events cannot be taken out of a min or max
		} else {
			wn.agg.merge(p.cfg.Fn, &pn.agg)
		}
	}
}

// rebuildAgg recomputes a fixed window's aggregate from its panes.
func (p *Partition) rebuildAgg(wn *win) {
	wn.agg = aggState{}
	for _, pn := range wn.ks.panesIn(wn.start, wn.start+p.cfg.SizeMs) {
		wn.agg.merge(p.cfg.Fn, &pn.agg)
	}
}

// installFired replaces the fired state of key's fixed windows with fs:
// the listed windows are fired (a placeholder with count 0 stands for one
// whose panes are not loaded yet), the others are not; a placeholder no
// longer listed is removed.
func (p *Partition) installFired(key string, fs []firedMeta) {
	ks := p.keyFor(key)
	for _, wn := range ks.wins {
		if wn.fired {
			wn.fired, wn.alertID, wn.rev = false, "", 0
			p.nFired--
		}
	}
	for _, f := range fs {
		wn := p.windowAt(ks, f.start)
		wn.fired, wn.alertID, wn.rev = true, f.alertID, f.rev
		p.nFired++
	}
	ks.wins = slices.DeleteFunc(ks.wins, func(wn *win) bool {
		if wn.fired || wn.agg.count > 0 {
			return false
		}
		wn.dead = true
		p.nWindows--
		return true
	})
	if len(ks.wins) == 0 {
		delete(p.keys, key)
		ks.dropped = true
	}
}

// pruneClosed silently drops the unfired fixed windows that the watermark
// has closed (W - L >= end), with the panes only they contained, marking
// nothing dirty. Fired ones are left to the next close, which reports
// them; a consistent state has none.
func (p *Partition) pruneClosed() {
	if p.cfg.Kind == Session {
		return
	}
	thr := subSat(p.wm, p.cfg.LatenessMs)
	var keep []dueEntry
	for len(p.due) > 0 && p.due[0].at <= thr {
		e := p.due.pop()
		wn := e.w
		switch {
		case wn.dead || !wn.queued || wn.qAt != e.at:
			// stale
		case wn.fired:
			keep = append(keep, e)
		default:
			wn.queued = false
			p.remove(wn, false)
		}
	}
	for _, e := range keep {
		p.due.push(e)
	}
}

// paneInRange reports whether a pane starting at start can hold an event
// (MinTS..MaxTS) without the window bounds overflowing.
func (p *Partition) paneInRange(start int64) bool {
	return start <= MaxTS && start > MinTS-p.paneMs && start%p.paneMs == 0
}

// windowStartOK reports whether start is a fixed window that can hold an
// event.
func (p *Partition) windowStartOK(start int64) bool {
	return start <= MaxTS && start > MinTS-p.cfg.SizeMs && start%p.adv == 0
}
