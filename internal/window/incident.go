package window

import (
	"cmp"
	"slices"
)

// keyState is the state of one key.
type keyState struct {
	key string
	// events are the applied qualifying events still needed, sorted by
	// (ts, event_id). Pruning only ever removes a prefix (see gc.go), so
	// they are always a suffix of all the key's applied events. Pruning
	// does not wait for open incidents: an incident counts the events of
	// its range that were pruned in incident.pruned.
	events []Evidence
	// seen maps a remembered event_id to its ts; seenBy holds the same
	// entries sorted by (ts, event_id) so that expiry removes a prefix.
	seen   map[string]int64
	seenBy []seenEntry
	// open are the key's open incidents sorted by start; they are disjoint
	// with gaps (open[i].start > open[i-1].end).
	open []*incident

	sched     int64 // the deadline queued in Partition.sweepQ, if scheduled
	scheduled bool
	dirty     bool // listed in Partition.dirtyKeys
	// dirtyB are the key's bucket entries marked dirty in generation
	// dirtyGen of the partition (Partition.markBucket); stale otherwise.
	dirtyB   []bucketMark
	dirtyGen uint64
}

// bucketMark names a bucket entry of a key.
type bucketMark struct {
	kind byte
	b    int64
}

type seenEntry struct {
	ts int64
	id string
}

