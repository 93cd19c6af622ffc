package consume

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/internal/sim"
)

// Rules whose outputs interleave per key: four in-place rules writing to
// one alerts topic and the source's default dead-letter and too-late
// topics (a sliding rule; two aggregating rules with the default horizon
// and watermark, so one dedup store and keeper; a session rule with its
// own horizon and lateness, so another keeper and records too late for it
// alone), and a repartitioned rule, whose forwards are outputs of the
// source partitions too. The repartitioned rule's own outputs depend on
// how the source partitions interleave (docs/RULES.md), so they go to
// topics of their own that this test does not read.
const orderRules = `rules:
  - id: high
    version: 1
    description: high-vibration events
    source: vibration.events
    filter: value >= 7.1 && quality == "good"
    window: {type: sliding, size: 2m}
    threshold: count >= 3
    outputs: {alerts: order.alerts}
  - id: peak
    version: 1
    description: vibration events
    source: vibration.events
    window: {type: tumbling, size: 1m}
    aggregate: {fn: max}
    threshold: agg >= 7.5
    outputs: {alerts: order.alerts}
  - id: busy
    version: 1
    description: events
    source: vibration.events
    window: {type: hopping, size: 2m, advance: 1m}
    threshold: count >= 80
    outputs: {alerts: order.alerts}
  - id: episode
    version: 1
    description: elevated events
    source: vibration.events
    filter: value >= 5
    window: {type: session, gap: 30s}
    threshold: count >= 5
    allowed_lateness: 2m
    dedup_horizon: 30m
    outputs: {alerts: order.alerts}
  - id: sensor-peak
    version: 1
    description: sensor peaks
    source: vibration.events
    key: sensor_id
    window: {type: tumbling, size: 1m}
    aggregate: {fn: max}
    threshold: agg >= 7.5
    outputs: {alerts: order.peak.alerts, late: order.peak.late}
`

// refOut is one output of the record-major reference (orderReference):
// where it goes, what it is, and which record and rule caused it.
type refOut struct {
	topic, key string
	fp         string // pipeline.Fingerprint of value and headers
	part       int32  // the causing record: partition and offset
	offset     int64
	rule       int // index in the rules; -1: a dead letter of the source
}

func (o refOut) String() string {
	return fmt.Sprintf("record %d@%d rule %d: %.160q", o.part, o.offset, o.rule, o.fp)
}

// orderReference runs the rules rs over the log record-major, the loop
// handleRecords must be equivalent to (docs/ARCHITECTURE.md, exactly-once
// rule 8): per source partition, each record is checked once; a record
// that fails is dead-lettered once per distinct dead-letter topic of the
// source's rules (in the rules' order, as plan collects them); a valid one
// goes through every in-place rule in the rules' order, each rule with a
// state of its own (pipeline.Stage.Reference's semantics, the oracle the
// other tests use, which runs one rule), and is then forwarded to each
// repartitioned rule's topic. It returns the outputs in production order
// and each in-place rule's accounting, summed over the partitions.
func orderReference(t *testing.T, repartition func(*rules.Compiled) string, rs []*rules.Compiled, log pipeline.Log) ([]refOut, []pipeline.Accounting) {
	t.Helper()
	source := rs[0].Rule.Source
	var dlqs []string
	for _, r := range rs {
		if r.Rule.Source != source {
			t.Fatalf("rule %s reads %s: the reference handles one source", r.Rule.ID, r.Rule.Source)
		}
		if !slices.Contains(dlqs, r.Rule.Outputs.DLQ) {
			dlqs = append(dlqs, r.Rule.Outputs.DLQ)
		}
	}
	stages := make([]*pipeline.Stage, len(rs))
	for i, r := range rs {
		st, err := pipeline.NewRuleStage(r, pipeline.Options{})
		if err != nil {
			t.Fatal(err)
		}
		stages[i] = st
	}
	check := stages[0] // every stage of the source validates alike
	var out []refOut
	accts := make([]pipeline.Accounting, len(rs))
	for p := range int32(testPartitions) {
		ws := make([]*pipeline.Partition, len(rs))
		for i, st := range stages {
			ws[i] = st.NewPartition()
		}
		for _, in := range log[p] {
			ev, verr := check.Check(&in)
			if verr != nil {
				for _, dlq := range dlqs {
					o := pipeline.DeadLetterOutput(in, verr, pipeline.DeadLetterRules(rs, source, dlq))
					out = append(out, refOut{topic: dlq, key: string(o.Key), fp: pipeline.Fingerprint(o.Value, o.Headers),
						part: p, offset: in.Offset, rule: -1})
				}
				for i, r := range rs {
					if !r.Rule.Repartitioned() {
						accts[i].Records++
						accts[i].DeadLettered++
					}
				}
				continue
			}
			for i, r := range rs {
				if r.Rule.Repartitioned() {
					continue
				}
				stages[i].Apply(ws[i], &ev, in, &accts[i], func(o pipeline.Output) {
					topic := map[pipeline.Kind]string{pipeline.Alert: r.Rule.Outputs.Alerts,
						pipeline.DeadLetter: r.Rule.Outputs.DLQ, pipeline.TooLate: r.Rule.Outputs.Late}[o.Kind]
					out = append(out, refOut{topic: topic, key: string(o.Key), fp: pipeline.Fingerprint(o.Value, o.Headers),
						part: p, offset: in.Offset, rule: i})
				})
			}
			for i, r := range rs {
				if !r.Rule.Repartitioned() {
					continue
				}
				hs := append(slices.Clip(in.Headers),
					pipeline.Header{Key: pipeline.HeaderSourceTopic, Value: []byte(in.Topic)},
					pipeline.Header{Key: pipeline.HeaderSourcePartition, Value: strconv.AppendInt(nil, int64(in.Partition), 10)},
					pipeline.Header{Key: pipeline.HeaderSourceOffset, Value: strconv.AppendInt(nil, in.Offset, 10)})
				out = append(out, refOut{topic: repartition(r), key: stages[i].KeyOf(&ev), fp: pipeline.Fingerprint(in.Value, hs),
					part: p, offset: in.Offset, rule: i})
			}
		}
	}
	return out, accts
}

