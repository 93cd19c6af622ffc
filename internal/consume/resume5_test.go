package consume

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
)

// Both modes: committed state of v1 (offsets 0..N) and the group's offsets moved
// back by a tool to 300 without metadata: documented as refused.
func TestToolResetBackIsRefused(t *testing.T) {
	for _, mode := range []string{config.ExactlyOnce, config.AtLeastOnce} {
		t.Run(mode, func(t *testing.T) {
			seeds := newCluster(t)
			cfg := testConfig(seeds, t.TempDir(), "reset")
			cfg.Mode = mode
			log := pipeline.Log{}
			produce(t, seeds, cfg.Topics.Input, simRecords(2000, 7), log)
			in := start(t, cfg, Options{})
			waitConsumed(t, seeds, cfg, log)
			in.stop(t)
			cl, _ := kgo.NewClient(kgo.SeedBrokers(seeds...))
			var offs kadm.Offsets
			for p := int32(0); p < testPartitions; p++ {
				offs.Add(kadm.Offset{Topic: cfg.Topics.Input, Partition: p, At: 300, LeaderEpoch: -1})
			}
			if _, err := kadm.NewClient(cl).CommitOffsets(context.Background(), cfg.GroupID, offs); err != nil {
				t.Fatal(err)
			}
			cl.Close()
			in = start(t, cfg, Options{})
			select {
			case err := <-in.done:
				// Partition 0's state ends past 300 and began before it.
				if !errors.Is(err, errFatal) || !strings.Contains(err.Error(), "partition vibration.events/0") || !strings.Contains(err.Error(), "count twice") {
					t.Fatalf("stopped with %v, want partition 0 refused (count twice)", err)
				}
			case <-time.After(8 * time.Second):
				in.stop(t)
				t.Errorf("not refused; accounting now %+v", latestAccounting(t, seeds, cfg))
			}
		})
	}
}
