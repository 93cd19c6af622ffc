package consume

import (
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
)

// at_least_once: an aborted batch's changelog records are written
// (alo.End flushes before it aborts). When it wrote more chunks of an entry
// than the committed state has, the next committed write tombstones only
// the committed count (rp.chunks, from the local store): the extra chunks
// stay live in the changelog, and a full restore stops with errCorruptChunks.
func TestAtLeastOnceAbortedChunksAreNotOrphaned(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "alochunks")
	cfg.Mode = config.AtLeastOnce
	cfg.CommitInterval = 3 * time.Second // one batch per run
	const machine = "M-chunky"
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	log := pipeline.Log{}
	produce(t, seeds, cfg.Topics.Input, bigIDEvents(t, machine, base, 0, 700), log) // a dedup bucket of 2 chunks
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	t.Logf("after run 1: live chunks %v", liveChunks(t, seeds, cfg))

	produce(t, seeds, cfg.Topics.Input, bigIDEvents(t, machine, base, 700, 1700), log) // two more
	var aborted atomic.Int64
	in = start(t, cfg, Options{AbortBatch: func() bool { aborted.Add(1); return true }})
	for aborted.Load() < 1 {
		time.Sleep(20 * time.Millisecond)
	}
	in.stop(t)
	t.Logf("after the aborted run: live chunks %v", liveChunks(t, seeds, cfg))

	// The next run processes the same records and, hours later, the close:
	// the key is deleted in one committed batch.
	produce(t, seeds, cfg.Topics.Input, []sim.Record{
		bigIDRecord(t, machine, base, "close", 4*time.Hour, 1),
		bigIDRecord(t, machine, base, bigID(9000), 4*time.Hour+time.Second, 9),
	}, log)
	in = start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	live := liveChunks(t, seeds, cfg)
	t.Logf("after the committed run: live chunks %v", live)

	// A new replica (empty state_dir) restores from the changelog.
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		t.Fatal(err)
	}
	produce(t, seeds, cfg.Topics.Input, []sim.Record{bigIDRecord(t, machine, base, bigID(9001), 4*time.Hour+2*time.Second, 9)}, log)
	in = start(t, cfg, Options{})
	done := make(chan struct{})
	go func() { waitConsumed(t, seeds, cfg, log); close(done) }()
	select {
	case err := <-in.done:
		t.Fatalf("restore on a new replica stopped: %v (live chunks %v)", err, live)
	case <-done:
	}
	in.stop(t)
}
