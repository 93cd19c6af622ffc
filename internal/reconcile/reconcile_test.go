package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/sim"
)

// processed runs the processor over a simulated stream on an in-process
// cluster and returns the cluster's addresses and the config.
func processed(t *testing.T) config.Config {
	t.Helper()
	cfg := kafkatest.Config(kafkatest.Cluster(t, 3, "vibration.events").ListenAddrs(), t.TempDir(), "r")

	o := sim.Demo()
	o.Machines = 12
	o.Seed = 1
	o.EpisodeRate = 0.05
	o.OutageLength = 11 * time.Minute
	o.OutageRate = 0.004
	line := sim.New(o)
	stop := startProcessor(t, cfg)
	// Produced in chunks while the processor runs: many commits.
	var produced []*kgo.Record
	for range 10 {
		produced = append(produced, kafkatest.Produce(t, cfg.Brokers, cfg.Topics.Input, kafkatest.Records(line, 1000)...)...)
		// Committed before the next chunk: at least one transaction per
		// chunk, however far ahead of its workers the processor polls.
		kafkatest.WaitCommitted(t, cfg.Brokers, cfg.GroupID, cfg.Topics.Input, kafkatest.NextOffsets(produced), 30*time.Second)
	}
	kafkatest.WaitCommitted(t, cfg.Brokers, cfg.GroupID, cfg.Topics.Input, kafkatest.NextOffsets(produced), 30*time.Second)
	stop()
	return cfg
}

// accountingStamps returns the timestamps of the accounting records of
// the changelog topic: at least 4 of them, to split a range at.
func accountingStamps(t *testing.T, brokers []string, changelog string) []time.Time {
	t.Helper()
	cl, err := ReadCommitted(context.Background(), brokers, changelog, 10*time.Second, nil)
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
	return stamps
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
	stamps := accountingStamps(t, cfg.Brokers, cfg.ChangelogTopic())
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
