package consume

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
	"github.com/vibeline/processor/internal/state"
)

// changelogSet applies entries to a map as the store would (nil deletes).
func changelogSet(m map[string][]byte, es []clEntry) {
	for _, e := range es {
		if e.value == nil {
			delete(m, string(e.name))
		} else {
			m[string(e.name)] = e.value
		}
	}
}

func TestChunkManifestRoundTrip(t *testing.T) {
	name := []byte("kmachine-1")
	for _, n := range []int{11, 16, 17, 100} {
		value := bytes.Repeat([]byte("0123456789abcdef"), n)[:n*10]
		m := map[string][]byte{}
		es, cnt := chunkedEntries(nil, nil, name, value, 0, 16)
		changelogSet(m, es)
		if want := (len(value) + 15) / 16; cnt != want || len(m) != want+1 {
			t.Fatalf("len %d: %d chunks, %d records, want %d chunks", len(value), cnt, len(m), want)
		}
		if !isManifest(m[string(name)]) {
			t.Fatalf("len %d: the entry's own record is %q, not a manifest", len(value), m[string(name)])
		}
		for k := range m {
			if k != string(name) && !isChunkKey([]byte(k)) {
				t.Fatalf("record %q is neither the manifest nor a chunk", k)
			}
		}
		got, mf, err := joinChunks(name, m[string(name)], func(k []byte) ([]byte, error) { return m[string(k)], nil })
		if err != nil || !bytes.Equal(got, value) || mf.count != cnt {
			t.Fatalf("len %d: join = %d bytes, %d chunks, %v", len(value), len(got), mf.count, err)
		}
	}
	// A value that fits is written as it is.
	es, cnt := chunkedEntries(nil, nil, name, []byte("\x01small"), 0, 16)
	if cnt != 0 || len(es) != 1 || string(es[0].value) != "\x01small" {
		t.Fatalf("small value: %d chunks, %v", cnt, es)
	}
}

// Keys of different entries never share a chunk key, and no entry name
// (they start with k, s, m, a, h or x) is a chunk key.
func TestChunkKeysDoNotCollide(t *testing.T) {
	seen := map[string]string{}
	for _, name := range []string{"k", "ka", "ka\x00\x00\x00", "ka\x00\x00\x00\x00", "kc", "m", "x", "a", "h", "kw\x00", "kp12345678m",
		"ke12345678m", "se12345678m", "sd12345678m", "sd12345678m\x00\x00\x00"} {
		if isChunkKey([]byte(name)) {
			t.Fatalf("entry name %q reads as a chunk key", name)
		}
		for i := range 3 {
			k := string(chunkKey([]byte(name), i))
			if o, ok := seen[k]; ok {
				t.Fatalf("chunk key %q of %q %d also belongs to %s", k, name, i, o)
			}
			seen[k] = fmt.Sprintf("%q %d", name, i)
		}
	}
	// No value format starts with the manifest marker.
	for _, v := range [][]byte{{1}, {2}, []byte(`{"v":1}`), []byte("ab12")} {
		if isManifest(v) {
			t.Fatalf("value %q reads as a manifest", v)
		}
	}
}

func TestJoinChunksRefusesCorruption(t *testing.T) {
	name := []byte("kx")
	value := bytes.Repeat([]byte{7, 8, 9}, 20)
	es, _ := chunkedEntries(nil, nil, name, value, 0, 16)
	good := map[string][]byte{}
	changelogSet(good, es)
	cases := map[string]func(m map[string][]byte){
		"chunk missing":   func(m map[string][]byte) { delete(m, string(chunkKey(name, 2))) },
		"chunk shorter":   func(m map[string][]byte) { m[string(chunkKey(name, 3))] = []byte{1} },
		"chunk longer":    func(m map[string][]byte) { m[string(chunkKey(name, 0))] = bytes.Repeat([]byte{1}, 40) },
		"chunk changed":   func(m map[string][]byte) { m[string(chunkKey(name, 1))] = bytes.Repeat([]byte{1}, 16) },
		"manifest cut":    func(m map[string][]byte) { m[string(name)] = m[string(name)][:4] },
		"manifest ver":    func(m map[string][]byte) { m[string(name)] = append([]byte{0xff, 9}, m[string(name)][2:]...) },
		"manifest 0":      func(m map[string][]byte) { m[string(name)] = []byte{0xff, 1, 0, 60, 0, 0, 0, 0} },
		"manifest longer": func(m map[string][]byte) { m[string(name)] = append(bytes.Clone(m[string(name)]), 0) },
	}
	for what, spoil := range cases {
		m := map[string][]byte{}
		for k, v := range good {
			m[k] = v
		}
		spoil(m)
		if _, _, err := joinChunks(name, m[string(name)], func(k []byte) ([]byte, error) { return m[string(k)], nil }); !errors.Is(err, errCorruptChunks) {
			t.Errorf("%s: err = %v, want errCorruptChunks", what, err)
		}
	}
}

