package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/internal/sim"
	"github.com/vibeline/processor/test/e2e/harness"
)

// TestRulesAndRepartitioningOnRealBroker runs the built binary with a rules
// file of three rules over one input on the real broker: the vibration rule
// in place, a per-sensor maximum (keyed by sensor_id, so repartitioned) and
// a per-machine count with repartition: true (a tenth of the records carry
// no key). The instance is SIGKILLed while the input is written and
// restarted. Then:
//   - the in-place rule committed exactly its reference's alerts;
//   - each repartitioned rule saw every event of a key in one state: the
//     last revision of each of its alerts carries the aggregate over all of
//     the key's events in the window (the reference over the whole log), and
//     none of its records was too late (the input has no genuinely late
//     records; the watermark of a repartition partition follows its slowest
//     source partition);
//   - the repartition topics exist with the input's partition count.
func TestRulesAndRepartitioningOnRealBroker(t *testing.T) {
	t.Parallel()
	seeds := harness.Bootstrap(t)
	input := newInput(t, seeds, "e2e-rules.in", inputPartitions)
	out := func(s string) string { return harness.UniqueName("e2e-rules." + s) }
	alertsHigh, alertsPeak, alertsCount := out("high"), out("peak"), out("count")
	dlq, late := out("dlq"), out("late")
	text := fmt.Sprintf(`rules:
  - id: vibration-high
    version: 1
    description: high-vibration events
    source: %[1]s
    filter: value >= 7.1 && quality == "good"
    window: {type: sliding, size: 2m}
    threshold: count >= 3
    outputs: {alerts: %[2]s, dlq: %[5]s, late: %[6]s}
  - id: sensor-peak
    version: 1
    description: sensor peaks
    source: %[1]s
    key: sensor_id
    window: {type: hopping, size: 2m, advance: 1m}
    aggregate: {fn: max}
    threshold: agg >= 7.5
    allowed_lateness: 2m
    outputs: {alerts: %[3]s, dlq: %[5]s, late: %[6]s}
  - id: machine-busy
    version: 1
    description: elevated events
    source: %[1]s
    repartition: true
    filter: value >= 4
    window: {type: tumbling, size: 1m}
    threshold: count >= 20
    allowed_lateness: 2m
    outputs: {alerts: %[4]s, dlq: %[5]s, late: %[6]s}
`, input, alertsHigh, alertsPeak, alertsCount, dlq, late)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	d := newDeployment(t, seeds, input, "rules", config.Default().Rule, "PROCESSOR_RULES_FILE="+path)
	cfg, rs, internal := rulesFileTopics(t, d.group, path)
	t.Cleanup(func() {
		deleteTopicsAndGroup(t, seeds, d.group, append(internal, alertsHigh, alertsPeak, alertsCount, dlq, late)...)
	})

	// The line without gateway outages (nothing genuinely too late), a
	// tenth of its records without a key.
	o := streamOptions(21)
	o.OutageRate = 0
	line := sim.New(o)
	cl := harness.NewClient(t, seeds, kgo.DefaultProduceTopic(input))
	produce := func(n int) {
		recs := make([]*kgo.Record, 0, n)
		for i := range n {
			r := line.Next()
			key := r.Key
			if i%10 == 3 {
				key = nil
			}
			recs = append(recs, &kgo.Record{Key: key, Value: r.Value, Timestamp: r.Timestamp})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(3000) // every source partition has records before the start
	p := d.start("r0", d.stateDir("r0"))
	for range 4 {
		produce(1500)
		time.Sleep(300 * time.Millisecond)
	}
	p.kill(t, d)
	produce(3000)
	p = d.start("r0", d.stateDir("r0"))
	produce(3000)

	log, ends := readLog(t, seeds, input)
	waitConsumed(t, d, ends, consumeTimeout)
	for _, r := range rs {
		if r.Rule.Repartitioned() {
			waitTopicConsumed(t, d, cfg.RepartitionFor(r))
		}
	}
	p.stop(t, d)

	// The in-place rule: exactly its reference (keyless records are
	// processed where they are, as the reference does).
	// Its dead letters name every rule of the source (they share the
	// dead-letter topic): pipeline.DeadLetterRules.
	high, err := pipeline.NewRuleStage(rs[0], pipeline.Options{DeadLetterRules: pipeline.DeadLetterRules(rs, input, dlq)})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := high.Reference(log)
	if want.Count(pipeline.Alert) == 0 {
		t.Error("vibration-high: the reference has no alert: the fixture proves nothing")
	}
	// A machine's keyless records sit on other partitions than its keyed
	// ones, so its alerts come from several partitions' states: their
	// interleaving on the alerts topic is not fixed, the set is, and each
	// alert's revisions are in order.
	var wantHigh, gotHigh []string
	for _, vs := range want[pipeline.Alert] {
		wantHigh = append(wantHigh, vs...)
	}
	lastRev := map[string]int{}
	for _, r := range harness.ReadCommitted(t, seeds, alertsHigh, readTimeout) {
		gotHigh = append(gotHigh, pipeline.Fingerprint(r.Value, headers(r)))
		a, err := alerts.Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := lastRev[a.AlertID]; (ok && a.Revision != prev+1) || (!ok && a.Revision != 0) {
			t.Errorf("vibration-high: alert %s revision %d after %d", a.AlertID, a.Revision, prev)
		}
		lastRev[a.AlertID] = a.Revision
	}
	slices.Sort(wantHigh)
	slices.Sort(gotHigh)
	if !slices.Equal(wantHigh, gotHigh) {
		t.Errorf("vibration-high: %d alert revisions committed, the reference has %d, or they differ", len(gotHigh), len(wantHigh))
	}
	// The shared dead-letter topic: one letter per invalid input record,
	// exactly the reference's (every rule reads the same source; a record
	// is checked once, at the source).
	var wantDLQ, gotDLQ []string
	for _, vs := range want[pipeline.DeadLetter] {
		wantDLQ = append(wantDLQ, vs...)
	}
	for _, r := range harness.ReadCommitted(t, seeds, dlq, readTimeout) {
		gotDLQ = append(gotDLQ, pipeline.Fingerprint(r.Value, headers(r)))
	}
	slices.Sort(wantDLQ)
	slices.Sort(gotDLQ)
	if !slices.Equal(wantDLQ, gotDLQ) {
		t.Errorf("dead letters: %d committed, the reference has %d, or they differ", len(gotDLQ), len(wantDLQ))
	}
	if len(wantDLQ) == 0 {
		t.Error("dead letters: the reference has none: the fixture proves nothing")
	}
	t.Logf("dead letters: %d, as the reference", len(gotDLQ))

	// The repartitioned rules.
	lateRecs := harness.ReadCommitted(t, seeds, late, readTimeout)
	for i, topic := range map[int]string{1: alertsPeak, 2: alertsCount} {
		r := rs[i]
		st, err := pipeline.NewRuleStage(r, pipeline.Options{})
		if err != nil {
			t.Fatal(err)
		}
		refVals, refLate := mergedReference(st, log, inputPartitions)
		wantLast := lastRevisions(t, refVals)
		var vals [][]byte
		revs := map[string]int{}
		for _, rec := range harness.ReadCommitted(t, seeds, topic, readTimeout) {
			vals = append(vals, rec.Value)
			// Exactly once: each alert's revisions are 0, 1, 2, ... in
			// the topic, none lost or repeated (which revisions there are
			// may differ from the reference's: how the source partitions
			// interleave in the repartition topic depends on timing).
			a, err := alerts.Decode(rec.Value)
			if err != nil {
				t.Fatal(err)
			}
			prev, seen := revs[a.AlertID]
			if (seen && a.Revision != prev+1) || (!seen && a.Revision != 0) {
				t.Errorf("%s: alert %s revision %d after %d (seen %v): lost or repeated", r.Rule.ID, a.AlertID, a.Revision, prev, seen)
			}
			revs[a.AlertID] = a.Revision
		}
		gotLast := lastRevisions(t, vals)
		if len(wantLast) == 0 {
			t.Errorf("%s: the reference has no alert: the fixture proves nothing", r.Rule.ID)
		}
		for id, w := range wantLast {
			if gotLast[id] != w {
				t.Errorf("%s: alert %s: last revision %q, want %q", r.Rule.ID, id, gotLast[id], w)
			}
		}
		// A repartition partition has no watermark until it has heard of
		// every source partition (docs/RULES.md): a record far behind
		// everything (a clock at 1970) that arrives before that is applied,
		// where the merged reference, whose watermark starts with its
		// first record, finds it too late. Such a record may open an alert
		// of its own; any other extra alert is wrong.
		lateIDs := map[string]bool{}
		for v := range refLate {
			var ev struct {
				EventID string `json:"event_id"`
			}
			if json.Unmarshal([]byte(v), &ev) == nil {
				lateIDs[ev.EventID] = true
			}
		}
		extra := 0
		for _, v := range vals {
			a, err := alerts.Decode(v)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := wantLast[a.AlertID]; ok || a.Revision != 0 {
				continue
			}
			extra++
			if !slices.ContainsFunc(a.Evidence, func(e alerts.Evidence) bool { return lateIDs[e.EventID] }) {
				t.Errorf("%s: alert %s is not in the reference, and no event of it is one the reference found too late: %s", r.Rule.ID, a.AlertID, v)
			}
		}
		if len(gotLast) != len(wantLast)+extra {
			t.Errorf("%s: %d alerts, want %d (the reference's) + %d (of records applied before the watermark existed)", r.Rule.ID, len(gotLast), len(wantLast), extra)
		}
		for _, lr := range lateRecs {
			if v, _ := header(lr, pipeline.HeaderLateRule); v == r.Rule.ID && !refLate[string(lr.Value)] {
				t.Fatalf("%s: a record was too late that the reference applied: %s", r.Rule.ID, lr.Value)
			}
		}
		t.Logf("%s: %d alerts, %d revisions, as the reference (%d more, of records applied before the watermark existed)", r.Rule.ID, len(gotLast), len(vals), extra)
	}
	checkRepartitionTopics(t, d, cfg, rs)
	// The operator's tool agrees, from the outside, for every rule
	// (accounting, copies, revision chains; no --recompute: it skips
	// repartitioned rules, whose revisions depend on timing).
	code, stderr, _ := runBinaryOut(t, 2*time.Minute, d.env, "reconcile", "--quiet")
	if code != 0 {
		t.Errorf("processor reconcile exited %d:\n%s", code, stderr)
	}
	t.Logf("processor reconcile: %s", lastLine(stderr))
}

// lastRevisions maps each alert id to its last revision's key, window and
// aggregate.
func lastRevisions(t *testing.T, vals [][]byte) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, v := range vals {
		a, err := alerts.Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		key := a.MachineID
		if a.KeyField != "" {
			key = a.KeyField + "=" + a.Key
		}
		agg := "count"
		if a.Aggregate != nil {
			agg = fmt.Sprintf("%s=%v", a.Aggregate.Fn, a.Aggregate.Value)
		}
		m[a.AlertID] = fmt.Sprintf("%s [%s, %s) %s", key, alerts.FormatTime(a.Start), alerts.FormatTime(a.End), agg)
	}
	return m
}

// mergedReference runs a repartitioned rule over the whole log as its
// repartition partitions see it: the valid records of every source
// partition merged by record timestamp, split by the murmur2 hash of the
// rule's key. It returns the alert values and the values of the records it
// found too late (those far behind everything, such as a clock at 1970).
func mergedReference(st *pipeline.Stage, log pipeline.Log, partitions int) ([][]byte, map[string]bool) {
	var all []pipeline.Input
	for p := range int32(partitions) {
		all = append(all, log[p]...)
	}
	slices.SortStableFunc(all, func(a, b pipeline.Input) int { return int(a.TimestampMs - b.TimestampMs) })
	hash := kgo.StickyKeyPartitioner(nil).ForTopic("repartition")
	parts := map[int]*pipeline.Partition{}
	acct := pipeline.Accounting{Version: 1}
	var vals [][]byte
	late := map[string]bool{}
	for _, in := range all {
		ev, verr := st.Check(&in)
		if verr != nil {
			continue // dead-lettered at the source
		}
		q := hash.Partition(&kgo.Record{Key: []byte(st.KeyOf(&ev))}, partitions)
		if parts[q] == nil {
			parts[q] = st.NewPartition()
		}
		st.Apply(parts[q], &ev, in, &acct, func(o pipeline.Output) {
			switch o.Kind {
			case pipeline.Alert:
				vals = append(vals, o.Value)
			case pipeline.TooLate:
				late[string(o.Value)] = true
			}
		})
	}
	return vals, late
}

// waitTopicConsumed waits until the deployment's group committed every
// record of an internal topic (its end offset minus the transaction
// markers: the offset after its last record).
func waitTopicConsumed(t *testing.T, d *deployment, topic string) {
	t.Helper()
	last := map[int32]int64{}
	for _, r := range harness.ReadCommitted(t, d.seeds, topic, readTimeout) {
		last[r.Partition] = max(last[r.Partition], r.Offset+1)
	}
	adm := harness.NewAdmin(t, d.seeds)
	if len(last) == 0 {
		// Consumed records are purged (every 30 s): all of them, or none
		// ever came.
		starts, err := adm.ListStartOffsets(context.Background(), topic)
		var purged int64
		if err == nil {
			starts.Each(func(o kadm.ListedOffset) { purged += o.Offset })
		}
		if purged == 0 {
			t.Fatalf("nothing reached %s (%v)", topic, err)
		}
		return
	}
	deadline := time.Now().Add(consumeTimeout)
	for {
		done, progress, err := committedProgress(adm, d.group, topic, last)
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not consumed within %v: %s %v%s", d.name, topic, consumeTimeout, progress, err, d.tails())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkRepartitionTopics: the repartition topics have the input's
// partition count.
func checkRepartitionTopics(t *testing.T, d *deployment, cfg config.Config, rs []*rules.Compiled) {
	t.Helper()
	adm := harness.NewAdmin(t, d.seeds)
	for _, r := range rs {
		if !r.Rule.Repartitioned() {
			continue
		}
		name := cfg.RepartitionFor(r)
		td, err := adm.ListTopics(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(td[name].Partitions); n != inputPartitions {
			t.Errorf("%s has %d partitions, want %d (the input's)", name, n, inputPartitions)
		}
	}
}

// rulesFileTopics returns the configuration of a deployment's rules file
// (group and path), its rules, and their internal topics: each rule's
// changelog and, when repartitioned, its repartition topic.
func rulesFileTopics(t *testing.T, group, path string) (config.Config, []*rules.Compiled, []string) {
	t.Helper()
	cfg := config.Default()
	cfg.GroupID, cfg.RulesFile = group, path
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	var internal []string
	for _, r := range rs {
		internal = append(internal, cfg.ChangelogFor(r))
		if r.Rule.Repartitioned() {
			internal = append(internal, cfg.RepartitionFor(r))
		}
	}
	return cfg, rs, internal
}
