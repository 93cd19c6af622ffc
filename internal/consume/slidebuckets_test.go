package consume

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
	"github.com/vibeline/processor/internal/state"
	"github.com/vibeline/processor/internal/window"
)

// A sliding rule's state in the changelog and the local store: a key
// entry ("k" + key) with the key's open incidents, and bucket entries ("s"
// + kind + bucket + key) with its events and remembered ids per time
// bucket (docs/ARCHITECTURE.md, "Changelog topic"), so that a commit
// writes what changed, not the key's whole state.

// unitPart is one rule's state of input partition 0 over a local store,
// committed without a broker: what changelogEntries returns is what a
// commit produces to the changelog and stages in the store.
type unitPart struct {
	t     testing.TB
	stage *pipeline.Stage
	tk    *task
	pt    *part
	out   []string // fingerprints of every output
}

func newUnitPart(t testing.TB, rule config.Rule) *unitPart {
	t.Helper()
	stage, err := pipeline.NewStage(rule)
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	u := &unitPart{t: t, stage: stage, tk: &task{stage: stage, store: st, ns: "r.v1", hash: "h"}}
	u.load()
	return u
}

// load rebuilds the in-memory state from the store, as an assignment or an
// abort does.
func (u *unitPart) load() {
	u.t.Helper()
	rp, err := loadRulePart(u.tk, 0, pipeline.DedupShare{})
	if err != nil {
		u.t.Fatal(err)
	}
	u.pt = &part{rs: []*rulePart{rp}}
}

func (u *unitPart) rp() *rulePart { return u.pt.rs[0] }

// process runs records through the rule.
func (u *unitPart) process(ins ...pipeline.Input) {
	for _, in := range ins {
		rp := u.rp()
		u.stage.Process(rp.win, in, &rp.batchAcct, func(o pipeline.Output) {
			u.out = append(u.out, string(o.Key)+"|"+pipeline.Fingerprint(o.Value, o.Headers))
		})
	}
}

