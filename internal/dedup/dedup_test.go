package dedup

import (
	"encoding/hex"
	"errors"
	"math"
	"slices"
	"testing"
)

func TestNew(t *testing.T) {
	if _, err := New(-1); err == nil {
		t.Fatal("New(-1): no error")
	}
	for _, h := range []int64{0, 1, 3_600_000, math.MaxInt64} {
		s, err := New(h)
		if err != nil {
			t.Fatalf("New(%d): %v", h, err)
		}
		if s.Watermark() != NoWatermark || s.HorizonMs() != h || s.Stats() != (Stats{}) {
			t.Fatalf("New(%d) = %v", h, s)
		}
	}
}

// seen and adv build the steps of TestSeen.
type step struct {
	op   op
	want bool // Seen's verdict
}

func seen(key, id string, ts int64, dup bool) step {
	return step{op: op{key: key, id: id, ts: ts}, want: dup}
}

func adv(w int64) step { return step{op: op{advance: true, ts: w}} }

func TestSeen(t *testing.T) {
	const max, min = math.MaxInt64, math.MinInt64
	tests := []struct {
		name  string
		h     int64
		steps []step
		stats Stats // at the end
	}{
		{"redelivery is a duplicate", 100, []step{
			seen("m1", "a", 10, false), seen("m1", "a", 10, true), seen("m1", "a", 10, true),
		}, Stats{1, 1}},
		{"same id under another key is not", 100, []step{
			seen("m1", "a", 10, false), seen("m2", "a", 10, false), seen("m2", "a", 10, true),
		}, Stats{2, 2}},
		{"other ids are not", 100, []step{
			seen("m1", "a", 10, false), seen("m1", "b", 10, false), seen("m1", "a", 11, true),
		}, Stats{1, 2}},
		{"remembered while ts >= W - H", 50, []step{
			seen("m1", "a", 50, false), adv(100), seen("m1", "a", 50, true),
			adv(101), seen("m1", "a", 50, false), seen("m1", "a", 51, false), seen("m1", "a", 50, true),
		}, Stats{1, 1}},
		{"a duplicate does not refresh the remembered ts", 100, []step{
			seen("m1", "a", 10, false), seen("m1", "a", 500, true), adv(110), seen("m1", "a", 500, true),
			adv(111), seen("m1", "a", 500, false), adv(600), seen("m1", "a", 1, true),
		}, Stats{1, 1}},
		{"an expired event is not remembered", 100, []step{
			adv(1000), seen("m1", "a", 899, false), seen("m1", "a", 899, false), seen("m1", "a", 900, false), seen("m1", "a", 899, true),
		}, Stats{1, 1}},
		{"too late but within H is remembered", 100, []step{
			adv(1000), seen("m1", "a", 950, false), adv(1050), seen("m1", "a", 950, true),
		}, Stats{1, 1}},
		{"the watermark never decreases", 10, []step{
			seen("m1", "a", 5, false), adv(20), adv(0), seen("m1", "a", 5, false), seen("m1", "a", 10, false), adv(min), seen("m1", "a", 9, true),
		}, Stats{1, 1}},
		{"H = 0 remembers while ts >= W", 0, []step{
			adv(7), seen("m1", "a", 7, false), seen("m1", "a", 7, true), adv(8), seen("m1", "a", 7, false),
		}, Stats{0, 0}},
		{"all ids expire and the key goes", 10, []step{
			seen("m1", "a", 1, false), seen("m1", "b", 2, false), seen("m2", "c", 30, false), adv(12), adv(13),
		}, Stats{1, 1}},
		{"no watermark: nothing expires", 0, []step{
			seen("m1", "a", min, false), seen("m1", "a", max, true), seen("m1", "b", max, false), adv(min), seen("m1", "a", 0, true),
		}, Stats{1, 2}},
		{"near MaxInt64 ids never expire", 10, []step{
			seen("m1", "a", max-10, false), seen("m1", "b", max-11, false), adv(max), seen("m1", "a", 0, true), seen("m1", "b", 0, false),
		}, Stats{1, 1}},
		{"H = MaxInt64", max, []step{
			seen("m1", "a", 0, false), seen("m1", "c", -1, false), adv(max), seen("m1", "a", min, true), seen("m1", "c", -1, false),
			seen("m1", "b", min, false), seen("m1", "b", min, false),
		}, Stats{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, tt.h)
			for i, st := range tt.steps {
				if got := st.op.apply(s); got != st.want {
					t.Fatalf("step %d %v: duplicate %v, want %v", i, st.op, got, st.want)
				}
				if err := s.check(); err != nil {
					t.Fatalf("step %d %v: %v", i, st.op, err)
				}
			}
			if got := s.Stats(); got != tt.stats {
				t.Fatalf("Stats %+v, want %+v", got, tt.stats)
			}
		})
	}
}

