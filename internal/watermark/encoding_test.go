package watermark

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// warmTracker returns a tracker of c that observed n random records.
func warmTracker(tb testing.TB, c Config, seed uint64, n int) *Tracker {
	tb.Helper()
	tr := mustTracker(tb, c)
	rng := rand.New(rand.NewPCG(seed, 5))
	w := NoWatermark
	for _, o := range genObs(rng, n) {
		w, _ = feed(tr, o, w, 50)
	}
	return tr
}

func TestEncodeRoundTrip(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 6))
		c := genAdaptive(rng)
		if seed%4 == 0 {
			c = Config{Strategy: Fixed, DelayMs: rng.Int64N(1000)}
		}
		tr := warmTracker(t, c, seed, rng.IntN(3*max(c.Sample, 10)))
		enc := tr.AppendEncode(nil)
		got := mustTracker(t, c)
		if err := got.Decode(enc); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if re := got.AppendEncode(nil); !bytes.Equal(re, enc) {
			t.Fatalf("seed %d: re-encoding differs:\n%x\n%x", seed, re, enc)
		}
		if got.DelayMs() != tr.DelayMs() || got.FixedWatermark() != tr.FixedWatermark() ||
			got.AtRiskTotal() != tr.AtRiskTotal() || got.Observed() != tr.Observed() {
			t.Fatalf("seed %d: decoded %v, encoded %v", seed, got, tr)
		}
		if err := got.q.check(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		// AppendEncode appends.
		if b := tr.AppendEncode([]byte{7, 7}); !bytes.Equal(b[2:], enc) || b[0] != 7 {
			t.Fatalf("seed %d: AppendEncode does not append", seed)
		}
	}
}

// TestEncodingLayout pins the format of a small state byte by byte.
func TestEncodingLayout(t *testing.T) {
	c := Config{Strategy: Adaptive, DelayMs: 150, Percentile: 99.5, MinMs: 1, MaxMs: 200, Sample: 3}
	tr := mustTracker(t, c)
	tr.ObserveEvent(1010, 1000, 0, NoWatermark) // 10
	tr.Observe(5000, 1000)                      // 4000 -> 200
	tr.Observe(1000, 1000)                      // 0 -> 1
	tr.Observe(1150, 1100)                      // 50; the sample is 200, 1, 50
	want := []byte{
		1,          // version
		2,          // adaptive
		0x96, 0x01, // delay 150
		0xe0, 0xff, 0xb8, 0x2f, // 99500000 millionths
		1,          // min
		0xc8, 0x01, // max 200
		3,          // sample
		0xec, 0x0e, // F = 1100 - 150 = 950, zig-zag 1900
		0,          // at risk
		3,          // R
		0xc8, 0x01, // 200
		1,  // 1
		50, // 50
	}
	if got := tr.AppendEncode(nil); !bytes.Equal(got, want) {
		t.Fatalf("encoding\n got %x\nwant %x", got, want)
	}
	if tr.DelayMs() != 200 {
		t.Fatalf("DelayMs = %d, want 200 (rank 3 of 3)", tr.DelayMs())
	}
}

