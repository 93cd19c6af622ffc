package window

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// ---- random scenarios ----

func genConfig(rng *rand.Rand) Config {
	return genConfigN(rng, []int{1, 2, 3, 3, 3, 4, 5}[rng.IntN(7)])
}

func genConfigN(rng *rand.Rand, n int) Config {
	s := 5 + rng.Int64N(56)
	l := rng.Int64N(81)
	cfg := Config{
		Threshold:      n,
		SizeMs:         s,
		DelayMs:        rng.Int64N(21),
		LatenessMs:     l,
		DedupHorizonMs: s + l + 1 + rng.Int64N(100),
		AlertID:        testAlertID,
	}
	setBuckets(&cfg)
	return cfg
}

// setBuckets gives cfg persisted buckets from 1 ms to longer than what a
// key keeps (the defaults, at least 1 s, would hold a test's whole state
// in one bucket), derived from its other fields so that the scenarios'
// random sequences stay those of the configurations without buckets.
func setBuckets(cfg *Config) {
	span := cfg.SizeMs + cfg.LatenessMs
	cfg.EventBucketMs = 1 + (cfg.SizeMs*31+cfg.LatenessMs*17+int64(cfg.Threshold))%(span+span/2+1)
	cfg.DedupBucketMs = 1 + (cfg.DedupHorizonMs*13+cfg.SizeMs)%(cfg.DedupHorizonMs+cfg.DedupHorizonMs/2+1)
}

// genEvents returns a set of records in ts order: bursts of qualifying
// events per key (so that firing sets appear, touch and chain), filtered
// events and redeliveries (same event_id and ts).
func genEvents(rng *rand.Rand, cfg Config, nKeys, n int) []rec {
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("m%d", i+1)
	}
	horizon := int64(n) * cfg.SizeMs / int64(2*cfg.Threshold+1)
	ids := rng.Perm(n * 2) // event ids not in ts order, so (ts, id) ties matter
	var recs []rec
	for len(recs) < n {
		key := keys[rng.IntN(nKeys)]
		base := rng.Int64N(horizon + 1)
		burst := 1 + rng.IntN(cfg.Threshold+2)
		spread := 1 + rng.Int64N(cfg.SizeMs*2)
		for range burst {
			id := fmt.Sprintf("e%03d", ids[len(recs)])
			ts := base + rng.Int64N(spread)
			if rng.IntN(8) == 0 {
				ts = base // exact ts ties
			}
			r := rec{ev: Event{Key: key, EventID: id, SensorID: "s" + id[len(id)-1:], TS: ts, Value: float64(ts % 97)}, q: rng.IntN(6) != 0}
			recs = append(recs, r)
			if rng.IntN(10) == 0 {
				recs = append(recs, r) // a redelivery
			}
		}
	}
	slices.SortStableFunc(recs, func(a, b rec) int { return cmp.Compare(a.ev.TS, b.ev.TS) })
	return recs
}

// genDenseConfig is genConfigN with N >= 2 (with N = 1 firing spans are
// points and chain only at equal ts) and a lateness of at most 2S, so that
// genDense's incidents last many times D + L + S.
func genDenseConfig(rng *rand.Rand) Config {
	cfg := genConfigN(rng, 2+rng.IntN(4))
	cfg.LatenessMs = rng.Int64N(2*cfg.SizeMs + 1)
	cfg.DedupHorizonMs = cfg.SizeMs + cfg.LatenessMs + 1 + rng.Int64N(100)
	setBuckets(&cfg)
	return cfg
}

