package aggwindow

import (
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vibeline/processor/internal/codec"
)

const minute = 60_000

// restoreConfigs are the fixed-window shapes of the restore tests: one pane
// per window, panes shared by windows with size a multiple of the advance,
// and size not a multiple of the advance (P = gcd = 1m < advance).
var restoreConfigs = []struct {
	name          string
	kind          Kind
	size, advance int64
}{
	{"tumbling 1m", Tumbling, minute, 0},
	{"hopping 10m/1m", Hopping, 10 * minute, minute},
	{"hopping 5m/2m", Hopping, 5 * minute, 2 * minute},
}

// genStream returns n events of keys machines, about one per key per
// second over the stream, displaced by up to maxDelay (and some later than
// the lateness: too late).
func genStream(rng *rand.Rand, keys, n int, maxDelay int64) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = Event{
			Key:       fmt.Sprintf("m%d", rng.IntN(keys)),
			EventID:   fmt.Sprintf("e%05d", i),
			SensorID:  fmt.Sprintf("s%d", rng.IntN(3)),
			TS:        int64(i)*1000/int64(keys) + rng.Int64N(2000),
			Value:     rng.Float64() * 10,
			Partition: 3,
			Offset:    int64(i),
		}
	}
	return arrive(rng, evs, maxDelay)
}

// TestRestoreContinues: a partition persisted at many points, and
// restored from the store at some of them (entries in random order), is
// the persisted one (windows, aggregates, fired state, panes) and goes on
// exactly like the partition that never stopped: every result, revision
// by revision, and the persisted entries equal the uninterrupted state.
func TestRestoreContinues(t *testing.T) {
	for _, rc := range restoreConfigs {
		for _, fn := range allFns {
			t.Run(fmt.Sprintf("%s/%s", rc.name, fn), func(t *testing.T) {
				for seed := range uint64(3) {
					rng := rand.New(rand.NewPCG(seed, uint64(fn)))
					cfg := Config{Kind: rc.kind, SizeMs: rc.size, AdvanceMs: rc.advance, Fn: fn,
						DelayMs: 20_000, LatenessMs: int64(rng.IntN(4)) * minute, EvidenceLimit: 1 + rng.IntN(4),
						Fires: monotoneAt(fn, 10), AlertID: testAlertID}
					if seed == 2 {
						level := 5 + rng.Float64()
						cfg.Fires = func(agg float64, _ int) bool { return agg >= level } // not monotone for avg, min
					}
					// As the pipeline sets it (a threshold that names the
					// aggregate alone), but not always.
					cfg.FiresIgnoresCount = seed > 0 && (seed == 2 || fn == Sum || fn == Min || fn == Max)
					evs := genStream(rng, 4, 3000, int64(rng.IntN(5))*minute/2)
					ref, p := mustPartition(t, cfg), mustPartition(t, cfg)
					store := newMemStore()
					revs := 0
					for i, e := range evs {
						q := rng.IntN(10) > 0
						want, got := ref.Process(e, q), p.Process(e, q)
						if !reflect.DeepEqual(got, want) {
							t.Fatalf("record %d: after restores\n got %+v\nwant %+v", i, got, want)
						}
						revs += len(want.Revisions)
						if rng.IntN(3) > 0 {
							continue // not a commit point
						}
						store.persist(p)
						if rng.IntN(10) == 0 {
							p = store.restore(t, cfg, rng)
							sameState(t, p, ref)
						}
					}
					store.persist(p)
					if got, want := store.entries(), entriesOf(ref); !maps.Equal(got, want) {
						t.Fatalf("persisted state differs from the uninterrupted one:\n got %q\nwant %q", got, want)
					}
					want := ref.Advance(math.MaxInt64)
					if got := p.Advance(math.MaxInt64); !reflect.DeepEqual(got, want) {
						t.Fatal("final closes differ")
					}
					if revs+len(want) == 0 {
						t.Fatal("no revisions: the test tests nothing")
					}
					store.persist(p)
					if len(store.entries()) != 1 || p.Stats() != (Stats{}) {
						t.Fatalf("state left after the final advance: %q %+v", store.entries(), p.Stats())
					}
				}
			})
		}
	}
}

// monotoneAt is a threshold predicate that fires some windows of
// genStream's values.
func monotoneAt(fn Fn, n int) func(float64, int) bool {
	switch fn {
	case Sum:
		return func(agg float64, _ int) bool { return agg >= 5*float64(n) }
	case Min:
		return func(agg float64, _ int) bool { return agg <= 0.5 }
	case Max:
		return func(agg float64, _ int) bool { return agg >= 9.9 }
	default:
		return func(_ float64, count int) bool { return count >= n }
	}
}

