package consume

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
	"github.com/vibeline/processor/internal/txn"
)

// These tests run the whole processor against franz-go's in-process Kafka
// cluster and compare what it committed, read_committed, with the
// reference: the same pipeline applied to the same log in one pass. The
// exactly-once proofs against a real broker, with SIGKILL, are in test/e2e.

const testPartitions = 3

func newCluster(t *testing.T) []string {
	t.Helper()
	return kafkatest.Cluster(t, testPartitions, "vibration.events").ListenAddrs()
}

func testConfig(seeds []string, dir, instance string) config.Config {
	cfg := kafkatest.Config(seeds, dir, instance)
	cfg.SessionTimeout = 2 * time.Second
	cfg.MaxPollRecords = 500
	return cfg
}

// produce writes records synchronously and returns the log as the broker
// stored it (partition and offset of each record).
func produce(t *testing.T, seeds []string, topic string, recs []sim.Record, log pipeline.Log) {
	t.Helper()
	batch := kafkatest.Produce(t, seeds, topic, recs...)
	for _, r := range batch {
		log[r.Partition] = append(log[r.Partition], pipeline.Input{
			Topic: topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
			TimestampMs: r.Timestamp.UnixMilli(),
		})
	}
}

type instance struct {
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, cfg config.Config, o Options) *instance {
	t.Helper()
	return startWith(t, cfg, o, prometheus.NewRegistry())
}

func (in *instance) stop(t *testing.T) {
	t.Helper()
	in.cancel()
	select {
	case err := <-in.done:
		if err != nil {
			t.Fatalf("processor: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("processor did not stop within 30s")
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

// waitConsumed waits until the group committed every input record.
func waitConsumed(t *testing.T, seeds []string, cfg config.Config, log pipeline.Log) {
	t.Helper()
	want := map[int32]int64{}
	for p, recs := range log {
		want[p] = recs[len(recs)-1].Offset + 1
	}
	kafkatest.WaitCommitted(t, seeds, cfg.GroupID, cfg.Topics.Input, want, 60*time.Second)
}

// readAll reads topics read_committed up to their end offsets.
func readAll(t *testing.T, seeds []string, topics ...string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(context.Background(), topics...)
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int32]kgo.Offset{}
	left := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic] = map[int32]kgo.Offset{}
			}
			want[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
			left++
		}
	})
	if left == 0 {
		return nil
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(want),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out []*kgo.Record
	doneParts := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(doneParts) < left {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading outputs: %d of %d partitions complete", len(doneParts), left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			end, _ := ends.Lookup(r.Topic, r.Partition)
			if r.Offset+1 >= end.Offset {
				doneParts[fmt.Sprintf("%s/%d", r.Topic, r.Partition)] = true
			}
		})
	}
	return out
}

func outputsOf(cfg config.Config, recs []*kgo.Record) pipeline.Outputs {
	out := pipeline.Outputs{}
	kinds := map[string]pipeline.Kind{cfg.Topics.Alerts: pipeline.Alert, cfg.Topics.DLQ: pipeline.DeadLetter, cfg.Topics.Late: pipeline.TooLate}
	for _, r := range recs {
		k, ok := kinds[r.Topic]
		if !ok {
			continue
		}
		hs := make([]pipeline.Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = pipeline.Header{Key: h.Key, Value: h.Value}
		}
		out.Add(k, r.Key, r.Value, hs)
	}
	return out.Canonical()
}