// genDense returns records in ts order in which every key qualifies
// continuously: consecutive events of a key are at most S/N apart (ties
// included), so N consecutive qualifying events span less than S, even
// across a filtered one, and the spans chain into incidents that stay open
// for many times L + S (the case where pruning inside open incidents
// matters). Now and then a gap of more than S ends an incident. Redeliveries
// repeat an event.
func genDense(rng *rand.Rand, cfg Config, nKeys, n int) []rec {
	step := max(cfg.SizeMs/int64(cfg.Threshold), 1)
	ids := rng.Perm(n * 2)
	next := make([]int64, nKeys)
	for i := range next {
		next[i] = rng.Int64N(cfg.SizeMs)
	}
	var recs []rec
	for len(recs) < n {
		k := rng.IntN(nKeys)
		if rng.IntN(80) == 0 {
			next[k] += cfg.SizeMs + 1 + rng.Int64N(cfg.SizeMs)
		}
		next[k] += rng.Int64N(step + 1)
		id := fmt.Sprintf("e%04d", ids[len(recs)])
		ts := next[k]
		r := rec{ev: Event{Key: fmt.Sprintf("m%d", k+1), EventID: id, SensorID: "s" + id[len(id)-1:], TS: ts, Value: float64(ts % 97)}, q: rng.IntN(12) != 0}
		recs = append(recs, r)
		if rng.IntN(10) == 0 {
			recs = append(recs, r)
		}
	}
	return recs
}

// genScenario returns a random configuration and records in ts order: for
// seed < propIterations genEvents's bursts (1 to maxKeys keys, n0 to
// n0+nRange-1 records), for the denseIterations seeds after them genDense's
// long incidents.
func genScenario(rng *rand.Rand, seed uint64, maxKeys, n0, nRange int) (Config, []rec) {
	if seed >= propIterations {
		cfg := genDenseConfig(rng)
		return cfg, genDense(rng, cfg, 1+rng.IntN(2), 100+rng.IntN(200))
	}
	cfg := genConfig(rng)
	return cfg, genEvents(rng, cfg, 1+rng.IntN(maxKeys), n0+rng.IntN(nRange))
}

// arrive returns an arrival order of recs in which no record is more than
// jitter behind any earlier one: each record's arrival key is ts + U[0,
// jitter]. With jitter <= D + L every qualifying event is applied (ts >= W -
// L holds because W <= ts' - D for an earlier ts' <= ts + jitter). Offsets
// are the arrival positions, as in a log.
func arrive(rng *rand.Rand, recs []rec, jitter int64) []rec {
	type keyed struct {
		k int64
		r rec
	}
	ks := make([]keyed, len(recs))
	for i, r := range recs {
		ks[i] = keyed{r.ev.TS + rng.Int64N(jitter+1), r}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int { return cmp.Compare(a.k, b.k) })
	out := make([]rec, len(ks))
	for i, k := range ks {
		out[i] = k.r
		out[i].ev.Offset = int64(i)
		out[i].ev.Partition = 7
	}
	return out
}

// closer returns a filtered record whose ts moves W far enough to close
// every incident and expire every remembered id.
func closer(cfg Config, recs []rec) rec {
	var hi int64
	for _, r := range recs {
		hi = max(hi, r.ev.TS)
	}
	return fev("zz", "closer", hi+cfg.DelayMs+cfg.LatenessMs+cfg.SizeMs+cfg.DedupHorizonMs+10)
}

// ---- the checker: the SPEC evaluated by brute force after every record ----

type checker struct {
	tb  testing.TB
	cfg Config
	wm  int64

	seen    map[string]map[string]int64 // never pruned
	applied map[string][]Evidence       // sorted by (ts, event_id)
	closed  map[string][]refIncident
	last    map[string]Revision // last revision of each alert
	final   map[string]bool     // merged or closed
}

func newChecker(tb testing.TB, cfg Config) *checker {
	return &checker{
		tb: tb, cfg: cfg, wm: NoWatermark,
		seen: map[string]map[string]int64{}, applied: map[string][]Evidence{},
		closed: map[string][]refIncident{}, last: map[string]Revision{}, final: map[string]bool{},
	}
}

func (c *checker) fatalf(format string, args ...any) {
	c.tb.Helper()
	c.tb.Fatalf(format, args...)
}

