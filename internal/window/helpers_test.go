package window

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// testAlertID is the injected id function of the tests: readable, and a
// pure function of (key, first event id) as the real one is.
func testAlertID(key, firstEventID string) string { return key + "/" + firstEventID }

// vibration returns the SPEC's vibration configuration with the defaults.
func vibration() Config {
	return Config{
		Threshold: 3, SizeMs: 120_000,
		DelayMs: DefaultDelayMs, LatenessMs: DefaultLatenessMs, DedupHorizonMs: DefaultDedupHorizonMs,
		AlertID: testAlertID,
	}
}

func mustPartition(tb testing.TB, cfg Config) *Partition {
	tb.Helper()
	p, err := NewPartition(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// rec is one input record for Process.
type rec struct {
	ev Event
	q  bool
}

func qev(key, id string, ts int64) rec {
	return rec{ev: Event{Key: key, EventID: id, SensorID: "s-" + key, TS: ts, Value: 9}, q: true}
}

func fev(key, id string, ts int64) rec {
	return rec{ev: Event{Key: key, EventID: id, SensorID: "s-" + key, TS: ts, Value: 1}, q: false}
}

// ---- brute-force reference: SPEC.md section 4, literally ----

type refIncident struct {
	Key        string
	Start, End int64
	Count      int
	Evidence   []Evidence
}

// refIncidents evaluates the SPEC's definition over all applied events of
// one key, with no incremental state at all.
func refIncidents(key string, applied []Evidence, n int, s int64) []refIncident {
	evs := sortedEvents(applied)
	var out []refIncident
	var cur *refIncident
	for i := 0; i+n-1 < len(evs); i++ {
		lo, hi := evs[i].TS, evs[i+n-1].TS
		if hi-lo > s { // test values are small: no overflow
			continue
		}
		if cur != nil && lo <= cur.End {
			cur.End = max(cur.End, hi)
			continue
		}
		out = append(out, refIncident{Key: key, Start: lo, End: hi, Evidence: slices.Clone(evs[i : i+n])})
		cur = &out[len(out)-1]
	}
	for i := range out {
		for _, e := range evs {
			if e.TS >= out[i].Start && e.TS <= out[i].End {
				out[i].Count++
			}
		}
	}
	return out
}

// sortedEvents returns a copy of evs in (ts, event_id) order.
func sortedEvents(evs []Evidence) []Evidence {
	evs = slices.Clone(evs)
	slices.SortFunc(evs, func(a, b Evidence) int {
		if c := cmp.Compare(a.TS, b.TS); c != 0 {
			return c
		}
		return cmp.Compare(a.EventID, b.EventID)
	})
	return evs
}

// ---- a driver that can sweep, persist and restore as it goes ----

type driver struct {
	tb  testing.TB
	cfg Config
	p   *Partition

	sweepEvery bool
	keepAll    bool // no pruning inside Process (see Partition.keepAll)
	// sweep, flush and restore are probabilities per record (0 = never);
	// rnd supplies the coin flips.
	sweep, flush, restore float64
	rnd                   func() float64

	store map[entryName][]byte // what package state would hold
	meta  []byte
	revs  []Revision
	outs  []Outcome
}

func newDriver(tb testing.TB, cfg Config) *driver {
	return &driver{tb: tb, cfg: cfg, p: mustPartition(tb, cfg), store: map[entryName][]byte{}}
}

func (d *driver) setKeepAll(v bool) {
	d.keepAll = v
	d.p.keepAll = v
}

func (d *driver) step(r rec) Result {
	res := d.p.Process(r.ev, r.q)
	d.revs = append(d.revs, res.Revisions...)
	d.outs = append(d.outs, res.Outcome)
	if d.sweepEvery {
		d.p.Sweep()
	}
	if d.rnd != nil {
		if d.rnd() < d.sweep {
			d.p.Sweep()
		}
		if d.rnd() < d.flush {
			d.persist()
		}
		if d.rnd() < d.restore {
			d.reload()
		}
	}
	return res
}

func (d *driver) run(recs []rec) []Revision {
	for _, r := range recs {
		d.step(r)
	}
	return d.revs
}

// persist writes the dirty state into the store, as package state does.
func (d *driver) persist() {
	_, meta := d.p.Dirty()
	persistDirty(d.p, d.store)
	if meta {
		d.meta = d.p.EncodeMeta()
	}
	d.p.ClearDirty()
	if k, m := d.p.Dirty(); len(k) != 0 || m || len(d.p.DirtyBuckets()) != 0 {
		d.tb.Fatalf("dirty after ClearDirty: %v %v %v", k, m, d.p.DirtyBuckets())
	}
}

// reload persists, then replaces the partition by one restored from the
// store alone (its entries loaded in a random order when the driver has a
// random source), and checks that the store described the partition
// exactly.
func (d *driver) reload() {
	d.persist()
	checkStoreMatches(d.tb, d.p, d.store)
	q := mustPartition(d.tb, d.cfg)
	q.keepAll = d.keepAll
	if d.meta != nil {
		if err := q.LoadMeta(d.meta); err != nil {
			d.tb.Fatal(err)
		}
	}
	var shuffle func(int, func(int, int))
	if d.rnd != nil {
		shuffle = shuffler(d.rnd)
	}
	if err := loadEntries(q, d.store, shuffle); err != nil {
		d.tb.Fatalf("load: %v", err)
	}
	if k, m := q.Dirty(); len(k) != 0 || m || len(q.DirtyBuckets()) != 0 {
		d.tb.Fatalf("a load of version 2 entries marked entries dirty: %v %v %v", k, m, q.DirtyBuckets())
	}
	checkStoreMatches(d.tb, q, d.store)
	if q.Watermark() != d.p.Watermark() {
		d.tb.Fatalf("restored watermark %d, want %d", q.Watermark(), d.p.Watermark())
	}
	if q.Stats() != d.p.Stats() {
		d.tb.Fatalf("restored stats %+v, want %+v", q.Stats(), d.p.Stats())
	}
	d.p = q
}

// ---- formatting, for golden files and failure messages ----

// fmtTS renders ms as [-]h:mm:ss[.mmm], NoWatermark as -inf.
func fmtTS(ms int64) string {
	if ms == NoWatermark {
		return "-inf"
	}
	sign := ""
	if ms < 0 {
		sign, ms = "-", -ms
	}
	s := fmt.Sprintf("%s%d:%02d:%02d", sign, ms/3_600_000, ms/60_000%60, ms/1000%60)
	if ms%1000 != 0 {
		s += fmt.Sprintf(".%03d", ms%1000)
	}
	return s
}

func fmtEvidence(ev []Evidence) string {
	parts := make([]string, len(ev))
	for i, e := range ev {
		parts[i] = e.EventID + "@" + fmtTS(e.TS)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func fmtRevision(r Revision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-7s %s r%d", r.Status, r.AlertID, r.Revision)
	if r.Status == Merged {
		fmt.Fprintf(&b, " into=%s", r.MergedInto)
	}
	fmt.Fprintf(&b, " start=%s end=%s count=%d evidence=%s wm=%s", fmtTS(r.Start), fmtTS(r.End), r.Count, fmtEvidence(r.Evidence), fmtTS(r.Watermark))
	if r.Late {
		b.WriteString(" late")
	}
	return b.String()
}

func fmtRevisions(revs []Revision) string {
	var b strings.Builder
	for _, r := range revs {
		b.WriteString(fmtRevision(r))
		b.WriteByte('\n')
	}
	return b.String()
}
