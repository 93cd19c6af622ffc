package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
	"github.com/vibeline/processor/test/e2e/harness"
)

// readTimeout bounds one read_committed read of a topic to its end. A
// SIGKILLed instance that is never restarted leaves a transaction open for
// up to the transaction timeout (10 s) plus the broker's abort sweep.
const readTimeout = 90 * time.Second

// ---- input -----------------------------------------------------------------

// newInput creates an input topic (deleted when the test ends) that keeps
// its records however old their timestamps: the simulated line's and the
// fixture's event times, and so their record timestamps, lie months in the
// past, and the broker's default time retention (7 days, judged by record
// timestamps) would delete whole segments of the input during the test.
func newInput(t *testing.T, seeds []string, prefix string, partitions int32) string {
	t.Helper()
	return harness.NewTopic(t, seeds, harness.UniqueName(prefix), partitions, map[string]*string{
		"retention.ms": kadm.StringPtr("-1"),
	})
}

// streamOptions are the simulated line of the crash tests: the load
// generator's line, 8 machines with two sensors each, with every kind of
// trouble often enough that 20,000 records (about 21 minutes of event time)
// hold alert revisions of every kind but merged (opened, updated, closed,
// some late), duplicates, out-of-order pairs, late-but-applied and too-late
// replays (gateway outages of 13 minutes: the first minutes of a replay are
// behind the watermark by more than the allowed lateness), poison records
// and clock jumps. Keys are spread over 3 partitions by murmur2.
func streamOptions(seed uint64) sim.Options {
	o := sim.Load(8)
	o.SensorsPerMachine = 2
	o.Seed = seed
	o.EpisodeRate = 0.006
	o.DuplicateRate = 0.01
	o.SwapRate = 0.03
	o.PoisonRate = 0.002
	o.ClockAheadRate = 0.001
	o.OutageRate = 0.0008
	o.OutageLength = 13 * time.Minute
	o.InchRate = 0.1
	return o
}

// producer writes a simulated stream to the input topic from a goroutine.
type producer struct {
	sent atomic.Int64
	done chan struct{}
	err  error
}