// observe checks one Process result against the model, then the whole
// partition state against the brute-force reference.
func (c *checker) observe(p *Partition, r rec, res Result) {
	c.tb.Helper()
	ev, cfg := r.ev, c.cfg
	w := c.wm
	if res.Watermark != w {
		c.fatalf("%v: result watermark %d, want W before = %d", ev, res.Watermark, w)
	}

	// Expected outcome, from a model that never forgets anything.
	want := Processed
	switch {
	case !r.q:
		want = Filtered
	default:
		if c.seen[ev.Key] == nil {
			c.seen[ev.Key] = map[string]int64{}
		}
		if ts, ok := c.seen[ev.Key][ev.EventID]; ok && (w == NoWatermark || ts >= w-cfg.DedupHorizonMs) {
			want = Duplicate
			break
		}
		c.seen[ev.Key][ev.EventID] = ev.TS
		if w != NoWatermark && ev.TS < w-cfg.LatenessMs {
			want = TooLate
		}
	}
	if res.Outcome != want {
		c.fatalf("%+v W=%d: outcome %v, want %v", ev, w, res.Outcome, want)
	}
	if want == Processed {
		e := Evidence{ev.EventID, ev.SensorID, ev.TS, ev.Value, ev.Partition, ev.Offset}
		i, _ := slices.BinarySearchFunc(c.applied[ev.Key], e, func(a, b Evidence) int {
			return cmp.Or(cmp.Compare(a.TS, b.TS), cmp.Compare(a.EventID, b.EventID))
		})
		c.applied[ev.Key] = slices.Insert(c.applied[ev.Key], i, e)
	}
	if ev.TS < w && res.LatenessMs != w-ev.TS || ev.TS >= w && res.LatenessMs != 0 {
		c.fatalf("%+v W=%d: lateness %d", ev, w, res.LatenessMs)
	}

	// Step 6.
	nw := max(w, ev.TS-cfg.DelayMs)
	if p.Watermark() != nw {
		c.fatalf("watermark %d, want %d", p.Watermark(), nw)
	}
	c.wm = nw

	// The revisions.
	closing := false
	var prevClosed *Revision
	for i, rv := range res.Revisions {
		if rv.Status == Closed {
			closing = true
			if rv.Late || rv.Watermark != nw {
				c.fatalf("closed revision late=%v wm=%d, want false, %d", rv.Late, rv.Watermark, nw)
			}
			if nw-cfg.LatenessMs <= rv.End+cfg.SizeMs {
				c.fatalf("closed too early: %s at W=%d", fmtRevision(rv), nw)
			}
			if prevClosed != nil && (prevClosed.End > rv.End || prevClosed.End == rv.End && prevClosed.AlertID > rv.AlertID) {
				c.fatalf("close order: %s before %s", fmtRevision(*prevClosed), fmtRevision(rv))
			}
			prevClosed = &res.Revisions[i]
			c.closed[rv.Key] = append(c.closed[rv.Key], refIncident{rv.Key, rv.Start, rv.End, rv.Count, rv.Evidence})
		} else {
			if closing {
				c.fatalf("step-5 revision after a close: %s", fmtRevision(rv))
			}
			if want != Processed || rv.Key != ev.Key {
				c.fatalf("revision %s from a %v record of key %s", fmtRevision(rv), want, ev.Key)
			}
			if rv.Late != (ev.TS < w) || rv.Watermark != w {
				c.fatalf("revision %s: late=%v wm=%d, want %v, %d", fmtRevision(rv), rv.Late, rv.Watermark, ev.TS < w, w)
			}
		}
		c.checkEvidence(rv)
		prev, known := c.last[rv.AlertID]
		switch {
		case rv.Revision == 0:
			if known || rv.Status != Open {
				c.fatalf("revision 0 of %s is %v (known before: %v)", rv.AlertID, rv.Status, known)
			}
			if id := cfg.AlertID(rv.Key, rv.Evidence[0].EventID); id != rv.AlertID {
				c.fatalf("alert id %s, want %s", rv.AlertID, id)
			}
		case !known || prev.Revision != rv.Revision-1 || c.final[rv.AlertID] || rv.Status == Open:
			c.fatalf("revision %s follows %s (final=%v)", fmtRevision(rv), fmtRevision(prev), c.final[rv.AlertID])
		}
		switch rv.Status {
		case Updated:
			// An update must change something visible, or be a survivor.
			if prev.Start == rv.Start && sameEvents(prev.Evidence, rv.Evidence) &&
				(i+1 >= len(res.Revisions) || res.Revisions[i+1].Status != Merged) {
				c.fatalf("update changes neither start nor evidence: %s after %s", fmtRevision(rv), fmtRevision(prev))
			}
			if rv.Start > prev.Start || rv.End < prev.End {
				c.fatalf("incident shrank (split?): %s after %s", fmtRevision(rv), fmtRevision(prev))
			}
		case Merged:
			sur, ok := c.last[rv.MergedInto]
			if !ok || c.final[rv.MergedInto] || rv.MergedInto == rv.AlertID {
				c.fatalf("merged into unknown or final alert: %s", fmtRevision(rv))
			}
			if sur.Start > rv.Start || sur.End < rv.End {
				c.fatalf("survivor %s does not contain merged %s", fmtRevision(sur), fmtRevision(rv))
			}
			if i == 0 || (res.Revisions[i-1].AlertID != rv.MergedInto && res.Revisions[i-1].Status != Merged) ||
				(res.Revisions[i-1].Status == Merged && res.Revisions[i-1].Start >= rv.Start) {
				c.fatalf("merge order: %s", fmtRevisions(res.Revisions))
			}
			c.final[rv.AlertID] = true
		case Closed:
			c.final[rv.AlertID] = true
		}
		c.last[rv.AlertID] = rv
	}
	c.checkState(p)
}