// A chunked entry that shrinks (fewer chunks, or none) or is deleted
// tombstones the chunks it no longer uses, in the same batch; one that
// grows adds chunks. The records of each batch applied in order always
// leave exactly the entry and its live chunks.
func TestStaleChunksAreDeleted(t *testing.T) {
	name := []byte("kmachine")
	store := map[string][]byte{}
	had := 0
	for _, step := range []struct {
		len, chunks, tombstones int
	}{
		{50, 4, 0},  // new: 4 chunks
		{100, 7, 0}, // grows
		{40, 3, 4},  // shrinks: chunks 3..6 deleted
		{10, 0, 3},  // fits: written as it is, chunks 0..2 deleted
		{33, 3, 0},  // chunked again
		{0, 0, 3},   // deleted (tombstone): every chunk with it
		{0, 0, 0},   // deleted again: nothing to delete
	} {
		var value []byte
		if step.len > 0 {
			value = bytes.Repeat([]byte{byte(step.len)}, step.len)
		}
		es, n := chunkedEntries(nil, nil, name, value, had, 16)
		tomb := 0
		for _, e := range es {
			if e.value == nil && isChunkKey(e.name) {
				tomb++
			}
		}
		if n != step.chunks || tomb != step.tombstones {
			t.Fatalf("len %d after %d chunks: %d chunks, %d chunk tombstones, want %d and %d", step.len, had, n, tomb, step.chunks, step.tombstones)
		}
		changelogSet(store, es)
		had = n
		want := n
		if value != nil {
			want++
		}
		if len(store) != want {
			t.Fatalf("len %d: %d records live, want %d: %q", step.len, len(store), want, store)
		}
		if value == nil {
			continue
		}
		got := store[string(name)]
		if n > 0 {
			var err error
			if got, _, err = joinChunks(name, got, func(k []byte) ([]byte, error) { return store[string(k)], nil }); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, value) {
			t.Fatalf("len %d: read back %d bytes", step.len, len(got))
		}
	}
}