// produceStream writes records of line to topic at about rate records per
// second, in chunks every 50 ms, until at least minN records were written
// and more(records written so far), asked between chunks, is false, or
// until maxN records were written. Keys are machine ids, so the default
// partitioner (murmur2) spreads machines over the partitions; record
// timestamps are the simulated send times (clock_ahead is judged against
// them).
func produceStream(t *testing.T, seeds []string, topic string, line *sim.Line, rate, minN, maxN int, more func(sent int) bool) *producer {
	t.Helper()
	cl := harness.NewClient(t, seeds, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	pr := &producer{done: make(chan struct{})}
	chunk := max(rate/20, 1)
	go func() {
		defer close(pr.done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		n := 0
		for n < maxN && (n < minN || more(n)) {
			recs := make([]*kgo.Record, 0, chunk)
			for range chunk {
				r := line.Next()
				recs = append(recs, &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				pr.err = fmt.Errorf("produce to %s after %d records: %w", topic, n, err)
				return
			}
			n += len(recs)
			pr.sent.Store(int64(n))
			<-tick.C
		}
	}()
	return pr
}

// running reports whether the producer is still writing.
func (pr *producer) running() bool {
	select {
	case <-pr.done:
		return false
	default:
		return true
	}
}

// wait waits for the producer to finish and fails the test on its error.
func (pr *producer) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-pr.done:
	case <-time.After(10 * time.Minute):
		t.Fatal("producer did not finish within 10 minutes")
	}
	if pr.err != nil {
		t.Fatal(pr.err)
	}
	return int(pr.sent.Load())
}

// readLog reads the input topic back, as the broker stored it, as the
// reference's log, and returns each partition's end offset.
func readLog(t *testing.T, seeds []string, topic string) (pipeline.Log, map[int32]int64) {
	t.Helper()
	log := pipeline.Log{}
	for _, r := range harness.ReadCommitted(t, seeds, topic, readTimeout) {
		log[r.Partition] = append(log[r.Partition], pipeline.Input{
			Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
			Key: r.Key, Value: r.Value, TimestampMs: r.Timestamp.UnixMilli(),
			Headers: headers(r),
		})
	}
	adm := harness.NewAdmin(t, seeds)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listed, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	// The input is not transactional: its offsets run from 0 without gaps,
	// unless records were deleted (the accounting checks rely on that).
	for p, recs := range log {
		for i, r := range recs {
			if r.Offset != int64(i) {
				t.Fatalf("input %s partition %d: record %d is at offset %d: records are missing (deleted by retention?)", topic, p, i, r.Offset)
			}
		}
		if n := int64(len(recs)); n != ends[p] {
			t.Fatalf("input %s partition %d: read %d records, end offset %d", topic, p, n, ends[p])
		}
	}
	return log, ends
}

func headers(r *kgo.Record) []pipeline.Header {
	if len(r.Headers) == 0 {
		return nil
	}
	hs := make([]pipeline.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = pipeline.Header{Key: h.Key, Value: h.Value}
	}
	return hs
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func logSizes(log pipeline.Log) string {
	parts := slices.Sorted(maps.Keys(log))
	var b strings.Builder
	total := 0
	for _, p := range parts {
		fmt.Fprintf(&b, "p%d=%d ", p, len(log[p]))
		total += len(log[p])
	}
	return fmt.Sprintf("%d records (%s)", total, strings.TrimSpace(b.String()))
}

// ---- progress ----------------------------------------------------------------

// waitConsumed waits until the deployment's group committed offsets at the
// input's end offsets ends on every partition: every input record was
// processed and its outputs committed. It fails early when an instance
// exited on its own.
func waitConsumed(t *testing.T, d *deployment, ends map[int32]int64, timeout time.Duration) time.Duration {
	t.Helper()
	adm := harness.NewAdmin(t, d.seeds)
	start := time.Now()
	deadline := start.Add(timeout)
	var last string
	for {
		if p := d.failure(); p != nil {
			t.Fatalf("%s exited on its own (%s) while processing%s", p.name, p.status(), d.tails())
		}
		done, progress, err := committedProgress(adm, d.group, d.input, ends)
		if err != nil {
			last = err.Error()
		} else {
			last = progress
		}
		if done {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: group %s did not commit the whole input within %v: %s%s", d.name, d.group, timeout, last, d.tails())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// committedProgress compares the group's committed offsets with ends.
func committedProgress(adm *kadm.Client, group, topic string, ends map[int32]int64) (done bool, progress string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return false, "", fmt.Errorf("fetch offsets of %s: %w", group, err)
	}
	done = true
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(ends)) {
		at := int64(-1)
		if o, ok := offs.Lookup(topic, p); ok {
			at = o.At
		}
		if at < ends[p] {
			done = false
		}
		fmt.Fprintf(&b, "p%d committed %d of %d; ", p, at, ends[p])
	}
	return done, strings.TrimSuffix(b.String(), "; "), nil
}

// committedSum is the sum of the group's committed offsets on topic (-1
// for none), for telling whether an instance committed anything between
// two calls; -1 on an error.
func committedSum(adm *kadm.Client, group, topic string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil || offs.Error() != nil {
		return -1
	}
	var n int64
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			n += o.At
		}
	})
	return n
}

// behind reports whether the group's committed offsets are behind the
// input's current end offsets (the instance has work in hand).
func behind(adm *kadm.Client, group, topic string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	listed, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return false
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	done, _, err := committedProgress(adm, group, topic, ends)
	return err == nil && !done
}

// ---- outputs -------------------------------------------------------------------

// committed is what one deployment committed, read with read_committed.
type committed struct {
	alerts, dlq, late []*kgo.Record
	outputs           pipeline.Outputs
	acct              map[int32]pipeline.Accounting   // the latest per changelog partition
	acctHistory       map[int32][]pipeline.Accounting // every committed one, in order
	changelog         int                             // committed changelog records
}

func readOutputs(t *testing.T, d *deployment) *committed {
	t.Helper()
	c := &committed{
		alerts:      harness.ReadCommitted(t, d.seeds, d.alerts, readTimeout),
		dlq:         harness.ReadCommitted(t, d.seeds, d.dlq, readTimeout),
		late:        harness.ReadCommitted(t, d.seeds, d.late, readTimeout),
		outputs:     pipeline.Outputs{},
		acct:        map[int32]pipeline.Accounting{},
		acctHistory: map[int32][]pipeline.Accounting{},
	}
	for kind, recs := range map[pipeline.Kind][]*kgo.Record{pipeline.Alert: c.alerts, pipeline.DeadLetter: c.dlq, pipeline.TooLate: c.late} {
		for _, r := range recs {
			c.outputs.Add(kind, r.Key, r.Value, headers(r))
		}
	}
	c.outputs.Canonical()
	changelog := harness.ReadCommitted(t, d.seeds, d.changelog, readTimeout)
	c.changelog = len(changelog)
	for _, r := range changelog {
		if string(r.Key) != "a" || r.Value == nil {
			continue // tombstones of an earlier history (scratch start)
		}
		a, err := consume.DecodeAccounting(r.Value)
		if err != nil {
			t.Fatalf("%s: changelog %s partition %d offset %d: %v", d.name, d.changelog, r.Partition, r.Offset, err)
		}
		c.acct[r.Partition] = a // records come in offset order: the last one wins
		c.acctHistory[r.Partition] = append(c.acctHistory[r.Partition], a)
	}
	return c
}

