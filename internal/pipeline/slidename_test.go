package pipeline

import (
	"slices"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/internal/window"
)

// A sliding rule's bucket entry names parse back to their bucket and sort
// by kind, then by bucket (negative buckets first), as a store scans them.
func TestBucketName(t *testing.T) {
	refs := []window.BucketRef{
		{Kind: window.DedupBucket, Key: "m1", Bucket: -2}, {Kind: window.DedupBucket, Key: "m1", Bucket: 5},
		{Kind: window.EventsBucket, Key: "", Bucket: -1}, {Kind: window.EventsBucket, Key: "m0", Bucket: 0},
		{Kind: window.EventsBucket, Key: "m1", Bucket: 0}, {Kind: window.EventsBucket, Key: "m0", Bucket: 1 << 40},
	}
	var names []string
	for _, r := range refs {
		n := bucketName(r)
		if got, ok := parseBucketName(n); !ok || got != r {
			t.Fatalf("parseBucketName(bucketName(%+v)) = %+v, %v", r, got, ok)
		}
		names = append(names, n)
	}
	if !slices.IsSorted(names) {
		t.Fatalf("bucket names do not sort by kind and bucket: %q", names)
	}
	for _, bad := range []string{"", "e", "e1234567", "x12345678k", "p12345678k", "m1"} {
		if _, ok := parseBucketName(bad); ok {
			t.Fatalf("parseBucketName(%q) accepted", bad)
		}
	}
}

// A sliding rule whose keys are spelled like the names of other keys'
// bucket entries ("e" or "d", 8 bytes of bucket, the key: as no JSON
// machine_id can be, but a key is any string) is restored from its entries
// at many points ("k" + key for key entries, "s" + name for bucket
// entries, as consume names them; persist loads them in map order) and
// emits exactly what an uninterrupted run emits.
func TestSlideRestoreThroughEntries(t *testing.T) {
	c := compileRule(t, func(r *rules.Rule) {
		r.Filter = `value >= 4`
		r.Window = rules.Window{Type: rules.Sliding, Size: rules.Duration(2 * time.Minute)}
	})
	s, err := NewRuleStage(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	evB := window.DefaultEventBucketMs(s.WindowConfig().LatenessMs, s.WindowConfig().SizeMs)
	ddB := window.DefaultDedupBucketMs(s.WindowConfig().DedupHorizonMs)
	log := troubledLine(5, 20_000)
	run := func(restoreEvery int) ([]string, Accounting, int) {
		var out []string
		acct := Accounting{Version: 1}
		p := s.NewPartition()
		store := map[string][]byte{}
		odd := map[string]bool{}
		for i, in := range log {
			if restoreEvery > 0 && i%restoreEvery == restoreEvery-1 {
				p.Sweep()
				p = persist(t, s, p, store)
			}
			ev, verr := s.Check(&in)
			if verr != nil {
				s.Process(p, in, &acct, func(Output) {})
				continue
			}
			if i%3 == 0 { // the key of one of its buckets, as another key's name
				kind, blen := window.EventsBucket, evB
				if i%2 == 0 {
					kind, blen = window.DedupBucket, ddB
				}
				ev.MachineID = bucketName(window.BucketRef{Kind: kind, Key: ev.MachineID, Bucket: ev.TS / blen})
				odd[ev.MachineID] = true
			}
			s.Apply(p, &ev, in, &acct, func(o Output) { out = append(out, string(o.Key)+"|"+Fingerprint(o.Value, o.Headers)) })
		}
		return out, acct, len(odd)
	}
	a, acctA, odd := run(0)
	b, acctB, _ := run(997)
	if !slices.Equal(a, b) || acctA != acctB {
		t.Fatalf("restored run differs: %d vs %d outputs, accounting %+v vs %+v", len(a), len(b), acctA, acctB)
	}
	if len(a) == 0 || odd == 0 {
		t.Fatalf("%d outputs, %d keys spelled as bucket names: the fixture proves nothing", len(a), odd)
	}
}

// A sliding rule's ids are persisted in the aggregating rules' dedup
// buckets (DedupBucketMs), as the docs say.
func TestSlidingDedupBucketsAreTheAggregatingOnes(t *testing.T) {
	for _, h := range []int64{1, 63_999, 64_000, 64_001, 720_001, 3_600_000, 86_400_000, 90 * 86_400_000} {
		if a, b := DedupBucketMs(h), window.DefaultDedupBucketMs(h); a != b {
			t.Fatalf("H = %d ms: aggregating buckets of %d ms, sliding ones of %d ms", h, a, b)
		}
	}
}