// checkEvidence is the SPEC's evidence invariant: N applied (hence
// qualifying) events of the alert's key, in (ts, event_id) order, spanning
// <= S.
func (c *checker) checkEvidence(rv Revision) {
	c.tb.Helper()
	n := c.cfg.Threshold
	if len(rv.Evidence) != n {
		c.fatalf("%s: %d evidence events, want %d", fmtRevision(rv), len(rv.Evidence), n)
	}
	if rv.Evidence[n-1].TS-rv.Evidence[0].TS > c.cfg.SizeMs {
		c.fatalf("%s: evidence spans more than S", fmtRevision(rv))
	}
	if rv.Start != rv.Evidence[0].TS || rv.End < rv.Evidence[n-1].TS || rv.Count < n {
		c.fatalf("%s: start/end/count inconsistent with evidence", fmtRevision(rv))
	}
	for i, e := range rv.Evidence {
		if i > 0 && !evLess(&rv.Evidence[i-1], &e) {
			c.fatalf("%s: evidence not in (ts, event_id) order", fmtRevision(rv))
		}
		if !slices.Contains(c.applied[rv.Key], e) {
			c.fatalf("%s: evidence %+v is not an applied event of key %s", fmtRevision(rv), e, rv.Key)
		}
	}
}

// checkState compares the partition with the reference: for every key, the
// closed incidents (as reported) plus the open ones (as held) are exactly
// the SPEC's incidents over all applied events; every open incident's last
// revision carries its current start and evidence; and the internal indexes
// and counters are consistent.
func (c *checker) checkState(p *Partition) {
	c.tb.Helper()
	nOpen, nEvents, nDedup := 0, 0, 0
	for key, applied := range c.applied {
		ref := refIncidents(key, applied, c.cfg.Threshold, c.cfg.SizeMs)
		got := slices.Clone(c.closed[key])
		if ks := p.keys[key]; ks != nil {
			for _, inc := range ks.open {
				got = append(got, refIncident{key, inc.start, inc.end, inc.count, inc.evidence})
				last := c.last[inc.alertID]
				if c.final[inc.alertID] || last.Start != inc.start || !sameEvents(last.Evidence, inc.evidence) {
					c.fatalf("open incident %s: last revision %s does not carry start=%d evidence=%s",
						inc.alertID, fmtRevision(last), inc.start, fmtEvidence(inc.evidence))
				}
			}
		}
		slices.SortFunc(got, func(a, b refIncident) int { return cmp.Compare(a.Start, b.Start) })
		if !reflect.DeepEqual(got, ref) {
			c.fatalf("key %s: incidents differ from the reference\n got: %+v\nwant: %+v", key, got, ref)
		}
		if ks := p.keys[key]; ks != nil {
			c.checkPruned(ks, applied)
		}
	}
	for key, ks := range p.keys {
		if key != ks.key {
			c.fatalf("key %q holds state of %q", key, ks.key)
		}
		if ks.empty() {
			// allowed only until the next Sweep; Process never leaves one
			if !ks.scheduled || ks.sched != NoWatermark {
				c.fatalf("empty key %q not due for deletion", key)
			}
		}
		nOpen += len(ks.open)
		nEvents += len(ks.events)
		nDedup += len(ks.seenBy)
		if len(ks.seen) != len(ks.seenBy) {
			c.fatalf("key %q: dedup map %d entries, ordered %d", key, len(ks.seen), len(ks.seenBy))
		}
		for i, e := range ks.seenBy {
			if ks.seen[e.id] != e.ts || i > 0 && cmpSeen(ks.seenBy[i-1], e) >= 0 {
				c.fatalf("key %q: dedup index inconsistent at %d", key, i)
			}
		}
		for i := 1; i < len(ks.events); i++ {
			if !evLess(&ks.events[i-1], &ks.events[i]) {
				c.fatalf("key %q: events out of order at %d", key, i)
			}
		}
		for i, inc := range ks.open {
			if inc.ks != ks || inc.hidx < 0 || inc.hidx >= len(p.open) || p.open[inc.hidx] != inc {
				c.fatalf("key %q: incident %s not indexed", key, inc.alertID)
			}
			if i > 0 && ks.open[i-1].end >= inc.start {
				c.fatalf("key %q: open incidents overlap", key)
			}
		}
	}
	for i := 1; i < len(p.open); i++ {
		if incLess(p.open[i], p.open[(i-1)/2]) {
			c.fatalf("open index heap order broken at %d", i)
		}
	}
	if st := p.Stats(); st != (Stats{len(p.keys), nEvents, nDedup, nOpen}) || len(p.open) != nOpen {
		c.fatalf("stats %+v, counted keys=%d events=%d dedup=%d open=%d", st, len(p.keys), nEvents, nDedup, nOpen)
	}
}

