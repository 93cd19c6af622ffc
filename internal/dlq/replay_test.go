package dlq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/reconcile"
)

// replays returns the replayed records of topic (read_committed) by the
// dead letter they came from, failing on a dead letter replayed twice.
func replays(t *testing.T, cfg config.Config, topic string) map[string]*kgo.Record {
	t.Helper()
	out := map[string]*kgo.Record{}
	for _, r := range readCommitted(t, cfg, topic) {
		from, ok := header(r, HeaderReplayedFrom)
		if !ok {
			continue
		}
		if out[from] != nil {
			t.Fatalf("dead letter %s replayed twice: at %d@%d and %d@%d", from, out[from].Partition, out[from].Offset, r.Partition, r.Offset)
		}
		out[from] = r
	}
	return out
}

// checkReplay checks that the replay of dead letter l is the original record.
func checkReplay(t *testing.T, cfg config.Config, l letter, r *kgo.Record) {
	t.Helper()
	var got []string
	for _, h := range r.Headers {
		got = append(got, h.Key+"="+string(h.Value))
	}
	want := []string{}
	for _, h := range l.headers {
		want = append(want, h.Key+"="+string(h.Value))
	}
	want = append(want,
		"dlq.original.topic="+cfg.Topics.Input,
		fmt.Sprintf("dlq.original.partition=%d", l.partition),
		fmt.Sprintf("dlq.original.offset=%d", l.offset),
		fmt.Sprintf("dlq.original.timestamp=%d", l.sourceTime().UnixMilli()),
		"dlq.replayed=1")
	if fmt.Sprint(got[:len(got)-1]) != fmt.Sprint(want) || !strings.HasPrefix(got[len(got)-1], "dlq.replayed.from="+cfg.Topics.DLQ+"/") {
		t.Errorf("replay of %d@%d: headers\n got %v\nwant %v + dlq.replayed.from", l.partition, l.offset, got, want)
	}
	if string(r.Key) != l.key || string(r.Value) != string(l.value()) || r.Partition != l.partition || !r.Timestamp.Equal(l.sourceTime()) {
		t.Errorf("replay of %d@%d is %s/%d key %q value %q ts %s", l.partition, l.offset, r.Topic, r.Partition, r.Key, r.Value, r.Timestamp)
	}
}

// bySource indexes replays by their dlq.original position.
func bySource(t *testing.T, rs map[string]*kgo.Record) map[string]*kgo.Record {
	t.Helper()
	out := map[string]*kgo.Record{}
	for _, r := range rs {
		p, _ := header(r, HeaderOriginalPartition)
		o, _ := header(r, HeaderOriginalOffset)
		out[p+"@"+o] = r
	}
	return out
}

func pos(l letter) string { return fmt.Sprintf("%d@%d", l.partition, l.offset) }

