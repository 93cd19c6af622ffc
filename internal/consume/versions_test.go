package consume

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
)

// Where a rule version starts when the group's committed offsets name no
// position of it (onFetched): a version bumped without replay, a first
// batch that aborted before any commit, a rollback, offsets moved by a
// tool.

// runToEnd produces recs (into log), runs cfg until the group committed
// all of log, and stops it.
func runToEnd(t *testing.T, seeds []string, cfg config.Config, recs []sim.Record, log pipeline.Log) {
	t.Helper()
	produce(t, seeds, cfg.Topics.Input, recs, log)
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
}

// bumped is cfg with its rule at version 2 (no replay).
func bumped(cfg config.Config) config.Config {
	cfg.Rule.Version = 2
	return cfg
}

// abortBatches runs cfg with every batch aborted until n were, then stops
// it: a crash before its first commit.
func abortBatches(t *testing.T, cfg config.Config, n int64) {
	t.Helper()
	var aborted atomic.Int64
	in := start(t, cfg, Options{AbortBatch: func() bool { aborted.Add(1); return true }})
	for deadline := time.Now().Add(30 * time.Second); aborted.Load() < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d batches aborted in 30s", aborted.Load(), n)
		}
	}
	in.stop(t)
}

// restartsToEnd starts cfg and fails if it stops before the group
// committed all of log.
func restartsToEnd(t *testing.T, seeds []string, cfg config.Config, log pipeline.Log) {
	t.Helper()
	in := start(t, cfg, Options{})
	done := make(chan struct{})
	go func() { waitConsumed(t, seeds, cfg, log); close(done) }()
	select {
	case err := <-in.done:
		t.Fatalf("version %d stopped on restart: %v", cfg.Rule.Version, err)
	case <-done:
	}
	in.stop(t)
}

// counted sums the records of the latest accounting of every partition.
func counted(t *testing.T, seeds []string, cfg config.Config) int64 {
	t.Helper()
	var n int64
	for _, a := range latestAccounting(t, seeds, cfg) {
		n += a.Records
	}
	return n
}

// A rule whose version changed without `processor replay` starts from the
// group's offsets with empty state, also when it is the only rule of its
// source: the committed changelog position names the rule version it
// belongs to (v2 metadata). (With the unnamed "v1 cl=<n>" once written for
// a single rule, the new version took the old one's position as its own
// and waited for ever for its empty changelog to reach it.)
func TestVersionBumpWithoutReplayStartsFromTheGroupsOffsets(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "bump")
	log := pipeline.Log{}
	recs := simRecords(4000, 7)
	runToEnd(t, seeds, cfg, recs[:2000], log)
	runToEnd(t, seeds, bumped(cfg), recs[2000:], log)
	if n := counted(t, seeds, bumped(cfg)); n != 2000 {
		t.Errorf("version 2 counted %d records, want the 2000 after the group's offsets", n)
	}
}

// A rule version that starts from the group's offsets (no accounting of
// its own yet) rewinds, after an aborted batch, to where it was restored,
// not to the start of the topic: in both modes the new version counts the
// records after the group's offsets, once.
func TestAbortAfterAVersionBumpRewindsToTheGroupsOffsets(t *testing.T) {
	for _, mode := range []string{config.ExactlyOnce, config.AtLeastOnce} {
		t.Run(mode, func(t *testing.T) {
			seeds := newCluster(t)
			cfg := testConfig(seeds, t.TempDir(), "bumpabort")
			cfg.Mode = mode
			log := pipeline.Log{}
			recs := simRecords(4000, 7)
			runToEnd(t, seeds, cfg, recs[:2000], log)
			produce(t, seeds, cfg.Topics.Input, recs[2000:], log)
			var aborted atomic.Int64
			in := start(t, bumped(cfg), Options{AbortBatch: func() bool {
				return aborted.Add(1) == 1 // the new version's first batch
			}})
			waitConsumed(t, seeds, bumped(cfg), log)
			in.stop(t)
			if aborted.Load() == 0 {
				t.Fatal("no batch was aborted")
			}
			if n := counted(t, seeds, bumped(cfg)); n != 2000 {
				t.Errorf("version 2 counted %d records, want the 2000 after the group's offsets", n)
			}
		})
	}
}

// A new version whose first batches aborted, then a crash before its first
// commit: the restart starts from the group's offsets again (exactly_once:
// nothing of it was committed; at_least_once: its flushed changelog records
// began at the group's offset) and counts the records after them once.
func TestNewVersionsAbortedFirstBatchThenRestart(t *testing.T) {
	for _, mode := range []string{config.ExactlyOnce, config.AtLeastOnce} {
		t.Run(mode, func(t *testing.T) {
			seeds := newCluster(t)
			cfg := testConfig(seeds, t.TempDir(), "abortrestart")
			cfg.Mode = mode
			log := pipeline.Log{}
			recs := simRecords(4000, 7)
			runToEnd(t, seeds, cfg, recs[:2000], log)
			produce(t, seeds, cfg.Topics.Input, recs[2000:], log)
			abortBatches(t, bumped(cfg), 3)
			restartsToEnd(t, seeds, bumped(cfg), log)
			if n := counted(t, seeds, bumped(cfg)); n != 2000 {
				t.Errorf("version 2 counted %d records, want 2000", n)
			}
		})
	}
}

