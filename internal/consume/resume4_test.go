package consume

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
)

// ALO: an aborted first batch of v2 whose flushed prefix lacks the "a"
// record (simulated by a tombstone of "a") is loaded as state.
func TestAtLeastOncePartialFirstBatchIsNotState(t *testing.T) {
	run := func(inject bool) map[int32]pipeline.Accounting {
		seeds := newCluster(t)
		cfg := testConfig(seeds, t.TempDir(), "alopart")
		cfg.Mode = config.AtLeastOnce
		log := pipeline.Log{}
		recs := simRecords(4000, 7)
		produce(t, seeds, cfg.Topics.Input, recs[:2000], log)
		in := start(t, cfg, Options{})
		waitConsumed(t, seeds, cfg, log)
		in.stop(t)
		cfg2 := cfg
		cfg2.Rule.Version = 2
		produce(t, seeds, cfg.Topics.Input, recs[2000:], log)
		var aborted atomic.Int64
		in2 := start(t, cfg2, Options{AbortBatch: func() bool { aborted.Add(1); return true }})
		for aborted.Load() < 1 {
			time.Sleep(20 * time.Millisecond)
		}
		in2.stop(t)
		rs, _ := cfg2.Rules()
		cl := cfg2.ChangelogFor(rs[0])
		if inject {
			c, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			parts := map[int32]bool{}
			for _, r := range readAll(t, seeds, cl) {
				if string(r.Key) == changelogAcct && r.Value != nil {
					parts[r.Partition] = true
				}
			}
			t.Logf("partitions with aborted accounting: %v", parts)
			for p := range parts {
				if err := c.ProduceSync(context.Background(), &kgo.Record{Topic: cl, Partition: p, Key: []byte(changelogAcct)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			c.Close()
		}
		in3 := start(t, cfg2, Options{})
		done := make(chan struct{})
		go func() { waitConsumed(t, seeds, cfg2, log); close(done) }()
		select {
		case err := <-in3.done:
			t.Fatalf("stopped: %v", err)
		case <-done:
		}
		in3.stop(t)
		return latestAccounting(t, seeds, cfg2)
	}
	clean, injected := run(false), run(true)
	t.Logf("clean %+v", clean)
	t.Logf("injected %+v", injected)
	for p, a := range clean {
		if injected[p] != a {
			t.Errorf("partition %d: %+v vs clean %+v", p, injected[p], a)
		}
	}
}
