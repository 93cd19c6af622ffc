package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/deliver"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/sim"
)

const inputTopic = "vibration.events"

// produceInput writes n simulated sensor events (with frequent
// high-vibration episodes, so the processor emits many alerts).
func produceInput(t testing.TB, seeds []string, n int) {
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
func coreRun(t testing.TB, seeds []string, group string, n int) float64 {
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
		// Bounded: a processor stuck waiting on something (delivery, say)
		// must fail the test, not hang it until go test's timeout.
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("processor %s: %v", group, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("processor %s did not stop within 30s of its cancel", group)
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

// TestSlowReceiverDoesNotHoldUpTheCore: the core processor never waits
// for delivery (the delivery stage is its own consumer group reading the
// alerts topic), so a sink that does not answer at all, the slowest
// receiver there is, backs up only the delivery stage: with the stage
// stuck, the core still processes and commits the whole input, and
// commits the same alerts as without the stage, while the stage delivers
// nothing.
//
// Nothing here is timed: the core has a generous 60 s for an input it
// processes in a second or two, and the stage cannot make progress
// however fast or slow the machine is, because the receiver holds every
// request until the test ends (and the sink's timeout, 5 m, is longer than
// the test). A core coupled to delivery (waiting for the delivery group's
// progress, for its lag to fall, for a sink) would never finish its input
// and fails the 60 s deadline; one that dropped or aborted output while
// the stage is stuck fails the comparison of the alerts. Whether a busy
// (not stuck) stage costs the core throughput when they share the machine
// is a question of speed: BenchmarkSlowReceiver.
func TestSlowReceiverDoesNotHoldUpTheCore(t *testing.T) {
	seeds := newCluster(t, inputTopic, alertsTopic)
	const n = 15000 // a few seconds with -race; size does not change what is shown
	produceInput(t, seeds, n)

	// The core alone, without a delivery stage: the alerts it commits for
	// this input (decisions depend only on the log, so every run over the
	// same input in a new group commits the same revisions). They are also
	// what the stuck stage will be stuck on.
	coreRun(t, seeds, "core-alone", n)
	alone := committedAlerts(t, seeds)
	before := endOffsets(t, seeds, alertsTopic)
	var parts int // partitions holding alerts: one lane each
	for _, end := range before {
		if end > 0 {
			parts++
		}
	}
	if len(alone) == 0 || parts == 0 {
		t.Fatal("the core alone committed no alerts: nothing for the delivery stage to be stuck on")
	}

	// The stuck stage: every lane sends its head revision, which the
	// receiver holds, and blocks on it. max_buffered 2 is below what each
	// partition holds, so every partition also fills its buffer and pauses
	// its fetching: the stage is backed up as far as it goes.
	rcv := newReceiver(t)
	release := rcv.holdRequests()
	cfg := testConfig(seeds, deliver.SinkConfig{Type: deliver.TypeWebhook, Name: "stuck", URL: rcv.url(), Timeout: 5 * time.Minute})
	cfg.GroupID = "delivery-stuck"
	cfg.MaxBuffered = 2
	st := startStage(t, cfg)
	t.Cleanup(release) // cleanups run last first: answer the held requests before the stage stops, or it waits for them
	rcv.waitRequested(t, parts, 20*time.Second)
	lagBefore := waitLag(t, st, -1, 5*time.Second)

	// The core again, in a new group, over the whole input: coreRun fails
	// the test unless every input record is processed and committed
	// (processor_records_total reaches n) within 60 s.
	coreRun(t, seeds, "core-stuck", n)

	// Its committed output is complete: the topic now holds every
	// revision the core alone committed twice as often (once per run),
	// and nothing else. (both includes the first run, so both - alone is
	// what the second run committed.)
	both := committedAlerts(t, seeds)
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(both)) {
		if stuck := both[k] - alone[k]; stuck != alone[k] {
			diff = append(diff, fmt.Sprintf("%s: %d alone, %d with the stage stuck", k, alone[k], stuck))
		}
	}
	if len(diff) > 0 {
		t.Errorf("%d of %d distinct alert revisions committed a different number of times with the delivery stage stuck than by the core alone, e.g.\n%s",
			len(diff), len(alone), strings.Join(diff[:min(len(diff), 5)], "\n"))
	}

	// And the stage is still stuck: it received one request per lane, the
	// held heads, and no other (no retries: the sink's timeout has not
	// passed), answered none, finished none, and its lag is every offset of
	// the alerts topic, the core's second run included. The lag of a paused
	// partition is refreshed every 5 s (deliver's lagRefresh), hence the
	// wait.
	after := endOffsets(t, seeds, alertsTopic)
	lag := waitLagEnds(t, st, after, 20*time.Second)
	var revisions int
	for _, c := range alone {
		revisions += c
	}
	t.Logf("alerts: %d revisions per run; delivery lag %v before the core's run with the stage stuck, %v after (end offsets %v -> %v)",
		revisions, lagBefore, lag, before, after)
	if got := rcv.requested(); got != parts {
		t.Errorf("receiver received %d requests, want %d: one held head per lane, nothing else", got, parts)
	}
	if _, _, ans, _ := rcv.snapshot(); len(ans) != 0 {
		t.Errorf("receiver answered %v, want nothing: the stage must be stuck throughout", ans)
	}
	if d := metric(t, st.reg, "processor_delivery_total", nil); d != 0 {
		t.Errorf("processor_delivery_total %v, want 0: the stage finished revisions it cannot have delivered", d)
	}
}

// committedAlerts counts the committed revisions in the alerts topic by
// alert id and revision.
func committedAlerts(t *testing.T, seeds []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, r := range readTopic(t, seeds, alertsTopic) {
		a, err := alerts.Decode(r.Value)
		if err != nil {
			t.Fatalf("alerts topic p%d@%d: %v", r.Partition, r.Offset, err)
		}
		out[fmt.Sprintf("%s/%d", a.AlertID, a.Revision)]++
	}
	return out
}

// endOffsets returns the end offset of each partition of topic.
func endOffsets(t *testing.T, seeds []string, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// waitLagEnds waits until each partition's delivery lag is its end offset
// in ends, which is to say the stage finished nothing of it (a partition's
// first offset is 0), and returns the total lag; after timeout it marks t
// failed and returns the total then.
func waitLagEnds(t *testing.T, st *stage, ends map[int32]int64, timeout time.Duration) float64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var total float64
		var off []string
		for p, end := range ends {
			lag := metric(t, st.reg, "processor_delivery_lag_records", map[string]string{"partition": strconv.Itoa(int(p))})
			total += lag
			if lag != float64(end) {
				off = append(off, fmt.Sprintf("p%d lag %v, end offset %d", p, lag, end))
			}
		}
		if len(off) == 0 {
			return total
		}
		if time.Now().After(deadline) {
			slices.Sort(off)
			t.Errorf("delivery lag not every offset of the alerts topic within %s (the stage finished something, or does not see the core's output): %s", timeout, strings.Join(off, "; "))
			return total
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkSlowReceiver measures what TestSlowReceiverDoesNotHoldUpTheCore
// cannot: the core processor's throughput with a delivery stage that is
// busy, not stuck, with a receiver taking 200 ms per request, against its
// throughput without the stage (the same work each time: the whole input
// in a new consumer group). That the core never waits for delivery is the
// test's; what is left to measure is the cost of the two sharing the
// machine (CPU, the in-process cluster). It reports the median ratio
// with/without (1: no cost) and the median throughputs. It was the test's
// assertion (median >= 0.8) until a run on the shared 2-core CI machines
// measured 0.74, its pairs 0.47 to 1.25, and passed on the rerun: a speed
// figure, not a pass/fail property.
//
// Identical runs on those machines differ by up to 2x. So each iteration
// runs four times in ABBA order (without, with, with, without) and each
// adjacent (without, with) pair gives a ratio; a stage that slowed the
// core would lower every pair's ratio. Run it with a few iterations, e.g.
//
//	go test -run '^$' -bench SlowReceiver -benchtime 4x ./test/delivery/
func BenchmarkSlowReceiver(b *testing.B) {
	seeds := newCluster(b, inputTopic, alertsTopic)
	n := 240000 // about half a second per run on the 2-core machines: many commits (20 ms apart) per measurement
	if raceEnabled {
		n = 15000
	}
	produceInput(b, seeds, n)
	rcv := newReceiver(b)
	rcv.delay = 200 * time.Millisecond
	cfg := testConfig(seeds, deliver.SinkConfig{Type: deliver.TypeWebhook, Name: "slow", URL: rcv.url(), Timeout: 5 * time.Second})
	cfg.GroupID = "delivery-slow"

	var ratios, with, without, lags []float64
	var st *stage
	for i := 0; i < b.N; i++ {
		var pending float64 // the first run of the current pair
		for run := range 4 {
			withStage := run == 1 || run == 2
			switch {
			case withStage && st == nil:
				st = startStage(b, cfg)
				_, _, ans, _ := rcv.snapshot()
				rcv.waitAnswered(b, http.StatusOK, ans[http.StatusOK]+1, 20*time.Second) // delivering
			case !withStage && st != nil:
				st.stop(b)
				st = nil
			}
			r := coreRun(b, seeds, fmt.Sprintf("core-%d-%d", i, run), n)
			if withStage {
				with = append(with, r)
				lags = append(lags, maxLag(b, st, time.Second)) // the stage falls behind: the receiver takes 5 per second per partition
			} else {
				without = append(without, r)
			}
			switch run {
			case 0, 2:
				pending = r
			case 1:
				ratios = append(ratios, r/pending)
			case 3:
				ratios = append(ratios, pending/r)
			}
		}
	}
	b.Logf("core throughput with/without the slow delivery stage, per pair: %.2f; rec/s with %.0f, without %.0f; delivery lag after each run with it %v",
		ratios, with, without, lags)
	b.ReportMetric(0, "ns/op") // an iteration is four runs and their set-up: not a figure
	b.ReportMetric(median(ratios), "with/without")
	b.ReportMetric(median(with), "rec/s-with")
	b.ReportMetric(median(without), "rec/s-without")
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// maxLag returns the highest delivery lag seen within d.
func maxLag(t testing.TB, st *stage, d time.Duration) float64 {
	t.Helper()
	var m float64
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		m = max(m, metric(t, st.reg, "processor_delivery_lag_records", nil))
	}
	return m
}

// waitLag waits until the delivery lag (summed over partitions) exceeds
// above and returns it; it fails t after timeout.
func waitLag(t testing.TB, st *stage, above float64, timeout time.Duration) float64 {
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
