package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/deliver"
	"github.com/vibeline/processor/internal/kafkatest"
)

const (
	alertsTopic = "vibration.alerts"
	dlqTopic    = "vibration.alerts.delivery-dlq"
	partitions  = 3
)

// newCluster starts an in-process Kafka cluster on 127.0.0.1 with the
// given topics (3 partitions each).
func newCluster(t testing.TB, topics ...string) []string {
	t.Helper()
	return kafkatest.Cluster(t, partitions, topics...).ListenAddrs()
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// ---- alerts ------------------------------------------------------------------

// revision is one alert revision produced to the alerts topic.
type revision struct {
	machine, key string // key: the idempotency key
	value        []byte
	partition    int32 // where produce wrote it
	offset       int64
}

// makeRevisions returns, for each of machines machines, alertsPer alerts
// of revs revisions each (open, updated..., closed), interleaved per
// machine in emission order. tag makes the alert ids of one batch unique.
func makeRevisions(t *testing.T, tag string, machines, alertsPer, revs int) []revision {
	t.Helper()
	now := time.Now().UnixMilli()
	var out []revision
	for r := range revs {
		for m := range machines {
			for a := range alertsPer {
				machine := fmt.Sprintf("M-%03d", m)
				al := alerts.Alert{
					AlertID:  alerts.ID("vibration-high", 1, machine, fmt.Sprintf("%s-%d", tag, a)),
					Revision: r, Status: alerts.StatusUpdated, RuleID: "vibration-high", RuleVersion: 1, MachineID: machine,
					Start: now - 120_000, End: now - 60_000 + int64(r), Count: 3 + r, Watermark: now - 90_000,
					Evidence: []alerts.Evidence{{EventID: tag + "-e1", SensorID: "S-1", TS: now - 120_000, Value: 7.5}},
				}
				switch r {
				case 0:
					al.Status = alerts.StatusOpen
				case revs - 1:
					al.Status = alerts.StatusClosed
				}
				al.Reason = alerts.ReasonSentence(al.Status, al.Count, "high-vibration events (>= 7.1 mm/s)", machine, al.Start, al.End, "")
				v, err := al.Encode()
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, revision{machine: machine, key: deliver.IdempotencyKey(al.AlertID, r), value: v})
			}
		}
	}
	return out
}

// produce writes revisions keyed by machine (the processor's partitioner)
// and records where each one was written.
func produce(t *testing.T, seeds []string, revs []revision) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(alertsTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(revs))
	for i, r := range revs {
		recs[i] = &kgo.Record{Key: []byte(r.machine), Value: r.value}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		revs[i].partition, revs[i].offset = r.Partition, r.Offset
	}
}

// checkCommitNotAhead fails t if group committed, in any partition, an
// offset beyond a revision the receiver has not accepted: offsets must be
// committed only after the sink accepted (or dead-lettered) the record.
func checkCommitNotAhead(t *testing.T, seeds []string, group string, rcv *receiver, batches ...[]revision) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	acc, _, _, _ := rcv.snapshot() // after the fetch: accepted later means not accepted at commit time either
	firstMissing := map[int32]int64{}
	for _, b := range batches {
		for _, r := range b {
			if acc[r.key] > 0 {
				continue
			}
			if o, ok := firstMissing[r.partition]; !ok || r.offset < o {
				firstMissing[r.partition] = r.offset
			}
		}
	}
	for p, missing := range firstMissing {
		if c, ok := offs.Lookup(alertsTopic, p); ok && c.At > missing {
			t.Errorf("partition %d: committed offset %d covers offset %d, which the receiver has not accepted", p, c.At, missing)
		}
	}
}