func TestSeenCopiesStrings(t *testing.T) {
	s := mustNew(t, 100)
	buf := []byte("m1a")
	s.Seen(string(buf[:2]), string(buf[2:]), 1)
	copy(buf, "xxx")
	if !s.Seen("m1", "a", 1) {
		t.Fatal("lost the id")
	}
}

func TestDirty(t *testing.T) {
	s := mustNew(t, 100)
	s.Seen("m2", "a", 10)
	s.Seen("m1", "a", 10)
	s.Seen("m2", "b", 20)
	if got := s.Dirty(); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("Dirty %v", got)
	}
	s.ClearDirty()
	s.Seen("m1", "a", 10)   // duplicate: no change
	s.Seen("m3", "x", -500) // no watermark yet: remembered
	s.Advance(50)           // nothing expires (10 >= -50); m3's x does
	if got := s.Dirty(); !slices.Equal(got, []string{"m3"}) {
		t.Fatalf("Dirty %v, want [m3] (created, then deleted)", got)
	}
	if b := s.EncodeKey("m3"); b != nil {
		t.Fatalf("deleted key encodes as %x", b)
	}
	s.ClearDirty()
	s.Advance(111) // m1 a (10) and m2 a (10) expire, m2 b (20) stays
	if got := s.Dirty(); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("Dirty %v", got)
	}
	if s.EncodeKey("m1") != nil || s.EncodeKey("m2") == nil || s.EncodeKey("nope") != nil {
		t.Fatal("EncodeKey after expiry")
	}
	s.ClearDirty()
	s.Seen("m1", "a", 200) // a deleted key comes back
	if got := s.Dirty(); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("Dirty %v", got)
	}
}

// tsID is an (event time, event id) pair of the tests.
type tsID struct {
	ts int64
	id string
}

// TestEncoding pins the format documented in doc.go.
func TestEncoding(t *testing.T) {
	tests := []struct {
		name string
		ids  []tsID // Seen in this order
		hex  string
	}{
		{"doc.go example", []tsID{{1003, "b"}, {1000, "a"}}, "0102d00f0161030162"},
		{"one id", []tsID{{0, "e1"}}, "010100026531"},
		{"negative ts, equal ts ordered by id, empty id", []tsID{{-1, "z"}, {-1, ""}, {-1, "y"}}, "010301" + "00" + "00" + "0179" + "00" + "017a"},
		{"extremes", []tsID{{math.MaxInt64, "b"}, {math.MinInt64, "a"}}, "0102" + "ffffffffffffffffff01" + "0161" + "ffffffffffffffffff01" + "0162"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, 100)
			for _, e := range tt.ids {
				s.Seen("k", e.id, e.ts)
			}
			got := s.EncodeKey("k")
			if hex.EncodeToString(got) != tt.hex {
				t.Fatalf("EncodeKey = %x, want %s", got, tt.hex)
			}
			r := mustNew(t, 100)
			if err := r.LoadKey("k", got); err != nil {
				t.Fatal(err)
			}
			if string(r.EncodeKey("k")) != string(got) || r.Stats() != s.Stats() || len(r.Dirty()) != 0 {
				t.Fatalf("reloaded: %x, %+v, dirty %v", r.EncodeKey("k"), r.Stats(), r.Dirty())
			}
			for _, e := range tt.ids {
				if !r.Seen("k", e.id, 0) {
					t.Fatalf("reloaded set forgot %q", e.id)
				}
			}
		})
	}
}

