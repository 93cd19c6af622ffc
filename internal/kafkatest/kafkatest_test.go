package kafkatest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/sim"
)

func TestProduceAndWaitCommitted(t *testing.T) {
	seeds := Cluster(t, 3, "in").ListenAddrs()
	recs := Produce(t, seeds, "in", Records(sim.New(sim.Demo()), 300)...)
	next := NextOffsets(recs)
	var total int64
	for _, n := range next {
		total += n
	}
	if len(recs) != 300 || total != 300 {
		t.Fatalf("%d records produced, next offsets %v", len(recs), next)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs := kadm.Offsets{}
	for p, at := range next {
		offs.Add(kadm.Offset{Topic: "in", Partition: p, At: at, LeaderEpoch: -1})
	}
	resp, err := kadm.NewClient(cl).CommitOffsets(context.Background(), "g", offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	WaitCommitted(t, seeds, "g", "in", next, 10*time.Second)

	cfg := Config(seeds, t.TempDir(), "i")
	if cfg.InstanceID != "i" || cfg.CommitInterval != 20*time.Millisecond || len(cfg.Brokers) != 1 {
		t.Fatalf("config %+v", cfg)
	}
	path := WriteFile(t, "rules.yaml", "rules: []\n")
	if b, err := os.ReadFile(path); err != nil || string(b) != "rules: []\n" {
		t.Fatalf("%s: %q %v", path, b, err)
	}
}
