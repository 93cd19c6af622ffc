package consume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/internal/sim"
)

// Four rules over one topic in one processor: the vibration rule (sliding),
// an average over tumbling windows, sessions, and a per-sensor maximum over
// hopping windows that is repartitioned by sensor_id.
const multiRules = "rules:\n" + ruleVibrationHigh + ruleVibrationAvg + ruleEpisode + ruleSensorPeak

// The rules of the fixtures of this package, one YAML list item each.
const (
	ruleVibrationHigh = `  - id: vibration-high
    version: 1
    description: high-vibration events
    source: vibration.events
    filter: value >= 7.1 && quality == "good"
    window: {type: sliding, size: 2m}
    threshold: count >= 3
    outputs: {alerts: vibration.alerts}
`
	ruleVibrationAvg = `  - id: vibration-avg
    version: 1
    description: vibration events
    source: vibration.events
    window: {type: tumbling, size: 1m}
    aggregate: {fn: avg}
    threshold: agg > 4 && count >= 10
    outputs: {alerts: vibration.avg.alerts}
`
	ruleEpisode = `  - id: episode
    version: 1
    description: elevated events
    source: vibration.events
    filter: value >= 5
    window: {type: session, gap: 30s}
    threshold: count >= 5
    outputs: {alerts: vibration.episodes}
`
	ruleSensorPeak = `  - id: sensor-peak
    version: 1
    description: sensor peaks
    source: vibration.events
    key: sensor_id
    window: {type: hopping, size: 2m, advance: 1m}
    aggregate: {fn: max}
    threshold: agg >= 7.5
    allowed_lateness: 2m
    outputs: {alerts: vibration.peak.alerts}
`
)