// commit writes the batch's changelog entries to the store, as a
// committed transaction does, and returns them.
func (u *unitPart) commit() []clEntry {
	u.t.Helper()
	es, err := u.pt.changelogEntries()
	if err != nil {
		u.t.Fatal(err)
	}
	b := u.tk.store.NewBatch()
	for _, e := range es {
		if err := b.Put(0, e.name, e.value); err != nil {
			u.t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		u.t.Fatal(err)
	}
	rp := u.rp()
	rp.acct, rp.hashOK, rp.tombstones = rp.batchAcct, true, nil
	rp.commitChunks()
	rp.win.ClearDirty()
	return es
}

// storeEntries returns the store's entries of partition 0.
func (u *unitPart) storeEntries() map[string][]byte {
	u.t.Helper()
	m := map[string][]byte{}
	if err := u.tk.store.Scan(0, func(name, value []byte) error {
		m[string(name)] = bytes.Clone(value)
		return nil
	}); err != nil {
		u.t.Fatal(err)
	}
	return m
}

// eventInput is a qualifying event of machine at ts (ms), offset off.
func eventInput(machine, id string, ts, off int64) pipeline.Input {
	v := fmt.Sprintf(`{"event_id":%q,"machine_id":%q,"sensor_id":"S-1","ts":%d,"seq":%d,"value":9.5,"unit":"mm/s","schema_version":1,"quality":"good"}`,
		id, machine, ts, off)
	return pipeline.Input{Topic: "in", Partition: 0, Offset: off, Key: []byte(machine), Value: []byte(v), TimestampMs: ts}
}

func entriesBytes(es []clEntry) int {
	n := 0
	for _, e := range es {
		n += len(e.name) + len(e.value)
	}
	return n
}

// TestHotSlidingKeyCommitIsBounded: one machine whose every event
// qualifies, 50 events/s of event time for an hour and a half (an hour of
// remembered ids, 12.5 minutes of kept events, one incident open all
// along), then one more record and a commit. The commit writes at most
// the key entry, the newest and the oldest bucket of each kind (the new
// event and id, and what pruning cut), the meta and the accounting: a
// bound from the bucket lengths and the event sizes, a few percent of the
// key's state. (Before bucket entries it rewrote the key's whole state,
// about 4 MB in 8 chunks.)
func TestHotSlidingKeyCommitIsBounded(t *testing.T) {
	cfg := testConfig(nil, t.TempDir(), "unit")
	u := newUnitPart(t, cfg.Rule)
	const machine, rate = "M-hot", 50 // events per second
	const every = 1000 / rate         // ms
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC).UnixMilli()
	id := func(i int64) string { return fmt.Sprintf("e%07d", i) }
	n := int64(90 * 60 * rate)
	for i := range n {
		u.process(eventInput(machine, id(i), base+i*every, i))
		if i%(10*rate) == 10*rate-1 { // a commit every 10 s of event time
			u.commit()
		}
	}
	u.commit()
	u.process(eventInput(machine, id(n), base+n*every, n))
	es := u.commit()
	written := entriesBytes(es)

	stateBytes := 0
	for k, v := range u.storeEntries() {
		if k[0] == changelogKeyPrefix || k[0] == changelogBucketPrefix || k[0] == changelogChunkPrefix {
			stateBytes += len(k) + len(v)
		}
	}
	// The bound. An event in a bucket: its ts (a delta, or the first one's
	// varint), id and sensor id with their lengths, the value, partition
	// and offset varints; an id: its ts and id with its length.
	wc := u.stage.WindowConfig()
	evB := window.DefaultEventBucketMs(wc.LatenessMs, wc.SizeMs)
	ddB := window.DefaultDedupBucketMs(wc.DedupHorizonMs)
	idLen, sensorLen := int64(len(id(n))), int64(len("S-1"))
	eventMax := binary.MaxVarintLen64 + 1 + idLen + 1 + sensorLen + 8 + binary.MaxVarintLen32 + binary.MaxVarintLen64
	idMax := binary.MaxVarintLen64 + 1 + idLen
	recordKey := int64(1 + 1 + 8 + len(machine))
	eventsBucket := recordKey + 1 + binary.MaxVarintLen64 + (evB/every+1)*eventMax
	dedupBucket := recordKey + 1 + binary.MaxVarintLen64 + (ddB/every+1)*idMax
	n3 := int64(wc.Threshold)
	keyEntry := int64(1+len(machine)) + 6*binary.MaxVarintLen64 + // version, buckets, counts, incidents
		1 + 32 + 5*binary.MaxVarintLen64 + n3*eventMax // one open incident: alert id, revision, start, end, count, pruned, evidence
	other := int64(1+9) + 1 + 512 // meta, accounting
	bound := keyEntry + 2*eventsBucket + 2*dedupBucket + other
	t.Logf("commit of one record: %d bytes in %d records (bound %d: buckets of %d ms and %d ms); the key's state: %d bytes",
		written, len(es), bound, evB, ddB, stateBytes)
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = fmt.Sprintf("%.12q %d", e.name, len(e.value))
	}
	if int64(written) > bound {
		t.Fatalf("the commit of one record wrote %d bytes, more than the bound %d: %s", written, bound, names)
	}
	if written*20 > stateBytes {
		t.Fatalf("the commit of one record wrote %d bytes, more than 5%% of the key's state (%d bytes)", written, stateBytes)
	}
	if len(es) > 7 { // key entry, 2 + 2 buckets, meta, accounting
		t.Fatalf("the commit of one record wrote %d records: %s", len(es), names)
	}
}