// TestCommitWritesOnePane: after one event, a commit writes that event's
// pane, plus the key entry only when the event caused a revision (and
// the meta when W moved); nothing of the key's other windows.
func TestCommitWritesOnePane(t *testing.T) {
	for _, rc := range restoreConfigs {
		t.Run(rc.name, func(t *testing.T) {
			cfg := Config{Kind: rc.kind, SizeMs: rc.size, AdvanceMs: rc.advance, Fn: Max, LatenessMs: 10 * minute,
				EvidenceLimit: 10, Fires: aggAtLeast(9), AlertID: testAlertID}
			p := mustPartition(t, cfg)
			store := newMemStore()
			rng := rand.New(rand.NewPCG(1, 2))
			ts := int64(0)
			for i := range 2000 { // 20 minutes of 5 keys
				ts = int64(i) * 600
				p.Process(Event{Key: fmt.Sprintf("m%d", i%5), EventID: fmt.Sprint(i), TS: ts, Value: rng.Float64() * 8.9}, true)
			}
			store.persist(p)
			for j, v := range []float64{1, 9.5, 2, 9.7} { // no revision, open (or updated), none, updated
				e := Event{Key: "m2", EventID: fmt.Sprint("x", j), TS: ts + int64(j), Value: v}
				res := p.Process(e, true)
				c := store.persist(p)
				wantPane := []PaneRef{{Key: "m2", Start: floorDiv(e.TS, p.paneMs) * p.paneMs}}
				if !slices.Equal(c.panes, wantPane) {
					t.Fatalf("event %d: panes written %v, want %v", j, c.panes, wantPane)
				}
				var wantKeys []string
				if len(res.Revisions) > 0 {
					wantKeys = []string{"m2"}
				}
				if !slices.Equal(c.keys, wantKeys) {
					t.Fatalf("event %d with %d revisions: key entries written %v, want %v", j, len(res.Revisions), c.keys, wantKeys)
				}
				if (j%2 == 1) != (len(res.Revisions) > 0) {
					t.Fatalf("event %d: revisions %v", j, res.Revisions)
				}
			}
		})
	}
}

// TestClosingWritesDroppedPanes: when windows close, the commit deletes the
// panes no live window contains any more, and the key entry only when a
// fired window closed.
func TestClosingWritesDroppedPanes(t *testing.T) {
	cfg := Config{Kind: Hopping, SizeMs: 5, AdvanceMs: 2, Fn: Count, LatenessMs: 0, EvidenceLimit: 1,
		Fires: countAtLeast(2), AlertID: testAlertID}
	p := mustPartition(t, cfg)
	store := newMemStore()
	for _, ts := range []int64{0, 1, 3, 4, 7} { // panes 0, 1, 3, 4, 7 (P = 1)
		p.Process(Event{Key: "k", EventID: fmt.Sprint(ts), TS: ts}, true)
	}
	store.persist(p)
	// W = 7: windows [-4,1), [-2,3), [0,5), [2,7) closed; [0,5) and [2,7) had fired.
	if got := slices.SortedFunc(maps.Keys(store.panes), cmpPaneRef); !slices.Equal(got, []PaneRef{{"k", 4}, {"k", 7}}) {
		t.Fatalf("panes %v, want 4 and 7 (windows [4,9) and [6,11) are live)", got)
	}
	res := p.Process(Event{Key: "k", EventID: "late", TS: 9}, false) // W = 9: [4,9) closes
	if len(res.Revisions) != 1 || res.Revisions[0].Status != Closed || res.Revisions[0].Start != 4 {
		t.Fatalf("revisions %+v", res.Revisions)
	}
	c := store.persist(p)
	if !slices.Equal(c.panes, []PaneRef{{"k", 4}}) || !slices.Equal(c.keys, []string{"k"}) || store.keys["k"] != nil {
		t.Fatalf("commit %+v, store %v", c, store.entries())
	}
	p.Advance(11) // [6,11) closes unfired: pane 7 goes, the key with it
	c = store.persist(p)
	if !slices.Equal(c.panes, []PaneRef{{"k", 7}}) || len(c.keys) != 0 || len(store.panes) != 0 || p.Stats() != (Stats{}) {
		t.Fatalf("commit %+v, store %v, stats %+v", c, store.entries(), p.Stats())
	}
}