// aborted counts the records of d's output and changelog topics that were
// written in aborted transactions.
func (c *committed) aborted(t *testing.T, d *deployment) int {
	t.Helper()
	return abortedRecords(t, d.seeds, len(c.alerts)+len(c.dlq)+len(c.late)+c.changelog, d.alerts, d.dlq, d.late, d.changelog)
}

func (c *committed) summary() string {
	statuses := map[string]int{}
	for _, r := range c.alerts {
		var s struct{ Status string }
		_ = json.Unmarshal(r.Value, &s)
		statuses[s.Status]++
	}
	return fmt.Sprintf("%d alert revisions %v, %d dead letters, %d too late; accounting checked at %d commit points",
		len(c.alerts), statuses, len(c.dlq), len(c.late), c.commitPoints())
}

// reference runs the pipeline over log in one pass: what a correct
// exactly-once run must have committed.
func reference(t *testing.T, d *deployment, log pipeline.Log) (pipeline.Outputs, map[int32]pipeline.Accounting) {
	t.Helper()
	stage, err := pipeline.NewStage(d.rule)
	if err != nil {
		t.Fatalf("reference stage: %v", err)
	}
	return stage.Reference(log)
}

// requireMeaningful fails when the input leaves a partition empty or the
// reference lacks a kind of output (opened, updated, closed and late alert
// revisions, dead letters, too-late records): the comparison would prove
// nothing about it.
func requireMeaningful(t *testing.T, want pipeline.Outputs, log pipeline.Log, partitions int) {
	t.Helper()
	if len(log) != partitions {
		t.Fatalf("input has records in %d of %d partitions: %s", len(log), partitions, logSizes(log))
	}
	statuses := map[string]int{}
	late := 0
	for _, recs := range want[pipeline.Alert] {
		for _, fp := range recs {
			var a struct {
				Status string
				Late   bool
			}
			v, _, _ := strings.Cut(fp, "\x00")
			if err := json.Unmarshal([]byte(v), &a); err != nil {
				t.Fatalf("reference alert %q: %v", v, err)
			}
			statuses[a.Status]++
			if a.Late {
				late++
			}
		}
	}
	if statuses["open"] == 0 || statuses["updated"] == 0 || statuses["closed"] == 0 || late == 0 ||
		want.Count(pipeline.DeadLetter) == 0 || want.Count(pipeline.TooLate) == 0 {
		t.Fatalf("the reference has alert revisions %v (%d late), %d dead letters and %d too late: the input proves too little",
			statuses, late, want.Count(pipeline.DeadLetter), want.Count(pipeline.TooLate))
	}
}

// checkCommitted compares what d committed with the reference (per output
// kind and key, in order) and checks its accounting (checkAccounting).
func checkCommitted(t *testing.T, d *deployment, got *committed, want pipeline.Outputs, wantAcct map[int32]pipeline.Accounting, log pipeline.Log, ends map[int32]int64) {
	t.Helper()
	if diff := pipeline.Diff(want, got.outputs); diff != "" {
		t.Errorf("%s: committed outputs differ from the reference:\n%s", d.name, diff)
	}
	checkAccounting(t, d, got, wantAcct, log, ends)
}

