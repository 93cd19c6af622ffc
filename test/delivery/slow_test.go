package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/deliver"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/sim"
)

const inputTopic = "vibration.events"

// produceInput writes n simulated sensor events (with frequent
// high-vibration episodes, so the processor emits many alerts).
func produceInput(t *testing.T, seeds []string, n int) {
	t.Helper()
	o := sim.Demo()
	o.Machines, o.SensorsPerMachine, o.Seed, o.EpisodeRate = 48, 1, 11, 0.005
	line := sim.New(o)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(inputTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		r := line.Next()
		recs[i] = &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// coreRun runs the core processor (internal/consume, exactly once) in a
// new consumer group over the whole input and returns its throughput in
// input records per second, from its first commit to the commit that
// completed the input (start-up is not measured).
func coreRun(t *testing.T, seeds []string, group string, n int) float64 {
	t.Helper()
	cfg := config.Default()
	cfg.Brokers = seeds
	cfg.GroupID = group
	cfg.InstanceID = group + "-0"
	cfg.StateDir = t.TempDir()
	cfg.SessionTimeout = 2 * time.Second
	cfg.CommitInterval = 20 * time.Millisecond
	cfg.MaxPollRecords = 1000
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu          sync.Mutex
		first, last time.Time
		firstCount  float64
		finished    = make(chan struct{})
	)
	onCommit := func() { // after each committed batch, on the processor's goroutine
		c := counted(met.Records)
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() && c > 0 {
			first, firstCount = time.Now(), c
		}
		if last.IsZero() && c >= float64(n) {
			last = time.Now()
			close(finished)
		}
	}
	proc, err := consume.New(cfg, consume.Options{Metrics: met, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OnCommit: onCommit})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("processor %s: %v", group, err)
		}
	}()
	select {
	case <-finished:
	case err := <-done:
		t.Fatalf("processor %s stopped: %v", group, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("processor %s: input not processed within 60s", group)
	}
	mu.Lock()
	defer mu.Unlock()
	return (float64(n) - firstCount) / last.Sub(first).Seconds()
}

// counted sums a counter vector.
func counted(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil && d.Counter != nil {
			sum += d.Counter.GetValue()
		}
	}
	return sum
}

// TestSlowReceiverDoesNotSlowTheCore: with a receiver that takes 200 ms
// per request, the core processor's throughput, measured in this test
// with and without the delivery stage running (the same work each time:
// the whole input in a new consumer group), stays within 20%, while the
// delivery stage's lag grows: a slow sink backs up only the delivery
// stage.
//
// The machines running these tests are shared: identical runs differ by up
// to 2x. So runs alternate in ABBA order (without, with, with, without,
// ...), each adjacent (without, with) pair gives a ratio, and the median
// ratio of at least 4 and at most 8 pairs must be >= 0.8. A delivery stage
// that slowed the core would lower every pair's ratio.
func TestSlowReceiverDoesNotSlowTheCore(t *testing.T) {
	seeds := newCluster(t, inputTopic, alertsTopic)
	n := 60000
	if raceEnabled {
		n = 15000
	}
	produceInput(t, seeds, n)
	rcv := newReceiver(t)
	rcv.delay = 200 * time.Millisecond
	cfg := testConfig(seeds, deliver.SinkConfig{Type: deliver.TypeWebhook, Name: "slow", URL: rcv.url(), Timeout: 5 * time.Second})
	cfg.GroupID = "delivery-slow"

	var (
		st                *stage
		ratios            []float64
		pending           float64 // the first run of the current pair
		lagFirst, lagLast = -1.0, -1.0
		median            float64
	)
	for run := 0; run < 16; run++ {
		with := run%4 == 1 || run%4 == 2
		switch {
		case with && st == nil:
			st = startStage(t, cfg)
			_, _, ans, _ := rcv.snapshot()
			rcv.waitAnswered(t, http.StatusOK, ans[http.StatusOK]+1, 20*time.Second) // delivering
		case !with && st != nil:
			st.stop(t)
			st = nil
		}
		var lagBefore float64
		if with {
			lagBefore = waitLag(t, st, -1, 5*time.Second)
			if lagFirst < 0 {
				lagFirst = lagBefore
			}
		}
		r := coreRun(t, seeds, fmt.Sprintf("core-%d", run), n)
		if with {
			// Every run writes tens of revisions within a second or two;
			// the receiver takes 5 per second per partition.
			lagLast = maxLag(t, st, time.Second)
			t.Logf("run %d with the delivery stage: %.0f rec/s; delivery lag %v -> %v", run, r, lagBefore, lagLast)
		} else {
			t.Logf("run %d without: %.0f rec/s", run, r)
		}
		if run%2 == 0 {
			pending = r
			continue
		}
		if with {
			ratios = append(ratios, r/pending)
		} else {
			ratios = append(ratios, pending/r)
		}
		sorted := slices.Sorted(slices.Values(ratios))
		median = sorted[len(sorted)/2]
		if len(sorted)%2 == 0 {
			median = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
		}
		if len(ratios) >= 4 && median >= 0.8 {
			break
		}
	}
	if st != nil {
		st.stop(t)
	}
	t.Logf("core throughput with/without the slow delivery stage, per pair: %.2f; median %.2f", ratios, median)
	if median < 0.8 {
		t.Errorf("core throughput with the slow delivery stage running is %.0f%% of the throughput without it (median of %d pairs: %.2f), want >= 80%%",
			100*median, len(ratios), ratios)
	}
	// Meanwhile the delivery stage fell behind: its lag grew.
	if lagLast <= lagFirst {
		t.Errorf("delivery lag %v after the runs, %v before: want it to grow behind the 200 ms receiver", lagLast, lagFirst)
	}
}

// maxLag returns the highest delivery lag seen within d.
func maxLag(t *testing.T, st *stage, d time.Duration) float64 {
	t.Helper()
	var m float64
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		m = max(m, metric(t, st.reg, "processor_delivery_lag_records", nil))
	}
	return m
}

// waitLag waits until the delivery lag (summed over partitions) exceeds
// above and returns it; it fails t after timeout.
func waitLag(t *testing.T, st *stage, above float64, timeout time.Duration) float64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		lag := metric(t, st.reg, "processor_delivery_lag_records", nil)
		if lag > above {
			return lag
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery lag %v, want it above %v within %s", lag, above, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
