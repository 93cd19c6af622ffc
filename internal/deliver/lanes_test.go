package deliver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/vibeline/processor/internal/alerts"
)

// funcSink is a sink whose answers the test decides.
type funcSink struct {
	name string
	fn   func(ctx context.Context, d Delivery) error
}

func (s *funcSink) Name() string                               { return s.name }
func (s *funcSink) Send(ctx context.Context, d Delivery) error { return s.fn(ctx, d) }

// value reads a counter or gauge.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	case d.Histogram != nil:
		return float64(d.Histogram.GetSampleCount())
	}
	t.Fatalf("metric %v has no value", m.Desc())
	return 0
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testRunners builds one runner per sink on a fresh registry, with the
// real clock (virtual inside a synctest bubble) and a seeded jitter source.
func testRunners(t *testing.T, retry RetryConfig, br BreakerConfig, sinks ...Sink) ([]*sinkRunner, *Metrics) {
	t.Helper()
	names := make([]string, len(sinks))
	for i, s := range sinks {
		names[i] = s.Name()
	}
	met, err := NewMetrics(prometheus.NewRegistry(), names)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var mu sync.Mutex
	clk := clock{now: time.Now, after: time.After, rand: func() float64 { mu.Lock(); defer mu.Unlock(); return rng.Float64() }}
	var rs []*sinkRunner
	for _, s := range sinks {
		rs = append(rs, newSinkRunner(s, retry, br, clk, met, quietLogger()))
	}
	return rs, met
}

// alertRecords returns n revisions of alerts on machine, as records of
// partition p from offset 0: revisions cycle over alerts a0..a(k-1).
func alertRecords(t *testing.T, p int32, machine string, n, k int) []Record {
	t.Helper()
	recs := make([]Record, n)
	for i := range n {
		a := alerts.Alert{
			AlertID: fmt.Sprintf("%s-a%d", machine, i%k), Revision: i / k, Status: alerts.StatusOpen,
			RuleID: "vibration-high", RuleVersion: 1, MachineID: machine,
			Start: 1767348000000, End: 1767348090000, Count: 3, Watermark: alerts.WatermarkNone, Reason: "r",
		}
		if a.Revision > 0 {
			a.Status = alerts.StatusUpdated
		}
		v, err := a.Encode()
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = Record{Topic: "vibration.alerts", Partition: p, Offset: int64(i), Key: []byte(machine), Value: v, Timestamp: time.Now()}
	}
	return recs
}

type dlqLog struct {
	mu  sync.Mutex
	dls []DeadLetter
}

func (l *dlqLog) write(_ context.Context, dl DeadLetter) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dls = append(l.dls, dl)
	return nil
}

func (l *dlqLog) all() []DeadLetter {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]DeadLetter(nil), l.dls...)
}

var quickRetry = RetryConfig{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, MaxAttempts: 5, MaxElapsed: time.Minute}
var quickBreaker = BreakerConfig{Failures: 5, Cooldown: time.Second}

// Two sinks: the fast one gets every record in order at once; the slow one
// holds record 5, so the commit position stops at 5 until it is released.
func TestLanesOrderAndCommitAtTheSlowestSink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		got := map[string][]int64{}
		gate := make(chan struct{})
		record := func(name string) func(context.Context, Delivery) error {
			return func(_ context.Context, d Delivery) error {
				if name == "slow" && d.Record.Offset == 5 {
					<-gate
				}
				mu.Lock()
				got[name] = append(got[name], d.Record.Offset)
				mu.Unlock()
				return nil
			}
		}
		rs, met := testRunners(t, quickRetry, quickBreaker, &funcSink{"fast", record("fast")}, &funcSink{"slow", record("slow")})
		var dlq dlqLog
		p := newPartition("vibration.alerts", 0, rs, dlq.write, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { p.run(ctx); close(done) }()
		p.push(alertRecords(t, 0, "M-1", 10, 3)...)
		synctest.Wait()
		if off, _, ok := p.commitPos(); !ok || off != 5 {
			t.Fatalf("commit position %d (%v) while the slow sink holds offset 5, want 5", off, ok)
		}
		mu.Lock()
		if fmt.Sprint(got["fast"]) != "[0 1 2 3 4 5 6 7 8 9]" || fmt.Sprint(got["slow"]) != "[0 1 2 3 4]" {
			t.Fatalf("before release: %v", got)
		}
		mu.Unlock()
		if n := p.buffered(); n != 5 {
			t.Fatalf("buffered %d, want the 5 records the slow sink has not finished", n)
		}
		close(gate)
		synctest.Wait()
		if off, _, _ := p.commitPos(); off != 10 {
			t.Fatalf("commit position %d after release, want 10", off)
		}
		if fmt.Sprint(got["slow"]) != "[0 1 2 3 4 5 6 7 8 9]" {
			t.Fatalf("slow sink order %v", got["slow"])
		}
		cancel()
		<-done
		if n := value(t, met.Deliveries.WithLabelValues("slow", OutcomeDelivered)); n != 10 {
			t.Errorf("delivered{slow} = %v", n)
		}
		if len(dlq.all()) != 0 {
			t.Errorf("dead letters: %v", dlq.all())
		}
	})
}

