package consume

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/pipeline"
)

// A crash (or a rebalance) after the first batch of a
// new rule version was flushed but before its commit leaves the version's
// changelog with only aborted records: its LSO > 0, its committed state
// empty. The restart starts from the group's offsets (it used to refuse).
func TestNewVersionsAbortedChangelogRecordsThenRestart(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "abortcl")
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
	// What the flushed batch of the crashed incarnation leaves: records of
	// a transaction that the next incarnation's InitProducerID aborts.
	c, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID("crashed"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := c.ProduceSync(ctx, &kgo.Record{Topic: cl, Partition: 0, Key: []byte("a"), Value: []byte(`{"version":1,"records":5}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := c.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	c.Close()
	in3 := start(t, cfg2, Options{})
	done := make(chan struct{})
	go func() { waitConsumed(t, seeds, cfg2, log); close(done) }()
	select {
	case err := <-in3.done:
		t.Fatalf("version 2 stopped on restart: %v", err)
	case <-done:
	}
	in3.stop(t)
}
