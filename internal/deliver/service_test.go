package deliver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/kafkatest"
)

// start_from: latest delivers "only alerts written after the group first
// joined". The group's start is pinned when it first joins (committed at
// the first commit), also for a partition that then finishes nothing: a
// revision written while the member is down is delivered after its
// restart. (Without the pin the partition had no commit, the restart
// reset it to the end again and the revision was never delivered.)
func TestStartLatestPinsTheStartAtTheFirstJoin(t *testing.T) {
	seeds := kafkatest.Cluster(t, 1, "vibration.alerts").ListenAddrs()
	var mu sync.Mutex
	var got []int64
	sink := &funcSink{name: "hook", fn: func(_ context.Context, d Delivery) error {
		mu.Lock()
		got = append(got, d.Record.Offset)
		mu.Unlock()
		return nil
	}}
	cfg := Default()
	cfg.Brokers = seeds
	cfg.StartFrom = StartLatest
	cfg.CommitInterval = 50 * time.Millisecond
	cfg.SessionTimeout = time.Second
	cfg.Sinks = []SinkConfig{{Type: TypeWebhook, Name: "hook", URL: "http://127.0.0.1:1/"}}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	produce := func(n int) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for _, rec := range alertRecords(t, 0, "M-1", n, 1) {
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "vibration.alerts", Key: rec.Key, Value: rec.Value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func(d time.Duration) {
		t.Helper()
		svc, err := New(cfg, []Sink{sink}, Options{Registerer: prometheus.NewRegistry(), Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		deadline := time.Now().Add(10 * time.Second)
		for len(svc.ids()) == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if len(svc.ids()) == 0 {
			t.Fatal("no partition assigned")
		}
		time.Sleep(d)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	produce(2) // history before the group exists: not delivered
	run(500 * time.Millisecond)
	produce(1) // while the member is down, after the group joined
	run(2 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != 2 {
		t.Fatalf("delivered offsets %v, want [2]: only the revision written after the group first joined", got)
	}
}
