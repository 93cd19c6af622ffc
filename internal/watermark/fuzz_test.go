package watermark

import (
	"bytes"
	"testing"
)

// fuzzConfigs are the configurations FuzzDecode decodes under.
var fuzzConfigs = []Config{
	{Strategy: Adaptive, DelayMs: 30, Percentile: 90, MinMs: 0, MaxMs: 1000, Sample: 8},
	{Strategy: Adaptive, DelayMs: 5, Percentile: 100, MinMs: 5, MaxMs: 5, Sample: 1},
	{Strategy: Fixed, DelayMs: 30},
}

// FuzzDecode: Decode on arbitrary bytes never panics and leaves the tracker
// unchanged on error; a state it accepts re-encodes to the same bytes,
// satisfies the sample's invariants and can be observed on.
func FuzzDecode(f *testing.F) {
	for i, c := range fuzzConfigs {
		for _, n := range []int{0, 3, 8, 50} {
			f.Add(warmTracker(f, c, uint64(i*100+n), n).AppendEncode(nil))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range fuzzConfigs {
			tr := warmTracker(t, c, 1, 5)
			before := tr.AppendEncode(nil)
			if err := tr.Decode(data); err != nil {
				if !bytes.Equal(tr.AppendEncode(nil), before) {
					t.Fatalf("%+v: a failed Decode changed the tracker", c)
				}
				continue
			}
			if re := tr.AppendEncode(nil); !bytes.Equal(re, data) {
				t.Fatalf("%+v: %x decoded but re-encodes as %x", c, data, re)
			}
			if err := tr.q.check(); err != nil {
				t.Fatalf("%+v: %v", c, err)
			}
			if d := tr.DelayMs(); d < 0 || d > MaxDelayMs || (c.Strategy == Adaptive && (d < c.MinMs || d > c.MaxMs)) {
				t.Fatalf("%+v: decoded delay %d", c, d)
			}
			for i := range int64(20) {
				tr.ObserveEvent(1000+i*7, 1000-i*3, 10, tr.FixedWatermark())
			}
			if err := tr.q.check(); err != nil {
				t.Fatalf("%+v: after observing: %v", c, err)
			}
		}
	})
}