// A permanent rejection dead-letters that revision at once (no retries)
// and the lane moves on; an undecodable record is dead-lettered without
// calling the sink.
func TestLanesPermanentAndUndecodableGoToTheDLQ(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls sync.Map
		sink := &funcSink{"hook", func(_ context.Context, d Delivery) error {
			n, _ := calls.LoadOrStore(d.IdempotencyKey, new(int))
			*n.(*int)++
			if d.Alert.AlertID == "M-1-a1" {
				return &SendError{Sink: "hook", Status: 422, Class: Permanent, Body: "unknown machine"}
			}
			return nil
		}}
		rs, met := testRunners(t, quickRetry, quickBreaker, sink)
		var dlq dlqLog
		p := newPartition("vibration.alerts", 0, rs, dlq.write, nil)
		recs := alertRecords(t, 0, "M-1", 6, 2)
		recs = append(recs, Record{Topic: "vibration.alerts", Offset: 6, Key: []byte("M-1"), Value: []byte("garbage")})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { p.run(ctx); close(done) }()
		p.push(recs...)
		synctest.Wait()
		cancel()
		<-done
		if off, _, _ := p.commitPos(); off != 7 {
			t.Fatalf("commit position %d, want 7: dead letters finish records too", off)
		}
		dls := dlq.all()
		if len(dls) != 4 {
			t.Fatalf("%d dead letters, want 3 rejected revisions of M-1-a1 and 1 undecodable: %+v", len(dls), dls)
		}
		for i, dl := range dls[:3] {
			if dl.Reason != ReasonRejected || dl.Attempts != 1 || dl.LastStatus != 422 || dl.IdempotencyKey != fmt.Sprintf("M-1-a1-%d", i) {
				t.Errorf("dead letter %d: %+v", i, dl)
			}
		}
		if dl := dls[3]; dl.Reason != ReasonUndecodable || dl.Attempts != 0 || dl.Record.Offset != 6 {
			t.Errorf("undecodable dead letter: %+v", dl)
		}
		if _, called := calls.Load(""); called {
			t.Error("the sink was called for the undecodable record")
		}
		if n := value(t, met.Deliveries.WithLabelValues("hook", OutcomeDeadLettered)); n != 4 {
			t.Errorf("dead_lettered = %v, want 4", n)
		}
		if n := value(t, met.Retries.WithLabelValues("hook")); n != 0 {
			t.Errorf("retries = %v, want 0: permanent failures are not retried", n)
		}
	})
}