// latestAccounting reads each partition's last committed accounting record.
func latestAccounting(t *testing.T, seeds []string, cfg config.Config) map[int32]pipeline.Accounting {
	t.Helper()
	got := map[int32]pipeline.Accounting{}
	for _, r := range readAll(t, seeds, cfg.ChangelogTopic()) {
		if string(r.Key) != changelogAcct || r.Value == nil {
			continue // tombstones of an earlier history (scratch start)
		}
		a, err := DecodeAccounting(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		got[r.Partition] = a
	}
	return got
}

func simRecords(n int, seed uint64) []sim.Record {
	o := sim.Demo()
	o.Machines = 12
	o.Seed = seed
	o.EpisodeRate = 0.05
	o.OutageLength = 11 * time.Minute // past the allowed lateness: too-late records
	o.OutageRate = 0.004
	return kafkatest.Records(sim.New(o), n)
}

func checkAgainstReference(t *testing.T, seeds []string, cfg config.Config, log pipeline.Log) {
	t.Helper()
	stage, err := pipeline.NewStage(cfg.Rule)
	if err != nil {
		t.Fatal(err)
	}
	want, wantAcct := stage.Reference(log)
	if want.Count(pipeline.Alert) == 0 || want.Count(pipeline.DeadLetter) == 0 || want.Count(pipeline.TooLate) == 0 {
		t.Fatalf("reference has %d alerts, %d dead letters and %d too late: the fixture proves nothing",
			want.Count(pipeline.Alert), want.Count(pipeline.DeadLetter), want.Count(pipeline.TooLate))
	}
	got := outputsOf(cfg, readAll(t, seeds, cfg.Topics.Alerts, cfg.Topics.DLQ, cfg.Topics.Late))
	if d := pipeline.Diff(want, got); d != "" {
		t.Fatalf("committed outputs differ from the reference:\n%s", d)
	}
	gotAcct := latestAccounting(t, seeds, cfg)
	for p, w := range wantAcct {
		g := gotAcct[p]
		if g != w || !g.Balanced() {
			t.Errorf("partition %d accounting = %+v, want %+v", p, g, w)
		}
	}
	t.Logf("%d alert revisions, %d dead letters, %d too late; accounting %v", got.Count(pipeline.Alert), got.Count(pipeline.DeadLetter), got.Count(pipeline.TooLate), gotAcct)
}

func TestPipelineMatchesReference(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "a")
	log := pipeline.Log{}
	recs := simRecords(12_000, 1)
	produce(t, seeds, cfg.Topics.Input, recs[:6000], log)
	in := start(t, cfg, Options{})
	produce(t, seeds, cfg.Topics.Input, recs[6000:], log)
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	checkAgainstReference(t, seeds, cfg, log)
}

// Aborted batches, restarts (with and without local state) and a second
// instance taking partitions over must not change a single output record.
func TestAbortsRestartsAndRebalancesMatchReference(t *testing.T) {
	seeds := newCluster(t)
	base := t.TempDir()
	cfgA := testConfig(seeds, filepath.Join(base, "a"), "a")
	cfgB := testConfig(seeds, filepath.Join(base, "b"), "b")
	rng := rand.New(rand.NewPCG(3, 4))
	var mu sync.Mutex
	var aborted atomic.Int64
	abort := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if rng.IntN(2) == 0 {
			aborted.Add(1)
			return true
		}
		return false
	}
	log := pipeline.Log{}
	recs := simRecords(16_000, 2)
	chunks := [][]sim.Record{recs[:4000], recs[4000:8000], recs[8000:12000], recs[12000:]}

	a := start(t, cfgA, Options{AbortBatch: abort})
	for i := 0; i < 4000; i += 500 { // many small batches, a third of them aborted
		produce(t, seeds, cfgA.Topics.Input, chunks[0][i:i+500], log)
		time.Sleep(40 * time.Millisecond)
	}
	b := start(t, cfgB, Options{AbortBatch: abort}) // rebalance: partitions move to b
	produce(t, seeds, cfgA.Topics.Input, chunks[1], log)
	time.Sleep(300 * time.Millisecond)
	a.stop(t) // its partitions move to b after the session timeout
	produce(t, seeds, cfgA.Topics.Input, chunks[2], log)
	time.Sleep(300 * time.Millisecond)
	b.stop(t)
	// a comes back without its local state: everything from the changelog.
	if err := os.RemoveAll(cfgA.StateDir); err != nil {
		t.Fatal(err)
	}
	a = start(t, cfgA, Options{AbortBatch: abort})
	b = start(t, cfgB, Options{AbortBatch: abort})
	produce(t, seeds, cfgA.Topics.Input, chunks[3], log)
	waitConsumed(t, seeds, cfgA, log)
	a.stop(t)
	b.stop(t)
	if aborted.Load() == 0 {
		t.Fatal("no batch was aborted: the test proves nothing about aborts")
	}
	t.Logf("%d batches aborted", aborted.Load())
	checkAgainstReference(t, seeds, cfgA, log)
}