// outputKey is a (topic, record key): the unit whose order Kafka keeps.
type outputKey struct{ topic, key string }

// orderStats counts, over the reference's sequences per (topic, key), the
// neighbours whose order a chunk's output sort decides: a record's outputs
// of two rules (sameRecord), one rule's outputs of one record (sameRule:
// only a stable sort keeps them), an earlier record's output of a later
// rule before a later record's of an earlier rule (crossed: a sort by rule
// first swaps them when the records share a chunk), and keys whose
// sequence goes from one rule to another and back (interleaved).
type orderStats struct {
	sameRecord, sameRule, crossed, interleaved int
}

func statsOf(seq []refOut) orderStats {
	var s orderStats
	for i := 1; i < len(seq); i++ {
		a, b := seq[i-1], seq[i]
		switch {
		case a.part == b.part && a.offset == b.offset && a.rule != b.rule:
			s.sameRecord++
		case a.part == b.part && a.offset == b.offset:
			s.sameRule++
		case a.rule > b.rule:
			s.crossed++
		}
	}
	left := map[int]bool{} // rules whose run of outputs ended
	for i := 1; i < len(seq); i++ {
		if seq[i].rule != seq[i-1].rule {
			left[seq[i-1].rule] = true
			if left[seq[i].rule] {
				s.interleaved = 1
				break
			}
		}
	}
	return s
}

