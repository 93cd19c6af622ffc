package harness

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadCommitted reads topic from the start of every partition up to its high
// watermark at the time of the call, with read_committed isolation, and
// returns the committed data records in partition order, then offset order.
//
// Control records (transaction markers) are read too, to see progress past
// the last stable offset, but not returned: a partition is done when the
// next offset to read reaches the high watermark. A transaction still open
// pins the last stable offset below the high watermark, so ReadCommitted
// waits for it to end, at most timeout, and then fails the test, saying
// which partitions are behind.
func ReadCommitted(t testing.TB, seeds []string, topic string, timeout time.Duration) []*kgo.Record {
	t.Helper()
	recs, err := readCommitted(seeds, topic, timeout)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return recs
}

func readCommitted(seeds []string, topic string, timeout time.Duration) ([]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, fmt.Errorf("read %s: admin client: %w", topic, err)
	}
	ends, err := kadm.NewClient(admCl).ListEndOffsets(ctx, topic)
	admCl.Close()
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: list end offsets: %w", topic, err)
	}

	end := map[int32]int64{}  // partition -> high watermark
	next := map[int32]int64{} // partition -> next offset seen
	start := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic != topic {
			return
		}
		end[o.Partition] = o.Offset
		next[o.Partition] = 0
		if o.Offset > 0 {
			start[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(end) == 0 {
		return nil, fmt.Errorf("read %s: topic has no partitions (does it exist?)", topic)
	}
	done := func() bool {
		for p, e := range end {
			if next[p] < e {
				return false
			}
		}
		return true
	}
	if done() {
		return nil, nil
	}

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return nil, fmt.Errorf("read %s: consumer: %w", topic, err)
	}
	defer cl.Close()

	var out []*kgo.Record
	for !done() {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("read %s read_committed: not at the end after %v (an open transaction pins the last stable offset?): %s",
				topic, timeout, progress(end, next))
		}
		var errs []error
		fetches.EachError(func(tp string, p int32, err error) {
			errs = append(errs, fmt.Errorf("partition %d: %w", p, err))
		})
		if len(errs) > 0 {
			return nil, fmt.Errorf("read %s: fetch: %w", topic, errors.Join(errs...))
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 > next[r.Partition] {
				next[r.Partition] = r.Offset + 1
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	// Records past the high watermark of the call (produced meanwhile) are
	// not part of the answer.
	kept := out[:0]
	for _, r := range out {
		if r.Offset < end[r.Partition] {
			kept = append(kept, r)
		}
	}
	sort.SliceStable(kept, func(i, j int) bool {
		if kept[i].Partition != kept[j].Partition {
			return kept[i].Partition < kept[j].Partition
		}
		return kept[i].Offset < kept[j].Offset
	})
	return kept, nil
}

func progress(end, next map[int32]int64) string {
	parts := make([]int32, 0, len(end))
	for p := range end {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	var b strings.Builder
	for _, p := range parts {
		fmt.Fprintf(&b, " p%d at %d of %d;", p, next[p], end[p])
	}
	return strings.TrimSuffix(strings.TrimSpace(b.String()), ";")
}