// checkPruned checks a key's kept events and pruned counters against all
// its applied events (all, sorted): the kept events are a suffix of them,
// every pruned one was prunable (ts < W - L - S), and every open incident's
// pruned counts exactly its events that are not kept, so that count =
// pruned + kept events in range; only the first incident has pruned ones.
func (c *checker) checkPruned(ks *keyState, all []Evidence) {
	c.tb.Helper()
	k := len(all) - len(ks.events)
	if k < 0 || !slices.Equal(all[k:], ks.events) {
		c.fatalf("key %q: the kept events are not a suffix of the applied events", ks.key)
	}
	if k > 0 && all[k-1].TS >= subSat(subSat(c.wm, c.cfg.LatenessMs), c.cfg.SizeMs) {
		c.fatalf("key %q: event %+v pruned at W=%d, not older than W - L - S", ks.key, all[k-1], c.wm)
	}
	for i, inc := range ks.open {
		total, kept := 0, 0
		for j, e := range all {
			if e.TS >= inc.start && e.TS <= inc.end {
				total++
				if j >= k {
					kept++
				}
			}
		}
		if inc.pruned != total-kept || inc.count != inc.pruned+kept {
			c.fatalf("key %q incident %s: count %d pruned %d, the applied events say %d of which %d kept",
				ks.key, inc.alertID, inc.count, inc.pruned, total, kept)
		}
		if i > 0 && inc.pruned != 0 {
			c.fatalf("key %q: incident %s after the first has pruned events", ks.key, inc.alertID)
		}
	}
}

// checkSwept checks that Sweep left nothing prunable: garbage collection is
// not only invisible but complete.
func (c *checker) checkSwept(p *Partition) {
	c.tb.Helper()
	w := p.Watermark()
	for key, ks := range p.keys {
		if ks.empty() {
			c.fatalf("key %q empty after Sweep", key)
		}
		if len(ks.seenBy) > 0 && ks.seenBy[0].ts < subSat(w, c.cfg.DedupHorizonMs) {
			c.fatalf("key %q: expired id %q left by Sweep at W=%d", key, ks.seenBy[0].id, w)
		}
		// Open incidents hold nothing back.
		thr := subSat(subSat(w, c.cfg.LatenessMs), c.cfg.SizeMs)
		if len(ks.events) > 0 && ks.events[0].TS < thr {
			c.fatalf("key %q: prunable event %+v left by Sweep at W=%d", key, ks.events[0], w)
		}
	}
}

