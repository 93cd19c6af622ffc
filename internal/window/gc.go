package window

import "math"

// Garbage collection.
//
// Two kinds of state can be forgotten without changing any future output:
//
//   - A remembered event_id whose ts < W - H. Step 3 only treats an id as a
//     duplicate while its remembered ts >= W - H, and W never decreases, so
//     the entry can never make anything a duplicate again. Forgetting it or
//     not, a later event with that id is not a duplicate and is remembered
//     afresh.
//   - An applied event with ts < W - L - S, whether or not an open incident
//     holds it. Every future applied event x has ts >= W - L, and a firing
//     window containing x holds only events with ts >= ts(x) - S >=
//     W - L - S, so the pruned event is in no future firing window; the
//     windows of the kept events that contain x are the same with or
//     without it (a window that skipped over it would start before it and
//     span more than S). Future incidents start at >= W - L - S, so no
//     future incident counts it. An open incident whose range holds it
//     still counts it: prune adds it to that incident's pruned counter, and
//     the incident's count stays pruned + kept events in [start, end]. Its
//     start and evidence are stored in the incident and can no longer
//     change through windows that need the pruned event; apply (incident.go)
//     shows when they change and that the events they then need are kept,
//     and how counts of chained incidents add up.
//
// Which open incidents can have pruned events: an open incident has
// W - L <= end + S (else step 7 closed it when W last moved), so the events
// at ts == end are never pruned. A later incident of the key starts after
// that end, above every pruned event, so only the key's first open incident
// can have pruned > 0. A state with an open incident thus always has events,
// and the evidence of every incident but the first is kept.
//
// Both sets are prefixes in (ts, ...) order, so pruning cuts a prefix and
// the kept events are always a suffix of all applied events of the key. A
// key with no events, no remembered ids and no open incidents is deleted.
// Whatever pruning removes is marked dirty in its bucket entry
// (encoding.go), which the next persist rewrites with what is left of it,
// or deletes: the oldest bucket of each kind of a busy key is rewritten as
// pruning cuts into it, and a deleted key's buckets were all marked by the
// prunes that emptied them.
// Because none of this changes an output, it does not matter when Sweep
// runs; the property tests check that (also with incidents that stay open
// for many times L + S).
//
// Each key is queued in a min-heap no later than its next deadline — the
// smallest W at which its first remembered id or its first event becomes
// prunable (lazy: an entry is valid only while it equals the key's scheduled
// time, and a deadline that moves later keeps the earlier entry) — so Sweep
// costs O(1) when nothing is due. The events of an open incident are pruned
// like any others, so an incident that stays open for hours keeps only its
// events of the last D + L + S of event time.

// prune forgets what is prunable in ks at watermark w and reports whether
// anything changed. It never deletes the key.
func (p *Partition) prune(ks *keyState, w int64) bool {
	changed := false
	if len(ks.seenBy) > 0 {
		h := subSat(w, p.cfg.DedupHorizonMs)
		if ks.seenBy[0].ts < h {
			k := 1
			for k < len(ks.seenBy) && ks.seenBy[k].ts < h {
				k++
			}
			for _, e := range ks.seenBy[:k] {
				delete(ks.seen, e.id)
				p.markBucket(ks, DedupBucket, e.ts)
			}
			clear(ks.seenBy[:k])
			ks.seenBy = ks.seenBy[k:]
			p.nDedup -= k
			changed = true
		}
	}
	if len(ks.events) > 0 {
		thr := subSat(subSat(w, p.cfg.LatenessMs), p.cfg.SizeMs)
		if ks.events[0].TS < thr {
			k := 1
			for k < len(ks.events) && ks.events[k].TS < thr {
				k++
			}
			// Credit the removed events ks.events[:k] to the open
			// incidents whose range holds them (sorted by start and
			// disjoint; one starting at or after thr holds none).
			for _, inc := range ks.open {
				if inc.start >= thr {
					break
				}
				if i, j := ks.lowerBound(inc.start), min(ks.upperBound(inc.end), k); j > i {
					inc.pruned += j - i
				}
			}
			for i := range ks.events[:k] {
				p.markBucket(ks, EventsBucket, ks.events[i].TS)
			}
			clear(ks.events[:k])
			ks.events = ks.events[k:]
			p.nEvents -= k
			changed = true
		}
	}
	return changed
}

// deadline returns the smallest watermark at which prune would change ks,
// or false when nothing ever becomes prunable through the watermark alone
// (the deadline overflows int64, or the key holds open incidents but no
// events or ids, which Process never builds, see above). An empty key is due
// at once.
func (p *Partition) deadline(ks *keyState) (int64, bool) {
	if ks.empty() {
		return math.MinInt64, true
	}
	d, ok := int64(math.MaxInt64), false
	// ts < W - H  <=>  W >= ts + H + 1
	if len(ks.seenBy) > 0 {
		if t, good := after(ks.seenBy[0].ts, p.cfg.DedupHorizonMs); good {
			d, ok = t, true
		}
	}
	// ts < W - L - S  <=>  W >= ts + L + S + 1 (open incidents or not)
	if len(ks.events) > 0 {
		if ls, good := addChecked(p.cfg.LatenessMs, p.cfg.SizeMs); good {
			if t, good := after(ks.events[0].TS, ls); good && t < d {
				d, ok = t, true
			}
		}
	}
	return d, ok
}

// after returns ts + delta + 1, reporting overflow (delta >= 0).
func after(ts, delta int64) (int64, bool) {
	t, ok := addChecked(ts, delta)
	if !ok || t == math.MaxInt64 {
		return 0, false
	}
	return t + 1, true
}

// reschedule makes sure that ks is queued no later than its current
// deadline: an entry at or before it, or a new one at it.
func (p *Partition) reschedule(ks *keyState) {
	d, ok := p.deadline(ks)
	if !ok {
		ks.scheduled = false
		return
	}
	if ks.scheduled && ks.sched <= d {
		// The queued entry is due no later than d: Sweep then prunes what
		// is due and queues the key again at its deadline. Not queueing
		// every later deadline keeps the queue at about one entry per key
		// while a busy key's deadline moves on with every pruning Process
		// (an entry popped early just prunes nothing or less).
		return
	}
	ks.sched, ks.scheduled = d, true
	p.sweepQ.push(sweepEntry{at: d, key: ks.key})
}

// Sweep garbage-collects the keys whose prune deadline the watermark has
// reached: it forgets expired event ids and events that can never matter
// again, and deletes keys left with no state. Deleted and pruned keys are
// marked dirty (EncodeKey of a deleted key is nil). It returns the number of
// keys deleted. Sweep never changes an output, so callers may run it
// whenever convenient (for example before persisting at commit time); it
// costs O(1) when nothing is due.
func (p *Partition) Sweep() int {
	deleted := 0
	for len(p.sweepQ) > 0 && p.sweepQ[0].at <= p.wm {
		e := p.sweepQ.pop()
		ks := p.keys[e.key]
		if ks == nil || !ks.scheduled || ks.sched != e.at {
			continue // stale entry
		}
		ks.scheduled = false
		if p.prune(ks, p.wm) {
			p.markDirty(ks)
		}
		if ks.empty() {
			delete(p.keys, ks.key)
			p.deleted = append(p.deleted, ks) // its bucket marks, for DirtyBuckets
			p.markDirty(ks)
			deleted++
			continue
		}
		if d, ok := p.deadline(ks); ok && d <= p.wm {
			// Cannot happen: prune removed everything due at p.wm. Leave
			// the key unscheduled rather than loop; its next event
			// reschedules it.
			continue
		}
		p.reschedule(ks)
	}
	return deleted
}