func TestDecodeErrors(t *testing.T) {
	c := Config{Strategy: Adaptive, DelayMs: 30, Percentile: 90, MinMs: 0, MaxMs: 1000, Sample: 8}
	good := warmTracker(t, c, 1, 20).AppendEncode(nil)
	header := func(strategy byte, delay, pct, minMs, maxMs, sample uint64) []byte {
		b := []byte{1, strategy}
		for _, v := range []uint64{delay, pct, minMs, maxMs, sample} {
			b = binary.AppendUvarint(b, v)
		}
		return b
	}
	h := header(2, 30, 90_000_000, 0, 1000, 8)
	tail := func(b []byte, vs ...uint64) []byte {
		b = slices.Clone(b)
		for _, v := range vs {
			b = binary.AppendUvarint(b, v)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrCorrupt},
		{"unknown version", append([]byte{2}, good[1:]...), ErrUnknownVersion},
		{"version 0", []byte{0}, ErrUnknownVersion},
		{"other strategy", append(header(1, 30, 90_000_000, 0, 1000, 8), 0, 0, 0), ErrConfigMismatch},
		{"other delay", append(header(2, 31, 90_000_000, 0, 1000, 8), 0, 0, 0), ErrConfigMismatch},
		{"other percentile", append(header(2, 30, 90_000_001, 0, 1000, 8), 0, 0, 0), ErrConfigMismatch},
		{"other min", append(header(2, 30, 90_000_000, 1, 1000, 8), 0, 0, 0), ErrConfigMismatch},
		{"other max", append(header(2, 30, 90_000_000, 0, 999, 8), 0, 0, 0), ErrConfigMismatch},
		{"other sample", append(header(2, 30, 90_000_000, 0, 1000, 9), 0, 0, 0), ErrConfigMismatch},
		{"sample longer than Sample", tail(h, 0, 0, 9, 1, 1, 1, 1, 1, 1, 1, 1, 1), ErrCorrupt},
		{"sample longer than the bytes", tail(h, 0, 0, 3, 1, 1), ErrCorrupt},
		{"delay above max", tail(h, 0, 0, 1, 1001), ErrCorrupt},
		{"trailing byte", append(slices.Clone(good), 0), ErrCorrupt},
		{"non-minimal uvarint", append(slices.Clone(h), 0x80, 0x00, 0, 0), ErrCorrupt},
		{"non-minimal varint", tail(append(slices.Clone(h), 0x81, 0x00), 0, 0), ErrCorrupt},
		{"uvarint overflow", append(slices.Clone(h[:2]), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := warmTracker(t, c, 2, 13)
			before := tr.AppendEncode(nil)
			err := tr.Decode(tc.data)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode: %v, want %v", err, tc.want)
			}
			if !bytes.Equal(tr.AppendEncode(nil), before) {
				t.Fatal("a failed Decode changed the tracker")
			}
		})
	}
	// Every proper prefix of a valid encoding is refused.
	for n := range len(good) {
		tr := mustTracker(t, c)
		if err := tr.Decode(good[:n]); err == nil {
			t.Fatalf("the %d-byte prefix of a %d-byte encoding decoded", n, len(good))
		}
	}
	// A fixed tracker's state has no sample.
	fixed := mustTracker(t, Config{Strategy: Fixed, DelayMs: 5})
	enc := fixed.AppendEncode(nil)
	enc[len(enc)-1] = 1
	if err := fixed.Decode(append(enc, 5)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("fixed state with a sample: %v", err)
	}
	// Extreme fixed watermarks round-trip.
	for _, f := range []int64{NoWatermark, math.MaxInt64, -1, 0} {
		fixed.fixedWM = f
		got := mustTracker(t, fixed.cfg)
		if err := got.Decode(fixed.AppendEncode(nil)); err != nil || got.FixedWatermark() != f {
			t.Fatalf("F = %d: %v, decoded %d", f, err, got.FixedWatermark())
		}
	}
}

// TestDecodeGarbage: random bytes and random mutations of valid encodings
// never panic, and what decodes re-encodes to the same bytes.
func TestDecodeGarbage(t *testing.T) {
	c := Config{Strategy: Adaptive, DelayMs: 30, Percentile: 90, MinMs: 0, MaxMs: 1000, Sample: 8}
	good := warmTracker(t, c, 3, 30).AppendEncode(nil)
	rng := rand.New(rand.NewPCG(8, 8))
	for i := range 20_000 {
		var b []byte
		if i%2 == 0 {
			b = make([]byte, rng.IntN(40))
			for j := range b {
				b[j] = byte(rng.UintN(256))
			}
		} else {
			b = slices.Clone(good)
			for range 1 + rng.IntN(3) {
				b[rng.IntN(len(b))] = byte(rng.UintN(256))
			}
		}
		tr := mustTracker(t, c)
		if err := tr.Decode(b); err == nil {
			if re := tr.AppendEncode(nil); !bytes.Equal(re, b) {
				t.Fatalf("%x decoded but re-encodes as %x", b, re)
			}
		}
	}
}
