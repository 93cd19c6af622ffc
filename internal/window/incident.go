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
	// they are always a suffix of all the key's applied events.
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
	ks       *keyState
	alertID  string
	rev      int // the last emitted revision
	start    int64
	end      int64
	count    int
	evidence []Evidence // replaced, never modified in place
	hidx     int        // position in Partition.open
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
//     also fires, and chains with it. Count is a range count.
//
// The tests compare this against a brute-force evaluation of the SPEC after
// every step.
func (p *Partition) apply(ks *keyState, ev *Event, w int64) []Revision {
	n, s := p.cfg.Threshold, p.cfg.SizeMs
	pos := ks.insert(Evidence{
		EventID: ev.EventID, SensorID: ev.SensorID, TS: ev.TS, Value: ev.Value,
		Partition: ev.Partition, Offset: ev.Offset,
	})
	p.nEvents++
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
	for b < len(ks.open) && ks.open[b].start <= hi {
		b++
	}
	start, end := lo, hi
	if b > a {
		start = min(start, ks.open[a].start)
		end = max(end, ks.open[b-1].end)
	}
	first := ks.lowerBound(start)
	if first+n > len(evs) || evs[first].TS != start || !spanWithin(evs[first].TS, evs[first+n-1].TS, s) {
		// Unreachable for states built by Process (see above); a state
		// loaded from bytes that passed validation but are still
		// inconsistent must not panic.
		first = firstFiring
	}
	count := ks.upperBound(end) - first
	window := evs[first : first+n]
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
		sur.start, sur.count = start, count
		sur.evidence = slices.Clone(window)
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