// at_least_once: without faults, the same outputs as exactly-once; with
// aborted batches (outputs already written, offsets not committed), every
// reference output is there at least once, and the accounting still
// balances because it is committed with the offsets.
func TestAtLeastOnceMode(t *testing.T) {
	for _, faults := range []bool{false, true} {
		t.Run(fmt.Sprintf("faults=%v", faults), func(t *testing.T) {
			seeds := newCluster(t)
			cfg := testConfig(seeds, t.TempDir(), "alo")
			cfg.Mode = config.AtLeastOnce
			var o Options
			var aborted atomic.Int64
			if faults {
				n := 0
				o.AbortBatch = func() bool {
					n++
					if n%3 == 0 {
						aborted.Add(1)
						return true
					}
					return false
				}
			}
			log := pipeline.Log{}
			recs := simRecords(12000, 1)
			in := start(t, cfg, o)
			for i := 0; i < len(recs); i += 1000 {
				produce(t, seeds, cfg.Topics.Input, recs[i:i+1000], log)
				time.Sleep(30 * time.Millisecond)
			}
			waitConsumed(t, seeds, cfg, log)
			in.stop(t)
			if !faults {
				checkAgainstReference(t, seeds, cfg, log)
				return
			}
			if aborted.Load() == 0 {
				t.Fatal("no batch aborted")
			}
			stage, err := pipeline.NewStage(cfg.Rule)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := stage.Reference(log)
			got := outputsOf(cfg, readAll(t, seeds, cfg.Topics.Alerts, cfg.Topics.DLQ, cfg.Topics.Late))
			for kind, byKey := range want {
				for key, recs := range byKey {
					have := map[string]int{}
					for _, r := range got[kind][key] {
						have[r]++
					}
					for _, r := range recs {
						if have[r] == 0 {
							t.Fatalf("kind %d key %q: a reference output is missing (lost under at_least_once): %.200q", kind, key, r)
						}
					}
				}
			}
			if got.Count(pipeline.Alert) <= want.Count(pipeline.Alert) && got.Count(pipeline.DeadLetter) <= want.Count(pipeline.DeadLetter) {
				t.Logf("note: no duplicates appeared despite %d aborted batches", aborted.Load())
			}
			for p, a := range latestAccounting(t, seeds, cfg) {
				if !a.Balanced() || a.Records != int64(len(log[p])) {
					t.Errorf("partition %d accounting %+v, want %d records balanced", p, a, len(log[p]))
				}
			}
		})
	}
}

// A clean shutdown commits the open batch. Its outputs linger in the
// producer until the batch's flush, and franz-go fails a buffered record
// whose produce context ended: cancelling Run must not turn the shutdown's
// commit into an abort (the records would be processed again after the
// restart, and the work of a commit interval lost).
func TestShutdownCommitsTheOpenBatch(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "s")
	cfg.CommitInterval = 50 * time.Second // no commit before the shutdown
	log := pipeline.Log{}
	recs := simRecords(12_000, 1)
	produce(t, seeds, cfg.Topics.Input, recs, log)
	in := startAndHandle(t, cfg, len(recs))
	start := time.Now()
	in.stop(t)
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("shutdown took %v", d)
	}
	// stop returned after the shutdown's commit: the offsets are there.
	want := map[int32]int64{}
	for p, rs := range log {
		want[p] = rs[len(rs)-1].Offset + 1
	}
	kafkatest.WaitCommitted(t, seeds, cfg.GroupID, cfg.Topics.Input, want, 2*time.Second)
	checkAgainstReference(t, seeds, cfg, log)
}