// TestEncodingLayout pins the bytes of the version 2 entries.
func TestEncodingLayout(t *testing.T) {
	cfg := Config{Kind: Hopping, SizeMs: 20, AdvanceMs: 10, Fn: Max, LatenessMs: 100, EvidenceLimit: 2,
		Fires: aggAtLeast(5), AlertID: func(key string, start int64) string { return fmt.Sprint(start) }}
	p := mustPartition(t, cfg)
	p.Process(Event{Key: "k", EventID: "a", SensorID: "s", TS: 12, Value: 4, Partition: 1, Offset: 7}, true)
	p.Process(Event{Key: "k", EventID: "b", SensorID: "s", TS: 15, Value: 6, Partition: 1, Offset: 8}, true)
	if got, want := hex.EncodeToString(p.EncodePane("k", 10)), "02"+"0205"+"02"+"0000000000001840"+"02"+
		"1e"+"0162"+"0173"+"0000000000001840"+"02"+"10"+ // ts 15, "b", "s", 6, partition 1, offset 8
		"18"+"0161"+"0173"+"0000000000001040"+"02"+"0e"; got != want { // ts 12, "a", "s", 4, 1, 7
		t.Errorf("pane:\n got %s\nwant %s", got, want)
	}
	if got, want := hex.EncodeToString(p.EncodeKey("k")), "02"+"0205"+"02"+"00"+"0130"+"00"+"14"+"023130"+"00"; got != want {
		t.Errorf("key:\n got %s\nwant %s", got, want) // windows 0 and 10, alert ids "0" and "10", revision 0
	}
	if p.EncodePane("k", 0) != nil || p.EncodePane("x", 10) != nil {
		t.Error("EncodePane of a pane that does not exist")
	}
}

func TestLoadRejects(t *testing.T) {
	fixed := Config{Kind: Tumbling, SizeMs: 10, Fn: Min, LatenessMs: 100, EvidenceLimit: 2, Fires: countAtLeast(1), AlertID: testAlertID}
	session := Config{Kind: Session, GapMs: 10, Fn: Min, LatenessMs: 100, EvidenceLimit: 2, Fires: countAtLeast(1), AlertID: testAlertID}
	ev := func(ts int64, id string, v float64) string {
		return hex.EncodeToString(appendEvent(nil, &Evidence{EventID: id, TS: ts, Value: v}))
	}
	f64 := func(v float64) string { return hex.EncodeToString(codec.AppendFloat64(nil, v)) }
	pane := "020104" + "02" + f64(1) + "02" + ev(11, "a", 1) + ev(12, "b", 3) // pane 10: min 1 of 2 events
	for _, tc := range []struct {
		name  string
		cfg   Config
		key   bool // LoadKey, else LoadPane at start
		start int64
		hex   string
		want  error
	}{
		{"valid pane", fixed, false, 10, pane, nil},
		{"valid key", fixed, true, 0, "020104" + "01" + "14" + "0178" + "03", nil},
		{"version 1 fixed key (whole windows)", fixed, true, 0, "010104" + "01" + "14" + "01" + f64(1) + "01" + ev(11, "a", 1) + "00", ErrUnknownVersion},
		{"version 2 session key", session, true, 0, "020304" + "01" + "14" + "0178" + "03", ErrUnknownVersion},
		{"pane of a session config", session, false, 10, pane, ErrCorrupt},
		{"pane version 1", fixed, false, 10, "01" + pane[2:], ErrUnknownVersion},
		{"pane not aligned", fixed, false, 5, pane, ErrCorrupt},
		{"pane beyond MaxTS", fixed, false, MaxTS + 10 - MaxTS%10, pane, ErrCorrupt},
		{"pane below MinTS", fixed, false, MinTS - 10 - MinTS%10, pane, ErrCorrupt},
		{"pane evidence outside", fixed, false, 0, pane, ErrCorrupt},
		{"pane of another fn", fixed, false, 10, "020105" + pane[6:], ErrCorrupt},
		{"pane of another kind", fixed, false, 10, "020204" + pane[6:], ErrCorrupt},
		{"first evidence not the extreme", fixed, false, 10, "020104" + "02" + f64(0.5) + "02" + ev(11, "a", 1) + ev(12, "b", 3), ErrCorrupt},
		{"evidence not increasing", fixed, false, 10, "020104" + "02" + f64(1) + "02" + ev(12, "b", 1) + ev(11, "a", 1), ErrCorrupt},
		{"evidence count", fixed, false, 10, "020104" + "01" + f64(1) + "02" + ev(11, "a", 1) + ev(12, "b", 3), ErrCorrupt},
		{"zero count", fixed, false, 10, "020104" + "00" + f64(1) + "00", ErrCorrupt},
		{"trailing bytes", fixed, false, 10, pane + "00", ErrCorrupt},
		{"no fired windows", fixed, true, 0, "020104" + "00", ErrCorrupt},
		{"fired window not aligned", fixed, true, 0, "020104" + "01" + "0a" + "0178" + "03", ErrCorrupt},
		{"fired windows not increasing", fixed, true, 0, "020104" + "02" + "14" + "0178" + "03" + "14" + "0179" + "00", ErrCorrupt},
		{"empty alert id", fixed, true, 0, "020104" + "01" + "14" + "00" + "03", ErrCorrupt},
		{"empty", fixed, true, 0, "", ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPartition(t, tc.cfg)
			data, err := hex.DecodeString(tc.hex)
			if err != nil {
				t.Fatal(err)
			}
			if tc.key {
				err = p.LoadKey("k", data)
			} else {
				err = p.LoadPane("k", tc.start, data)
			}
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err != nil && (p.Stats() != Stats{} || len(p.keys) != 0) {
				t.Fatal("a failed load changed the partition")
			}
			if err != nil && !strings.HasPrefix(err.Error(), "aggwindow: load ") {
				t.Fatalf("error without context: %v", err)
			}
		})
	}
}

