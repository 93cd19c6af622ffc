package consume

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/pipeline"
)

// Version 2 (bumped
// without replay) aborts its first batch, whose changelog records were
// partly sent before the abort (a chunked entry is larger than a producer
// batch); the process stops before a commit of version 2. The restart
// starts from the group's offsets (it used to refuse: no committed
// accounting, NextOffset 0, is not the committed offset).
func TestNewVersionsAbortedChunkedFirstBatch(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "natural")
	cfg.CommitInterval = 3 * time.Second
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	log := pipeline.Log{}
	produce(t, seeds, cfg.Topics.Input, bigIDEvents(t, "M-chunky", base, 0, 10), log)
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	cfg2 := cfg
	cfg2.Rule.Version = 2
	produce(t, seeds, cfg.Topics.Input, bigIDEvents(t, "M-chunky", base, 10, 1500), log)
	var aborted atomic.Int64
	in2 := start(t, cfg2, Options{AbortBatch: func() bool { aborted.Add(1); return true }})
	for aborted.Load() < 1 {
		time.Sleep(20 * time.Millisecond)
	}
	in2.stop(t)
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