// A shutdown whose broker is gone ends within about the transaction
// timeout instead of waiting for a broker that does not come back: the
// open batch's lingering outputs and its commit are bounded once Run's
// context is cancelled (the process then exits with the commit's error,
// and the records are processed again after the restart).
func TestShutdownWithTheBrokerGoneIsBounded(t *testing.T) {
	c := kafkatest.Cluster(t, testPartitions, "vibration.events")
	seeds := c.ListenAddrs()
	cfg := testConfig(seeds, t.TempDir(), "gone")
	cfg.CommitInterval = 50 * time.Second // the batch is open at the shutdown
	cfg.TransactionTimeout = 2 * time.Second
	log := pipeline.Log{}
	recs := simRecords(6000, 2)
	produce(t, seeds, cfg.Topics.Input, recs, log)
	in := startAndHandle(t, cfg, len(recs))
	c.Close()
	start := time.Now()
	in.cancel()
	select {
	case err := <-in.done:
		t.Logf("Run returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(cfg.TransactionTimeout + 20*time.Second):
		t.Fatalf("the shutdown still waits for the broker after %v", time.Since(start).Round(time.Second))
	}
}

// commitWithMeta commits offset 0 of every partition of topic for group,
// with commit metadata meta, as if a processor had committed it.
func commitWithMeta(t *testing.T, seeds []string, group, topic string, meta string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var os kadm.Offsets
	for p := int32(0); p < testPartitions; p++ {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: 0, LeaderEpoch: -1, Metadata: meta})
	}
	resp, err := kadm.NewClient(cl).CommitOffsets(context.Background(), group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// An older version's "v1 cl=<n>" of one rule is read as the rule's only if
// its changelog holds that position: one beyond it is another version's,
// and the rule starts from the group's offsets (a warning), never waiting.
func TestLegacyV1PositionBeyondTheChangelogIsAnotherVersions(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "legacy")
	log := pipeline.Log{}
	produce(t, seeds, cfg.Topics.Input, simRecords(12_000, 1), log)
	commitWithMeta(t, seeds, cfg.GroupID, cfg.Topics.Input, "v1 cl=5000")
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	checkAgainstReference(t, seeds, cfg, log)
}

// A committed changelog position that the rule's changelog does not reach
// (the topic deleted and recreated, or truncated) stops the processor with
// the reason, instead of waiting for ever for records that will not come.
func TestChangelogBehindTheCommittedPositionFails(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "behind")
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	produce(t, seeds, cfg.Topics.Input, simRecords(300, 9), pipeline.Log{})
	commitWithMeta(t, seeds, cfg.GroupID, cfg.Topics.Input, txn.EncodePositions(map[string]int64{rs[0].Rule.ID + ".v1": 5000}))
	in := start(t, cfg, Options{})
	select {
	case err := <-in.done:
		if err == nil || !strings.Contains(err.Error(), "deleted, recreated or truncated") {
			t.Fatalf("Run returned %v, want the changelog named as behind", err)
		}
	case <-time.After(30 * time.Second):
		in.cancel()
		t.Fatal("the processor still waits for its changelog after 30s")
	}
}