// ---- properties ----

const (
	propIterations  = 300 // seeds with genEvents's bursts
	denseIterations = 100 // seeds after those with genDense's long incidents
)

// TestPropertyAgainstReference feeds random logs in arbitrary arrival order
// (duplicates, late and too-late events included), sweeping, persisting and
// restoring at random points, and checks the whole state against the
// brute-force SPEC after every record.
func TestPropertyAgainstReference(t *testing.T) {
	for seed := range uint64(propIterations + denseIterations) {
		rng := rand.New(rand.NewPCG(seed, 1))
		cfg, recs := genScenario(rng, seed, 3, 20, 60)
		recs = arrive(rng, recs, rng.Int64N(3*(cfg.DelayMs+cfg.LatenessMs+cfg.SizeMs)+1))
		recs = append(recs, closer(cfg, recs))
		d := newDriver(t, cfg)
		d.rnd, d.flush, d.restore = rng.Float64, 0.3, 0.1
		// Without pruning inside Process, expired state meets Process
		// (e.g. an expired remembered id that is remembered afresh).
		d.setKeepAll(seed%3 == 0)
		ck := newChecker(t, cfg)
		for _, r := range recs {
			if rng.IntN(4) == 0 {
				d.p.Sweep()
				ck.checkSwept(d.p)
			}
			p := d.p
			res := d.step(r)
			ck.observe(p, r, res)
			ck.checkState(d.p)
		}
		if st := d.p.Stats(); st.OpenIncidents != 0 {
			t.Fatalf("seed %d: %d incidents open after the closer", seed, st.OpenIncidents)
		}
		d.p.Sweep()
		if st := d.p.Stats(); st != (Stats{}) {
			t.Fatalf("seed %d: state left after everything expired: %+v", seed, st)
		}
	}
}

type finalAlert struct {
	Key        string
	Start, End int64
	Count      int
	Evidence   string
}

// finals returns the Closed revisions as a sorted set. Evidence is compared
// by event_id, sensor_id, ts and value: partition and offset name the copy
// of a redelivered event that happened to be applied, which depends on the
// arrival order.
func finals(revs []Revision) []finalAlert {
	var out []finalAlert
	for _, r := range revs {
		if r.Status == Closed {
			out = append(out, finalAlert{r.Key, r.Start, r.End, r.Count, fmtEvidenceFull(r.Evidence)})
		}
	}
	slices.SortFunc(out, func(a, b finalAlert) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Start, b.Start))
	})
	return out
}

func fmtEvidenceFull(ev []Evidence) string {
	s := ""
	for _, e := range ev {
		s += fmt.Sprintf("%s/%s/%d/%g ", e.EventID, e.SensorID, e.TS, e.Value)
	}
	return s
}

// TestPropertyOrderIndependence: when every event arrives within the
// allowed lateness, the closed alerts depend only on the set of events, and
// equal the brute-force reference over that set.
func TestPropertyOrderIndependence(t *testing.T) {
	for seed := range uint64(propIterations + denseIterations) {
		rng := rand.New(rand.NewPCG(seed, 2))
		cfg, set := genScenario(rng, seed, 4, 20, 80)

		// The reference over the set.
		byKey := map[string][]Evidence{}
		seen := map[string]bool{}
		for _, r := range set {
			if r.q && !seen[r.ev.Key+"\x00"+r.ev.EventID] {
				seen[r.ev.Key+"\x00"+r.ev.EventID] = true
				byKey[r.ev.Key] = append(byKey[r.ev.Key], Evidence{EventID: r.ev.EventID, SensorID: r.ev.SensorID, TS: r.ev.TS, Value: r.ev.Value})
			}
		}
		var want []finalAlert
		for key, evs := range byKey {
			for _, inc := range refIncidents(key, evs, cfg.Threshold, cfg.SizeMs) {
				want = append(want, finalAlert{key, inc.Start, inc.End, inc.Count, fmtEvidenceFull(inc.Evidence)})
			}
		}
		slices.SortFunc(want, func(a, b finalAlert) int {
			return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Start, b.Start))
		})

		for perm := range 4 {
			jitter := cfg.DelayMs + cfg.LatenessMs
			if perm == 0 {
				jitter = 0 // in ts order
			}
			recs := arrive(rng, set, jitter)
			recs = append(recs, closer(cfg, recs))
			d := newDriver(t, cfg)
			revs := d.run(recs)
			for i, o := range d.outs {
				if o == TooLate {
					t.Fatalf("seed %d perm %d: record %d too late; the arrival order is not within lateness", seed, perm, i)
				}
			}
			if got := finals(revs); !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d perm %d (%+v):\n got %+v\nwant %+v", seed, perm, cfg, got, want)
			}
		}
	}
}

