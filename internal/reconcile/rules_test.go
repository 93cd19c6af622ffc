package reconcile

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
)

// Four rules over one source: a sliding rule and a tumbling average that
// share an alerts topic, sessions on their own topic, and a per-sensor
// maximum over hopping windows that is repartitioned by sensor_id. All
// share the source's default dead-letter and late topics, and allow 2
// minutes of lateness, so that the gateway outages of the stream (3
// minutes) replay records too late for them.
const testRules = `rules:
  - id: vibration-high
    version: 1
    description: high-vibration events
    source: vibration.events
    filter: value >= 7.1 && quality == "good"
    window: {type: sliding, size: 2m}
    threshold: count >= 3
    allowed_lateness: 2m
    outputs: {alerts: vibration.alerts}
  - id: vibration-avg
    version: 1
    description: vibration events
    source: vibration.events
    window: {type: tumbling, size: 1m}
    aggregate: {fn: avg}
    threshold: agg > 4 && count >= 10
    allowed_lateness: 2m
    outputs: {alerts: vibration.alerts}
  - id: episode
    version: 1
    description: elevated events
    source: vibration.events
    filter: value >= 5
    window: {type: session, gap: 30s}
    threshold: count >= 5
    allowed_lateness: 2m
    outputs: {alerts: vibration.episodes}
  - id: sensor-peak
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

// processedRules runs the processor with testRules over a simulated
// stream (duplicates, poison records, gateway outages that replay too
// late) on an in-process cluster and returns the configuration. Consumed
// repartition records are not purged (the test purges some itself).
func processedRules(t *testing.T) config.Config {
	t.Helper()
	o := sim.Demo()
	o.Machines, o.Seed, o.EpisodeRate = 12, 3, 0.05
	o.OutageLength, o.OutageRate = 3*time.Minute, 0.002
	return processedWith(t, testRules, o, 8000)
}

// processedWith runs the processor with the rules text over total records
// of the simulated line o.
func processedWith(t *testing.T, rulesText string, o sim.Options, total int) config.Config {
	t.Helper()
	cfg := kafkatest.Config(kafkatest.Cluster(t, 3, "vibration.events").ListenAddrs(), t.TempDir(), "rules")
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", rulesText)
	runProcessor(t, cfg, o, total, nil)
	return cfg
}

// runProcessor runs the processor with cfg over total records of the
// simulated line o, each chunk converted by conv (nil: as simulated), until
// it committed them all (and its repartition topics' records).
func runProcessor(t *testing.T, cfg config.Config, o sim.Options, total int, conv func([]sim.Record) []sim.Record) {
	t.Helper()
	stop := startProcessor(t, cfg)
	line := sim.New(o)
	var produced []*kgo.Record
	const chunk = 1000
	for i := 0; i < total; i += chunk {
		recs := kafkatest.Records(line, chunk)
		if conv != nil {
			recs = conv(recs)
		}
		produced = append(produced, kafkatest.Produce(t, cfg.Brokers, cfg.Topics.Input, recs...)...)
		// Each chunk committed before the next: at least one transaction
		// per chunk (the range tests split the log at a commit), however
		// far ahead of its workers the processor polls.
		kafkatest.WaitCommitted(t, cfg.Brokers, cfg.GroupID, cfg.Topics.Input, kafkatest.NextOffsets(produced), 30*time.Second)
	}
	kafkatest.WaitCommitted(t, cfg.Brokers, cfg.GroupID, cfg.Topics.Input, kafkatest.NextOffsets(produced), 30*time.Second)
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Rule.Repartitioned() {
			waitRepartitionConsumed(t, cfg, cfg.RepartitionFor(r))
		}
	}
	stop()
}

// startProcessor runs a processor of cfg in the background; stop stops it
// (a clean shutdown) and fails the test on its error.
func startProcessor(t *testing.T, cfg config.Config) (stop func()) {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	p, err := consume.New(cfg, consume.Options{Metrics: met, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		PurgeEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// waitRepartitionConsumed waits until the group committed every data
// record of the repartition topic (after the source was consumed: all it
// forwards is then there), so the repartitioned rule has alerts.
func waitRepartitionConsumed(t *testing.T, cfg config.Config, topic string) {
	t.Helper()
	recs, err := ReadCommitted(context.Background(), cfg.Brokers, topic, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	var data []*kgo.Record
	for _, r := range recs {
		if len(r.Value) > 0 {
			data = append(data, r)
		}
	}
	kafkatest.WaitCommitted(t, cfg.Brokers, cfg.GroupID, topic, kafkatest.NextOffsets(data), 30*time.Second)
}

// ruleReport returns the section of rule id.
func ruleReport(t *testing.T, rep *Report, id string) *RuleReport {
	t.Helper()
	for _, rr := range rep.Rules {
		if rr.ID == id {
			return rr
		}
	}
	t.Fatalf("no section for rule %s in\n%s", id, rep)
	return nil
}

// wantViolation fails unless the report names rule id in a violation
// containing what.
func wantViolation(t *testing.T, rep *Report, id, what string) {
	t.Helper()
	for _, v := range rep.Violations {
		if strings.HasPrefix(v, "rule "+id+" v1: ") && strings.Contains(v, what) {
			return
		}
	}
	t.Errorf("no violation of rule %s mentioning %q in:\n%s", id, what, strings.Join(rep.Violations, "\n"))
}

func runOK(t *testing.T, o Options) *Report {
	t.Helper()
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("clean run: %s", rep)
	}
	return rep
}

// A rules file: every rule reconciles, with and without recomputation,
// before and after consumed repartition records were purged, over the
// whole log and over two halves of it; then each kind of damage is caught
// and blamed on the right rule.
func TestReconcileRulesFile(t *testing.T) {
	cfg := processedRules(t)
	base := Options{Config: cfg, Timeout: 30 * time.Second}
	rec := base
	rec.Recompute = true
	rep := runOK(t, rec)
	t.Log("\n" + rep.String())
	if rep.InputRecords != 8000 || rep.DeadLetters == 0 || rep.TooLate == 0 || len(rep.Rules) != 4 {
		t.Fatalf("the fixture proves too little: %s", rep)
	}
	for _, rr := range rep.Rules {
		if rr.Alerts == 0 || rr.Checked == 0 || rr.DeadLetters != rep.DeadLetters {
			t.Errorf("rule %s: %d alert revisions, %d records checked, %d of %d dead letters: the fixture proves too little",
				rr.ID, rr.Alerts, rr.Checked, rr.DeadLetters, rep.DeadLetters)
		}
		if rr.TooLate == 0 && !rr.Repartitioned {
			t.Errorf("rule %s: nothing too late: the fixture proves nothing there", rr.ID)
		}
		if rr.Recomputed == rr.Repartitioned {
			t.Errorf("rule %s: recomputed %v, repartitioned %v", rr.ID, rr.Recomputed, rr.Repartitioned)
		}
	}
	if !strings.Contains(rep.String(), "recompute: skipped") {
		t.Error("the report does not say that the repartitioned rule was not recomputed")
	}

	t.Run("purged", func(t *testing.T) { testRulesPurged(t, rec) })
	t.Run("range", func(t *testing.T) { testRulesRange(t, base, rep.Alerts) })
	t.Run("tampered", func(t *testing.T) { testRulesTampered(t, cfg, rec) })
}

// testRulesPurged deletes the first half of every partition of the
// repartition topic, as the processor does once they were consumed: the
// repartitioned rule's evidence in the deleted part is found in the source,
// and its record counts are bounded by the offsets deleted.
func testRulesPurged(t *testing.T, o Options) {
	ctx := context.Background()
	rs, err := o.Config.Rules()
	if err != nil {
		t.Fatal(err)
	}
	topic := o.Config.RepartitionFor(rs[3])
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.Config.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	offs, err := adm.FetchOffsets(ctx, o.Config.GroupID)
	if err != nil {
		t.Fatal(err)
	}
	del := kadm.Offsets{}
	offs.Each(func(c kadm.OffsetResponse) {
		if c.Topic == topic {
			del.Add(kadm.Offset{Topic: topic, Partition: c.Partition, At: c.At / 2, LeaderEpoch: -1})
		}
	})
	resp, err := adm.DeleteRecords(ctx, del)
	if err == nil {
		err = resp.Error()
	}
	if err != nil || len(del) == 0 {
		t.Fatalf("deleting the first half of %s (%d partitions): %v", topic, len(del), err)
	}
	rep := runOK(t, o)
	rr := ruleReport(t, rep, "sensor-peak")
	notes := strings.Join(rr.Notes, "\n")
	if rr.Checked == 0 || !strings.Contains(notes, "through the source") || !strings.Contains(notes, "bounded, not exact") {
		t.Fatalf("after the purge: %d records checked, notes:\n%s", rr.Checked, notes)
	}
	t.Log("\n" + notes)
}

// testRulesRange splits the check at a commit in the middle: both halves
// reconcile and together hold every alert revision.
func testRulesRange(t *testing.T, o Options, revisions int) {
	rs, err := o.Config.Rules()
	if err != nil {
		t.Fatal(err)
	}
	stamps := accountingStamps(t, o.Config.Brokers, o.Config.ChangelogFor(rs[0]))
	mid := stamps[len(stamps)/2]
	a, b := o, o
	a.To, b.From = mid, mid
	first, second := runOK(t, a), runOK(t, b)
	if first.Alerts+second.Alerts != revisions || first.Alerts == 0 || second.Alerts == 0 {
		t.Fatalf("alert revisions %d + %d, want %d", first.Alerts, second.Alerts, revisions)
	}
	b.Recompute = true
	if _, err := Run(context.Background(), b); err == nil {
		t.Fatal("recompute with a range must be refused")
	}
}

// testRulesTampered writes damaged records to the topics, the way a broken
// processor would, and checks that each is caught and names its rule.
func testRulesTampered(t *testing.T, cfg config.Config, o Options) {
	ctx := context.Background()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	read := func(topic string) []*kgo.Record {
		recs, err := ReadCommitted(ctx, cfg.Brokers, topic, 10*time.Second, nil)
		if err != nil || len(recs) == 0 {
			t.Fatalf("%s: %d records, %v", topic, len(recs), err)
		}
		return recs
	}
	again := func(r *kgo.Record, value []byte) *kgo.Record {
		return &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: value, Headers: r.Headers}
	}
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	episode := read("vibration.episodes")[0]
	dlq := read("vibration.events.dlq")[0]
	fake := nonQualifyingEvidence(t, read("vibration.alerts"), read("vibration.events"))
	acct := unbalanced(t, read(cfg.ChangelogFor(rs[1])))
	err = prod.ProduceSync(ctx,
		again(episode, episode.Value), // a doubled revision
		fake,                          // evidence that does not qualify
		again(dlq, dlq.Value),         // a dead letter twice
		acct,                          // an accounting record that does not balance
	).FirstErr()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() {
		t.Fatal("a damaged topic set reconciled OK")
	}
	wantViolation(t, rep, "episode", "appears twice")
	wantViolation(t, rep, "vibration-high", "does not qualify under the rule's filter")
	for _, id := range []string{"vibration-high", "vibration-avg", "episode", "sensor-peak"} {
		wantViolation(t, rep, id, "appears more than once") // the DLQ topic is shared by all
	}
	wantViolation(t, rep, "vibration-avg", "accounting does not balance")
	wantViolation(t, rep, "vibration-avg", "differ from a recomputation")
	t.Log("\n" + rep.String())
}

// nonQualifyingEvidence returns a new alert of the sliding rule whose first
// evidence sample is a valid input record of the same machine that does
// not qualify (its value is below 7.1 mm/s).
func nonQualifyingEvidence(t *testing.T, alertRecs, input []*kgo.Record) *kgo.Record {
	t.Helper()
	for _, r := range alertRecs {
		a, err := alerts.Decode(r.Value)
		if err != nil || a.RuleID != "vibration-high" {
			continue
		}
		for _, in := range input {
			var ev struct {
				EventID  string  `json:"event_id"`
				Machine  string  `json:"machine_id"`
				Sensor   string  `json:"sensor_id"`
				Value    float64 `json:"value"`
				Unit     string  `json:"unit"`
				Quality  string  `json:"quality"`
				TS       int64   `json:"ts"`
				Schema   int     `json:"schema_version"`
				Sequence int64   `json:"seq"`
			}
			if json.Unmarshal(in.Value, &ev) != nil || ev.Machine != a.MachineID || string(in.Key) != ev.Machine ||
				ev.Unit != "mm/s" || ev.Value >= 5 || ev.Quality != "good" || ev.Schema != 1 {
				continue
			}
			if ev.TS >= a.Evidence[1].TS || a.Evidence[1].TS-ev.TS > 60_000 {
				continue
			}
			a.Evidence[0] = alerts.Evidence{EventID: ev.EventID, SensorID: ev.Sensor, TS: ev.TS, Value: ev.Value,
				Partition: in.Partition, Offset: in.Offset}
			a.Revision, a.Status = 0, alerts.StatusOpen
			a.AlertID = alerts.ID(a.RuleID, a.RuleVersion, a.MachineID, ev.EventID)
			v, err := a.Encode()
			if err != nil {
				t.Fatal(err)
			}
			return &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: v}
		}
	}
	t.Fatal("no sliding alert with a non-qualifying record of its machine to point at")
	return nil
}

// unbalanced returns partition 0's last accounting record with one more
// processed record than it counts.
func unbalanced(t *testing.T, changelog []*kgo.Record) *kgo.Record {
	t.Helper()
	var last *kgo.Record
	for _, r := range changelog {
		if string(r.Key) == "a" && r.Partition == 0 {
			last = r
		}
	}
	if last == nil {
		t.Fatal("no accounting record on partition 0")
	}
	var a pipeline.Accounting
	if err := json.Unmarshal(last.Value, &a); err != nil {
		t.Fatal(err)
	}
	a.Processed++
	v, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: last.Topic, Partition: 0, Key: last.Key, Value: v}
}