func TestReplayOneReasonOnce(t *testing.T) {
	cfg := newCluster(t)
	letters := someLetters(30, "decode_error", "key_mismatch", "invalid_field")
	produceLetters(t, cfg, letters, someLetters(3, "key_mismatch")) // the aborted ones must never come back
	ctx := context.Background()
	o := ReplayOptions{Config: cfg, Selection: Selection{Reasons: []string{"key_mismatch"}}, Batch: 7, Logger: quiet()}
	rep, err := Replay(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.String())
	if rep.Examined != 30 || rep.ReplayedTotal() != 10 || rep.Replayed["key_mismatch"] != 10 ||
		rep.Skipped["decode_error"] != 10 || rep.Skipped["invalid_field"] != 10 || rep.Transactions < 5 {
		t.Fatalf("report %+v", rep)
	}
	got := bySource(t, replays(t, cfg, cfg.Topics.Input))
	if len(got) != 10 {
		t.Fatalf("%d replays on the input, want 10", len(got))
	}
	for _, l := range letters {
		r := got[pos(l)]
		if (r != nil) != (l.reason == "key_mismatch") {
			t.Fatalf("letter %s (%s): replayed = %v", pos(l), l.reason, r != nil)
		}
		if r != nil {
			checkReplay(t, cfg, l, r)
		}
	}

	// A second run examines nothing new and replays nothing.
	rep, err = Replay(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Examined != 0 || rep.ReplayedTotal() != 0 || len(replays(t, cfg, cfg.Topics.Input)) != 10 {
		t.Fatalf("second run: %+v", rep)
	}

	// New dead letters arrive: the next run examines only them.
	more := []letter{{reason: "key_mismatch", partition: 1, offset: 900, key: "M-9"}, {reason: "decode_error", partition: 2, offset: 901, key: "M-9"}}
	produceLetters(t, cfg, more, nil)
	rep, err = Replay(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	got = bySource(t, replays(t, cfg, cfg.Topics.Input))
	if rep.Examined != 2 || rep.ReplayedTotal() != 1 || len(got) != 11 || got["1@900"] == nil {
		t.Fatalf("third run: %+v, %d replays", rep, len(got))
	}
	checkReplay(t, cfg, more[0], got["1@900"])
}

// A batch that fails after its replays were produced aborts: the re-run
// replays each chosen letter exactly once in the read_committed view.
func TestReplayAbortMidwayThenRerun(t *testing.T) {
	cfg := newCluster(t)
	letters := someLetters(40, "clock_ahead", "schema_unknown")
	produceLetters(t, cfg, letters, nil)
	ctx := context.Background()
	boom := errors.New("injected failure")
	o := ReplayOptions{Config: cfg, Selection: Selection{Reasons: []string{"clock_ahead"}}, Batch: 6, Logger: quiet(),
		AfterProduce: func(batch int) error {
			if batch == 3 {
				return boom
			}
			return nil
		}}
	rep, err := Replay(ctx, o)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	committed := rep.ReplayedTotal()
	if rep.Transactions != 2 || committed == 0 || committed >= 20 {
		t.Fatalf("first run: %+v", rep)
	}
	if n := len(replays(t, cfg, cfg.Topics.Input)); n != committed {
		t.Fatalf("%d replays committed on the input, the report says %d", n, committed)
	}
	// The aborted batch did produce: a read_uncommitted reader sees more.
	if n := len(readUncommitted(t, cfg, cfg.Topics.Input)); n <= committed {
		t.Fatalf("the failed batch produced nothing (%d records uncommitted view)", n)
	}

	o.AfterProduce = nil
	rep2, err := Replay(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	got := bySource(t, replays(t, cfg, cfg.Topics.Input)) // fails on any duplicate
	if len(got) != 20 || rep2.ReplayedTotal() != 20-committed || rep.Examined+rep2.Examined != 40 {
		t.Fatalf("after the re-run: %d replays; runs %+v and %+v", len(got), rep, rep2)
	}
	for _, l := range letters {
		if r := got[pos(l)]; (r != nil) != (l.reason == "clock_ahead") {
			t.Fatalf("letter %s (%s): replayed = %v", pos(l), l.reason, r != nil)
		} else if r != nil {
			checkReplay(t, cfg, l, r)
		}
	}
}

// An interrupt (SIGINT cancels the context) during a batch lets that batch
// commit and stops before the next one; a re-run does the rest.
func TestReplayInterruptFinishesTheBatch(t *testing.T) {
	cfg := newCluster(t)
	produceLetters(t, cfg, someLetters(20, "decode_error"), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := ReplayOptions{Config: cfg, Batch: 5, Logger: quiet(), AfterProduce: func(batch int) error {
		if batch == 2 {
			cancel()
		}
		return nil
	}}
	rep, err := Replay(ctx, o)
	if !errors.Is(err, context.Canceled) || rep.Transactions != 2 || rep.ReplayedTotal() != len(replays(t, cfg, cfg.Topics.Input)) {
		t.Fatalf("interrupted run: %v, %+v", err, rep)
	}
	o.AfterProduce = nil
	rep2, err := Replay(context.Background(), o)
	if err != nil || rep.ReplayedTotal()+rep2.ReplayedTotal() != 20 || len(replays(t, cfg, cfg.Topics.Input)) != 20 {
		t.Fatalf("re-run: %v, %+v", err, rep2)
	}
}

// A run that died with its transaction open (replays produced, offsets not
// committed) is fenced by the next run, which aborts that transaction.
func TestReplayFencesADeadRun(t *testing.T) {
	cfg := newCluster(t)
	letters := someLetters(9, "decode_error")
	produceLetters(t, cfg, letters, nil)
	ctx := context.Background()
	group := cfg.GroupID + ".dlq-replay"

	// The dead run: its producer (same transactional id) wrote a replay and
	// never ended the transaction.
	zombie := client(t, cfg, kgo.TransactionalID(TransactionalID(group)), kgo.TransactionTimeout(time.Minute))
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	l := Letter{Topic: cfg.Topics.DLQ, Partition: 0, Offset: 0, Key: []byte("zombie"), Value: []byte("zombie")}
	if err := zombie.ProduceSync(ctx, l.ReplayRecord(cfg.Topics.Input)).FirstErr(); err != nil {
		t.Fatal(err)
	}

	rep, err := Replay(ctx, ReplayOptions{Config: cfg, Logger: quiet(), Batch: 4})
	if err != nil {
		t.Fatal(err)
	}
	got := replays(t, cfg, cfg.Topics.Input)
	if rep.ReplayedTotal() != 9 || len(got) != 9 {
		t.Fatalf("%+v, %d replays", rep, len(got))
	}
	for _, r := range got {
		if string(r.Key) == "zombie" {
			t.Fatal("the dead run's open transaction became visible")
		}
	}
	if err := zombie.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Fatal("the dead run's producer could still commit: not fenced")
	}
}

func TestReplayDryRunChangesNothing(t *testing.T) {
	cfg := newCluster(t)
	produceLetters(t, cfg, someLetters(12, "decode_error", "key_mismatch"), nil)
	ctx := context.Background()
	adm := kadm.NewClient(client(t, cfg))
	endsBefore, err := adm.ListEndOffsets(ctx, cfg.Topics.Input)
	if err != nil {
		t.Fatal(err)
	}
	o := ReplayOptions{Config: cfg, Selection: Selection{Reasons: []string{"decode_error"}}, DryRun: true, Logger: quiet()}
	rep, err := Replay(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Examined != 12 || rep.ReplayedTotal() != 6 || rep.Skipped["key_mismatch"] != 6 || !strings.Contains(rep.String(), "DRY RUN") {
		t.Fatalf("dry run: %+v", rep)
	}
	endsAfter, err := adm.ListEndOffsets(ctx, cfg.Topics.Input)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(endsBefore.Offsets()) != fmt.Sprint(endsAfter.Offsets()) {
		t.Fatalf("the dry run wrote to the input: %v -> %v", endsBefore.Offsets(), endsAfter.Offsets())
	}
	offs, err := adm.FetchOffsets(ctx, cfg.GroupID+".dlq-replay")
	if err == nil {
		offs.Each(func(o kadm.OffsetResponse) {
			if o.At >= 0 {
				t.Errorf("the dry run committed %s/%d@%d", o.Topic, o.Partition, o.At)
			}
		})
	}
	// What it announced is what a run does.
	o.DryRun = false
	real, err := Replay(ctx, o)
	if err != nil || real.ReplayedTotal() != rep.ReplayedTotal() || real.Examined != rep.Examined {
		t.Fatalf("real run %+v (%v) differs from the dry run %+v", real, err, rep)
	}
	// A dry run after it has nothing to do.
	o.DryRun = true
	if rep, err := Replay(ctx, o); err != nil || rep.Examined != 0 {
		t.Fatalf("dry run after the run: %+v %v", rep, err)
	}
}

// --reset re-examines from the start: with the same selection it replays
// everything again (that is what the confirmation in the CLI is for).
func TestReplayReset(t *testing.T) {
	cfg := newCluster(t)
	produceLetters(t, cfg, someLetters(6, "decode_error"), nil)
	ctx := context.Background()
	o := ReplayOptions{Config: cfg, Logger: quiet()}
	if rep, err := Replay(ctx, o); err != nil || rep.ReplayedTotal() != 6 {
		t.Fatalf("%+v %v", rep, err)
	}
	o.Reset, o.DryRun = true, true
	if rep, err := Replay(ctx, o); err != nil || rep.ReplayedTotal() != 6 {
		t.Fatalf("dry reset: %+v %v", rep, err)
	}
	if n := len(readCommitted(t, cfg, cfg.Topics.Input)); n != 6 {
		t.Fatalf("the dry reset replayed: %d records", n)
	}
	o.DryRun = false
	if rep, err := Replay(ctx, o); err != nil || rep.ReplayedTotal() != 6 {
		t.Fatalf("reset: %+v %v", rep, err)
	}
	if n := len(readCommitted(t, cfg, cfg.Topics.Input)); n != 12 {
		t.Fatalf("%d records on the input after a reset, want 12", n)
	}
}

// Letters from another topic are not re-injected into the input unless a
// target is named; the batch holding one aborts, so it stays unexamined.
func TestReplayRefusesForeignSource(t *testing.T) {
	cfg := newCluster(t)
	ls := someLetters(4, "decode_error")
	produceLetters(t, cfg, ls, nil)
	foreign := ls[0].record(cfg)
	for i, h := range foreign.Headers {
		if h.Key == pipeline.HeaderSourceTopic {
			foreign.Headers[i].Value = []byte("legacy.events")
		}
	}
	foreign.Partition = 0
	if err := client(t, cfg, kgo.RecordPartitioner(kgo.ManualPartitioner())).ProduceSync(context.Background(), foreign).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err := Replay(ctx, ReplayOptions{Config: cfg, Logger: quiet()})
	if !errors.Is(err, ErrSourceTopic) || !strings.Contains(err.Error(), "legacy.events") {
		t.Fatalf("err = %v", err)
	}
	if n := len(readCommitted(t, cfg, cfg.Topics.Input)); n != 0 {
		t.Fatalf("%d records replayed despite the refusal", n)
	}
	// Named explicitly, every letter goes there, to its source partition.
	createTopic(t, cfg, "legacy.events", 3)
	rep, err := Replay(ctx, ReplayOptions{Config: cfg, Logger: quiet(), ToTopic: "legacy.events"})
	if err != nil || rep.ReplayedTotal() != 5 || len(readCommitted(t, cfg, "legacy.events")) != 5 {
		t.Fatalf("%+v %v", rep, err)
	}
}

// End to end with the processor: replayed key_mismatch records go through
// the processor again, fail again, and come back to the DLQ carrying
// dlq.replayed; every topic still reconciles, and a second replay run
// does not pick up the returned letters it has not reached.
func TestReplayedRecordsReturnToTheDLQ(t *testing.T) {
	cfg := processed(t, 2000)
	before := readCommitted(t, cfg, cfg.Topics.DLQ)
	mismatched := map[string]bool{}
	for _, r := range before {
		if l := Parse(r); l.Reason == "key_mismatch" {
			mismatched[l.Position()] = true
		}
	}
	if len(mismatched) == 0 {
		t.Fatal("no key_mismatch dead letters to replay")
	}
	ctx := context.Background()
	rep, err := Replay(ctx, ReplayOptions{Config: cfg, Selection: Selection{Reasons: []string{"key_mismatch"}}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Examined != len(before) || rep.ReplayedTotal() != len(mismatched) {
		t.Fatalf("%+v, want %d examined, %d replayed", rep, len(before), len(mismatched))
	}

	runProcessor(t, cfg) // continues from its committed offsets: only the replays are new
	back := 0
	for _, r := range readCommitted(t, cfg, cfg.Topics.DLQ) {
		l := Parse(r)
		if !l.Replayed() {
			continue
		}
		back++
		orig, _ := header(r, HeaderOriginalOffset)
		if l.Reason != "key_mismatch" || !mismatched[l.ReplayedFrom] || l.SourceTopic != cfg.Topics.Input || strconv.FormatInt(l.SourceOffset, 10) == orig {
			t.Errorf("returned letter %s: reason %s, from %s, source %s, original offset %s", l.Position(), l.Reason, l.ReplayedFrom, l.Source(), orig)
		}
		if tr, ok := header(r, "trace"); !ok || tr == "" {
			t.Errorf("returned letter %s lost the original headers", l.Position())
		}
		// The new letter names the rule that wrote it, once: the replay
		// did not carry the first letter's dlq.rules into the input.
		var named []string
		for _, h := range r.Headers {
			if h.Key == pipeline.HeaderDeadLetterRules {
				named = append(named, string(h.Value))
			}
		}
		if want := cfg.Rule.ID + "@" + strconv.Itoa(cfg.Rule.Version); len(named) != 1 || named[0] != want || l.Rules != want {
			t.Errorf("returned letter %s: dlq.rules headers %q, want one %q", l.Position(), named, want)
		}
		delete(mismatched, l.ReplayedFrom)
	}
	if back != rep.ReplayedTotal() || len(mismatched) != 0 {
		t.Fatalf("%d replays came back to the DLQ, want %d (missing %v)", back, rep.ReplayedTotal(), mismatched)
	}
	sum, err := Inspect(ctx, InspectOptions{Config: cfg, Selection: Selection{Reasons: []string{"key_mismatch"}}})
	if err != nil || sum.ReplayedBefore != back || sum.Selected != 2*back {
		t.Fatalf("inspect after the round trip: %+v %v", sum, err)
	}
	rc, err := reconcile.Run(ctx, reconcile.Options{Config: cfg, Timeout: 20 * time.Second})
	if err != nil || !rc.OK() {
		t.Fatalf("reconcile after replay: %v\n%s", err, rc)
	}

	// The returned letters are new: the next run examines exactly them, and
	// replays them once more only because the selection still chooses them.
	rep2, err := Replay(ctx, ReplayOptions{Config: cfg, Selection: Selection{Reasons: []string{"key_mismatch"}}, Logger: quiet()})
	if err != nil || rep2.Examined != back || rep2.ReplayedTotal() != back {
		t.Fatalf("second run %+v %v", rep2, err)
	}
}

// After a fix, replayed records are processed: here the fix is a
// configuration (max_future_skew raised) applied by a processor that reads
// the replays from their own topic; none of them is dead-lettered again.
func TestReplayedRecordsProcessedAfterAFix(t *testing.T) {
	cfg := processed(t, 2000)
	ctx := context.Background()
	fixed := cfg
	fixed.GroupID = "fixed"
	fixed.Topics = config.Topics{Input: "vibration.events.fixed", Alerts: "fixed.alerts", DLQ: "fixed.dlq", Late: "fixed.late"}
	fixed.Rule.MaxFutureSkew = 2 * time.Hour
	fixed.StateDir = t.TempDir()
	createTopic(t, cfg, fixed.Topics.Input, 3)
	rep, err := Replay(ctx, ReplayOptions{Config: cfg, Selection: Selection{Reasons: []string{"clock_ahead"}}, ToTopic: fixed.Topics.Input, Logger: quiet()})
	if err != nil || rep.ReplayedTotal() == 0 {
		t.Fatalf("%+v %v", rep, err)
	}
	runProcessor(t, fixed)
	rc, err := reconcile.Run(ctx, reconcile.Options{Config: fixed, Timeout: 20 * time.Second})
	if err != nil || !rc.OK() {
		t.Fatalf("reconcile of the fixed run: %v\n%s", err, rc)
	}
	if rc.InputRecords != rep.ReplayedTotal() || rc.DeadLetters != 0 {
		t.Fatalf("fixed run: %d input records (want %d), %d dead letters (want 0)", rc.InputRecords, rep.ReplayedTotal(), rc.DeadLetters)
	}
}

// A letter written without its value (dlq.omitted) is counted apart by
// inspect and skipped by replay, whose report says where its original is
// instead of suggesting to replay it later.
func TestOmittedLettersAreSingledOut(t *testing.T) {
	cfg := newCluster(t)
	ls := someLetters(6, "too_large", "decode_error")
	ls[0].omitted, ls[2].omitted = true, true // two of the three too_large
	produceLetters(t, cfg, ls, nil)
	sum, err := Inspect(context.Background(), InspectOptions{Config: cfg, Samples: 1})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Omitted != 2 || !strings.Contains(sum.String(), "written without their value") {
		t.Fatalf("inspect: omitted %d, want 2:\n%s", sum.Omitted, sum)
	}
	target := "vibration.events.fixed"
	createTopic(t, cfg, target, 3)
	for _, dry := range []bool{true, false} {
		rep, err := Replay(context.Background(), ReplayOptions{Config: cfg, ToTopic: target, DryRun: dry, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Omitted != 2 || rep.ReplayedTotal() != 4 || rep.SkippedTotal() != 2 {
			t.Fatalf("dry=%v: %+v, want 4 replayed and 2 omitted skipped", dry, rep)
		}
		out := rep.String()
		if !strings.Contains(out, "2 selected letters were written without their value") || strings.Contains(out, "replay them later") {
			t.Fatalf("dry=%v: report:\n%s", dry, out)
		}
	}
}

func TestReplayRefusesLiveMembers(t *testing.T) {
	cfg := newCluster(t)
	produceLetters(t, cfg, someLetters(2, "decode_error"), nil)
	group := cfg.GroupID + ".dlq-replay"
	member := client(t, cfg, kgo.ConsumerGroup(group), kgo.ConsumeTopics(cfg.Topics.DLQ))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		member.PollFetches(ctx) // joins the group
		g, err := kadm.NewClient(member).DescribeGroups(ctx, group)
		if err == nil && len(g[group].Members) > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the member did not join")
		}
	}
	_, err := Replay(context.Background(), ReplayOptions{Config: cfg, Logger: quiet()})
	if !errors.Is(err, ErrLiveMembers) {
		t.Fatalf("err = %v", err)
	}
}