// A revision that keeps failing transiently while the receiver otherwise
// works (so the breaker stays closed) exhausts its retries and is
// dead-lettered; the other partition is not held up meanwhile.
func TestLanesRetriesExhaustedWhileBreakerClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var poisonAttempts []time.Time
		var mu sync.Mutex
		sink := &funcSink{"hook", func(_ context.Context, d Delivery) error {
			if d.Alert.AlertID == "M-1-a0" && d.Alert.Revision == 0 {
				mu.Lock()
				poisonAttempts = append(poisonAttempts, time.Now())
				mu.Unlock()
				return &SendError{Sink: "hook", Status: 500, Class: Transient}
			}
			time.Sleep(100 * time.Millisecond) // the healthy traffic: a success every 100ms
			return nil
		}}
		retry := RetryConfig{Initial: time.Second, Max: time.Second, MaxAttempts: 4, MaxElapsed: time.Hour}
		rs, met := testRunners(t, retry, BreakerConfig{Failures: 3, Cooldown: time.Minute}, sink)
		var dlq dlqLog
		a := newPartition("vibration.alerts", 0, rs, dlq.write, nil)
		b := newPartition("vibration.alerts", 1, rs, dlq.write, nil)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { a.run(ctx) })
		wg.Go(func() { b.run(ctx) })
		a.push(alertRecords(t, 0, "M-1", 3, 1)...)
		b.push(alertRecords(t, 1, "M-2", 100, 5)...)
		time.Sleep(time.Minute)
		cancel()
		wg.Wait()
		if off, _, _ := a.commitPos(); off != 3 {
			t.Errorf("partition 0 commit position %d, want 3", off)
		}
		if off, _, _ := b.commitPos(); off != 100 {
			t.Errorf("partition 1 commit position %d, want 100", off)
		}
		dls := dlq.all()
		if len(dls) != 1 || dls[0].Reason != ReasonRetriesExhausted || dls[0].Attempts != 4 || dls[0].LastStatus != 500 || dls[0].IdempotencyKey != "M-1-a0-0" {
			t.Fatalf("dead letters %+v, want M-1-a0-0 retries_exhausted after 4 attempts", dls)
		}
		if len(poisonAttempts) != 4 {
			t.Errorf("%d attempts of the poison revision, want 4", len(poisonAttempts))
		}
		for i := 1; i < len(poisonAttempts); i++ {
			if gap := poisonAttempts[i].Sub(poisonAttempts[i-1]); gap > time.Second {
				t.Errorf("backoff %d = %s, above retry.max 1s", i, gap)
			}
		}
		if n := value(t, met.Retries.WithLabelValues("hook")); n != 3 {
			t.Errorf("retries = %v, want 3", n)
		}
	})
}

// Stopping a lane in the middle of a record's retries leaves the record
// unfinished: it is not committed, so the next owner delivers it.
func TestLanesStopLeavesTheRecordUncommitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &funcSink{"hook", func(_ context.Context, d Delivery) error {
			if d.Record.Offset >= 2 {
				return &SendError{Sink: "hook", Status: 503, Class: Transient}
			}
			return nil
		}}
		rs, _ := testRunners(t, quickRetry, quickBreaker, sink)
		var dlq dlqLog
		p := newPartition("vibration.alerts", 0, rs, dlq.write, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { p.run(ctx); close(done) }()
		p.push(alertRecords(t, 0, "M-1", 5, 1)...)
		time.Sleep(10 * time.Second) // the breaker opens; the lane waits
		if s := rs[0].breaker.State(); s == StateClosed {
			t.Errorf("breaker %s after 10s of 503s, want open or half-open", s)
		}
		cancel()
		<-done
		if off, _, _ := p.commitPos(); off != 2 {
			t.Fatalf("commit position %d, want 2", off)
		}
		if len(dlq.all()) != 0 {
			t.Fatalf("an outage dead-lettered %v", dlq.all())
		}
	})
}

// Waiting lanes do not poll a down receiver: while the breaker is open no
// attempt is made, and the half-open probe is the only one.
func TestLanesWaitOnOpenBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var attempts []time.Time
		start := time.Now()
		sink := &funcSink{"hook", func(_ context.Context, d Delivery) error {
			mu.Lock()
			attempts = append(attempts, time.Now())
			mu.Unlock()
			return errors.New("connection refused")
		}}
		rs, _ := testRunners(t, RetryConfig{Initial: 100 * time.Millisecond, Max: time.Second, MaxAttempts: 3, MaxElapsed: time.Hour},
			BreakerConfig{Failures: 3, Cooldown: 30 * time.Second}, sink)
		var dlq dlqLog
		var parts []*partition
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range 4 {
			p := newPartition("vibration.alerts", int32(i), rs, dlq.write, nil)
			parts = append(parts, p)
			wg.Go(func() { p.run(ctx) })
			p.push(alertRecords(t, int32(i), fmt.Sprintf("M-%d", i), 3, 1)...)
		}
		time.Sleep(5 * time.Minute)
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%d attempts in 5 minutes of outage", len(attempts))
		// Up to 4 lanes' attempts before the breaker opened (3 failures, plus
		// attempts already in flight), then one probe per 30s cool-down.
		if n := len(attempts); n < 10 || n > 4+3+10+1 {
			t.Errorf("%d attempts in 5 minutes of outage, want about 3 + 10 probes", n)
		}
		var late int
		for _, a := range attempts {
			if a.Sub(start) > 31*time.Second {
				late++
			}
		}
		if late > 10 {
			t.Errorf("%d attempts after the first cool-down, want at most one probe per 30s", late)
		}
		if len(dlq.all()) != 0 {
			t.Errorf("the outage dead-lettered %d revisions, want none", len(dlq.all()))
		}
	})
}
