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

// streamOptions are the simulated line of the crash tests: the load
// generator's line with every kind of trouble often enough that a few
// thousand records hold alerts (opened, updated, closed), duplicates,
// out-of-order pairs, late-but-applied and too-late replays (gateway
// outages longer than the allowed lateness), poison records and clock jumps.
func streamOptions(machines int, seed uint64) sim.Options {
	o := sim.Load(machines)
	o.Seed = seed
	o.EpisodeRate = 0.004
	o.DuplicateRate = 0.01
	o.SwapRate = 0.03
	o.PoisonRate = 0.002
	o.ClockAheadRate = 0.001
	o.OutageRate = 0.0004
	o.OutageLength = 11 * time.Minute // > the allowed lateness: too-late replays
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
// second, in chunks every 50 ms, until at least min records were written
// and more(records written) (asked between chunks) is false, or max records were written.
// Keys are machine ids, so the default partitioner (murmur2) spreads
// machines over the partitions; record timestamps are the simulated send
// times (clock_ahead is judged against them).
func produceStream(t *testing.T, seeds []string, topic string, line *sim.Line, rate, min, max int, more func(sent int) bool) *producer {
	t.Helper()
	cl := harness.NewClient(t, seeds, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	pr := &producer{done: make(chan struct{})}
	chunk := max1(rate / 20)
	go func() {
		defer close(pr.done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		n := 0
		for n < max && (n < min || more(n)) {
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

func max1(n int) int { return max(n, 1) }

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
	for p, recs := range log {
		if last := recs[len(recs)-1].Offset; last+1 != ends[p] {
			t.Fatalf("input %s partition %d: read up to offset %d, end offset %d", topic, p, last, ends[p])
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
	acct              map[int32]pipeline.Accounting // the latest per changelog partition
	acctRecords       int                           // accounting records in the changelog
}

func readCommitted(t *testing.T, d *deployment) *committed {
	t.Helper()
	c := &committed{
		alerts:  harness.ReadCommitted(t, d.seeds, d.alerts, readTimeout),
		dlq:     harness.ReadCommitted(t, d.seeds, d.dlq, readTimeout),
		late:    harness.ReadCommitted(t, d.seeds, d.late, readTimeout),
		outputs: pipeline.Outputs{},
		acct:    map[int32]pipeline.Accounting{},
	}
	for kind, recs := range map[pipeline.Kind][]*kgo.Record{pipeline.Alert: c.alerts, pipeline.DeadLetter: c.dlq, pipeline.TooLate: c.late} {
		for _, r := range recs {
			c.outputs.Add(kind, r.Key, r.Value, headers(r))
		}
	}
	c.outputs.Canonical()
	for _, r := range harness.ReadCommitted(t, d.seeds, d.changelog, readTimeout) {
		if string(r.Key) != "a" {
			continue
		}
		a, err := consume.DecodeAccounting(r.Value)
		if err != nil {
			t.Fatalf("%s: changelog %s partition %d offset %d: %v", d.name, d.changelog, r.Partition, r.Offset, err)
		}
		c.acct[r.Partition] = a // records come in offset order: the last one wins
		c.acctRecords++
	}
	return c
}

func (c *committed) summary() string {
	statuses := map[string]int{}
	for _, r := range c.alerts {
		var s struct{ Status string }
		_ = json.Unmarshal(r.Value, &s)
		statuses[s.Status]++
	}
	return fmt.Sprintf("%d alert revisions %v, %d dead letters, %d too late", len(c.alerts), statuses, len(c.dlq), len(c.late))
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

// requireMeaningful fails when the reference lacks a kind of output: then
// the comparison would prove nothing about it.
func requireMeaningful(t *testing.T, want pipeline.Outputs, log pipeline.Log, partitions int) {
	t.Helper()
	if len(log) != partitions {
		t.Fatalf("input has records in %d of %d partitions: %s", len(log), partitions, logSizes(log))
	}
	statuses := map[string]bool{}
	for _, recs := range want[pipeline.Alert] {
		for _, fp := range recs {
			var s struct{ Status string }
			v, _, _ := strings.Cut(fp, "\x00")
			if err := json.Unmarshal([]byte(v), &s); err == nil {
				statuses[s.Status] = true
			}
		}
	}
	if !statuses["open"] || !statuses["closed"] || want.Count(pipeline.DeadLetter) == 0 || want.Count(pipeline.TooLate) == 0 {
		t.Fatalf("the reference has alert statuses %v, %d dead letters and %d too late: the input proves too little",
			statuses, want.Count(pipeline.DeadLetter), want.Count(pipeline.TooLate))
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
// source.partition header) as it counts.
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
	}
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