// produceMachine writes events of machine m at the given seconds after
// base to partition 0 of topic, value 9 (high vibration).
func produceMachine(t *testing.T, seeds []string, topic, m string, base time.Time, secs ...int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i, s := range secs {
		ts := base.Add(time.Duration(s) * time.Second)
		v := fmt.Sprintf(`{"event_id":"%s-%d","machine_id":%q,"sensor_id":"%s-s1","ts":%d,"seq":%d,"value":9,"unit":"mm/s","schema_version":1,"quality":"good"}`,
			m, s, m, m, ts.UnixMilli(), i)
		rs = append(rs, &kgo.Record{Topic: topic, Partition: 0, Key: []byte(m), Value: []byte(v), Timestamp: ts})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// A start from scratch (no committed offset) over a changelog that holds
// an earlier history (the group's offsets expired or were deleted, the
// changelog kept) deletes that history's keys in its first commit: a later
// restore from the changelog's start (local state lost) gives the same
// state as the replica that kept it. (Before, the old history's open
// incident came back in the full restore and was closed, an alert revision
// the run that kept its state never emitted.)
func TestScratchStartDeletesTheEarlierHistory(t *testing.T) {
	for _, wipe := range []bool{false, true} {
		t.Run(fmt.Sprintf("wipe=%v", wipe), func(t *testing.T) {
			seeds := newCluster(t)
			cfg := testConfig(seeds, t.TempDir(), "scratch")
			in := cfg.Topics.Input
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			end := func() int64 {
				ends, err := adm.ListEndOffsets(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				o, _ := ends.Lookup(in, 0)
				return o.Offset
			}
			runToEnd := func() {
				t.Helper()
				p := start(t, cfg, Options{})
				kafkatest.WaitCommitted(t, seeds, cfg.GroupID, in, map[int32]int64{0: end()}, 30*time.Second)
				p.stop(t)
			}
			// History 1: m-old opens an incident.
			produceMachine(t, seeds, in, "m-old", base, 0, 10, 20)
			runToEnd()
			// The group's offsets go (deleted here; expired in life), and
			// the old input with them (retention).
			if _, err := adm.DeleteGroup(context.Background(), cfg.GroupID); err != nil {
				t.Fatal(err)
			}
			var del kadm.Offsets
			del.Add(kadm.Offset{Topic: in, Partition: 0, At: end(), LeaderEpoch: -1})
			if resp, err := adm.DeleteRecords(context.Background(), del); err != nil || resp.Error() != nil {
				t.Fatal(err, resp.Error())
			}
			// History 2, from scratch: m-new only.
			produceMachine(t, seeds, in, "m-new", base, 3600, 3610)
			runToEnd()
			if wipe {
				if err := os.RemoveAll(cfg.StateDir); err != nil {
					t.Fatal(err)
				}
			}
			// An hour later everything of history 2's past closes.
			produceMachine(t, seeds, in, "m-new", base, 7200, 7210)
			runToEnd()
			opened := false
			for _, r := range readAll(t, seeds, cfg.Topics.Alerts) {
				a, err := alerts.Decode(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				if a.MachineID != "m-old" {
					continue
				}
				if a.Status != alerts.StatusOpen {
					t.Fatalf("m-old's incident of the earlier history got revision %d %s after the start from scratch: its state came back", a.Revision, a.Status)
				}
				opened = true
			}
			if !opened {
				t.Fatal("no m-old alert in the earlier history: the fixture proves nothing")
			}
		})
	}
}

// A record that fails validation and is too large to be dead-lettered
// whole (its value near the producer's 1 MB limit, plus the letter's
// headers) is dead-lettered without its value, saying so, instead of
// failing every retry of its batch: the partition goes on.
func TestHugePoisonRecordIsDeadLetteredWithoutItsValue(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "huge")
	log := pipeline.Log{}
	recs := simRecords(12_000, 1)
	huge := recs[1000]
	huge.Value = bytes.Repeat([]byte("x"), 999_900) // over the 900,000-byte cap: too_large
	recs[1000] = huge
	produce(t, seeds, cfg.Topics.Input, recs, log)
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	found := false
	for _, r := range readAll(t, seeds, cfg.Topics.DLQ) {
		hs := map[string]string{}
		for _, h := range r.Headers {
			hs[h.Key] = string(h.Value)
		}
		if hs[pipeline.HeaderOmitted] == "" {
			continue
		}
		found = true
		if hs[pipeline.HeaderOmitted] != "value" || r.Value != nil || string(r.Key) != string(huge.Key) ||
			hs[pipeline.HeaderErrorReason] != "too_large" || hs[pipeline.HeaderOriginalBytes] == "" {
			t.Errorf("dead letter of the huge record: key %q, %d value bytes, headers %v", r.Key, len(r.Value), hs)
		}
	}
	if !found {
		t.Fatal("no dead letter without its value")
	}
	checkAgainstReference(t, seeds, cfg, log)
}

// A stop requested during start-up (here at once, while topics are checked
// and the producer is fenced) is a clean stop, not an error: nothing was
// consumed. (Tests that stopped a processor still starting on a loaded
// machine saw "init producer id: context canceled".)
func TestStopDuringStartUpIsClean(t *testing.T) {
	seeds := newCluster(t)
	for i := range 5 {
		cfg := testConfig(seeds, t.TempDir(), fmt.Sprint("early-", i))
		in := start(t, cfg, Options{})
		time.Sleep(time.Duration(i) * 20 * time.Millisecond)
		in.stop(t)
	}
}

// startAndHandle starts a processor and waits until its jobs handled n
// records (Options.afterJob), whatever it committed.
func startAndHandle(t *testing.T, cfg config.Config, n int) *instance {
	t.Helper()
	var handled atomic.Int64
	in := start(t, cfg, Options{afterJob: func(k int) { handled.Add(int64(k)) }})
	deadline := time.Now().Add(30 * time.Second)
	for handled.Load() < int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("the processor handled %d of %d records in 30s", handled.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return in
}
