package dlq

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/reconcile"
	"github.com/vibeline/processor/internal/sim"
)

// newCluster starts an in-process cluster with the input (3 partitions) and
// dead-letter (3 partitions: the processor requires its outputs to have the
// input's partition count) topics and returns a config for it.
func newCluster(t *testing.T) config.Config {
	t.Helper()
	cfg := kafkatest.Config(kafkatest.Cluster(t, 3, "vibration.events").ListenAddrs(), t.TempDir(), "r")
	createTopic(t, cfg, cfg.Topics.DLQ, 3)
	return cfg
}

func createTopic(t *testing.T, cfg config.Config, topic string, partitions int32) {
	t.Helper()
	cl := client(t, cfg)
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

func client(t *testing.T, cfg config.Config, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// runProcessor runs the real processor until it has committed every record
// of the input, then stops it.
func runProcessor(t *testing.T, cfg config.Config) {
	t.Helper()
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
	// The group's offset of a partition is after its last data record
	// (transaction markers of replays may follow it).
	want := map[int32]int64{}
	for _, r := range readCommitted(t, cfg, cfg.Topics.Input) {
		want[r.Partition] = r.Offset + 1
	}
	adm := kadm.NewClient(client(t, cfg))
	deadline := time.Now().Add(30 * time.Second)
	for {
		offs, err := adm.FetchOffsets(context.Background(), cfg.GroupID)
		caughtUp := err == nil
		for p, w := range want {
			if o, ok := offs.Lookup(cfg.Topics.Input, p); !ok || o.At < w {
				caughtUp = false
			}
		}
		if caughtUp {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("processor stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("processor did not consume the input in time (want %v)", want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// processed fills the input with a simulated line rich in poison records
// and runs the processor over it, filling the dead-letter topic.
func processed(t *testing.T, n int) config.Config {
	t.Helper()
	cfg := newCluster(t)
	o := sim.Demo()
	o.Machines = 6
	o.Seed = 3
	o.PoisonRate = 0.03
	o.ClockAheadRate = 0.01
	line := sim.New(o)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		r := line.Next()
		recs[i] = &kgo.Record{Topic: cfg.Topics.Input, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t" + strconv.Itoa(i))}}}
	}
	if err := client(t, cfg).ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	runProcessor(t, cfg)
	return cfg
}

func readCommitted(t *testing.T, cfg config.Config, topic string) []*kgo.Record {
	t.Helper()
	recs, err := reconcile.ReadCommitted(context.Background(), cfg.Brokers, topic, 20*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// readUncommitted reads every data record of topic, aborted ones included.
func readUncommitted(t *testing.T, cfg config.Config, topic string) []*kgo.Record {
	t.Helper()
	ends, err := kadm.NewClient(client(t, cfg)).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	cl := client(t, cfg, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords(), kgo.FetchMaxWait(fetchMaxWait))
	next := map[int32]int64{}
	var out []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		all := true
		ends.Each(func(o kadm.ListedOffset) { all = all && next[o.Partition] >= o.Offset })
		if all {
			return out
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s uncommitted: timeout", topic)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
}

// letter is a dead letter to produce directly.
type letter struct {
	reason    string
	partition int32 // source partition
	offset    int64 // source offset
	key       string
	headers   []kgo.RecordHeader // original headers
	omitted   bool               // written without its value (dlq.omitted)
	rules     string             // its dlq.rules; "": none (an older processor's letter)
}

// value is the (recognisable) value of a test letter.
func (l letter) value() []byte { return fmt.Appendf(nil, "value of %d@%d", l.partition, l.offset) }

// sourceTime is the original record timestamp of a test letter.
func (l letter) sourceTime() time.Time {
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(l.offset) * time.Second)
}

// record is l as the processor dead-letters it (pipeline's header names).
func (l letter) record(cfg config.Config) *kgo.Record {
	hs := slices.Clone(l.headers)
	hs = append(hs,
		kgo.RecordHeader{Key: pipeline.HeaderErrorReason, Value: []byte(l.reason)},
		kgo.RecordHeader{Key: pipeline.HeaderErrorDetail, Value: []byte("detail of " + l.reason)})
	if l.rules != "" {
		hs = append(hs, kgo.RecordHeader{Key: pipeline.HeaderDeadLetterRules, Value: []byte(l.rules)})
	}
	hs = append(hs,
		kgo.RecordHeader{Key: pipeline.HeaderSourceTopic, Value: []byte(cfg.Topics.Input)},
		kgo.RecordHeader{Key: pipeline.HeaderSourcePartition, Value: []byte(strconv.Itoa(int(l.partition)))},
		kgo.RecordHeader{Key: pipeline.HeaderSourceOffset, Value: []byte(strconv.FormatInt(l.offset, 10))},
		kgo.RecordHeader{Key: pipeline.HeaderSourceTimestamp, Value: []byte(strconv.FormatInt(l.sourceTime().UnixMilli(), 10))},
	)
	value := l.value()
	if l.omitted {
		value = nil
		hs = append(hs, kgo.RecordHeader{Key: pipeline.HeaderOmitted, Value: []byte("value")},
			kgo.RecordHeader{Key: pipeline.HeaderOriginalBytes, Value: []byte("995000")})
	}
	// Spread over both DLQ partitions by source partition.
	return &kgo.Record{Topic: cfg.Topics.DLQ, Partition: l.partition % 2, Key: []byte(l.key), Value: value, Headers: hs}
}

// produceLetters writes letters to the dead-letter topic the way the
// processor does: in committed transactions. The letters in aborted are
// written in an aborted transaction between them: a read_committed reader
// never sees them.
func produceLetters(t *testing.T, cfg config.Config, letters, aborted []letter) {
	t.Helper()
	cl := client(t, cfg, kgo.TransactionalID("test-dlq-writer"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := context.Background()
	write := func(ls []letter, commit kgo.TransactionEndTry) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if err := cl.ProduceSync(ctx, l.record(cfg)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	half := len(letters) / 2
	write(letters[:half], kgo.TryCommit)
	if len(aborted) > 0 {
		write(aborted, kgo.TryAbort)
	}
	write(letters[half:], kgo.TryCommit)
}

// someLetters returns n letters cycling through reasons and source partitions.
func someLetters(n int, reasons ...string) []letter {
	out := make([]letter, n)
	for i := range out {
		p := int32(i % 3)
		out[i] = letter{reason: reasons[i%len(reasons)], partition: p, offset: int64(100 + i), key: fmt.Sprintf("M-%03d", i%7),
			headers: []kgo.RecordHeader{{Key: "trace", Value: []byte(fmt.Sprint("t", i))}}}
	}
	return out
}

func header(r *kgo.Record, key string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
