package replay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/sim"
)

// topics.changelog does not follow rule.version: after a version bump
// that kept it, replay and run both refuse, and both say that the new
// version needs a new changelog topic there (not "bump the version",
// which was done).
func TestChangelogOverrideNeedsANewTopicPerVersion(t *testing.T) {
	v1 := kafkatest.Config(kafkatest.Cluster(t, 3, "vibration.events").ListenAddrs(), t.TempDir(), "r")
	v1.SessionTimeout = 2 * time.Second
	v1.Topics.Changelog = "vibration.state"
	input := kafkatest.NextOffsets(kafkatest.Produce(t, v1.Brokers, v1.Topics.Input, kafkatest.Records(sim.New(sim.Demo()), 2000)...))
	p := startProcessor(t, v1)
	kafkatest.WaitCommitted(t, v1.Brokers, v1.GroupID, "vibration.events", input, 30*time.Second)
	p.stop(t)
	v2 := v1
	v2.Rule.Version, v2.Rule.Threshold = 2, 4
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err = Run(context.Background(), Options{Config: v2, DryRun: true})
		if !errors.Is(err, ErrLiveMembers) || time.Now().After(deadline) {
			break
		}
	}
	if !errors.Is(err, ErrStateExists) || !strings.Contains(err.Error(), "topics.changelog is set") {
		t.Fatalf("replay: %v, want ErrStateExists naming topics.changelog", err)
	}
	p = startProcessor(t, v2)
	select {
	case err := <-p.done:
		if !errors.Is(err, consume.ErrRuleChanged) || !strings.Contains(err.Error(), "topics.changelog is set") {
			t.Fatalf("run: %v, want ErrRuleChanged naming topics.changelog", err)
		}
	case <-time.After(30 * time.Second):
		p.stop(t)
		t.Fatal("run: version 2 ran on version 1's changelog")
	}
	// With a new changelog topic the new version replays.
	v2.Topics.Changelog = "vibration.state.v2"
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err = Run(context.Background(), Options{Config: v2, DryRun: true})
		if !errors.Is(err, ErrLiveMembers) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("replay with a new changelog topic: %v", err)
	}
}
