package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/avro/avrotest"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
)

// These tests run the processor with an Avro source (schema ids from a
// fake Confluent-API registry) and Avro alerts, then reconcile what it
// committed.

// eventWriter is the producers' writer schema (registered as id 1): the
// event's fields with a plain long-or-string ts.
var eventWriter = avrotest.EventWriter(avrotest.ClockField)

// unknownSchemaID is a schema id the registry does not know: its records
// are dead-lettered as schema_unknown.
const unknownSchemaID = 999

// avroConverter turns simulated JSON records into wire-format Avro of
// schema id 1; every 50th record gets the unknown schema id instead. A
// value that is not an object of the event's fields with Avro-compatible
// types (the simulator's poison records) keeps its bytes: decode_error.
func avroConverter(t *testing.T) func([]sim.Record) []sim.Record {
	writer := avrotest.ParseSchema(t, eventWriter)
	n := 0
	return func(recs []sim.Record) []sim.Record {
		for i, r := range recs {
			body, ok := avrotest.EventBody(t, writer, r.Value)
			if !ok {
				continue
			}
			id := uint32(1)
			if n++; n%50 == 0 {
				id = unknownSchemaID
			}
			recs[i].Value = avrotest.Wire(id, body)
		}
		return recs
	}
}

// avroProcessed runs the processor with an Avro source and Avro alerts
// over total simulated records (the rules file rulesText, or the rule:
// block when empty) and returns its configuration and the registry.
func avroProcessed(t *testing.T, rulesText string, o sim.Options, total int) (config.Config, *avrotest.Registry) {
	t.Helper()
	reg := avrotest.NewRegistry(t)
	if id := reg.Register("vibration.events-value", eventWriter); id != 1 {
		t.Fatalf("writer schema id %d, want 1", id)
	}
	cfg := kafkatest.Config(kafkatest.Cluster(t, 3, "vibration.events").ListenAddrs(), t.TempDir(), "avro")
	if rulesText != "" {
		cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", rulesText)
	}
	cfg.Sources = []config.Source{{Topic: cfg.Topics.Input, Format: config.FormatAvro}}
	cfg.AlertsFormat = config.FormatAvro
	cfg.Registry.URL = reg.URL()
	cfg.Registry.Timeout = 2 * time.Second
	cfg.Registry.RetryBackoff = 20 * time.Millisecond
	cfg.Registry.RetryBackoffMax = 200 * time.Millisecond
	runProcessor(t, cfg, o, total, avroConverter(t))
	return cfg, reg
}

// wantAvroOutputs fails unless the fixture holds Avro alerts and dead
// letters of both Avro reasons (schema_unknown, decode_error): otherwise
// it would prove too little.
func wantAvroOutputs(t *testing.T, cfg config.Config, alertsTopic, dlqTopic string) {
	t.Helper()
	ctx := context.Background()
	as, err := ReadCommitted(ctx, cfg.Brokers, alertsTopic, 10*time.Second, nil)
	if err != nil || len(as) == 0 {
		t.Fatalf("%s: %d alerts, %v", alertsTopic, len(as), err)
	}
	if _, ok := avro.SchemaID(as[0].Value); !ok {
		t.Fatalf("%s holds no Avro alert: %q", alertsTopic, as[0].Value)
	}
	dlq, err := ReadCommitted(ctx, cfg.Brokers, dlqTopic, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, r := range dlq {
		reason, _ := lastHeader(r, pipeline.HeaderErrorReason)
		reasons[reason]++
	}
	if reasons["schema_unknown"] == 0 || reasons["decode_error"] == 0 {
		t.Fatalf("dead letters by reason %v: want schema_unknown and decode_error", reasons)
	}
}

// reencoded returns r's Avro alert decoded, changed by change and encoded
// again with the same schema id, as a new record for r's partition.
func reencoded(t *testing.T, reg *avrotest.Registry, r *kgo.Record, change func(*alerts.Alert)) *kgo.Record {
	t.Helper()
	a := decodeAvroAlert(t, reg, r.Value)
	change(&a)
	id, _ := avro.SchemaID(r.Value)
	return &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: avrotest.AlertValue(t, id, a), Headers: r.Headers}
}

// movedEvidence makes a an alert of its own (a new id, revision 0) whose
// first evidence sample names an offset that is not in the input.
func movedEvidence(a *alerts.Alert) {
	a.AlertID, a.Revision, a.Status, a.MergedInto = strings.Repeat("f", 32), 0, alerts.StatusOpen, ""
	a.Evidence[0].Offset += 1_000_000
}

