package harness

// These tests prove, on the real broker, the Kafka behaviour the processor
// relies on. They fail (never skip) without a broker.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

const readTimeout = 30 * time.Second

// TestAbortedInvisibleToReadCommitted: a transactional producer's aborted
// records are in the log but invisible to read_committed readers; committed
// ones are visible, in order.
func TestAbortedInvisibleToReadCommitted(t *testing.T) {
	seeds := Bootstrap(t)
	topic := NewTopic(t, seeds, UniqueName("harness-abort"), 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cl := NewClient(t, seeds,
		kgo.TransactionalID(UniqueName("harness-abort-txn")),
		kgo.TransactionTimeout(10*time.Second),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	produceTxn := func(prefix string, commit kgo.TransactionEndTry) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("begin: %v", err)
		}
		for i := range 10 {
			r := &kgo.Record{Partition: int32(i % 2), Value: []byte(prefix + strconv.Itoa(i))}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", r.Value, err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatalf("end transaction (commit=%v): %v", commit, err)
		}
	}
	produceTxn("aborted-", kgo.TryAbort)
	produceTxn("committed-", kgo.TryCommit)

	got := values(ReadCommitted(t, seeds, topic, readTimeout))
	want := []string{ // partition 0, then partition 1
		"committed-0", "committed-2", "committed-4", "committed-6", "committed-8",
		"committed-1", "committed-3", "committed-5", "committed-7", "committed-9",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed got %q, want %q", got, want)
	}

	// The aborted records were written: read_uncommitted sees all 20.
	all := readUncommitted(t, seeds, topic, 20)
	aborted := 0
	for _, v := range all {
		if len(v) > 8 && v[:8] == "aborted-" {
			aborted++
		}
	}
	if len(all) != 20 || aborted != 10 {
		t.Fatalf("read_uncommitted got %d records, %d aborted; want 20 and 10: %q", len(all), aborted, all)
	}
}

// TestGroupTransactSessionEOSAndFencing: a consume-transform-produce round
// of kgo.GroupTransactSession commits its input offsets inside the
// transaction (KIP-447, EOS v2); a second session with the same
// transactional ID fences the first as soon as it loads its producer ID,
// aborting the first one's open transaction; the second session then
// resumes from the offsets committed in the transaction.
func TestGroupTransactSessionEOSAndFencing(t *testing.T) {
	seeds := Bootstrap(t)
	in := NewTopic(t, seeds, UniqueName("harness-eos-in"), 2, nil)
	out := NewTopic(t, seeds, UniqueName("harness-eos-out"), 2, nil)
	group := UniqueName("harness-eos-group")
	txnID := UniqueName("harness-eos-txn") // stable for both "incarnations"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	produceInput(t, seeds, in, 0, 20)

	sess1, closeSess1 := newSession(t, seeds, in, group, txnID)
	if _, _, err := sess1.Client().ProducerID(ctx); err != nil {
		t.Fatalf("session 1 producer ID: %v", err)
	}
	if n := transformRound(ctx, t, sess1, out, 20); n != 20 {
		t.Fatalf("session 1 transformed %d records, want 20", n)
	}

	if got := ReadCommitted(t, seeds, out, readTimeout); len(got) != 20 {
		t.Fatalf("output has %d committed records, want 20", len(got))
	}
	if n := committedOffsets(ctx, t, seeds, group, in); n != 20 {
		t.Fatalf("group %s committed offsets sum to %d, want 20 (committed in the transaction)", group, n)
	}

	// Session 1 opens a transaction and writes to the broker, then a second
	// incarnation with the same transactional ID starts.
	if err := sess1.Begin(); err != nil {
		t.Fatalf("session 1 begin: %v", err)
	}
	zombie := &kgo.Record{Topic: out, Value: []byte("zombie")}
	if err := sess1.ProduceSync(ctx, zombie).FirstErr(); err != nil {
		t.Fatalf("session 1 produce in open transaction: %v", err)
	}

	sess2, _ := newSession(t, seeds, in, group, txnID)
	start := time.Now()
	if _, _, err := sess2.Client().ProducerID(ctx); err != nil {
		t.Fatalf("session 2 producer ID (fencing session 1): %v", err)
	}
	fenced := time.Since(start)

	// The zombie's open transaction was aborted by the fencing: readers are
	// not blocked and never see its record.
	start = time.Now()
	got := ReadCommitted(t, seeds, out, readTimeout)
	unblocked := time.Since(start)
	if len(got) != 20 || slices.Contains(values(got), "zombie") {
		t.Fatalf("after fencing the output has %d committed records (zombie visible: %v), want 20 without it",
			len(got), slices.Contains(values(got), "zombie"))
	}
	t.Logf("fencing: session 2's ProducerID (InitProducerID aborting session 1's open transaction) took %v; read_committed reached the end %v later",
		fenced.Round(time.Millisecond), unblocked.Round(time.Millisecond))

	// Session 1 can no longer commit.
	committed, err := sess1.End(ctx, kgo.TryCommit)
	if committed {
		t.Fatalf("fenced session 1 committed its transaction")
	}
	t.Logf("fenced session 1 End: committed=%v err=%v (producer fenced: %v)", committed, err,
		errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch))
	closeSess1()

	// Session 2 takes over from the offsets committed in session 1's
	// transaction: it sees only the new input.
	produceInput(t, seeds, in, 20, 6)
	if n := transformRound(ctx, t, sess2, out, 6); n != 6 {
		t.Fatalf("session 2 transformed %d records, want 6", n)
	}
	got = ReadCommitted(t, seeds, out, readTimeout)
	seen := map[string]int{}
	for _, v := range values(got) {
		seen[v]++
	}
	for i := range 26 {
		if v := "out-" + strconv.Itoa(i); seen[v] != 1 {
			t.Errorf("output has %q %d times, want exactly once", v, seen[v])
		}
	}
	if len(got) != 26 {
		t.Errorf("output has %d committed records, want 26", len(got))
	}
	if n := committedOffsets(ctx, t, seeds, group, in); n != 26 {
		t.Errorf("group %s committed offsets sum to %d, want 26", group, n)
	}
}