// produceAborted writes revisions in a transaction and aborts it: a
// read_committed consumer must never deliver them.
func produceAborted(t *testing.T, seeds []string, revs []revision) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(alertsTopic), kgo.TransactionalID("test-aborted"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, r := range revs {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(r.machine), Value: r.value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
}

// expectedOrder is the keys of each machine in production order.
func expectedOrder(batches ...[]revision) map[string][]string {
	out := map[string][]string{}
	for _, b := range batches {
		for _, r := range b {
			out[r.machine] = append(out[r.machine], r.key)
		}
	}
	return out
}

// ---- the receiver ------------------------------------------------------------

// receiver is a webhook receiver on a real 127.0.0.1 port that honours
// Idempotency-Key: a key it already accepted is answered 200 again and
// counted as a repeat, never processed twice. It can be made unavailable
// (503), down (the listener closed: connections are refused), slow, stuck
// (holding every request unanswered), or reject chosen alert ids with 422.
type receiver struct {
	t    testing.TB
	addr string

	mu       sync.Mutex
	srv      *http.Server
	status   int           // 0: accept; else answer with this status
	delay    time.Duration // before answering
	hold     chan struct{} // non-nil: answer only once it is closed (holdRequests)
	reject   map[string]bool
	accepted map[string]int      // key -> accepted count (1 + repeats)
	order    map[string][]string // machine -> keys in first-acceptance order
	answered map[int]int         // status -> count
	requests int
	repeats  int
	badSig   int
	secret   []byte
}

func newReceiver(t testing.TB) *receiver {
	t.Helper()
	r := &receiver{t: t, reject: map[string]bool{}, accepted: map[string]int{}, order: map[string][]string{}, answered: map[int]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(func() {
		r.mu.Lock()
		srv := r.srv
		r.mu.Unlock()
		if srv != nil {
			srv.Close()
		}
	})
	return r
}

func (r *receiver) url() string { return "http://" + r.addr + "/hook" }

func (r *receiver) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(r.handle), ReadHeaderTimeout: 5 * time.Second}
	r.srv = srv
	go srv.Serve(ln)
}

// down closes the listener and every connection: connections are refused.
func (r *receiver) down() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// up listens again on the same address.
func (r *receiver) up() {
	r.t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port is ours; a closing socket may hold it briefly
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		r.t.Fatalf("receiver: listen again on %s: %v", r.addr, err)
	}
	r.mu.Lock()
	r.serve(ln)
	r.mu.Unlock()
}

func (r *receiver) setStatus(code int) { r.mu.Lock(); r.status = code; r.mu.Unlock() }