// legacyValue is the window format version 1 value (docs/ARCHITECTURE.md,
// "Window state encodings") of the state that a key's version 2 entries
// hold: what the builds before bucket entries wrote for it. key is its key
// entry, events and dedup its bucket entries in bucket order. It decodes
// the entries as the specification says, independently of package window.
func legacyValue(t testing.TB, key []byte, events, dedup [][]byte) []byte {
	t.Helper()
	r := key
	uv := func() uint64 {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			t.Fatalf("bad uvarint in %x", r)
		}
		r = r[n:]
		return v
	}
	sv := func() int64 {
		v, n := binary.Varint(r)
		if n <= 0 {
			t.Fatalf("bad varint in %x", r)
		}
		r = r[n:]
		return v
	}
	str := func() []byte { // a string, returned with its length
		start := r
		n := uv()
		r = r[n:]
		return start[:len(start)-len(r)]
	}
	if r[0] != 2 {
		t.Fatalf("key entry version %d", r[0])
	}
	r = r[1:]
	uv() // bucket lengths
	uv()
	nEvents, nDedup := uv(), uv()
	incidents := r
	out := []byte{1}
	out = binary.AppendUvarint(out, nEvents)
	for _, b := range events {
		r = b[1:]
		var ts int64
		for i := range uv() {
			if i == 0 {
				ts = sv()
			} else {
				ts += int64(uv())
			}
			start := r
			str()     // event_id
			str()     // sensor_id
			r = r[8:] // value
			sv()      // partition
			sv()      // offset
			out = binary.AppendVarint(out, ts)
			out = append(out, start[:len(start)-len(r)]...)
		}
	}
	out = binary.AppendUvarint(out, nDedup)
	for _, b := range dedup {
		r = b[1:]
		var ts int64
		for i := range uv() {
			if i == 0 {
				ts = sv()
			} else {
				ts += int64(uv())
			}
			out = binary.AppendVarint(out, ts)
			out = append(out, str()...)
		}
	}
	return append(out, incidents...)
}