// fingerprints groups output records by topic as sorted fingerprints.
func fingerprints(recs []*kgo.Record) map[string][]string {
	out := map[string][]string{}
	for _, r := range recs {
		hs := make([]pipeline.Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = pipeline.Header{Key: h.Key, Value: h.Value}
		}
		out[r.Topic] = append(out[r.Topic], string(r.Key)+"|"+pipeline.Fingerprint(r.Value, hs))
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// Several rules in one processor, with aborted batches and a restart
// without local state: the in-place rules' outputs equal each rule's
// reference exactly (dead letters once per dead-letter topic, too-late
// copies once per rule), and the repartitioned rule sees every event of a
// sensor in one state: its closed alerts equal the reference's.
func TestSeveralRulesMatchReference(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "m")
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", multiRules)
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	abort := func() bool { n++; return n%4 == 0 }
	log := pipeline.Log{}
	// No gateway outages: nothing is genuinely too late, so the
	// repartitioned rule, whose watermark depends on how the source
	// partitions interleave, must apply every event.
	o := sim.Demo()
	o.Machines, o.Seed, o.EpisodeRate, o.OutageRate = 12, 5, 0.05, 0
	recs := kafkatest.Records(sim.New(o), 9000)
	// Every source partition has records before the processor starts, so
	// that none starts far behind the others: a repartitioned rule's
	// watermark follows the slowest source partition that has sent records
	// (see pipeline.Partition.alignDelay), and one that has sent none yet
	// cannot hold it back.
	produce(t, seeds, cfg.Topics.Input, recs[:3000], log)
	in := start(t, cfg, Options{AbortBatch: abort})
	for i := 3000; i < 6000; i += 1000 {
		produce(t, seeds, cfg.Topics.Input, recs[i:i+1000], log)
		time.Sleep(30 * time.Millisecond)
	}
	waitConsumed(t, seeds, cfg, log)
	waitRepartitioned(t, seeds, cfg.GroupID, cfg.RepartitionFor(rs[3]))
	in.stop(t)
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		t.Fatal(err)
	}
	in = start(t, cfg, Options{AbortBatch: abort})
	produce(t, seeds, cfg.Topics.Input, recs[6000:], log)
	waitConsumed(t, seeds, cfg, log)
	waitRepartitioned(t, seeds, cfg.GroupID, cfg.RepartitionFor(rs[3]))
	in.stop(t)

	// The dead letters name every rule of the source, the repartitioned one
	// too (its letters of the source are these).
	named := pipeline.DeadLetterRules(rs, "vibration.events", "vibration.events.dlq")
	if string(named) != "episode@1,sensor-peak@1,vibration-avg@1,vibration-high@1" {
		t.Fatalf("dlq.rules of the source's letters: %q", named)
	}
	want, peakStage := refFingerprints(t, rs, log, named)
	topics := []string{"vibration.alerts", "vibration.avg.alerts", "vibration.episodes", "vibration.events.dlq", "vibration.events.late"}
	got := checkOutputs(t, seeds, want, topics...)

	// The repartitioned rule: every event of a sensor meets one state, so
	// the last revision of each alert (a window of a sensor) carries the
	// maximum over all the sensor's events in the window, as in the
	// reference over the whole log (whatever the interleaving did to the
	// watermark, nothing was too late), and no record of it was too late.
	ref, refAcct := refOutputs(peakStage, log)
	if refAcct.TooLate != 0 {
		t.Fatalf("the reference found %d records too late: the fixture is wrong", refAcct.TooLate)
	}
	last := func(vals [][]byte) map[string]string {
		m := map[string]string{}
		for _, v := range vals {
			a, err := alerts.Decode(v)
			if err != nil {
				t.Fatal(err)
			}
			m[a.AlertID] = fmt.Sprintf("%s [%s, %s) %s=%v", a.Key, alerts.FormatTime(a.Start), alerts.FormatTime(a.End), a.Aggregate.Fn, a.Aggregate.Value)
		}
		return m
	}
	var refVals, gotVals [][]byte
	for _, o := range ref {
		if o.Kind == pipeline.Alert {
			refVals = append(refVals, o.Value)
		}
	}
	revs := map[string]int{}
	for _, r := range readAll(t, seeds, "vibration.peak.alerts") {
		a, err := alerts.Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		// Exactly once: each alert's revisions are 0, 1, 2, ... (which
		// ones may differ from the reference's with the interleaving).
		prev, seen := revs[a.AlertID]
		if (seen && a.Revision != prev+1) || (!seen && a.Revision != 0) {
			t.Errorf("peak alert %s: revision %d after %d (seen %v): lost or repeated", a.AlertID, a.Revision, prev, seen)
		}
		revs[a.AlertID] = a.Revision
		if a.KeyField != "sensor_id" || string(r.Key) != a.Key || a.MachineID != "" {
			t.Fatalf("peak alert keyed %q: key_field %q key %q machine %q", r.Key, a.KeyField, a.Key, a.MachineID)
		}
		for _, e := range a.Evidence {
			if e.SensorID != a.Key {
				t.Fatalf("alert %s of sensor %s has evidence of sensor %s", a.AlertID, a.Key, e.SensorID)
			}
		}
		gotVals = append(gotVals, r.Value)
	}
	wantLast, gotLast := last(refVals), last(gotVals)
	if len(wantLast) == 0 {
		t.Fatal("the repartitioned rule's reference has no alert: the fixture proves nothing")
	}
	for id, w := range wantLast {
		if gotLast[id] != w {
			t.Errorf("peak alert %s: last revision %q, want %q", id, gotLast[id], w)
		}
	}
	if len(gotLast) != len(wantLast) {
		t.Errorf("%d peak alerts, want %d", len(gotLast), len(wantLast))
	}
	for _, r := range readAll(t, seeds, "vibration.events.late") {
		for _, h := range r.Headers {
			if h.Key == pipeline.HeaderLateRule && string(h.Value) == "sensor-peak" {
				t.Fatalf("a record was too late for the repartitioned rule: %s", r.Value)
			}
		}
	}
	t.Logf("outputs: %v records per topic; %d peak alerts", func() map[string]int {
		m := map[string]int{}
		for k, v := range got {
			m[k] = len(v)
		}
		return m
	}(), len(gotLast))
}