// TestCompactedTopic: a compacted topic (the processor's changelog) is
// created with its configs, takes transactional writes and tombstones, and
// the cleaner really compacts it on this broker.
func TestCompactedTopic(t *testing.T) {
	seeds := Bootstrap(t)
	ptr := func(s string) *string { return &s }
	topic := NewTopic(t, seeds, UniqueName("harness-compact"), 1, map[string]*string{
		"cleanup.policy":            ptr("compact"),
		"segment.ms":                ptr("100"),
		"min.cleanable.dirty.ratio": ptr("0.01"),
		"delete.retention.ms":       ptr("100"),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	adm := NewAdmin(t, seeds)
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("describe configs: %v", err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		t.Fatalf("describe configs of %s: %v", topic, err)
	}
	policy := ""
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" {
			policy = c.MaybeValue()
		}
	}
	if policy != "compact" {
		t.Fatalf("cleanup.policy = %q, want compact", policy)
	}

	cl := NewClient(t, seeds,
		kgo.TransactionalID(UniqueName("harness-compact-txn")),
		kgo.TransactionTimeout(10*time.Second),
		kgo.DefaultProduceTopic(topic),
	)
	// Three transactions, each overwriting the same 5 keys; the last one
	// deletes key k0. Pauses longer than segment.ms roll segments, so the
	// older ones become cleanable.
	for round := range 3 {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("begin: %v", err)
		}
		for k := range 5 {
			r := &kgo.Record{Key: []byte("k" + strconv.Itoa(k)), Value: []byte(fmt.Sprintf("v%d", round))}
			if round == 2 && k == 0 {
				r.Value = nil // tombstone
			}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}

	// Latest value per key, as a restore from the changelog would see it.
	latest := func(recs []*kgo.Record) map[string]string {
		m := map[string]string{}
		for _, r := range recs {
			if r.Value == nil {
				delete(m, string(r.Key))
			} else {
				m[string(r.Key)] = string(r.Value)
			}
		}
		return m
	}
	want := map[string]string{"k1": "v2", "k2": "v2", "k3": "v2", "k4": "v2"}
	recs := ReadCommitted(t, seeds, topic, readTimeout)
	if got := latest(recs); !mapsEqual(got, want) {
		t.Fatalf("latest values %v, want %v", got, want)
	}

	// The cleaner runs every second on scripts/kafka.sh's broker (15 s by
	// default elsewhere): wait until the first round's records are gone.
	// A record written after a pause rolls the active segment.
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	for {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("begin: %v", err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("roll"), Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit: %v", err)
		}
		recs = ReadCommitted(t, seeds, topic, readTimeout)
		if !slices.Contains(values(recs), "v0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not compacted after %v: still %d records", time.Since(start).Round(time.Second), len(recs))
		}
		time.Sleep(time.Second)
	}
	if got := latest(recs); !mapsEqual(got, map[string]string{"k1": "v2", "k2": "v2", "k3": "v2", "k4": "v2", "roll": "x"}) {
		t.Fatalf("after compaction latest values %v", got)
	}
	t.Logf("compaction: older values gone after %v, %d records left", time.Since(start).Round(100*time.Millisecond), len(recs))
}