// The rule part's bookkeeping over committed and aborted batches: the
// chunk counts change only when a batch commits, and a load from the
// store finds them again (and deletes chunks no manifest names).
func TestRulePartChunkCountsFollowTheStore(t *testing.T) {
	cfg := testConfig(nil, t.TempDir(), "unit")
	stage, err := pipeline.NewStage(cfg.Rule)
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tk := &task{stage: stage, store: st, ns: "r.v1", hash: "h"}
	rp, err := loadRulePart(tk, 0, pipeline.DedupShare{})
	if err != nil {
		t.Fatal(err)
	}
	name := []byte("kbig")
	big := bytes.Repeat([]byte{1}, 2*chunkBytes+1)
	write := func(value []byte) {
		t.Helper()
		var es []clEntry
		had := rp.chunks[string(name)]
		es, n := chunkedEntries(es, rp, name, value, had, chunkBytes)
		b := tk.store.NewBatch()
		for _, e := range es {
			if err := b.Put(0, e.name, e.value); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		rp.batchChunks = map[string]int{string(name): n}
		rp.commitChunks()
	}
	scan := func() int {
		n := 0
		if err := tk.store.Scan(0, func(name, _ []byte) error {
			if isChunkKey(name) {
				n++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	write(big)
	if rp.chunks[string(name)] != 3 || scan() != 3 {
		t.Fatalf("chunks %v, %d in the store", rp.chunks, scan())
	}
	// loadRulePart resolves it: LoadKey of a sliding rule gets the
	// joined value, here not a window encoding, so it fails to decode
	// (the chunks themselves are not offered as entries).
	if _, err := loadRulePart(tk, 0, pipeline.DedupShare{}); err == nil || errors.Is(err, errCorruptChunks) || !strings.Contains(err.Error(), `key "big"`) {
		t.Fatalf("load of a joined non-window value: %v", err)
	}
	write(nil)
	if len(rp.chunks) != 0 || scan() != 0 {
		t.Fatalf("after delete: chunks %v, %d in the store", rp.chunks, scan())
	}
	// An orphan chunk (no manifest names it: at_least_once flushes an
	// aborted batch's chunks) is not state: the load deletes it at the
	// next commit.
	b := tk.store.NewBatch()
	if err := b.Put(0, chunkKey(name, 0), []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	rp2, err := loadRulePart(tk, 0, pipeline.DedupShare{})
	if err != nil || len(rp2.tombstones) != 1 || !bytes.Equal(rp2.tombstones[0], chunkKey(name, 0)) {
		t.Fatalf("load with an orphan chunk: %v, tombstones %q", err, rp2.tombstones)
	}
}

// bigID is the id of event i, as long as valid ids get (1 KB).
func bigID(i int) string {
	p := fmt.Sprintf("e%05d-", i)
	return p + strings.Repeat("x", event.MaxIDBytes-len(p))
}

// bigIDRecord is an event of machine at base+at.
func bigIDRecord(t *testing.T, machine string, base time.Time, id string, at time.Duration, value float64) sim.Record {
	t.Helper()
	ts := base.Add(at)
	v, err := json.Marshal(map[string]any{"event_id": id, "machine_id": machine, "sensor_id": "S-1",
		"ts": ts.UnixMilli(), "seq": 0, "value": value, "unit": "mm/s", "schema_version": 1, "quality": "good"})
	if err != nil {
		t.Fatal(err)
	}
	return sim.Record{Key: []byte(machine), Value: v, Timestamp: ts}
}

// bigIDEvery is the event time between two of bigIDEvents: ten events a
// second, so that a sliding rule's dedup bucket of a machine (56.25 s of
// ids at the default horizon of 1 h) holds about 560 ids of 1 KB, more
// than a changelog record takes (chunkBytes).
const bigIDEvery = 100 * time.Millisecond

// bigIDEvents are qualifying events from..to-1 of machine, event i at
// base + i x bigIDEvery, with ids bigID(i).
func bigIDEvents(t *testing.T, machine string, base time.Time, from, to int) []sim.Record {
	t.Helper()
	var rs []sim.Record
	for i := from; i < to; i++ {
		rs = append(rs, bigIDRecord(t, machine, base, bigID(i), time.Duration(i)*bigIDEvery, 9))
	}
	return rs
}

// checkBucketLayout checks that the changelog's live records of a sliding
// rule are of the bucket layout (docs/ARCHITECTURE.md, "Changelog topic"):
// bucket entries ("s"), key entries ("k") of window format version 2 (or
// manifests), and, when chunked is set, chunks of bucket entries among the
// live chunks.
func checkBucketLayout(t *testing.T, seeds []string, cfg config.Config, chunked bool) {
	t.Helper()
	live := map[string][]byte{}
	for _, r := range readAll(t, seeds, cfg.ChangelogTopic()) {
		live[fmt.Sprintf("%d/%s", r.Partition, r.Key)] = r.Value
	}
	buckets, bucketChunks := 0, 0
	for k, v := range live {
		if v == nil {
			continue
		}
		key := k[strings.IndexByte(k, '/')+1:]
		switch key[0] {
		case changelogBucketPrefix:
			buckets++
		case changelogKeyPrefix:
			if !isManifest(v) && v[0] != 2 {
				t.Errorf("changelog key entry %.24q holds a value of version %d", key, v[0])
			}
		case changelogChunkPrefix:
			if key[1] == changelogBucketPrefix {
				bucketChunks++
			}
		}
	}
	if buckets == 0 || chunked && bucketChunks == 0 {
		t.Fatalf("the changelog holds %d bucket entries, %d chunks of them: not the bucket layout", buckets, bucketChunks)
	}
}

// liveChunks returns the changelog's chunk keys whose last record is not
// a tombstone.
func liveChunks(t *testing.T, seeds []string, cfg config.Config) []string {
	t.Helper()
	live := map[string]bool{}
	for _, r := range readAll(t, seeds, cfg.ChangelogTopic()) {
		if len(r.Value) > chunkBytes+64 {
			t.Errorf("changelog record %.16q of %d bytes", r.Key, len(r.Value))
		}
		if isChunkKey(r.Key) {
			live[fmt.Sprintf("%d/%.24q", r.Partition, r.Key)] = r.Value != nil
		}
	}
	var out []string
	for k, ok := range live {
		if ok {
			out = append(out, k)
		}
	}
	return out
}

// A sliding key whose state outgrows a Kafka record: one machine sends
// qualifying events with ids as long as valid ids get (1 KB), ten a
// second, and the rule remembers every id of its dedup horizon (1 h), in
// buckets of 56.25 s: a bucket's changelog entry passes 512 KiB after
// about 510 events (before the buckets, the key's one entry passed 1 MB
// after about 1000, and its produce failed inside the transaction,
// MESSAGE_TOO_LARGE, which aborted and retried for ever). Such an entry
// is written in chunks: the group
// commits past every record with the reference's outputs and accounting,
// through restarts with the local state and restores from the changelog
// (the state directory deleted) while the entry is chunked, after it grew,
// and after it was deleted (no chunk left behind).
func TestLargeKeyStateIsChunked(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "chunks")
	const machine = "M-chunky"
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	id := bigID
	rec := func(id string, at time.Duration, value float64) sim.Record {
		return bigIDRecord(t, machine, base, id, at, value)
	}
	events := func(from, to int, dups ...int) []sim.Record {
		rs := bigIDEvents(t, machine, base, from, to)
		for _, d := range dups { // sent again: a duplicate within the horizon
			rs = append(rs, rec(id(d), time.Duration(d)*bigIDEvery, 9))
		}
		return rs
	}
	log := pipeline.Log{}
	reg := prometheus.NewRegistry()
	run := func(recs []sim.Record, wipe bool) {
		t.Helper()
		if wipe {
			if err := os.RemoveAll(cfg.StateDir); err != nil {
				t.Fatal(err)
			}
		}
		produce(t, seeds, cfg.Topics.Input, recs, log)
		reg = prometheus.NewRegistry()
		in := startWith(t, cfg, Options{}, reg)
		waitConsumed(t, seeds, cfg, log)
		in.stop(t)
	}
	run(events(0, 1200), false) // two dedup buckets pass 512 KiB
	if metricValue(t, reg, "processor_state_chunked_writes_total") == 0 {
		t.Fatal("no state entry was written in chunks: the fixture proves nothing")
	}
	run(events(1200, 1600, 100), false) // restart with the local state; grows
	checkBucketLayout(t, seeds, cfg, true)
	run(events(1600, 2400, 700, 1300), true) // restored from the changelog while chunked; grows
	run(events(2400, 2500, 2000), true)      // and again
	// Hours later (filtered): the incident closes, the ids expire and the
	// key is deleted, its chunks with it.
	run([]sim.Record{rec("close", 4*time.Hour, 1)}, false)
	run([]sim.Record{rec(id(9000), 4*time.Hour+time.Second, 9)}, true) // a restore finds no chunk without its manifest

	stage, err := pipeline.NewStage(cfg.Rule)
	if err != nil {
		t.Fatal(err)
	}
	want, wantAcct := stage.Reference(log)
	dups := int64(0)
	for _, a := range wantAcct {
		dups += a.Duplicate
	}
	if want.Count(pipeline.Alert) == 0 || dups != 4 {
		t.Fatalf("reference has %d alerts and accounting %v: the fixture proves nothing", want.Count(pipeline.Alert), wantAcct)
	}
	got := outputsOf(cfg, readAll(t, seeds, cfg.Topics.Alerts, cfg.Topics.DLQ, cfg.Topics.Late))
	if d := pipeline.Diff(want, got); d != "" {
		t.Fatalf("committed outputs differ from the reference:\n%s", d)
	}
	gotAcct := latestAccounting(t, seeds, cfg)
	for p, w := range wantAcct {
		if g := gotAcct[p]; g != w {
			t.Errorf("partition %d accounting = %+v, want %+v", p, g, w)
		}
	}
	checkBucketLayout(t, seeds, cfg, false)
	// The changelog's final state holds no chunk (the key was deleted, the
	// new one is small), and no record over the bound.
	if live := liveChunks(t, seeds, cfg); len(live) > 0 {
		t.Errorf("chunks still live: %v", live)
	}
}

// A start from scratch over a changelog whose earlier history holds a
// chunked entry deletes its chunks with its other keys at its first commit
// of the partition (they are live keys of that history): a full restore
// afterwards finds no chunk without its manifest.
func TestScratchStartDeletesChunks(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "scratchchunks")
	in := cfg.Topics.Input
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	log := pipeline.Log{}
	run := func(recs []sim.Record, wipe bool) {
		t.Helper()
		if wipe {
			if err := os.RemoveAll(cfg.StateDir); err != nil {
				t.Fatal(err)
			}
		}
		produce(t, seeds, in, recs, log)
		p := start(t, cfg, Options{})
		waitConsumed(t, seeds, cfg, log)
		p.stop(t)
	}
	run(bigIDEvents(t, "M-old", base, 0, 1100), false)
	if len(liveChunks(t, seeds, cfg)) == 0 {
		t.Fatal("no chunk in the first history: the fixture proves nothing")
	}
	if _, err := adm.DeleteGroup(context.Background(), cfg.GroupID); err != nil {
		t.Fatal(err)
	}
	var del kadm.Offsets
	for p, rs := range log {
		del.Add(kadm.Offset{Topic: in, Partition: p, At: rs[len(rs)-1].Offset + 1, LeaderEpoch: -1})
	}
	if resp, err := adm.DeleteRecords(context.Background(), del); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
	log = pipeline.Log{} // the new history's input
	// The same machine (so the same partition, which only a commit of the
	// new history cleans), small state: only the scratch start's
	// tombstones delete the chunks.
	run(bigIDEvents(t, "M-old", base.Add(2*time.Hour), 0, 3), false) // from scratch
	run(bigIDEvents(t, "M-old", base.Add(2*time.Hour), 3, 6), true)  // full restore
	if live := liveChunks(t, seeds, cfg); len(live) > 0 {
		t.Errorf("chunks of the earlier history still live: %v", live)
	}
}