// checkOutputs compares what the processor committed on topics with want
// (refFingerprints), topic by topic; a topic other than the too-late one
// must have records in the reference. It returns what was committed.
func checkOutputs(t *testing.T, seeds []string, want map[string][]string, topics ...string) map[string][]string {
	t.Helper()
	got := fingerprints(readAll(t, seeds, topics...))
	for _, topic := range topics {
		if len(want[topic]) == 0 && topic != "vibration.events.late" {
			t.Errorf("the reference has no record on %s: the fixture proves nothing there", topic)
		}
		if !slices.Equal(got[topic], want[topic]) {
			t.Errorf("%s: %d records, want %d (reference)", topic, len(got[topic]), len(want[topic]))
		}
	}
	return got
}

// refFingerprints is the reference output of the in-place rules of rs over
// the log, topic by topic as sorted fingerprints (each dead letter once per
// topic), and the stage of the repartitioned rule among them (nil if none).
func refFingerprints(t *testing.T, rs []*rules.Compiled, log pipeline.Log, named []byte) (map[string][]string, *pipeline.Stage) {
	t.Helper()
	want := map[string][]string{}
	dlqDone := map[string]bool{}
	var repart *pipeline.Stage
	for _, r := range rs {
		st, err := pipeline.NewRuleStage(r, pipeline.Options{DeadLetterRules: named})
		if err != nil {
			t.Fatal(err)
		}
		if r.Rule.Repartitioned() {
			repart = st
			continue
		}
		ref, _ := refOutputs(st, log)
		for _, o := range ref {
			topic := map[pipeline.Kind]string{pipeline.Alert: r.Rule.Outputs.Alerts, pipeline.DeadLetter: r.Rule.Outputs.DLQ, pipeline.TooLate: r.Rule.Outputs.Late}[o.Kind]
			if o.Kind == pipeline.DeadLetter && dlqDone[topic] {
				continue
			}
			want[topic] = append(want[topic], string(o.Key)+"|"+pipeline.Fingerprint(o.Value, o.Headers))
		}
		dlqDone[r.Rule.Outputs.DLQ] = true
	}
	for _, v := range want {
		slices.Sort(v)
	}
	return want, repart
}

// refOutputs runs a stage over the log, partition by partition. For a
// repartitioned rule the partitions are those of its repartition topic:
// the valid records of all source partitions, merged by record timestamp
// (as the concurrent source partitions forward them, give or take a
// batch), split by the murmur2 hash of the rule's key.
func refOutputs(st *pipeline.Stage, log pipeline.Log) ([]pipeline.Output, pipeline.Accounting) {
	var out []pipeline.Output
	acct := pipeline.Accounting{Version: 1}
	emit := func(o pipeline.Output) { out = append(out, o) }
	if !st.Rule().Rule.Repartitioned() {
		for p := int32(0); p < testPartitions; p++ {
			w := st.NewPartition()
			for _, in := range log[p] {
				st.Process(w, in, &acct, emit)
			}
		}
		return out, acct
	}
	var all []pipeline.Input
	for p := int32(0); p < testPartitions; p++ {
		all = append(all, log[p]...)
	}
	slices.SortStableFunc(all, func(a, b pipeline.Input) int { return int(a.TimestampMs - b.TimestampMs) })
	hash := kgo.StickyKeyPartitioner(nil).ForTopic("repartition")
	parts := map[int]*pipeline.Partition{}
	for _, in := range all {
		ev, verr := st.Check(&in)
		if verr != nil {
			continue // dead-lettered at the source
		}
		q := hash.Partition(&kgo.Record{Key: []byte(st.KeyOf(&ev))}, testPartitions)
		if parts[q] == nil {
			parts[q] = st.NewPartition()
		}
		st.Apply(parts[q], &ev, in, &acct, emit)
	}
	return out, acct
}