func (r *receiver) handle(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	var a struct {
		AlertID   string `json:"alert_id"`
		MachineID string `json:"machine_id"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		http.Error(w, "not an alert: "+err.Error(), http.StatusBadRequest)
		return
	}
	key := req.Header.Get("Idempotency-Key")
	r.mu.Lock()
	delay, hold, status, reject := r.delay, r.hold, r.status, r.reject[a.AlertID]
	r.requests++
	if r.secret != nil && req.Header.Get("X-Signature-SHA256") != deliver.Sign(r.secret, body) {
		r.badSig++
	}
	r.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	if hold != nil {
		select {
		case <-hold:
		case <-req.Context().Done(): // the client gave up: nothing to answer
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case status != 0:
		r.answered[status]++
		http.Error(w, "unavailable", status)
		return
	case reject:
		r.answered[http.StatusUnprocessableEntity]++
		http.Error(w, "unknown machine "+a.MachineID, http.StatusUnprocessableEntity)
		return
	}
	r.answered[http.StatusOK]++
	r.accepted[key]++
	if r.accepted[key] > 1 {
		r.repeats++ // honoured: same answer, nothing done twice
		return
	}
	r.order[a.MachineID] = append(r.order[a.MachineID], key)
}

// holdRequests makes the receiver hold every request from now on without
// answering it, until release is called (a stuck sink); release answers
// the held requests as usual and ends the holding.
func (r *receiver) holdRequests() (release func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.hold = ch
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			r.hold = nil
			r.mu.Unlock()
			close(ch)
		})
	}
}

// requested returns how many requests the receiver has received
// (answered or not).
func (r *receiver) requested() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// waitRequested waits until the receiver has received at least n
// requests.
func (r *receiver) waitRequested(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := r.requested()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver received %d requests within %s, want >= %d", got, timeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// snapshot returns copies of the receiver's counters.
func (r *receiver) snapshot() (accepted map[string]int, order map[string][]string, answered map[int]int, repeats int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	accepted, order, answered = map[string]int{}, map[string][]string{}, map[int]int{}
	for k, v := range r.accepted {
		accepted[k] = v
	}
	for k, v := range r.order {
		order[k] = append([]string(nil), v...)
	}
	for k, v := range r.answered {
		answered[k] = v
	}
	return accepted, order, answered, r.repeats
}

// waitAccepted waits until every key of revs was accepted.
func (r *receiver) waitAccepted(t *testing.T, timeout time.Duration, revs ...[]revision) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		acc, _, _, _ := r.snapshot()
		missing := 0
		for _, b := range revs {
			for _, rv := range b {
				if acc[rv.key] == 0 {
					missing++
				}
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d revisions not delivered within %s", missing, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAnswered waits until the receiver answered status at least n times.
func (r *receiver) waitAnswered(t testing.TB, status, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, _, ans, _ := r.snapshot()
		if ans[status] >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver answered %d %d times within %s, want >= %d", status, ans[status], timeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkOrder fails t unless each machine's keys were first accepted in
// production order.
func checkOrder(t *testing.T, got, want map[string][]string) {
	t.Helper()
	for m, keys := range want {
		if fmt.Sprint(got[m]) != fmt.Sprint(keys) {
			t.Errorf("machine %s: first accepted in order\n %v\nwant\n %v", m, got[m], keys)
		}
	}
}

// ---- the delivery stage in-process -------------------------------------------

func testConfig(seeds []string, sinks ...deliver.SinkConfig) deliver.Config {
	c := deliver.Default()
	c.Brokers = seeds
	c.Sinks = sinks
	c.CommitInterval = 100 * time.Millisecond
	c.SessionTimeout = 2 * time.Second
	c.StartupTimeout = 20 * time.Second
	c.Retry = deliver.RetryConfig{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: 10, MaxElapsed: 0}
	c.Breaker = deliver.BreakerConfig{Failures: 3, Cooldown: 300 * time.Millisecond}
	c.EnsureDefaults()
	return c
}

type stage struct {
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// startStage runs a delivery Service in-process until the test ends.
func startStage(t testing.TB, cfg deliver.Config) *stage {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sinks, err := deliver.NewSinks(cfg.Sinks, deliver.SinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc, err := deliver.New(cfg, sinks, deliver.Options{Logger: testLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &stage{reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- svc.Run(ctx) }()
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *stage) stop(t testing.TB) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("delivery stage: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("delivery stage did not stop within 30s")
	}
}

// metric sums the values of the series of name whose labels include want.
func metric(t testing.TB, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// ---- Kafka reads ---------------------------------------------------------------

// readTopic reads every committed record of topic up to its end offsets.
func readTopic(t *testing.T, seeds []string, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return nil
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	done := map[int32]bool{}
	for len(done) < len(want) {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %d of %d partitions read", topic, len(done), len(want))
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if end, _ := ends.Lookup(r.Topic, r.Partition); r.Offset+1 >= end.Offset {
				done[r.Partition] = true
			}
		})
	}
	return out
}

// waitCommitted waits until group committed the end offset of every
// partition of topic.
func waitCommitted(t *testing.T, seeds []string, group, topic string, timeout time.Duration) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ends, err1 := adm.ListEndOffsets(context.Background(), topic)
		offs, err2 := adm.FetchOffsets(context.Background(), group)
		if err := errors.Join(err1, err2); err == nil {
			done := true
			var parts []string
			ends.Each(func(o kadm.ListedOffset) {
				c, ok := offs.Lookup(topic, o.Partition)
				at := int64(-1)
				if ok {
					at = c.At
				}
				parts = append(parts, fmt.Sprintf("p%d %d/%d", o.Partition, at, o.Offset))
				if at < o.Offset {
					done = false
				}
			})
			sort.Strings(parts)
			last = strings.Join(parts, ", ")
			if done {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("group %s did not commit the end of %s within %s: %s", group, topic, timeout, last)
}

// ---- the built binary ----------------------------------------------------------

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// processorBinary builds ./cmd/processor once per test run.
func processorBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			buildErr = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		dir, err := os.MkdirTemp("", "processor-delivery-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "processor")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/processor")
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/processor: %v\n%s", err, stderr.String())
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// freeAddr returns a 127.0.0.1 address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