// A crash (or a rebalance) after the first batch of a new rule version was
// flushed but before its commit leaves the version's changelog with only
// aborted records: its last stable offset > 0, its committed state empty.
// The restart starts from the group's offsets (it used to refuse).
func TestNewVersionsAbortedChangelogRecordsThenRestart(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "abortcl")
	log := pipeline.Log{}
	recs := simRecords(4000, 7)
	runToEnd(t, seeds, cfg, recs[:2000], log)
	produce(t, seeds, cfg.Topics.Input, recs[2000:], log)
	abortBatches(t, bumped(cfg), 1)
	rs, err := bumped(cfg).Rules()
	if err != nil {
		t.Fatal(err)
	}
	cl := bumped(cfg).ChangelogFor(rs[0])
	// What the flushed batch of the crashed incarnation leaves: records of
	// a transaction that the next incarnation's InitProducerID aborts.
	c, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID("crashed"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := c.ProduceSync(ctx, &kgo.Record{Topic: cl, Partition: 0, Key: []byte(changelogAcct), Value: []byte(`{"version":1,"records":5}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := c.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	c.Close()
	restartsToEnd(t, seeds, bumped(cfg), log)
}

// Version 2 aborts its first batch, whose changelog records were partly
// sent before the abort (a chunked entry is larger than a producer batch);
// the process stops before a commit of version 2. The restart starts from
// the group's offsets (it used to refuse: no committed accounting,
// NextOffset 0, is not the committed offset).
func TestNewVersionsAbortedChunkedFirstBatch(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "natural")
	cfg.CommitInterval = 3 * time.Second
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	log := pipeline.Log{}
	runToEnd(t, seeds, cfg, bigIDEvents(t, "M-chunky", base, 0, 10), log)
	produce(t, seeds, cfg.Topics.Input, bigIDEvents(t, "M-chunky", base, 10, 1500), log)
	abortBatches(t, bumped(cfg), 1)
	restartsToEnd(t, seeds, bumped(cfg), log)
}

// at_least_once: an aborted first batch of version 2 whose flushed prefix
// lacks the accounting record (its tombstone stands in for it) is not
// loaded as state: the restart counts what a restart after a whole aborted
// batch counts.
func TestAtLeastOncePartialFirstBatchIsNotState(t *testing.T) {
	run := func(withoutAccounting bool) map[int32]pipeline.Accounting {
		seeds := newCluster(t)
		cfg := testConfig(seeds, t.TempDir(), "alopart")
		cfg.Mode = config.AtLeastOnce
		log := pipeline.Log{}
		recs := simRecords(4000, 7)
		runToEnd(t, seeds, cfg, recs[:2000], log)
		produce(t, seeds, cfg.Topics.Input, recs[2000:], log)
		abortBatches(t, bumped(cfg), 1)
		if withoutAccounting {
			rs, err := bumped(cfg).Rules()
			if err != nil {
				t.Fatal(err)
			}
			cl := bumped(cfg).ChangelogFor(rs[0])
			c, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			parts := map[int32]bool{}
			for _, r := range readAll(t, seeds, cl) {
				if string(r.Key) == changelogAcct && r.Value != nil {
					parts[r.Partition] = true
				}
			}
			for p := range parts {
				if err := c.ProduceSync(context.Background(), &kgo.Record{Topic: cl, Partition: p, Key: []byte(changelogAcct)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			c.Close()
		}
		restartsToEnd(t, seeds, bumped(cfg), log)
		return latestAccounting(t, seeds, bumped(cfg))
	}
	whole, partial := run(false), run(true)
	for p, a := range whole {
		if partial[p] != a {
			t.Errorf("partition %d: %+v, after a whole aborted batch %+v", p, partial[p], a)
		}
	}
}

// A rule version whose state exists is refused when the group's offset
// was moved past it by something else: here version 2 ran in between, and
// version 1 comes back (a rollback, or a replica still on the old
// configuration). Resuming would have skipped version 2's records.
func TestRuleStateBehindTheGroupsOffsetIsRefused(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "gap")
	recs := simRecords(6000, 7)
	log := pipeline.Log{}
	runToEnd(t, seeds, cfg, recs[:2000], log)
	runToEnd(t, seeds, bumped(cfg), recs[2000:4000], log)
	produce(t, seeds, cfg.Topics.Input, recs[4000:], log)
	refused(t, cfg, "resuming would skip the records in between")
}

// The group's offsets moved back by a tool (to 300, without metadata)
// behind committed state: refused in both modes (at_least_once does not
// take it for an aborted first batch: that state began before 300).
func TestToolResetBackIsRefused(t *testing.T) {
	for _, mode := range []string{config.ExactlyOnce, config.AtLeastOnce} {
		t.Run(mode, func(t *testing.T) {
			seeds := newCluster(t)
			cfg := testConfig(seeds, t.TempDir(), "reset")
			cfg.Mode = mode
			runToEnd(t, seeds, cfg, simRecords(2000, 7), pipeline.Log{})
			cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
			if err != nil {
				t.Fatal(err)
			}
			var offs kadm.Offsets
			for p := int32(0); p < testPartitions; p++ {
				offs.Add(kadm.Offset{Topic: cfg.Topics.Input, Partition: p, At: 300, LeaderEpoch: -1})
			}
			if _, err := kadm.NewClient(cl).CommitOffsets(context.Background(), cfg.GroupID, offs); err != nil {
				t.Fatal(err)
			}
			cl.Close()
			// Partition 0's state ends past 300 and began before it.
			refused(t, cfg, "partition vibration.events/0", "count twice")
		})
	}
}

// refused starts cfg and wants it to stop at once with a fatal error
// containing every one of want.
func refused(t *testing.T, cfg config.Config, want ...string) {
	t.Helper()
	in := start(t, cfg, Options{})
	select {
	case err := <-in.done:
		for _, w := range want {
			if !errors.Is(err, errFatal) || !strings.Contains(err.Error(), w) {
				t.Fatalf("stopped with %v, want a fatal error naming %q", err, w)
			}
		}
	case <-time.After(30 * time.Second):
		in.cancel()
		t.Fatal("not refused")
	}
}