// waitRepartitioned waits until the group committed every record of the
// repartition topic (call it after the source was consumed: everything the
// source forwards is then in the topic).
func waitRepartitioned(t *testing.T, seeds []string, group, topic string) {
	t.Helper()
	last := kafkatest.NextOffsets(readAll(t, seeds, topic))
	if len(last) == 0 {
		t.Fatalf("nothing reached the repartition topic %s", topic)
	}
	kafkatest.WaitCommitted(t, seeds, group, topic, last, 60*time.Second)
}

// A changed rule is refused also when the group's offsets are gone
// (expired or deleted): the partitions start from scratch, and the
// changelog's earlier history, which they delete rather than load, still
// names the definition that wrote the alerts so far.
func TestChangedRuleRefusedAfterTheGroupsOffsetsAreGone(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "scr")
	log := pipeline.Log{}
	produce(t, seeds, cfg.Topics.Input, simRecords(2000, 7), log)
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteGroup(context.Background(), cfg.GroupID); err != nil {
		t.Fatal(err)
	}
	changed := cfg
	changed.Rule.Threshold = 4 // same id, same version
	in2 := start(t, changed, Options{})
	select {
	case err := <-in2.done:
		if !errors.Is(err, ErrRuleChanged) || !strings.Contains(err.Error(), "earlier history") {
			t.Fatalf("stopped with %v, want ErrRuleChanged", err)
		}
	case <-time.After(30 * time.Second):
		in2.cancel()
		t.Fatal("the changed rule ran from scratch instead of being refused")
	}
	// The unchanged rule starts from scratch as before.
	in3 := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in3.stop(t)
}

// A rule changed without a version bump is refused: its stored state (in
// the local store, and in the changelog when the store is gone) carries
// the hash of the definition that wrote it.
func TestChangedRuleWithSameVersionRefused(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "h")
	log := pipeline.Log{}
	produce(t, seeds, cfg.Topics.Input, simRecords(2000, 7), log)
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)

	changed := cfg
	changed.Rule.Threshold = 4 // same id, same version
	// rule.max_future_skew is outside the rule but decides what is
	// clock_ahead: a changed skew is a changed definition too.
	skewed := cfg
	skewed.Rule.MaxFutureSkew = 10 * time.Minute
	for _, c := range []struct {
		name string
		cfg  config.Config
		wipe bool
	}{{"skew", skewed, false}, {"threshold", changed, false}, {"threshold", changed, true}} {
		if c.wipe {
			if err := os.RemoveAll(cfg.StateDir); err != nil {
				t.Fatal(err)
			}
		}
		in := start(t, c.cfg, Options{})
		select {
		case err := <-in.done:
			if !errors.Is(err, ErrRuleChanged) || !strings.Contains(err.Error(), "bump the rule's version") {
				t.Fatalf("%s, wipe=%v: stopped with %v, want ErrRuleChanged", c.name, c.wipe, err)
			}
			t.Logf("%s, wipe=%v: %v", c.name, c.wipe, err)
		case <-time.After(30 * time.Second):
			in.cancel()
			t.Fatalf("%s, wipe=%v: the changed rule was not refused within 30s", c.name, c.wipe)
		}
	}
	// The same rule with its version bumped starts (from its own, empty
	// state), and so does the original definition.
	bumped := changed
	bumped.Rule.Version = 2
	for _, c := range []config.Config{bumped, cfg} {
		in := start(t, c, Options{})
		time.Sleep(500 * time.Millisecond)
		select {
		case err := <-in.done:
			t.Fatalf("rule %s v%d threshold %d stopped: %v", c.Rule.ID, c.Rule.Version, c.Rule.Threshold, err)
		default:
		}
		in.stop(t)
	}
}

