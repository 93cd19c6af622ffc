package dedup

import (
	"fmt"
	"math"
	"testing"
)

// BenchmarkSeen measures what a caller does per qualifying record in the
// steady state: Seen, then Advance to the new watermark. 10,000 keys take
// turns, one record per millisecond of event time (each key every 10 s),
// with the watermark 30 s behind (D) and H = 100 s or 1,000 s: about 10 or
// 100 ids per key, 100,000 or 1,000,000 in the set, each record expiring
// about one. Ids cycle through a pool of 256 per key (unique within the
// horizon), so generating the input allocates nothing. Per size: every
// record new, and 10% of the records redeliveries of an id the key saw 1
// to H/20 s (half the horizon) ago. The large set is bound by memory latency: every record
// touches two random keys' maps and slices in a heap of about 150 MB.
//
// views=7 is the same stream through seven views of one store (the
// aggregating rules of the 10-rule mix over one partition), each record
// passed to every view in turn, Seen then Advance, as the pipeline does.
func BenchmarkSeen(b *testing.B) {
	for _, h := range []int64{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("ids=%dk/new", h/1000), func(b *testing.B) { benchSeen(b, h, false, 1, 0) })
		b.Run(fmt.Sprintf("ids=%dk/dup10pc", h/1000), func(b *testing.B) { benchSeen(b, h, true, 1, 0) })
	}
	b.Run("ids=100k/new/views=7", func(b *testing.B) { benchSeen(b, 100_000, false, 7, 0) })
	// As the aggregating rules' dedup keepers: persisted by buckets of
	// H/64 (pipeline.DedupBucketMs), which are dropped whole (keepThr).
	b.Run("ids=100k/new/views=7/bucketed", func(b *testing.B) { benchSeen(b, 100_000, false, 7, 100_000/64) })
	b.Run("ids=1000k/new/views=7/bucketed", func(b *testing.B) { benchSeen(b, 1_000_000, false, 7, 1_000_000/64) })
}

// benchSeen runs the stream through views views of one store, persisted
// by key (bucketMs 0, New) or by buckets of bucketMs (NewBucketed).
func benchSeen(b *testing.B, h int64, dup bool, views int, bucketMs int64) {
	const (
		nKeys = 10_000
		d     = 30_000 // ms
		pool  = 256    // ids per key, > the at most 103 within H + D
		// records per commit (ClearDirty), about a 100 ms transaction's
		// of one partition of the 10-rule benchmark
		commitEvery = 20_000
	)
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("machine-%05d", i)
	}
	ids := make([]string, pool)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt-%016x", uint64(i)*0x9e3779b97f4a7c15)
	}
	maxBack := h / nKeys / 2 // turns
	first := mustNew(b, h)
	if bucketMs > 0 {
		var err error
		if first, err = NewBucketed(h, bucketMs); err != nil {
			b.Fatal(err)
		}
	}
	vs := []*Set{first}
	for len(vs) < views {
		v, err := vs[0].NewView()
		if err != nil {
			b.Fatal(err)
		}
		vs = append(vs, v)
	}
	s := vs[0]
	var n int64 // record number = its ts in ms
	dups := 0
	step := func() {
		k, turn := n%nKeys, n/nKeys
		ts := n
		if dup && (turn+k)%10 == 0 && turn > maxBack {
			// A redelivery of the key's record 1 to maxBack turns ago
			// (within H), which was not a redelivery itself.
			back := 1 + (n*7)%maxBack
			if back%10 == 0 {
				back++
			}
			turn -= back
			ts -= back * nKeys
		}
		for _, v := range vs {
			if v.Seen(keys[k], ids[turn%pool], ts) && v == s {
				dups++
			}
			v.Advance(n - d)
		}
		n++
		if n%commitEvery == 0 {
			// A commit: what it persisted is no longer dirty (without
			// it, a bucketed view's dirty buckets pile up).
			for _, v := range vs {
				v.ClearDirty()
			}
		}
	}
	for range 2 * (h + d) { // fill to the steady state
		step()
	}
	dups = 0
	st := s.Stats()
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
	// With buckets a key also holds the ids of its oldest bucket that
	// have expired (keepThr): up to one bucket's worth more.
	if st.Keys != nKeys || int64(st.IDs) < h*8/10 || int64(st.IDs) > h+d+nKeys+bucketMs {
		b.Fatalf("not the intended steady state: %+v", st)
	}
	want := 0.0
	if dup {
		want = 0.1
	}
	if got := float64(dups) / float64(b.N); b.N >= 10_000 && math.Abs(got-want) > 0.02 {
		b.Fatalf("%d duplicates in %d records, want %.0f%%", dups, b.N, want*100)
	}
	b.ReportMetric(float64(st.IDs), "ids")
	b.ReportMetric(float64(dups)/float64(b.N), "dup/op")
}