// toLegacy rewrites a rule part's store as the builds before bucket
// entries would have left the same state: one version 1 value per key
// ("k" + key, chunked when long), no bucket entry.
func (u *unitPart) toLegacy() (legacyKeys, chunked int) {
	u.t.Helper()
	store := u.storeEntries()
	get := func(k []byte) ([]byte, error) { return store[string(k)], nil }
	value := func(name string) []byte {
		v := store[name]
		if isManifest(v) {
			var err error
			if v, _, err = joinChunks([]byte(name), v, get); err != nil {
				u.t.Fatal(err)
			}
		}
		return v
	}
	type parts struct{ events, dedup [][]byte }
	byKey := map[string]*parts{}
	b := u.tk.store.NewBatch()
	del := func(name string) {
		if err := b.Put(0, []byte(name), nil); err != nil {
			u.t.Fatal(err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(store)) { // buckets in bucket order
		switch {
		case isChunkKey([]byte(name)):
			del(name)
		case name[0] == changelogBucketPrefix:
			key := name[1+1+8:]
			if byKey[key] == nil {
				byKey[key] = &parts{}
			}
			if name[1] == window.EventsBucket {
				byKey[key].events = append(byKey[key].events, value(name))
			} else {
				byKey[key].dedup = append(byKey[key].dedup, value(name))
			}
			del(name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(store)) {
		if name[0] != changelogKeyPrefix {
			continue
		}
		key := name[1:]
		p := byKey[key]
		if p == nil {
			p = &parts{}
		}
		v := legacyValue(u.t, value(name), p.events, p.dedup)
		es, n := chunkedEntries(nil, nil, []byte(name), v, 0, chunkBytes)
		for _, e := range es {
			if err := b.Put(0, e.name, e.value); err != nil {
				u.t.Fatal(err)
			}
		}
		legacyKeys++
		if n > 0 {
			chunked++
		}
	}
	if err := b.Commit(); err != nil {
		u.t.Fatal(err)
	}
	return legacyKeys, chunked
}

// upgradeLog is a log of 12 simulated machines (late, too-late, duplicate
// and filtered events) and one that sends ten qualifying events a second
// with 1 KB ids, whose version 1 value is chunked (and so are its dedup
// buckets), as inputs of partition 0 in record time order.
func upgradeLog(t *testing.T) []pipeline.Input {
	t.Helper()
	recs := simRecords(6000, 7)
	base := recs[0].Timestamp
	recs = append(recs, bigIDEvents(t, "M-chunky", base, 0, 5000)...)
	slices.SortStableFunc(recs, func(a, b sim.Record) int { return a.Timestamp.Compare(b.Timestamp) })
	ins := make([]pipeline.Input, len(recs))
	for i, r := range recs {
		ins[i] = pipeline.Input{Topic: "in", Partition: 0, Offset: int64(i), Key: r.Key, Value: r.Value, TimestampMs: r.Timestamp.UnixMilli()}
	}
	return ins
}

// TestUpgradeFromLegacyLayout: a rule part whose store holds the version
// 1 layout (one value per key, some chunked, as the builds before wrote
// it) loads; its next commit rewrites every key in version 2 (the key
// entries replace the version 1 values, their chunks are deleted, the
// bucket entries are written), after which the store is exactly that of
// a run that never had the version 1 layout; and processing goes on with
// the outputs of the uninterrupted run.
func TestUpgradeFromLegacyLayout(t *testing.T) {
	cfg := testConfig(nil, t.TempDir(), "unit")
	log := upgradeLog(t)
	const every = 250
	cut := len(log) / 2
	run := func(u *unitPart, from, to int) {
		for i := from; i < to; i++ {
			u.process(log[i])
			if i%every == every-1 {
				u.commit()
			}
		}
	}
	ref := newUnitPart(t, cfg.Rule)
	run(ref, 0, len(log))

	u := newUnitPart(t, cfg.Rule)
	run(u, 0, cut)
	u.commit()
	nOut := len(u.out)
	keys, chunked := u.toLegacy()
	if keys < 10 || chunked == 0 {
		t.Fatalf("%d keys, %d of them chunked, in the version 1 layout: the fixture proves nothing", keys, chunked)
	}
	for name, v := range u.storeEntries() {
		if name[0] == changelogBucketPrefix || name[0] == changelogKeyPrefix && v[0] == 2 {
			t.Fatalf("%.12q is of the version 2 layout after toLegacy", name)
		}
	}
	u.load()
	names, _ := u.rp().win.Dirty()
	if len(names) != keys || len(u.rp().win.DirtyBuckets()) == 0 {
		t.Fatalf("after loading %d version 1 values: %d key entries and %d bucket entries dirty", keys, len(names), len(u.rp().win.DirtyBuckets()))
	}
	u.process(log[cut])
	es := u.commit()
	tombstones := 0
	for _, e := range es {
		if e.value == nil && isChunkKey(e.name) && e.name[1] == changelogKeyPrefix {
			tombstones++
		}
	}
	if tombstones == 0 {
		t.Fatal("the upgrade deleted no chunk of a version 1 value")
	}

	// The same state as a run that never saw the version 1 layout, byte
	// for byte, committed at the same records.
	same := newUnitPart(t, cfg.Rule)
	run(same, 0, cut)
	same.commit()
	same.process(log[cut])
	same.commit()
	got, want := u.storeEntries(), same.storeEntries()
	for name, v := range got {
		if w, ok := want[name]; !ok || !bytes.Equal(v, w) {
			t.Fatalf("after the upgrade commit the store holds %.16q (%d bytes, version %d), the run without the upgrade %d bytes", name, len(v), v[0], len(w))
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Fatalf("after the upgrade commit the store lacks %.16q", name)
		}
	}

	run(u, cut+1, len(log))
	if !slices.Equal(u.out[nOut:], ref.out[nOut:]) || len(u.out) != len(ref.out) {
		t.Fatalf("outputs after the upgrade differ from the uninterrupted run: %d and %d outputs", len(u.out), len(ref.out))
	}
	if nOut < 10 || len(ref.out)-nOut < 10 {
		t.Fatalf("%d outputs before the upgrade, %d after: the fixture proves nothing", nOut, len(ref.out)-nOut)
	}
}