func decodeAvroAlert(t *testing.T, reg *avrotest.Registry, value []byte) alerts.Alert {
	t.Helper()
	a, err := avrotest.DecodeAlert(t, reg.Cache(t), value)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func produce(t *testing.T, cfg config.Config, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// A rules file over an Avro source with Avro alerts reconciles, with and
// without recomputation (schema_unknown and decode_error dead letters
// included); a registry that is down stops the run with an error naming
// it, not with violations; damaged Avro alerts are caught.
func TestReconcileAvroRulesFile(t *testing.T) {
	o := sim.Demo()
	o.Machines, o.Seed, o.EpisodeRate = 12, 3, 0.05
	o.OutageLength, o.OutageRate = 3*time.Minute, 0.002
	cfg, reg := avroProcessed(t, testRules, o, 6000)
	wantAvroOutputs(t, cfg, "vibration.alerts", "vibration.events.dlq")
	base := Options{Config: cfg, Timeout: 30 * time.Second}
	rec := base
	rec.Recompute = true
	rep := runOK(t, rec)
	t.Log("\n" + rep.String())
	if rep.InputRecords != 6000 || rep.DeadLetters == 0 || len(rep.Rules) != 4 {
		t.Fatalf("the fixture proves too little: %s", rep)
	}
	for _, rr := range rep.Rules {
		if rr.Alerts == 0 || rr.Checked == 0 {
			t.Errorf("rule %s: %d alert revisions, %d records checked: the fixture proves too little", rr.ID, rr.Alerts, rr.Checked)
		}
		if rr.Recomputed == rr.Repartitioned {
			t.Errorf("rule %s: recomputed %v, repartitioned %v", rr.ID, rr.Recomputed, rr.Repartitioned)
		}
	}
	runOK(t, base)

	t.Run("registry down", func(t *testing.T) {
		reg.SetDown(avrotest.Unavailable)
		defer reg.SetDown(avrotest.Up)
		testRegistryDown(t, rec, reg)
	})

	t.Run("tampered", func(t *testing.T) {
		ctx := context.Background()
		read := func(topic string) []*kgo.Record {
			recs, err := ReadCommitted(ctx, cfg.Brokers, topic, 10*time.Second, nil)
			if err != nil || len(recs) == 0 {
				t.Fatalf("%s: %d records, %v", topic, len(recs), err)
			}
			return recs
		}
		episode := read("vibration.episodes")[0]
		var sliding *kgo.Record
		for _, r := range read("vibration.alerts") {
			if decodeAvroAlert(t, reg, r.Value).RuleID == "vibration-high" {
				sliding = r
				break
			}
		}
		if sliding == nil {
			t.Fatal("no alert of vibration-high")
		}
		moved := reencoded(t, reg, sliding, movedEvidence)
		json := *episode
		jsonAlert := decodeAvroAlert(t, reg, episode.Value)
		v, err := jsonAlert.Encode()
		if err != nil {
			t.Fatal(err)
		}
		json.Value = v
		produce(t, cfg,
			&kgo.Record{Topic: episode.Topic, Partition: episode.Partition, Key: episode.Key, Value: episode.Value, Headers: episode.Headers}, // a doubled revision
			moved, // evidence not in the input
			&kgo.Record{Topic: json.Topic, Partition: json.Partition, Key: json.Key, Value: json.Value}, // a JSON alert on an Avro topic
		)
		rep, err := Run(ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK() {
			t.Fatal("a damaged topic set reconciled OK")
		}
		wantViolation(t, rep, "episode", "appears twice")
		wantViolation(t, rep, "episode", "differ from a recomputation")
		wantViolation(t, rep, "vibration-high", "is not in the input")
		if all := strings.Join(rep.Violations, "\n"); !strings.Contains(all, "topic vibration.episodes: alert") || !strings.Contains(all, "undecodable") {
			t.Errorf("the JSON value on the Avro alerts topic is not reported undecodable:\n%s", all)
		}
		t.Log("\n" + rep.String())
	})
}

// testRegistryDown: with the registry answering 503, reconcile (a new
// run: an empty schema cache) fails with an error naming the registry and
// the schema id, and reports nothing.
func testRegistryDown(t *testing.T, o Options, reg *avrotest.Registry) {
	t.Helper()
	rep, err := Run(context.Background(), o)
	if err == nil {
		t.Fatalf("the registry is down, yet reconcile reported:\n%s", rep)
	}
	if rep != nil {
		t.Errorf("a report with an error: %s", rep)
	}
	for _, want := range []string{reg.URL(), "schema id ", "unavailable"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	t.Log(err)
}

// The rule: block over an Avro source with Avro alerts reconciles with
// recomputation; a registry that is down stops the run; a doubled Avro
// revision and Avro evidence that is not in the input are caught.
func TestReconcileAvroLegacy(t *testing.T) {
	o := sim.Demo()
	o.Machines, o.Seed, o.EpisodeRate = 12, 1, 0.05
	o.OutageLength, o.OutageRate = 11*time.Minute, 0.004
	cfg, reg := avroProcessed(t, "", o, 6000)
	wantAvroOutputs(t, cfg, cfg.Topics.Alerts, cfg.Topics.DLQ)
	rec := Options{Config: cfg, Recompute: true, Timeout: 30 * time.Second}
	rep := runOK(t, rec)
	t.Log("\n" + rep.String())
	if rep.Alerts == 0 || rep.DeadLetters == 0 || rep.InputRecords != 6000 || !rep.Recomputed {
		t.Fatalf("the fixture proves too little: %s", rep)
	}

	t.Run("registry down", func(t *testing.T) {
		reg.SetDown(avrotest.Unavailable)
		defer reg.SetDown(avrotest.Up)
		testRegistryDown(t, rec, reg)
	})

	alertRecs, err := ReadCommitted(context.Background(), cfg.Brokers, cfg.Topics.Alerts, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	dup := alertRecs[0]
	last := alertRecs[len(alertRecs)-1]
	moved := reencoded(t, reg, last, movedEvidence)
	produce(t, cfg, &kgo.Record{Topic: dup.Topic, Partition: dup.Partition, Key: dup.Key, Value: dup.Value, Headers: dup.Headers}, moved)
	rep, err = Run(context.Background(), rec)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(rep.Violations, "\n")
	for _, want := range []string{"appears twice", "is not in the input", "differ from a recomputation"} {
		if !strings.Contains(all, want) {
			t.Errorf("violations do not mention %q:\n%s", want, all)
		}
	}
}