// TestPropertyDeterminism: the same input twice gives identical revisions.
func TestPropertyDeterminism(t *testing.T) {
	for seed := range uint64(propIterations) {
		rng := rand.New(rand.NewPCG(seed, 3))
		cfg := genConfig(rng)
		recs := genEvents(rng, cfg, 1+rng.IntN(4), 20+rng.IntN(80))
		recs = arrive(rng, recs, rng.Int64N(2*(cfg.DelayMs+cfg.LatenessMs)+1))
		recs = append(recs, closer(cfg, recs))
		a := newDriver(t, cfg).run(recs)
		b := newDriver(t, cfg).run(recs)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: runs differ:\n%s\n%s", seed, fmtRevisions(a), fmtRevisions(b))
		}
	}
}

// TestPropertyGCInvisible: sweeping after every record, sweeping,
// persisting and restoring at random points, and never forgetting anything
// (no Sweep, no pruning inside Process) give identical revisions and
// outcomes. The dense seeds keep incidents open for many times L + S, so
// that events are pruned inside open incidents (checked to happen).
func TestPropertyGCInvisible(t *testing.T) {
	prunedInside := 0
	for seed := range uint64(propIterations + denseIterations) {
		rng := rand.New(rand.NewPCG(seed, 4))
		cfg, recs := genScenario(rng, seed, 4, 20, 80)
		recs = arrive(rng, recs, rng.Int64N(3*(cfg.DelayMs+cfg.LatenessMs+cfg.SizeMs)+1))
		recs = append(recs, closer(cfg, recs))
		never := newDriver(t, cfg)
		never.setKeepAll(true)
		never.run(recs)
		always := newDriver(t, cfg)
		always.sweepEvery = true
		sometimes := newDriver(t, cfg)
		sometimes.rnd, sometimes.sweep, sometimes.flush, sometimes.restore = rng.Float64, 0.2, 0.3, 0.1
		seen := false
		for _, r := range recs {
			always.step(r)
			sometimes.step(r)
			if ks := always.p.keys[r.ev.Key]; ks != nil && len(ks.open) > 0 && ks.open[0].pruned > 0 {
				seen = true
			}
		}
		if seen && seed >= propIterations {
			prunedInside++
		}
		for _, d := range []*driver{always, sometimes} {
			if !reflect.DeepEqual(never.revs, d.revs) || !reflect.DeepEqual(never.outs, d.outs) {
				t.Fatalf("seed %d: garbage collection changed the output:\n%s\n%s", seed, fmtRevisions(never.revs), fmtRevisions(d.revs))
			}
		}
		if n, a := never.p.Stats(), always.p.Stats(); n.Keys == 0 || a.Keys != 0 || n.Events+n.Dedup == 0 {
			t.Fatalf("seed %d: after the closer never=%+v always=%+v", seed, n, a)
		}
	}
	t.Logf("events pruned inside an open incident in %d of %d dense seeds", prunedInside, denseIterations)
	if prunedInside < denseIterations*3/4 {
		t.Fatalf("events pruned inside an open incident in only %d seeds: the dense seeds do not test it", prunedInside)
	}
}