func cmpSeen(a, b seenEntry) int {
	if c := cmp.Compare(a.ts, b.ts); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

func (ks *keyState) empty() bool {
	return len(ks.events) == 0 && len(ks.seenBy) == 0 && len(ks.open) == 0
}

// evLess orders events by (ts, event_id), the SPEC's firing order.
func evLess(a, b *Evidence) bool {
	if a.TS != b.TS {
		return a.TS < b.TS
	}
	return a.EventID < b.EventID
}

// insert adds e in (ts, event_id) order and returns its index. The common
// case (in-order arrival) appends.
func (ks *keyState) insert(e Evidence) int {
	evs := ks.events
	n := len(evs)
	if n == 0 || evLess(&evs[n-1], &e) {
		ks.events = append(evs, e)
		return n
	}
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if evLess(&evs[m], &e) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	ks.events = slices.Insert(evs, lo, e)
	return lo
}

// lowerBound returns the index of the first event with TS >= ts.
func (ks *keyState) lowerBound(ts int64) int {
	evs := ks.events
	lo, hi := 0, len(evs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if evs[m].TS < ts {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// upperBound returns the index of the first event with TS > ts.
func (ks *keyState) upperBound(ts int64) int {
	evs := ks.events
	lo, hi := 0, len(evs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if evs[m].TS <= ts {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (ks *keyState) removeOpen(inc *incident) {
	if i := slices.Index(ks.open, inc); i >= 0 {
		ks.open = slices.Delete(ks.open, i, i+1)
	}
}

// incident is an open incident: one chain of firing spans, one alert.
type incident struct {
	ks      *keyState
	alertID string
	rev     int // the last emitted revision
	start   int64
	end     int64
	count   int // applied events with ts in [start, end]: pruned + kept ones
	// pruned is the number of applied events with ts in [start, end] that
	// were pruned from ks.events, so that count == pruned + the number of
	// kept events with ts in [start, end]. Only the key's first open
	// incident can have pruned > 0 (see gc.go).
	pruned int
	// evidence is stored, not derived from ks.events, because its events
	// may have been pruned. It is replaced, never modified in place.
	evidence []Evidence
	hidx     int // position in Partition.open
}

func (inc *incident) revision(st Status, mergedInto string, late bool, wm int64) Revision {
	return Revision{
		AlertID:    inc.alertID,
		Revision:   inc.rev,
		Status:     st,
		MergedInto: mergedInto,
		Key:        inc.ks.key,
		Start:      inc.start,
		End:        inc.end,
		Count:      inc.count,
		Evidence:   slices.Clone(inc.evidence),
		Late:       late,
		Watermark:  wm,
	}
}

func sameEvents(a, b []Evidence) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].TS != b[i].TS || a[i].EventID != b[i].EventID {
			return false
		}
	}
	return true
}

// apply runs step 5: it inserts the event into its key's state and returns
// the revisions that causes; w is W before the record.
//
// The work is bounded to the region the event can influence. Write the
// key's events in (ts, event_id) order and call window i the N events
// e[i..i+N-1]; it fires when its ts span is <= S.
//
//   - Windows that do not contain the new event x are, as event sets,
//     windows of the old sequence, so only windows containing x are new.
//     Those overlap at ts(x), so their spans' union is one interval
//     [lo, hi] with hi - lo <= 2S around ts(x).
//   - Firing is monotone: a window that fired before and straddles x's
//     position is replaced by two windows containing x (one keeping its
//     first event, one its last), each a subset of it in ts range, so both
//     fire, and they overlap (for N >= 2; with N = 1 nothing straddles).
//     So the union of firing spans only grows: an incident never splits,
//     incidents only grow or chain together.
//   - Consequently, if no window containing x fires, no firing span changed,
//     and x is not inside any incident's [start, end] (a point inside a
//     firing span always lands in a firing window containing it), so no
//     count changed either: nothing to do.
//   - Otherwise the new chain is [lo, hi] plus every open incident that
//     overlaps or touches it (start <= hi and end >= lo). Incidents are
//     separated by gaps, so no other incident joins transitively, and
//     closed incidents cannot touch it (see closeDue).
//   - The chain's first firing position is the first event with
//     ts == start: an event with the same ts just before a firing position
//     also fires, and chains with it.
//
// Pruned events (gc.go) are not in ks.events. Every pruned event p has
// ts(p) < W' - L - S for the W' it was pruned at, W' <= w, and x is applied,
// so ts(x) >= w - L; hence ts(p) < w - L - S <= ts(x) - S <= lo, and every
// event with ts >= lo is kept. That is all the pruned events may affect:
//
//   - The windows containing x: one that also held a pruned event would
//     span more than ts(x) - ts(p) > S, so it does not fire; the others are
//     windows of the kept suffix. So lo, hi and firstFiring are exact.
//   - Which incidents chain: they have end >= lo. The first of them, a,
//     may have pruned events; every later one starts after a's end >= lo,
//     so all its events are kept (its pruned is 0).
//   - start and evidence: if open[a].start < lo, neither changes. Let F be
//     a's evidence (the window at the first event with ts == a.start). x is
//     not before F[0] (ts(x) >= lo > a.start), and not between F[0] and
//     F[N-1], since then the window at F[0] would contain x, span at most
//     F's span and fire, giving lo <= a.start. So x sorts after F, the
//     first event with ts == a.start and the window there are unchanged:
//     a's stored evidence is still right, though its events may be pruned.
//     Otherwise start = lo (a.start >= lo, or no incident chains), and the
//     first event with ts == lo and the N events from it are kept.
//   - count: a pruned event in [start, end] has ts < lo <= a.end, so it is
//     in a's range [a.start, a.end] and counted in a.pruned; every event
//     counted in a chained incident's pruned lies in its range, inside
//     [start, end]; and ranges are disjoint, so nothing is counted twice.
//     Hence count = sum of the chained incidents' pruned + the kept events
//     in [start, end], and the pruned events of the union are that sum
//     (the growth of the range, [start, a.start) and (a.end, end], lies
//     at or after lo, where nothing was pruned).
//
// The tests compare this against a brute-force evaluation of the SPEC after
// every step, with and without pruning.
func (p *Partition) apply(ks *keyState, ev *Event, w int64) []Revision {
	n, s := p.cfg.Threshold, p.cfg.SizeMs
	pos := ks.insert(Evidence{
		EventID: ev.EventID, SensorID: ev.SensorID, TS: ev.TS, Value: ev.Value,
		Partition: ev.Partition, Offset: ev.Offset,
	})
	p.nEvents++
	p.markBucket(ks, EventsBucket, ev.TS)
	evs := ks.events

	firstFiring := -1
	var lo, hi int64
	for i, last := max(pos-n+1, 0), min(pos, len(evs)-n); i <= last; i++ {
		if spanWithin(evs[i].TS, evs[i+n-1].TS, s) {
			if firstFiring < 0 {
				firstFiring, lo = i, evs[i].TS
			}
			hi = evs[i+n-1].TS
		}
	}
	if firstFiring < 0 {
		return nil
	}

	// The open incidents touching [lo, hi] are contiguous: ks.open is
	// sorted by start and, being disjoint, by end too.
	a := 0
	for a < len(ks.open) && ks.open[a].end < lo {
		a++
	}
	b := a
	pruned := 0
	for b < len(ks.open) && ks.open[b].start <= hi {
		pruned += ks.open[b].pruned
		b++
	}
	start, end := lo, hi
	var window []Evidence // the chain's evidence
	stored := false       // window is ks.open[a]'s stored evidence
	if b > a {
		end = max(end, ks.open[b-1].end)
		if ks.open[a].start < lo {
			start, window, stored = ks.open[a].start, ks.open[a].evidence, true
		}
	}
	first := ks.lowerBound(start)
	if !stored {
		f := first
		if f+n > len(evs) || evs[f].TS != start || !spanWithin(evs[f].TS, evs[f+n-1].TS, s) {
			// Unreachable for states built by Process (see above); a state
			// loaded from bytes that passed validation but are still
			// inconsistent must not panic.
			f = firstFiring
		}
		window = evs[f : f+n]
	}
	count := pruned + ks.upperBound(end) - first
	late := ev.TS < w

	switch b - a {
	case 0: // a new incident
		inc := &incident{ks: ks, start: start, end: end, count: count, evidence: slices.Clone(window)}
		inc.alertID = p.cfg.AlertID(ks.key, inc.evidence[0].EventID)
		ks.open = slices.Insert(ks.open, a, inc)
		p.open.push(inc)
		return []Revision{inc.revision(Open, "", late, w)}

	case 1: // grows one incident; only start or evidence changes are news
		inc := ks.open[a]
		changed := inc.start != start || !sameEvents(inc.evidence, window)
		if changed {
			inc.evidence = slices.Clone(window)
			inc.rev++
		}
		inc.start, inc.count = start, count
		if inc.end != end {
			inc.end = end
			p.open.fix(inc)
		}
		if !changed {
			return nil
		}
		return []Revision{inc.revision(Updated, "", late, w)}

	default: // chains several incidents: the earliest start survives
		sur := ks.open[a]
		if !sameEvents(sur.evidence, window) {
			sur.evidence = slices.Clone(window)
		}
		sur.start, sur.count, sur.pruned = start, count, pruned
		sur.rev++
		if sur.end != end {
			sur.end = end
			p.open.fix(sur)
		}
		revs := make([]Revision, 0, b-a)
		revs = append(revs, sur.revision(Updated, "", late, w))
		// A merged revision carries the merged incident's own last state
		// (informational, SPEC section 4).
		for _, m := range ks.open[a+1 : b] {
			m.rev++
			revs = append(revs, m.revision(Merged, sur.alertID, late, w))
			p.open.remove(m)
		}
		ks.open = slices.Delete(ks.open, a+1, b)
		return revs
	}
}
