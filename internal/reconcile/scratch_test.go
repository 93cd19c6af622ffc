package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/kafkatest"
)

// After a scratch start (the group's offsets deleted, the changelog kept)
// the changelog holds tombstones of the earlier history's keys, the
// accounting record's among them: reconcile skips them rather than
// calling them undecodable accounting records. (It does report what the
// second pass wrote again: that is what a scratch start does.)
func TestScratchStartAccountingTombstonesAreSkipped(t *testing.T) {
	cfg := processed(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteGroup(context.Background(), cfg.GroupID); err != nil {
		t.Fatal(err)
	}
	stop := startProcessor(t, cfg)
	input, err := ReadCommitted(context.Background(), cfg.Brokers, cfg.Topics.Input, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	kafkatest.WaitCommitted(t, cfg.Brokers, cfg.GroupID, cfg.Topics.Input, kafkatest.NextOffsets(input), 30*time.Second)
	stop()
	changelog, err := ReadCommitted(context.Background(), cfg.Brokers, cfg.ChangelogTopic(), 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	tombstones := 0
	for _, r := range changelog {
		if string(r.Key) == "a" && r.Value == nil {
			tombstones++
		}
	}
	if tombstones == 0 {
		t.Fatal("no accounting tombstone in the changelog: the fixture proves nothing")
	}
	rep, err := Run(context.Background(), Options{Config: cfg, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		if strings.Contains(v, "accounting record") {
			t.Errorf("reconcile: %s", v)
		}
	}
}