// checkAccounting checks, per input partition, that the latest committed
// accounting record equals the reference's, balances, counts every input
// record up to the input's end, and that the dead-letter and too-late
// topics hold exactly as many records of that partition (by their
// source.partition header) as it counts. It also checks every earlier
// committed accounting record (one per committed transaction that touched
// the partition): each balances, counts exactly the records before its
// next_offset (the input has no gaps: it is not transactional), and each
// counts more records than the one before, no counter ever going down.
func checkAccounting(t *testing.T, d *deployment, got *committed, wantAcct map[int32]pipeline.Accounting, log pipeline.Log, ends map[int32]int64) {
	t.Helper()
	perPartition := func(recs []*kgo.Record, kind string) map[int32]int64 {
		n := map[int32]int64{}
		for _, r := range recs {
			v, ok := header(r, pipeline.HeaderSourcePartition)
			p, err := strconv.ParseInt(v, 10, 32)
			if !ok || err != nil {
				t.Errorf("%s: %s record at %d/%d has source.partition %q (present %v)", d.name, kind, r.Partition, r.Offset, v, ok)
				continue
			}
			if topic, _ := header(r, pipeline.HeaderSourceTopic); topic != d.input {
				t.Errorf("%s: %s record at %d/%d has source.topic %q, want %q", d.name, kind, r.Partition, r.Offset, topic, d.input)
			}
			n[int32(p)]++
		}
		return n
	}
	dlq, late := perPartition(got.dlq, "dead-letter"), perPartition(got.late, "too-late")
	for p := range got.acct {
		if _, ok := log[p]; !ok {
			t.Errorf("%s: changelog partition %d has accounting %+v, but input partition %d is empty", d.name, p, got.acct[p], p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(log)) {
		a, ok := got.acct[p]
		switch {
		case !ok:
			t.Errorf("%s: no committed accounting record for partition %d", d.name, p)
			continue
		case a != wantAcct[p]:
			t.Errorf("%s: partition %d accounting = %+v, reference %+v", d.name, p, a, wantAcct[p])
		}
		if !a.Balanced() {
			t.Errorf("%s: partition %d accounting does not balance: %+v", d.name, p, a)
		}
		if a.Records != int64(len(log[p])) || a.NextOffset != ends[p] {
			t.Errorf("%s: partition %d accounting counts %d records up to offset %d; the input has %d records, end offset %d",
				d.name, p, a.Records, a.NextOffset, len(log[p]), ends[p])
		}
		if dlq[p] != a.DeadLettered {
			t.Errorf("%s: partition %d: %d dead letters in %s, accounting says %d", d.name, p, dlq[p], d.dlq, a.DeadLettered)
		}
		if late[p] != a.TooLate {
			t.Errorf("%s: partition %d: %d too-late records in %s, accounting says %d", d.name, p, late[p], d.late, a.TooLate)
		}
		var prev pipeline.Accounting
		for i, h := range got.acctHistory[p] {
			switch {
			case !h.Balanced() || h.Records != h.NextOffset:
				t.Errorf("%s: partition %d: committed accounting record %d does not balance or does not count every record before offset %d: %+v",
					d.name, p, i, h.NextOffset, h)
			case h.Records <= prev.Records || h.Processed < prev.Processed || h.Filtered < prev.Filtered ||
				h.Duplicate < prev.Duplicate || h.DeadLettered < prev.DeadLettered || h.TooLate < prev.TooLate:
				t.Errorf("%s: partition %d: committed accounting record %d went backwards or stood still: %+v after %+v", d.name, p, i, h, prev)
			}
			prev = h
		}
	}
}

// commitPoints is the number of committed accounting records: the commit
// points at which checkAccounting checked the invariant.
func (c *committed) commitPoints() int {
	n := 0
	for _, h := range c.acctHistory {
		n += len(h)
	}
	return n
}

func acctString(accts map[int32]pipeline.Accounting) string {
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(accts)) {
		a := accts[p]
		fmt.Fprintf(&b, "p%d{records %d = processed %d + filtered %d + duplicate %d + dead-lettered %d + too late %d} ",
			p, a.Records, a.Processed, a.Filtered, a.Duplicate, a.DeadLettered, a.TooLate)
	}
	return strings.TrimSpace(b.String())
}

// abortedRecords counts the data records of topics that read_uncommitted
// sees and read_committed does not: records of aborted transactions (a
// SIGKILL after the batch produced them and before it committed; its
// restarted incarnation fenced and aborted the transaction). committed is
// the number of records read_committed saw.
func abortedRecords(t *testing.T, seeds []string, committed int, topics ...string) int {
	t.Helper()
	adm := harness.NewAdmin(t, seeds)
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	listed, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	start := map[string]map[int32]kgo.Offset{}
	left := map[string]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if start[o.Topic] == nil {
				start[o.Topic] = map[int32]kgo.Offset{}
			}
			start[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
			left[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		}
	})
	if len(left) == 0 {
		return -committed
	}
	cl := harness.NewClient(t, seeds, kgo.ConsumePartitions(start),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
	data := 0
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read_uncommitted %v: %d partitions not read to their end", topics, len(left))
		}
		fs.EachRecord(func(r *kgo.Record) {
			tp := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
			end, ok := left[tp]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				data++
			}
			if r.Offset+1 >= end {
				delete(left, tp)
			}
		})
	}
	return data - committed
}