// TestOutputOrderPerKey guards rule 8 of docs/ARCHITECTURE.md's
// exactly-once rules: handleRecords goes rule-major through chunks of
// chunkRecords records, buffers the chunk's outputs and produces them
// stable-sorted by (record, rule), and the contract is that each (topic,
// key) then holds exactly the sequence a record-major loop (each record
// through every rule in the rules' order, before the next record) would
// produce. The other integration tests compare outputs through
// fingerprints(), which sorts each topic's records, so they would pass if
// the outputs came out in another order (sorted by rule first, unstably,
// or grouped per rule); this one compares, per topic and record key, the
// exact sequence of values and headers with orderReference.
//
// The input, three partitions of well over chunkRecords records each
// (several chunks per poll and a partial last chunk), has records that
// fire several rules at once (two aggregating rules sharing a dedup
// keeper, a session rule with a store of its own, a sliding rule), some
// of them with several outputs of one rule (hopping windows, closes),
// duplicates next to their originals (in one chunk but at a boundary),
// poison records (dead letters), gateway replays beyond the allowed
// lateness (too-late copies, some of them by one rule only) and forwards
// to a repartitioned rule's topic. Forwards and dead letters go to topics
// of their own, so where they sort among a record's rule outputs is not
// visible in any one topic and not checked here.
func TestOutputOrderPerKey(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "order")
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", orderRules)
	cfg.MaxPollRecords = 5000 // whole fetches in one poll: jobs of several chunks
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	// The dedup stores as described: peak and busy share one keeper,
	// episode has its own, and the repartitioned rule's topic one more.
	var groups []string
	for _, k := range planned(t, cfg).keepers {
		var ids []string
		for _, m := range k.members {
			ids = append(ids, m.rule.Rule.ID)
		}
		groups = append(groups, strings.Join(ids, "+"))
	}
	slices.Sort(groups)
	if want := []string{"episode", "peak+busy", "sensor-peak"}; !slices.Equal(groups, want) {
		t.Fatalf("dedup keepers %v, want %v: the fixture does not share stores as it claims", groups, want)
	}

	log := pipeline.Log{}
	// Five machines of two sensors (partitions of two, two and one
	// machine): 15 minutes of event time, so that windows close, gateways
	// come back from outages longer than the allowed lateness and
	// partitions hold over a thousand records.
	so := sim.Demo()
	so.Machines, so.Seed, so.EpisodeRate = 5, 31, 0.05
	so.OutageRate, so.OutageLength = 0.004, 11*time.Minute
	recs := kafkatest.Records(sim.New(so), 9000)
	produce(t, seeds, cfg.Topics.Input, recs, log)
	for p := range int32(testPartitions) {
		if n := len(log[p]); n < 3*chunkRecords {
			t.Fatalf("partition %d has %d records, want well over %d (several chunks)", p, n, chunkRecords)
		}
	}
	var mu sync.Mutex
	var jobs []int
	in := start(t, cfg, Options{PurgeEvery: time.Hour, afterJob: func(n int) {
		mu.Lock()
		jobs = append(jobs, n)
		mu.Unlock()
	}})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)

	// Chunks of many records: at least half as many records as the source
	// holds were handled in jobs of more than one chunk (a job is one poll's records
	// of one partition, of the source or the repartition topic), so the
	// rules went rule-major over full chunks and partial last ones.
	mu.Lock()
	multi := 0
	for _, n := range jobs {
		if n > chunkRecords {
			multi += n
		}
	}
	t.Logf("job sizes: %v", jobs)
	mu.Unlock()
	if multi*2 < len(recs) {
		t.Fatalf("only %d records were handled in jobs of more than %d records, of %d in the source: the chunks prove little", multi, chunkRecords, len(recs))
	}

	repart := rs[len(rs)-1]
	ref, accts := orderReference(t, cfg.RepartitionFor, rs, log)
	want := map[outputKey][]refOut{}
	for _, o := range ref {
		k := outputKey{o.topic, o.key}
		want[k] = append(want[k], o)
	}

	// The fixture has what the test claims: interleaved rules per key,
	// records with outputs of two rules and of one rule twice on a key, on
	// the alerts and the too-late topic; duplicates; dead letters;
	// forwards.
	perTopic := map[string]orderStats{}
	count := map[string]int{}
	for k, seq := range want {
		s, sum := statsOf(seq), perTopic[k.topic]
		sum.sameRecord += s.sameRecord
		sum.sameRule += s.sameRule
		sum.crossed += s.crossed
		sum.interleaved += s.interleaved
		perTopic[k.topic] = sum
		count[k.topic] += len(seq)
	}
	t.Logf("reference: %v records per topic; per topic order stats %+v", count, perTopic)
	if s := perTopic["order.alerts"]; s.sameRecord == 0 || s.sameRule == 0 || s.crossed == 0 || s.interleaved == 0 {
		t.Fatalf("alerts: %+v: the fixture does not interleave rules per key", s)
	}
	if s := perTopic[rs[0].Rule.Outputs.Late]; s.sameRecord == 0 || s.crossed == 0 {
		t.Fatalf("too late: %+v: no record is too late for two rules", s)
	}
	if count[rs[0].Rule.Outputs.DLQ] == 0 || count[cfg.RepartitionFor(repart)] == 0 {
		t.Fatalf("no dead letter or no forward in the reference: %v", count)
	}
	for i, a := range accts {
		if !rs[i].Rule.Repartitioned() && rs[i].Rule.Window.Type != rules.Sliding && a.Duplicate == 0 {
			t.Fatalf("rule %s found no duplicate: %+v", rs[i].Rule.ID, a)
		}
	}

	topics := []string{"order.alerts", rs[0].Rule.Outputs.DLQ, rs[0].Rule.Outputs.Late, cfg.RepartitionFor(repart)}
	got := map[outputKey][]string{}
	for _, r := range readAll(t, seeds, topics...) {
		if len(r.Key) == 0 && r.Topic == cfg.RepartitionFor(repart) {
			continue // a watermark marker
		}
		hs := make([]pipeline.Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = pipeline.Header{Key: h.Key, Value: h.Value}
		}
		k := outputKey{r.Topic, string(r.Key)}
		got[k] = append(got[k], pipeline.Fingerprint(r.Value, hs))
	}
	keys := make([]outputKey, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if want[k] == nil {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b outputKey) int { return strings.Compare(a.topic+"\x00"+a.key, b.topic+"\x00"+b.key) })
	bad := 0
	for _, k := range keys {
		w, g := want[k], got[k]
		i := 0
		for i < len(w) && i < len(g) && w[i].fp == g[i] {
			i++
		}
		if i == len(w) && i == len(g) {
			continue
		}
		bad++
		if bad > 5 {
			continue
		}
		wfps := make([]string, len(w))
		for j, o := range w {
			wfps[j] = o.fp
		}
		same := slices.Equal(slices.Sorted(slices.Values(wfps)), slices.Sorted(slices.Values(slices.Clone(g))))
		msg := fmt.Sprintf("%s key %q: %d records, want %d (same records, other order: %v); first difference at #%d",
			k.topic, k.key, len(g), len(w), same, i)
		if i < len(w) {
			msg += fmt.Sprintf("\n  want: %s", w[i])
		}
		if i < len(g) {
			at := slices.Index(wfps, g[i])
			if at >= 0 {
				msg += fmt.Sprintf("\n  got:  the reference's #%d, %s", at, w[at])
			} else {
				msg += fmt.Sprintf("\n  got:  %.160q (not in the reference)", g[i])
			}
		}
		t.Error(msg)
	}
	if bad > 0 {
		t.Errorf("%d of %d (topic, key) sequences differ from the record-major reference", bad, len(keys))
	}
}