// ---- helpers ----------------------------------------------------------------

func values(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// readUncommitted reads n records of topic with read_uncommitted.
func readUncommitted(t *testing.T, seeds []string, topic string, n int) []string {
	t.Helper()
	cl := NewClient(t, seeds,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
	)
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	var out []string
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read_uncommitted %s: %d of %d records after %v", topic, len(out), n, readTimeout)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	return out
}

// produceInput writes values in-<from>..in-<from+n-1> to topic, keyed so
// they spread over its partitions.
func produceInput(t *testing.T, seeds []string, topic string, from, n int) {
	t.Helper()
	cl := NewClient(t, seeds, kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	var recs []*kgo.Record
	for i := from; i < from+n; i++ {
		recs = append(recs, &kgo.Record{Key: []byte("key-" + strconv.Itoa(i)), Value: []byte("in-" + strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce input: %v", err)
	}
}

// newSession starts a group transact session, closed in t.Cleanup or by the
// returned func, whichever comes first.
func newSession(t *testing.T, seeds []string, in, group, txnID string) (*kgo.GroupTransactSession, func()) {
	t.Helper()
	s, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(10*time.Second),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.SessionTimeout(6*time.Second),
	)
	if err != nil {
		t.Fatalf("new group transact session: %v", err)
	}
	closeOnce := sync.OnceFunc(s.Close)
	t.Cleanup(closeOnce)
	return s, closeOnce
}

// transformRound polls until want input records arrived, then writes
// out-<n> for each in-<n> to out in one transaction that also commits the
// input offsets, and returns how many records the committed transaction
// carried. A rebalance abort (committed=false, err=nil) is retried: the
// records come again.
func transformRound(ctx context.Context, t *testing.T, s *kgo.GroupTransactSession, out string, want int) int {
	t.Helper()
	for attempt := 1; ; attempt++ {
		var polled []*kgo.Record
		for len(polled) < want {
			fs := s.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("poll: %d of %d input records: %v", len(polled), want, ctx.Err())
			}
			fs.EachError(func(topic string, p int32, err error) {
				t.Fatalf("poll %s/%d: %v", topic, p, err)
			})
			polled = append(polled, fs.Records()...)
		}
		if err := s.Begin(); err != nil {
			t.Fatalf("begin: %v", err)
		}
		e := kgo.AbortingFirstErrPromise(s.Client())
		for _, r := range polled {
			v := "out-" + string(r.Value[len("in-"):])
			s.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: []byte(v)}, e.Promise())
		}
		if err := s.Client().Flush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
		committed, err := s.End(ctx, e.Err() == nil)
		if err != nil {
			t.Fatalf("end transaction: %v (produce error: %v)", err, e.Err())
		}
		if committed {
			return len(polled)
		}
		if attempt == 5 {
			t.Fatalf("transaction aborted %d times in a row", attempt)
		}
		t.Logf("transaction aborted (rebalance), attempt %d; polling again", attempt)
	}
}

// committedOffsets sums the offsets group committed on topic.
func committedOffsets(ctx context.Context, t *testing.T, seeds []string, group, topic string) int64 {
	t.Helper()
	resps, err := NewAdmin(t, seeds).FetchOffsets(ctx, group)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	var sum int64
	resps.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			sum += o.At
		}
	})
	return sum
}

// TestBuildBinary: the processor binary builds once per test binary and the
// path is stable across calls.
func TestBuildBinary(t *testing.T) {
	path := BuildBinary(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("built binary: %v", err)
	}
	if fi.Mode()&0o111 == 0 {
		t.Fatalf("%s is not executable (mode %v)", path, fi.Mode())
	}
	if again := BuildBinary(t); again != path {
		t.Fatalf("second BuildBinary returned %s, want %s", again, path)
	}
}
