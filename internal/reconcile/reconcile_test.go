package reconcile

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/sim"
)

// processed runs the processor over a simulated stream on an in-process
// cluster and returns the cluster's addresses and the config.
func processed(t *testing.T) config.Config {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "vibration.events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := config.Default()
	cfg.Brokers = c.ListenAddrs()
	cfg.StateDir = t.TempDir()
	cfg.InstanceID = "r"
	cfg.CommitInterval = 20 * time.Millisecond

	o := sim.Demo()
	o.Machines = 12
	o.Seed = 1
	o.EpisodeRate = 0.05
	o.OutageLength = 11 * time.Minute
	o.OutageRate = 0.004
	line := sim.New(o)
	prod, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.DefaultProduceTopic(cfg.Topics.Input))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var batch []*kgo.Record
	for i := 0; i < 10_000; i++ {
		r := line.Next()
		batch = append(batch, &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp})
	}
	if err := prod.ProduceSync(context.Background(), batch...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	p, err := consume.New(cfg, consume.Options{Metrics: met, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	adm := kadm.NewClient(prod)
	deadline := time.Now().Add(30 * time.Second)
	for {
		offs, err := adm.FetchOffsets(ctx, cfg.GroupID)
		var sum int64
		if err == nil {
			offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
		}
		if sum == int64(len(batch)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not consumed in time (%d of %d)", sum, len(batch))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestReconcile(t *testing.T) {
	cfg := processed(t)
	rep, err := Run(context.Background(), Options{Config: cfg, Recompute: true, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.String())
	if !rep.OK() || rep.Alerts == 0 || rep.DeadLetters == 0 || rep.TooLate == 0 || rep.InputRecords != 10_000 {
		t.Fatalf("clean run: %s", rep)
	}

	// Now break things the way a broken processor would, and see each caught.
	prod, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	alertRecs, err := ReadCommitted(context.Background(), cfg.Brokers, cfg.Topics.Alerts, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := ReadCommitted(context.Background(), cfg.Brokers, cfg.Topics.DLQ, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	dup := alertRecs[0]
	fakeEvidence := []byte(strings.Replace(string(alertRecs[len(alertRecs)-1].Value), `"offset":`, `"offset":9`, 1))
	redlq := dlq[0]
	err = prod.ProduceSync(context.Background(),
		&kgo.Record{Topic: cfg.Topics.Alerts, Key: dup.Key, Value: dup.Value},                          // a doubled revision
		&kgo.Record{Topic: cfg.Topics.Alerts, Key: []byte("x"), Value: fakeEvidence},                   // evidence not in the input
		&kgo.Record{Topic: cfg.Topics.DLQ, Key: redlq.Key, Value: redlq.Value, Headers: redlq.Headers}, // a dead letter twice
	).FirstErr()
	if err != nil {
		t.Fatal(err)
	}
	rep, err = Run(context.Background(), Options{Config: cfg, Recompute: true, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(rep.Violations, "\n")
	for _, want := range []string{"appears twice", "is not in the input", "dead", "differ from a recomputation"} {
		if !strings.Contains(all, want) {
			t.Errorf("violations do not mention %q:\n%s", want, all)
		}
	}
	if rep.OK() {
		t.Fatal("a broken topic set reconciled OK")
	}
}