// TestLoadOrder: the entries of a key give the same partition whatever
// their order, including the key entry before its panes (placeholders) and
// the meta last (windows the restored watermark closed are dropped), and a
// pane or key entry loaded twice replaces the first.
func TestLoadOrder(t *testing.T) {
	cfg := Config{Kind: Hopping, SizeMs: 5 * minute, AdvanceMs: 2 * minute, Fn: Avg, DelayMs: 0, LatenessMs: minute,
		EvidenceLimit: 2, Fires: countAtLeast(3), AlertID: testAlertID}
	ref := mustPartition(t, cfg)
	for i := range 40 {
		ref.Process(Event{Key: "k", EventID: fmt.Sprint(i), TS: int64(i) * 15_000, Value: float64(i % 7)}, true)
	}
	store := newMemStore()
	store.persist(ref)
	if len(store.keys) != 1 || len(store.panes) < 3 {
		t.Fatalf("setup: %d key entries, %d panes", len(store.keys), len(store.panes))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		sameState(t, store.restore(t, cfg, rng), ref)
	}
	// Loading again replaces: the same pane twice, then another key entry.
	p := store.restore(t, cfg, rng)
	for r, b := range store.panes {
		if err := p.LoadPane(r.Key, r.Start, b); err != nil {
			t.Fatal(err)
		}
	}
	sameState(t, p, ref)
	if err := p.LoadKey("k", []byte{2, byte(Hopping), byte(Avg), 1, 0, 1, 'x', 0}); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Fired != 1 || st.Windows != ref.Stats().Windows+1 {
		t.Fatalf("after a key entry naming window 0 only: %+v (uninterrupted %+v)", st, ref.Stats())
	}
}

// TestEncodeSizedExactly: EncodeKey and EncodePane allocate their value
// at its length (the caller keeps it, as a changelog record): every value
// of every state along random streams has len == cap, across the
// varint lengths of negative, small and large fields.
func TestEncodeSizedExactly(t *testing.T) {
	forEachConfig(t, 10, func(t *testing.T, rng *rand.Rand, cfg Config) {
		cfg.EvidenceLimit = rng.IntN(5)
		cfg.Fires = func(float64, int) bool { return rng.IntN(3) == 0 } // some windows fired, some not
		p := mustPartition(t, cfg)
		base := []int64{-1 << 40, -300, 0, 1 << 20, 1 << 45}[rng.IntN(5)]
		evs := arrive(rng, genEvents(rng, 3, 40+rng.IntN(40), base, 300), int64(rng.IntN(50)))
		for i, e := range evs {
			e.Partition = int32(rng.IntN(1 << (1 + rng.IntN(30))))
			e.Offset = rng.Int64N(1 << (1 + rng.IntN(62)))
			e.SensorID = strings.Repeat("s", rng.IntN(200)) // a length of one or two bytes
			p.Process(e, true)
			for k, ks := range p.keys {
				if b := p.EncodeKey(k); b != nil && len(b) != cap(b) {
					t.Fatalf("record %d: EncodeKey(%q): len %d, cap %d", i, k, len(b), cap(b))
				}
				for _, pn := range ks.panes {
					if b := p.EncodePane(k, pn.start); len(b) != cap(b) {
						t.Fatalf("record %d: EncodePane(%q, %d): len %d, cap %d", i, k, pn.start, len(b), cap(b))
					}
				}
			}
		}
	})
}

func TestVarintLen(t *testing.T) {
	for _, x := range []int64{0, 1, -1, 63, -64, 64, -65, 1 << 20, -(1 << 20), math.MaxInt64, math.MinInt64, math.MaxInt32, math.MinInt32} {
		if got, want := varintLen(x), len(codec.AppendVarint(nil, x)); got != want {
			t.Errorf("varintLen(%d) = %d, want %d", x, got, want)
		}
		if got, want := uvarintLen(uint64(x)), len(codec.AppendUvarint(nil, uint64(x))); got != want {
			t.Errorf("uvarintLen(%d) = %d, want %d", uint64(x), got, want)
		}
	}
	for n := range 64 {
		for _, x := range []uint64{1<<n - 1, 1 << n, 1<<n + 1} {
			if got, want := uvarintLen(x), len(codec.AppendUvarint(nil, x)); got != want {
				t.Errorf("uvarintLen(%d) = %d, want %d", x, got, want)
			}
		}
	}
}
