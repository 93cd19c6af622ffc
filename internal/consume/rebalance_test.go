package consume

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/txn"
	"github.com/vibeline/processor/internal/window"
)

// markerRecord is a watermark marker of source partition src for
// partition q of topic, as Processor.markers builds it.
func markerRecord(topic string, src int32, partitions, q int) *kgo.Record {
	hs := pipeline.MarkerRecord(src, partitions, 1000, true)
	kh := make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		kh[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
	}
	return &kgo.Record{Topic: topic, Partition: int32(q), Headers: kh}
}

// A marker reports its source partition to every partition of a
// repartition topic, so each must land on the partition it names; the
// records forwarded there stay partitioned by key, like the rules' other
// outputs. (The sticky partitioner alone put all eight markers on one
// partition.)
func TestMarkersReachThePartitionTheyName(t *testing.T) {
	def := kgo.StickyKeyPartitioner(nil)
	pr := partitioner{manual: map[string]bool{"r.changelog": true}, markers: map[string]bool{"r.repartition": true}, def: def}
	tp := pr.ForTopic("r.repartition")
	const n = 8
	for q := range n {
		if got := tp.Partition(markerRecord("r.repartition", 3, n, q), n); got != q {
			t.Errorf("marker for partition %d partitioned to %d", q, got)
		}
	}
	if !tp.RequiresConsistency(markerRecord("r.repartition", 3, n, 0)) {
		t.Error("a marker's partition must not change when that partition is unavailable")
	}
	hash := def.ForTopic("x")
	for i := range 50 {
		r := &kgo.Record{Topic: "r.repartition", Key: []byte("machine-" + strconv.Itoa(i)), Value: []byte("{}"), Partition: 5}
		if got, want := tp.Partition(r, n), hash.Partition(r, n); got != want {
			t.Errorf("forwarded record %q: partition %d, the key's partition is %d", r.Key, got, want)
		}
	}
	// Other topics are unchanged: keyed by key.
	alerts := pr.ForTopic("r.alerts")
	r := &kgo.Record{Topic: "r.alerts", Key: []byte("machine-7"), Value: []byte("{}")}
	if got, want := alerts.Partition(r, n), hash.Partition(r, n); got != want {
		t.Errorf("alert: partition %d, the key's partition is %d", got, want)
	}
}

type captureSess struct {
	mu  sync.Mutex
	out []*kgo.Record
}

func (c *captureSess) Client() *kgo.Client { return nil }
func (c *captureSess) Begin() error        { return nil }
func (c *captureSess) Produce(_ context.Context, r *kgo.Record) {
	c.mu.Lock()
	c.out = append(c.out, r)
	c.mu.Unlock()
}
func (c *captureSess) End(context.Context, bool, txn.MetaFunc) (bool, error) { return true, nil }
func (c *captureSess) AllowRebalance()                                       {}
func (c *captureSess) Close()                                                {}

// franz-go's transactional session calls onRevoked once between two ends
// of a transaction: after two rebalances with no commit in between, the
// second revoke never reaches the processor. The partition given away in
// it must still be dropped (onAssigned gets the whole assignment), or the
// member goes on reporting it: here, as an idle source in its watermark
// markers, which would let the new owner's repartitioned rules run their
// watermarks past that partition's backlog.
func TestAssignmentDropsPartitionsOfASwallowedRevoke(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	src := &source{topic: "src", forwards: []*task{{input: "r.repartition"}}, partitions: 2}
	sess := &captureSess{}
	p := &Processor{
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), met: m, now: func() time.Time { return time.Unix(1000, 0) },
		sess: sess, parts: map[pkey]*part{}, fresh: map[pkey]bool{}, sources: map[string]*source{"src": src},
	}
	restored := func(id int32) {
		pt := &part{pkey: pkey{"src", id}, src: src, stats: newBatchStats()}
		pt.fwd.max = window.NoWatermark
		pt.committedFwd = pt.fwd
		p.parts[pt.pkey] = pt
		delete(p.fresh, pt.pkey)
	}
	// Rebalance 1 (its revoke delivered): {0, 1} assigned and restored.
	p.onAssigned(context.Background(), nil, map[string][]int32{"src": {0, 1}})
	restored(0)
	restored(1)
	// Rebalance 2 before any commit: the revoke is swallowed, {1} assigned;
	// and one more with {1} while 1 is still being restored.
	p.onAssigned(context.Background(), nil, map[string][]int32{"src": {1}})
	restored(1)
	if _, ok := p.parts[pkey{"src", 0}]; ok {
		t.Fatal("src/0, no longer assigned, is still held")
	}
	p.markers(context.Background())
	if len(sess.out) == 0 {
		t.Fatal("no markers for the partition still owned")
	}
	for _, r := range sess.out {
		if string(r.Headers[0].Value) != "1" {
			t.Errorf("a marker reports source partition %s, which this member no longer owns", r.Headers[0].Value)
		}
	}
	p.onAssigned(context.Background(), nil, map[string][]int32{"src": {0}})
	if len(p.parts) != 0 || !p.fresh[pkey{"src", 0}] || p.fresh[pkey{"src", 1}] {
		t.Errorf("after assigning {0}: parts %v, fresh %v; want none held and only src/0 to restore", p.parts, p.fresh)
	}
}