func TestLoadKeyRejects(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		want error
	}{
		{"empty", "", ErrCorrupt},
		{"unknown version", "0201000161", ErrUnknownVersion},
		{"version 0", "00", ErrUnknownVersion},
		{"no count", "01", ErrCorrupt},
		{"no ids", "0100", ErrCorrupt},
		{"count beyond the bytes", "01030001610001", ErrCorrupt},
		{"huge count", "01ffffffffffffffff7f00", ErrCorrupt},
		{"overlong count", "018100000161", ErrCorrupt},
		{"overlong ts", "010180000161", ErrCorrupt},
		{"overlong delta", "01020001618000016" + "2", ErrCorrupt},
		{"overlong string length", "0101008100" + "61", ErrCorrupt},
		{"truncated string", "0101000561", ErrCorrupt},
		{"truncated varint", "010180", ErrCorrupt},
		{"trailing bytes", "010100016100", ErrCorrupt},
		{"equal entries", "0102000161000161", ErrCorrupt},
		{"ids out of order at equal ts", "0102000162000161", ErrCorrupt},
		{"repeated id", "0102000161010161", ErrCorrupt},
		{"ts overflow", "0102" + "feffffffffffffffff01" + "0161" + "02" + "0162", ErrCorrupt},
		{"delta beyond uint64", "0102000161" + "ffffffffffffffffff7f" + "0162", ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := hex.DecodeString(tt.hex)
			if err != nil {
				t.Fatal(err)
			}
			s := mustNew(t, 100)
			s.Seen("k", "old", 5)
			s.ClearDirty()
			err = s.LoadKey("k", data)
			if !errors.Is(err, tt.want) {
				t.Fatalf("LoadKey(%x) = %v, want %v", data, err, tt.want)
			}
			if s.Stats() != (Stats{1, 1}) || !s.Seen("k", "old", 5) || len(s.Dirty()) != 0 {
				t.Fatal("a failed LoadKey changed the set")
			}
		})
	}
}

func TestLoadKeyReplaces(t *testing.T) {
	src := mustNew(t, 100)
	src.Seen("k", "x", 50)
	src.Seen("k", "y", 60)
	data := src.EncodeKey("k")

	s := mustNew(t, 100)
	s.Seen("k", "old", 55)
	s.Seen("j", "j1", 55)
	if err := s.LoadKey("k", data); err != nil {
		t.Fatal(err)
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	if s.Stats() != (Stats{2, 3}) || s.Seen("k", "old", 55) || !s.Seen("k", "x", 0) {
		t.Fatalf("after LoadKey: %v", s)
	}
	// Dirty before the load, so still dirty (its value must be written).
	if got := s.Dirty(); !slices.Equal(got, []string{"j", "k"}) {
		t.Fatalf("Dirty %v", got)
	}

	// Loaded at a later watermark: x (50) has expired at W = 151.
	s = mustNew(t, 100)
	s.Advance(151)
	if err := s.LoadKey("k", data); err != nil {
		t.Fatal(err)
	}
	if s.Stats() != (Stats{1, 1}) || !slices.Equal(s.Dirty(), []string{"k"}) || s.Seen("k", "x", 50) {
		t.Fatalf("late load: %v, dirty %v", s, s.Dirty())
	}
	// Everything expired: the key is deleted at once and dirty (tombstone).
	s = mustNew(t, 100)
	s.Advance(1000)
	if err := s.LoadKey("k", data); err != nil {
		t.Fatal(err)
	}
	if s.Stats() != (Stats{}) || !slices.Equal(s.Dirty(), []string{"k"}) || s.EncodeKey("k") != nil {
		t.Fatalf("expired load: %v, dirty %v", s, s.Dirty())
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}

// TestSeenReplacesExpired reaches the branch of Seen that Advance and
// LoadKey make unreachable (an id kept below W - H) by moving W behind
// their backs: the verdict still follows the SPEC, and the state stays
// consistent.
func TestSeenReplacesExpired(t *testing.T) {
	s := mustNew(t, 100)
	s.Seen("k", "a", 10)
	s.Seen("k", "b", 20)
	s.Seen("j", "a", 10)
	s.ClearDirty()
	s.wm = 1000 // W - H = 900: every id above has expired, none forgotten
	if s.Seen("k", "a", 950) {
		t.Fatal("an expired id counted as a duplicate")
	}
	if !s.Seen("k", "a", 0) || s.Stats() != (Stats{2, 3}) {
		t.Fatalf("the replacement was not remembered: %v", s)
	}
	if s.Seen("j", "a", 5) { // replaced by an event that is itself expired
		t.Fatal("an expired id counted as a duplicate")
	}
	if s.st.keys["j"] != nil || s.EncodeKey("j") != nil || s.Stats() != (Stats{1, 2}) {
		t.Fatalf("key j should be gone: %v", s)
	}
	if got := s.Dirty(); !slices.Equal(got, []string{"j", "k"}) {
		t.Fatalf("Dirty %v", got)
	}
	s.wm = NoWatermark
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}
