package consume

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
)

// A rule version that starts from the group's offsets (version bump
// without replay / rule added) and whose first batch aborts, then the
// process restarts before any commit: the changelog holds only aborted
// records (exactly_once) or the uncommitted batch's records (at_least_once).
// Expected: the restart starts from the group's offsets again, as
// TestAbortAfterAVersionBumpRewindsToTheGroupsOffsets does within one run.
func TestNewVersionsAbortedFirstBatchThenRestart(t *testing.T) {
	for _, mode := range []string{config.ExactlyOnce, config.AtLeastOnce} {
		t.Run(mode, func(t *testing.T) {
			seeds := newCluster(t)
			cfg := testConfig(seeds, t.TempDir(), "abortrestart")
			cfg.Mode = mode
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
			deadline := time.Now().Add(30 * time.Second)
			for aborted.Load() < 3 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			in2.stop(t) // a crash before the first commit of version 2
			if aborted.Load() == 0 {
				t.Fatal("no batch was aborted")
			}
			in3 := start(t, cfg2, Options{})
			done := make(chan struct{})
			go func() {
				waitConsumed(t, seeds, cfg2, log)
				close(done)
			}()
			select {
			case err := <-in3.done:
				t.Fatalf("version 2 stopped on restart: %v", err)
			case <-done:
			}
			in3.stop(t)
			var v2 int64
			for _, a := range latestAccounting(t, seeds, cfg2) {
				v2 += a.Records
			}
			if v2 != 2000 {
				t.Errorf("version 2 counted %d records, want 2000", v2)
			}
		})
	}
}