// Rules over two source topics in one instance: each rule sees its own
// source only, and its outputs equal its reference exactly; the metric
// labels of the second source's partitions name the topic.
func TestRulesOverTwoSources(t *testing.T) {
	seeds := kafkatest.Cluster(t, testPartitions, "vibration.events", "line2.events").ListenAddrs()
	cfg := testConfig(seeds, t.TempDir(), "two")
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", `rules:
  - id: line1
    version: 1
    source: vibration.events
    filter: value >= 7.1
    window: {type: sliding, size: 2m}
    threshold: count >= 3
    outputs: {alerts: line1.alerts}
  - id: line2
    version: 1
    source: line2.events
    window: {type: tumbling, size: 1m}
    aggregate: {fn: max}
    threshold: agg > 9
    outputs: {alerts: line2.alerts}
`)
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	log1, log2 := pipeline.Log{}, pipeline.Log{}
	produce(t, seeds, "vibration.events", simRecords(4000, 21), log1)
	produce(t, seeds, "line2.events", simRecords(4000, 22), log2)
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log1)
	cfg2 := cfg
	cfg2.Topics.Input = "line2.events"
	waitConsumed(t, seeds, cfg2, log2)
	in.stop(t)
	for i, log := range []pipeline.Log{log1, log2} {
		st, err := pipeline.NewRuleStage(rs[i], pipeline.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := refOutputs(st, log)
		var want []string
		for _, o := range ref {
			if o.Kind == pipeline.Alert {
				want = append(want, string(o.Key)+"|"+pipeline.Fingerprint(o.Value, o.Headers))
			}
		}
		slices.Sort(want)
		topic := rs[i].Rule.Outputs.Alerts
		got := fingerprints(readAll(t, seeds, topic))[topic]
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s: %d alert revisions, want %d (reference)", topic, len(got), len(want))
		}
	}
}

// Consumed records of a repartition topic are deleted (the topic has no
// time retention: forwarded records keep their source's timestamps).
func TestRepartitionRecordsPurged(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "purge")
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", `rules:
  - id: per-sensor
    version: 1
    source: vibration.events
    key: sensor_id
    window: {type: tumbling, size: 1m}
    threshold: count >= 5
    outputs: {alerts: per-sensor.alerts}
`)
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	log := pipeline.Log{}
	produce(t, seeds, cfg.Topics.Input, simRecords(3000, 4), log)
	in := start(t, cfg, Options{PurgeEvery: time.Millisecond})
	waitConsumed(t, seeds, cfg, log)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := cfg.RepartitionFor(rs[0])
	deadline := time.Now().Add(20 * time.Second)
	for {
		starts, err := adm.ListStartOffsets(context.Background(), topic)
		var total int64
		if err == nil {
			starts.Each(func(o kadm.ListedOffset) { total += o.Offset })
		}
		if total > 0 {
			t.Logf("%s: %d records purged", topic, total)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record of %s purged within 20s (%v)", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	in.stop(t)
}

// Source partitions with nothing to forward do not hold back a
// repartitioned rule: their forwarders report them idle with a marker to
// every partition of the repartition topic, each marker on the partition
// it names. Here one machine with one sensor writes to one source
// partition, so every forwarded record lands on one repartition partition,
// which hears of the two empty source partitions only through their
// markers: without them it has no watermark and closes no window (the
// markers once all went to whichever partition the sticky partitioner
// picked).
func TestIdleSourcePartitionsReleaseTheRepartitionedWatermark(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "idle")
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", `rules:
  - id: per-sensor
    version: 1
    source: vibration.events
    key: sensor_id
    window: {type: tumbling, size: 1m}
    threshold: count >= 1
    allowed_lateness: 30s
    outputs: {alerts: per-sensor.alerts}
`)
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	o := sim.Demo()
	o.Machines, o.SensorsPerMachine, o.OutageRate, o.ClockAheadRate, o.SwapRate = 1, 1, 0, 0, 0
	log := pipeline.Log{}
	produce(t, seeds, cfg.Topics.Input, kafkatest.Records(sim.New(o), 2400), log)
	if len(log) != 1 {
		t.Fatalf("the records went to %d source partitions, want 1", len(log))
	}
	st, err := pipeline.NewRuleStage(rs[0], pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := refOutputs(st, log)
	want := map[string]bool{}
	for _, o := range ref {
		if o.Kind != pipeline.Alert {
			continue
		}
		a, err := alerts.Decode(o.Value)
		if err != nil {
			t.Fatal(err)
		}
		if a.Status == alerts.StatusClosed {
			want[a.AlertID] = true
		}
	}
	if len(want) < 5 {
		t.Fatalf("the reference closes %d windows: the fixture proves nothing", len(want))
	}
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	waitRepartitioned(t, seeds, cfg.GroupID, cfg.RepartitionFor(rs[0]))
	closed := func() map[string]bool {
		got := map[string]bool{}
		for _, r := range readAll(t, seeds, "per-sensor.alerts") {
			a, err := alerts.Decode(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if a.Status == alerts.StatusClosed {
				got[a.AlertID] = true
			}
		}
		return got
	}
	deadline := time.Now().Add(20 * time.Second)
	got := closed()
	for len(got) < len(want) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		got = closed()
	}
	in.stop(t)
	for id := range want {
		if !got[id] {
			t.Errorf("window %s: closed in the reference, not by the processor (%d of %d closed)", id, len(got), len(want))
			break
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d windows closed, the reference closes %d", len(got), len(want))
	}
}

// Rules whose changelog positions would not fit in Kafka's default commit
// metadata (4096 bytes) are refused at start-up, naming the topic and the
// rules, instead of every commit failing.
func TestTooManyRulesForCommitMetadataRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 30 {
		fmt.Fprintf(&b, "  - id: %s-%02d\n    version: 1\n    source: vibration.events\n    filter: value >= 7.1\n    window: {type: sliding, size: 2m}\n    threshold: count >= 3\n    outputs: {alerts: out-%02d}\n", strings.Repeat("r", 150), i, i)
	}
	err := newWithRules(t, b.String())
	if err == nil || !strings.Contains(err.Error(), "offset.metadata.max.bytes") || !strings.Contains(err.Error(), "vibration.events") {
		t.Fatalf("New: %v, want the commit metadata refusal", err)
	}
}

// Rules whose dead letters would need a dlq.rules header larger than
// pipeline.MaxDeadLetterRulesBytes are refused at start-up (the in-place
// rules of a source are bounded by their commit metadata already; the
// repartitioned ones here are not), so that no dead letter can exceed the
// producer's record size because of it. With a dead-letter topic of their
// own for half of them, each topic's letters name fewer rules: accepted.
func TestTooManyRulesForDeadLetterHeaderRefused(t *testing.T) {
	newWith := func(dlq func(i int) string) error {
		var b strings.Builder
		b.WriteString("rules:\n")
		for i := range 100 {
			fmt.Fprintf(&b, "  - id: %s-%03d\n    version: 1\n    description: events\n    source: vibration.events\n    key: sensor_id\n    window: {type: tumbling, size: 1m}\n    threshold: count >= 3\n    outputs: {alerts: out-%02d, dlq: %s}\n",
				strings.Repeat("r", 196), i, i, dlq(i))
		}
		return newWithRules(t, b.String())
	}
	err := newWith(func(int) string { return "shared.dlq" })
	if err == nil || !strings.Contains(err.Error(), pipeline.HeaderDeadLetterRules) || !strings.Contains(err.Error(), "vibration.events") ||
		!strings.Contains(err.Error(), "shared.dlq") {
		t.Fatalf("New: %v, want the dlq.rules refusal", err)
	}
	if err := newWith(func(i int) string { return fmt.Sprintf("dlq-%d", i%2) }); err != nil {
		t.Fatalf("New with two dead-letter topics: %v", err)
	}
}

// newWithRules returns the error of New for a configuration whose rules
// file holds y.
func newWithRules(t *testing.T, y string) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.RulesFile, cfg.StateDir = path, t.TempDir()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg, Options{Metrics: met})
	return err
}
