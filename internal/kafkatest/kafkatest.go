// Package kafkatest is scaffolding for tests that run the processor
// against franz-go's in-process fake Kafka cluster (kfake): a cluster with
// seeded topics, a configuration for a test processor, records of the
// simulated line produced to a topic, and waiting for a consumer group to
// commit what it was given.
//
// It is for tests only: no production code imports it. The in-package
// tests of internal/consume use it, so it must import nothing that imports
// internal/consume (only the standard library, franz-go, internal/config
// and internal/sim).
package kafkatest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/sim"
)

// Cluster starts a one-broker in-process cluster with topics created with
// partitions partitions each; it is closed when the test ends. The cluster
// accepts session timeouts from 500ms (kfake's default minimum is 6s), so
// that tests may let a stopped member expire quickly.
func Cluster(t testing.TB, partitions int32, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...),
		kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Config is the default configuration of a test processor on the cluster
// at seeds, with its state in stateDir, the static member id instance and
// a short commit interval (20ms: many transactions).
func Config(seeds []string, stateDir, instance string) config.Config {
	cfg := config.Default()
	cfg.Brokers = seeds
	cfg.StateDir = stateDir
	cfg.InstanceID = instance
	cfg.CommitInterval = 20 * time.Millisecond
	return cfg
}

// WriteFile writes text to a file called name in a new temporary directory
// of the test (a rules file, say) and returns its path.
func WriteFile(t testing.TB, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Records returns the next n records of the simulated line.
func Records(line *sim.Line, n int) []sim.Record {
	recs := make([]sim.Record, n)
	for i := range recs {
		recs[i] = line.Next()
	}
	return recs
}

// Produce writes the simulated records to topic synchronously, in one
// batch, and returns them as the broker stored them (with their partitions
// and offsets).
func Produce(t testing.TB, seeds []string, topic string, recs ...sim.Record) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	batch := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		batch[i] = &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	}
	if err := cl.ProduceSync(context.Background(), batch...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return batch
}

// NextOffsets returns, by partition, the offset after the last of the
// records (all of one topic): what a group that consumed them all has
// committed. It is not the end offset where transaction markers follow.
func NextOffsets(recs []*kgo.Record) map[int32]int64 {
	next := map[int32]int64{}
	for _, r := range recs {
		next[r.Partition] = max(next[r.Partition], r.Offset+1)
	}
	return next
}

// WaitCommitted waits until group has committed at least want[p] on every
// partition p of topic, and fails the test if it has not within timeout.
func WaitCommitted(t testing.TB, seeds []string, group, topic string, want map[int32]int64, timeout time.Duration) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(timeout)
	var got kadm.OffsetResponses
	for time.Now().Before(deadline) {
		offs, err := adm.FetchOffsets(context.Background(), group)
		if err == nil {
			got = offs
			if reached(offs, topic, want) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	have := map[int32]int64{}
	got.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			have[o.Partition] = o.At
		}
	})
	t.Fatalf("group %s did not commit %s up to %v within %s (committed %v)", group, topic, want, timeout, have)
}

func reached(offs kadm.OffsetResponses, topic string, want map[int32]int64) bool {
	for p, w := range want {
		if o, ok := offs.Lookup(topic, p); !ok || o.At < w {
			return false
		}
	}
	return true
}
