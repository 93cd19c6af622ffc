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
	// Produced in chunks while the processor runs: many commits.
	var batch []*kgo.Record
	for i := 0; i < 10_000; i++ {
		r := line.Next()
		batch = append(batch, &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp})
		if i%1000 == 999 {
			if err := prod.ProduceSync(context.Background(), batch[len(batch)-1000:]...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(40 * time.Millisecond)
		}
	}
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

// A time range splits the check: [0, mid) and [mid, end) each reconcile,
// and together they cover every alert revision.
func TestReconcileRange(t *testing.T) {
	cfg := processed(t)
	cl, err := ReadCommitted(context.Background(), cfg.Brokers, cfg.ChangelogTopic(), 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	var stamps []time.Time
	for _, r := range cl {
		if string(r.Key) == "a" {
			stamps = append(stamps, r.Timestamp)
		}
	}
	if len(stamps) < 4 {
		t.Fatalf("only %d accounting records", len(stamps))
	}
	slices := func(from, to time.Time) *Report {
		rep, err := Run(context.Background(), Options{Config: cfg, From: from, To: to, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			t.Fatalf("range [%v, %v): %s", from, to, rep)
		}
		return rep
	}
	mid := stamps[len(stamps)/2]
	whole := slices(time.Time{}, time.Time{})
	a, b := slices(time.Time{}, mid), slices(mid, time.Time{})
	if a.Alerts+b.Alerts != whole.Alerts {
		t.Fatalf("alerts %d + %d != %d", a.Alerts, b.Alerts, whole.Alerts)
	}
	if _, err := Run(context.Background(), Options{Config: cfg, From: mid, Recompute: true}); err == nil {
		t.Fatal("recompute with a range must be refused")
	}
}