// TestPropertyRoundTrip: persisting the dirty state and restoring a fresh
// partition from it at random points gives identical revisions to an
// uninterrupted run.
func TestPropertyRoundTrip(t *testing.T) {
	for seed := range uint64(propIterations + denseIterations) {
		rng := rand.New(rand.NewPCG(seed, 5))
		cfg, recs := genScenario(rng, seed, 4, 20, 80)
		recs = arrive(rng, recs, rng.Int64N(3*(cfg.DelayMs+cfg.LatenessMs+cfg.SizeMs)+1))
		recs = append(recs, closer(cfg, recs))
		plain := newDriver(t, cfg)
		plain.run(recs)
		restored := newDriver(t, cfg)
		restored.rnd, restored.flush, restored.restore = rng.Float64, 0.5, 0.2
		restored.sweepEvery = seed%2 == 0
		restored.run(recs)
		if !reflect.DeepEqual(plain.revs, restored.revs) || !reflect.DeepEqual(plain.outs, restored.outs) {
			t.Fatalf("seed %d: restoring changed the output:\n%s\n%s", seed, fmtRevisions(plain.revs), fmtRevisions(restored.revs))
		}
	}
}

// TestPropertyEvidence: every evidence set of every revision is N applied
// qualifying events of the alert's key from the input, spanning <= S,
// checked directly against the input log.
func TestPropertyEvidence(t *testing.T) {
	for seed := range uint64(propIterations) {
		rng := rand.New(rand.NewPCG(seed, 6))
		cfg := genConfig(rng)
		recs := genEvents(rng, cfg, 1+rng.IntN(4), 20+rng.IntN(80))
		recs = arrive(rng, recs, rng.Int64N(3*(cfg.DelayMs+cfg.LatenessMs+cfg.SizeMs)+1))
		recs = append(recs, closer(cfg, recs))
		d := newDriver(t, cfg)
		d.run(recs)
		input := map[Evidence]rec{}
		for i, r := range recs {
			if d.outs[i] == Processed {
				input[Evidence{r.ev.EventID, r.ev.SensorID, r.ev.TS, r.ev.Value, r.ev.Partition, r.ev.Offset}] = r
			}
		}
		for _, rv := range d.revs {
			if len(rv.Evidence) != cfg.Threshold || rv.Evidence[len(rv.Evidence)-1].TS-rv.Evidence[0].TS > cfg.SizeMs {
				t.Fatalf("seed %d: bad evidence %s", seed, fmtRevision(rv))
			}
			for _, e := range rv.Evidence {
				r, ok := input[e]
				if !ok || !r.q || r.ev.Key != rv.Key {
					t.Fatalf("seed %d: evidence %+v of %s is not a qualifying input event of the key", seed, e, fmtRevision(rv))
				}
			}
		}
	}
}

// TestPropertyIncidentsNeverSplit: firing is monotone. Adding one event to
// any set of events only grows the union of firing spans, so every incident
// of the old set lies inside one incident of the new set (incidents grow or
// chain, never split). This is the lemma apply relies on, checked on the
// brute-force reference itself.
func TestPropertyIncidentsNeverSplit(t *testing.T) {
	for seed := range uint64(propIterations * 5) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 1 + rng.IntN(5)
		s := 1 + rng.Int64N(30)
		var evs []Evidence
		for i := range 5 + rng.IntN(40) {
			evs = append(evs, Evidence{EventID: fmt.Sprintf("e%02d", rng.IntN(100)) + fmt.Sprint(i), TS: rng.Int64N(150)})
		}
		before := refIncidents("k", evs, n, s)
		x := Evidence{EventID: "x", TS: rng.Int64N(160) - 5}
		after := refIncidents("k", append(slices.Clone(evs), x), n, s)
		for _, old := range before {
			if !slices.ContainsFunc(after, func(nw refIncident) bool { return nw.Start <= old.Start && old.End <= nw.End }) {
				t.Fatalf("seed %d: inserting %+v split or shrank [%d, %d]:\nbefore %+v\nafter %+v", seed, x, old.Start, old.End, before, after)
			}
		}
	}
}
