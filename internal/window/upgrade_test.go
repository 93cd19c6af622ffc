package window

import (
	"bufio"
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The upgrade from format version 1 (a key's whole state in one value) to
// version 2 (key entry and bucket entries): state written by the builds
// before loads, processing goes on exactly as without the restart, and
// the first persist after the load rewrites every key in version 2, so
// that no version 1 value is left.

// legacyScenario is a log whose state, after cut records and a Sweep,
// holds every kind of key state: m1 vibrates every 20 s for an hour (one
// incident open all along, its evidence and first events pruned), m2 has
// an open incident with all its evidence kept, a duplicate and a too-late
// event, m3 only remembered ids (its incident closed, its events pruned),
// m4 two open incidents. The rest of the log goes on with every key.
// testdata/legacy_v1.golden holds that state as the builds before bucket
// entries wrote it.
func legacyScenario() (recs []rec, cut int) {
	add := func(key, id string, ts int64, q bool) {
		r := rec{ev: Event{Key: key, EventID: id, SensorID: "s-" + key, TS: ts, Value: float64(ts%97) / 3, Partition: 3, Offset: int64(len(recs))}, q: q}
		recs = append(recs, r)
	}
	const s, m = int64(1000), int64(60_000)
	for i := int64(0); i < 20; i++ { // m3: an incident at 0:25, long closed at the cut
		add("m3", fmt.Sprintf("c%02d", i), 25*m+i*10*s, true)
	}
	for i := int64(0); i <= 180; i++ { // m1: 0:20 to 1:20, every 20 s
		add("m1", fmt.Sprintf("a%03d", i), 20*m+i*20*s, true)
		switch i {
		case 170: // m2: an incident at 1:15, a duplicate, a too-late event
			add("m2", "b0", 75*m, true)
			add("m2", "b1", 75*m+30*s, true)
			add("m2", "b2", 75*m+40*s, true)
			add("m2", "b1", 75*m+30*s, true)
			add("m2", "late", 40*m, true)
			add("m2", "f0", 75*m+45*s, false)
		case 175: // m4: two incidents, 1:10 and 1:17
			for j := int64(0); j < 3; j++ {
				add("m4", fmt.Sprintf("d%d", j), 70*m+j*s, true)
				add("m4", fmt.Sprintf("e%d", j), 77*m+j*s, true)
			}
		}
	}
	cut = len(recs)
	for i := int64(0); i < 40; i++ { // every key goes on, then everything closes
		ts := 80*m + 20*s + i*20*s
		add("m1", fmt.Sprintf("a%03d", 181+i), ts, true)
		add("m2", fmt.Sprintf("b%02d", 10+i), ts+5*s, i%3 == 0)
		add("m4", fmt.Sprintf("d%02d", 10+i), ts-9*m, i%5 == 0)
		if i == 2 {
			add("m3", "c05", 5*s, true) // a duplicate: its id is still remembered
		}
	}
	add("zz", "closer", 6*60*m, false)
	return recs, cut
}

var updateLegacy = flag.Bool("update-legacy", false, "rewrite testdata/legacy_v1.golden from encodeKeyV1 (only with a reason: it pins what the builds before wrote)")

const legacyGolden = "testdata/legacy_v1.golden"

// readLegacyGolden reads the golden state: "meta <hex>" and "key <key>
// <hex>" lines.
func readLegacyGolden(t *testing.T) (meta []byte, store map[entryName][]byte) {
	t.Helper()
	f, err := os.Open(legacyGolden)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	store = map[entryName][]byte{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		b, err := hex.DecodeString(fs[len(fs)-1])
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case fs[0] == "meta" && len(fs) == 2:
			meta = b
		case fs[0] == "key" && len(fs) == 3:
			store[keyEntry(fs[1])] = b
		default:
			t.Fatalf("bad line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return meta, store
}

// TestLegacyGoldenUpgrade: the golden version 1 state (written by the
// encoder of the builds before bucket entries) is the state the scenario
// leaves at its cut; loaded, it marks every key dirty, one persist leaves
// exactly the version 2 entries of the state (no version 1 value left,
// nothing missing), and processing goes on with the revisions and
// outcomes of the uninterrupted run, also through later restores.
func TestLegacyGoldenUpgrade(t *testing.T) {
	cfg := vibration()
	cfg.EventBucketMs, cfg.DedupBucketMs = 0, 0 // the defaults, as the processor has them
	recs, cut := legacyScenario()
	plain := newDriver(t, cfg)
	plain.run(recs[:cut])
	plain.p.Sweep()
	nRevs := len(plain.revs)
	if *updateLegacy {
		var b strings.Builder
		b.WriteString("# Format version 1 state of legacyScenario at its cut (upgrade_test.go), as the\n# builds before bucket entries wrote it (generated with their EncodeKey, commit 923551f):\n# the partition meta, then one value per key.\n")
		fmt.Fprintf(&b, "meta %x\n", plain.p.EncodeMeta())
		for _, k := range slices.Sorted(maps.Keys(plain.p.keys)) {
			fmt.Fprintf(&b, "key %s %x\n", k, encodeKeyV1(plain.p, k))
		}
		if err := os.WriteFile(legacyGolden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	meta, legacy := readLegacyGolden(t)
	if !reflect.DeepEqual(legacy, legacyStore(plain.p)) || string(meta) != string(plain.p.EncodeMeta()) {
		t.Fatal("the golden state is not the scenario's state at its cut encoded in version 1 (encodeKeyV1 changed?)")
	}
	ks := plain.p.keys
	if len(ks) != 4 || len(ks["m1"].open) != 1 || ks["m1"].open[0].pruned == 0 || len(ks["m4"].open) != 2 ||
		len(ks["m3"].open) != 0 || len(ks["m3"].events) != 0 || len(ks["m3"].seenBy) == 0 || len(ks["m2"].open) != 1 {
		t.Fatal("the scenario does not leave the state it describes")
	}
	plain.run(recs[cut:])

	for _, order := range []string{"sorted", "shuffled"} {
		t.Run(order, func(t *testing.T) {
			q := mustPartition(t, cfg)
			if err := q.LoadMeta(meta); err != nil {
				t.Fatal(err)
			}
			var shuffle func(int, func(int, int))
			if order == "shuffled" {
				shuffle = rand.New(rand.NewPCG(1, 2)).Shuffle
			}
			store := maps.Clone(legacy)
			if err := loadEntries(q, store, shuffle); err != nil {
				t.Fatal(err)
			}
			checkUpgrade(t, q, store)
			d := newDriver(t, cfg)
			d.p, d.meta, d.store = q, meta, store
			d.rnd, d.flush, d.restore = rand.New(rand.NewPCG(3, 4)).Float64, 0.2, 0.05
			d.run(recs[cut:])
			if len(d.revs) == 0 {
				t.Fatal("no revision after the cut: the test proves nothing")
			}
			if !reflect.DeepEqual(d.revs, plain.revs[nRevs:]) || !reflect.DeepEqual(d.outs, plain.outs[cut:]) {
				t.Fatalf("processing after the upgrade differs:\n%s\nwant\n%s", fmtRevisions(d.revs), fmtRevisions(plain.revs[nRevs:]))
			}
		})
	}
}

// checkUpgrade checks a partition just loaded from the version 1 store
// legacy: every key is dirty, key entry and every bucket entry, and one
// persist of what is dirty leaves exactly its version 2 entries in the
// store (each version 1 value replaced by a version 2 key entry).
func checkUpgrade(t *testing.T, q *Partition, legacy map[entryName][]byte) {
	t.Helper()
	keys, _ := q.Dirty()
	if len(keys) != len(q.keys) {
		t.Fatalf("dirty keys %q after a load of version 1 values, want all %d", keys, len(q.keys))
	}
	want := 0
	for k := range q.keys {
		want += len(keyBuckets(q, k))
	}
	if n := len(q.DirtyBuckets()); n != want {
		t.Fatalf("%d dirty buckets after a load of version 1 values, want all %d", n, want)
	}
	for n, v := range legacy {
		if v[0] != legacyKeyVersion {
			t.Fatalf("%v: not a version 1 value", n)
		}
	}
	persistDirty(q, legacy)
	q.ClearDirty()
	checkStoreMatches(t, q, legacy)
	for n, v := range legacy {
		if n.kind == 'k' && v[0] != keyVersion {
			t.Fatalf("%v still holds a version %d value", n, v[0])
		}
	}
}

// TestPropertyUpgrade: at a random point of a random log, the state as
// version 1 stored it (every key's value from encodeKeyV1), loaded in a
// random order, upgrades as checkUpgrade says, and the run goes on
// exactly as the uninterrupted one, restoring from version 2 entries at
// random points.
func TestPropertyUpgrade(t *testing.T) {
	for seed := range uint64(propIterations + denseIterations) {
		rng := rand.New(rand.NewPCG(seed, 11))
		cfg, recs := genScenario(rng, seed, 4, 20, 80)
		recs = arrive(rng, recs, rng.Int64N(3*(cfg.DelayMs+cfg.LatenessMs+cfg.SizeMs)+1))
		recs = append(recs, closer(cfg, recs))
		plain := newDriver(t, cfg)
		plain.run(recs)

		cut := rng.IntN(len(recs))
		d := newDriver(t, cfg)
		d.rnd, d.flush, d.restore = rng.Float64, 0.3, 0.05
		d.run(recs[:cut])
		q := mustPartition(t, cfg)
		meta := d.p.EncodeMeta()
		if err := q.LoadMeta(meta); err != nil {
			t.Fatal(err)
		}
		legacy := legacyStore(d.p)
		if err := loadEntries(q, legacy, rng.Shuffle); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		checkUpgrade(t, q, legacy)
		d.p, d.meta, d.store = q, meta, legacy
		d.run(recs[cut:])
		if !reflect.DeepEqual(plain.revs, d.revs) || !reflect.DeepEqual(plain.outs, d.outs) {
			t.Fatalf("seed %d: upgrading at record %d changed the output:\n%s\n%s", seed, cut, fmtRevisions(plain.revs), fmtRevisions(d.revs))
		}
	}
}
