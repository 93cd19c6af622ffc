package consume

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/txn"
)

// openZombieTxn begins a transaction of another transactional id that
// writes one record to changelog partition 0 and leaves it open (a zombie
// that lost its partitions but has not been aborted yet), so the changelog
// partition's last stable offset stays at that record.
func openZombieTxn(t *testing.T, seeds []string, topic string) func() {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID("zombie"),
		kgo.TransactionTimeout(120*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: 0, Key: []byte("kzombie"), Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := cl.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
			t.Error(err)
		}
		cl.Close()
	}
}

// A committed changelog position above the changelog's last stable offset
// is legitimate while another producer's transaction is open on the
// changelog partition (a zombie; or, on a real broker, the commit marker of
// the last transaction not yet written there). The restore must wait for
// it, not stop the processor as if the topic had been truncated.
func TestOpenTransactionOnChangelogIsNotTruncation(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "lso")
	log := pipeline.Log{}
	recs := simRecords(6000, 11)
	produce(t, seeds, cfg.Topics.Input, recs[:3000], log)
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)

	abortZombie := openZombieTxn(t, seeds, cfg.ChangelogTopic())

	produce(t, seeds, cfg.Topics.Input, recs[3000:], log)
	in = start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t) // committed positions now beyond the zombie's record

	in = start(t, cfg, Options{})
	select {
	case err := <-in.done:
		abortZombie()
		if err != nil && strings.Contains(err.Error(), "deleted, recreated or truncated") {
			t.Fatalf("an open transaction of another producer on the changelog stopped the processor: %v", err)
		}
		t.Fatalf("Run returned %v", err)
	case <-time.After(8 * time.Second):
		in.cancel()
		<-in.done
		abortZombie()
	}
}

// The legacy path: an older version (rolling upgrade) committed "v1 cl=<n>"
// and an open transaction on the changelog holds its last stable offset
// below n. n is still this rule's (the changelog's high watermark is past
// it): the restore waits for the transaction and restores to n. (Compared
// with the last stable offset, n was taken for another version's and the
// state silently missed the last committed transactions.)
func TestLegacyV1PositionAboveTheLastStableOffsetKeepsState(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "lso1")
	log := pipeline.Log{}
	recs := simRecords(9000, 11)
	produce(t, seeds, cfg.Topics.Input, recs[:3000], log)
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	abortZombie := openZombieTxn(t, seeds, cfg.ChangelogTopic())
	produce(t, seeds, cfg.Topics.Input, recs[3000:6000], log)
	in = start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	// As the older version would have committed it: v1, same positions.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	offs, err := adm.FetchOffsets(context.Background(), cfg.GroupID)
	if err != nil {
		t.Fatal(err)
	}
	var re kadm.Offsets
	offs.Each(func(o kadm.OffsetResponse) {
		pos, ok := txn.DecodePositions(o.Metadata)
		if n, v1 := txn.DecodeMeta(o.Metadata); v1 {
			pos, ok = map[string]int64{"": n}, true
		}
		if !ok || len(pos) != 1 {
			t.Fatalf("metadata %q", o.Metadata)
		}
		for _, n := range pos {
			re.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.At, LeaderEpoch: -1, Metadata: txn.EncodeMeta(n)})
		}
	})
	if resp, err := adm.CommitOffsets(context.Background(), cfg.GroupID, re); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
	cl.Close()
	in = start(t, cfg, Options{})
	time.Sleep(3 * time.Second) // the restore waits for the zombie's transaction
	abortZombie()
	produce(t, seeds, cfg.Topics.Input, recs[6000:], log)
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	for p, a := range latestAccounting(t, seeds, cfg) {
		if a.Records != int64(len(log[p])) {
			t.Errorf("partition %d accounting counts %d records, the log has %d: state restored behind the committed offsets", p, a.Records, len(log[p]))
		}
	}
}

// A replica restarted with its local state after its rule's changelog was
// deleted (and recreated at start-up) stops with the reason: its store is
// at the committed position, but the changelog no longer holds it, and
// going on would start a history whose past only this store knows.
func TestRecreatedChangelogStopsAReplicaWithItsLocalState(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "recreated")
	log := pipeline.Log{}
	recs := simRecords(6000, 5)
	produce(t, seeds, cfg.Topics.Input, recs[:3000], log)
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	if _, err := adm.DeleteTopics(context.Background(), cfg.ChangelogTopic()); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	time.Sleep(500 * time.Millisecond)

	produce(t, seeds, cfg.Topics.Input, recs[3000:], log)
	in = start(t, cfg, Options{}) // same state dir: checkpoint == committed position
	select {
	case err := <-in.done:
		if err != nil && strings.Contains(err.Error(), "deleted, recreated or truncated") {
			return // the documented behaviour
		}
		t.Fatalf("Run returned %v", err)
	case <-time.After(10 * time.Second):
		in.cancel()
		<-in.done
		acct := latestAccounting(t, seeds, cfg)
		t.Fatalf("the processor runs on over a recreated changelog (no stop); its new changelog's accounting: %v", acct)
	}
}
