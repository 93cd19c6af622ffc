package txn_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/txn"
)

// The processor's transactional producer lingers for the whole transaction
// (consume sets a 1-minute linger). An abort must fail the buffered records
// at once instead of waiting them out, and must not report them as a
// failed produce; a commit flushes them; a read_committed reader sees only
// the committed batch.
func TestLingeringRecordsAbortAndCommitAtOnce(t *testing.T) {
	c := kafkatest.Cluster(t, 1, "in", "out")
	seeds := c.ListenAddrs()
	ctx := context.Background()
	s, err := txn.NewExactlyOnce(ctx,
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.TransactionalID("linger-test"),
		kgo.ProducerLinger(time.Minute),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	noMeta := func(string, int32) (kgo.EpochOffset, string, error) {
		return kgo.EpochOffset{Epoch: -1, Offset: -1}, "", nil
	}

	batch := func(value string, commit bool) (bool, time.Duration) {
		t.Helper()
		if err := s.Begin(); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			s.Produce(ctx, &kgo.Record{Topic: "out", Value: []byte(value), Key: []byte{byte('a' + i)}})
		}
		start := time.Now()
		committed, err := s.End(ctx, commit, noMeta)
		if err != nil {
			t.Fatalf("End(commit=%v) of %q: %v", commit, value, err)
		}
		return committed, time.Since(start)
	}

	if committed, took := batch("aborted", false); committed || took > 10*time.Second {
		t.Fatalf("abort: committed %v after %v; want an abort well within the 1-minute linger", committed, took)
	}
	if committed, took := batch("kept", true); !committed || took > 10*time.Second {
		t.Fatalf("commit: committed %v after %v; want a commit well within the 1-minute linger", committed, took)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("out"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < 3 && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		cancel()
	}
	if want := []string{"kept", "kept", "kept"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed output %q, want %q", got, want)
	}
}
