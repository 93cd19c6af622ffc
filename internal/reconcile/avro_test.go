package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	hamba "github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/avro"
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
const eventWriter = `{"type":"record","name":"VibrationEvent","namespace":"com.acme.iot","fields":[
	{"name":"event_id","type":"string"},
	{"name":"machine_id","type":"string"},
	{"name":"sensor_id","type":"string"},
	{"name":"ts","type":["long","string"]},
	{"name":"seq","type":"long"},
	{"name":"value","type":"double"},
	{"name":"unit","type":"string"},
	{"name":"schema_version","type":"long"},
	{"name":"quality","type":"string"},
	{"name":"clock","type":["null","string"],"default":null}]}`

// unknownSchemaID is a schema id the registry does not know: its records
// are dead-lettered as schema_unknown.
const unknownSchemaID = 999

// fakeRegistry is a Confluent-API schema registry on 127.0.0.1 (GET
// /schemas/ids/{id}, POST /subjects/{subject}/versions) that can be taken
// down (HTTP 503).
type fakeRegistry struct {
	srv  *httptest.Server
	mu   sync.Mutex
	byID map[uint32]string
	ids  map[string]uint32
	down bool
}

func newFakeRegistry(t *testing.T) *fakeRegistry {
	t.Helper()
	f := &fakeRegistry{byID: map[uint32]string{}, ids: map[string]uint32{}}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeRegistry) register(schema string) uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.ids[schema]
	if !ok {
		id = uint32(len(f.ids) + 1)
		f.ids[schema], f.byID[id] = id, schema
	}
	return id
}

func (f *fakeRegistry) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func (f *fakeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error_code":50301,"message":"registry down for the test"}`)
		return
	}
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/schemas/ids/"):
		n, err := strconv.ParseUint(strings.TrimPrefix(r.URL.Path, "/schemas/ids/"), 10, 32)
		f.mu.Lock()
		s, ok := f.byID[uint32(n)]
		f.mu.Unlock()
		if err != nil || !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error_code":40403,"message":"Schema not found"}`)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"schema": s})
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/versions"):
		var body struct{ Schema string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"error_code":42201,"message":"invalid schema"}`)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]uint32{"id": f.register(body.Schema)})
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error_code":404,"message":"no such path"}`)
	}
}

// avroEvent is a producer's record of eventWriter.
type avroEvent struct {
	EventID       string  `avro:"event_id"`
	MachineID     string  `avro:"machine_id"`
	SensorID      string  `avro:"sensor_id"`
	TS            any     `avro:"ts"`
	Seq           int64   `avro:"seq"`
	Value         float64 `avro:"value"`
	Unit          string  `avro:"unit"`
	SchemaVersion int64   `avro:"schema_version"`
	Quality       string  `avro:"quality"`
	Clock         *string `avro:"clock"`
}

// avroConverter turns simulated JSON records into wire-format Avro of
// schema id 1; every 50th record gets the unknown schema id instead. A
// value that is not an object of the event's fields with Avro-compatible
// types (the simulator's poison records) keeps its bytes: decode_error.
func avroConverter(t *testing.T) func([]sim.Record) []sim.Record {
	writer, err := hamba.ParseWithCache(eventWriter, "", &hamba.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	api := hamba.Config{TagKey: "avro"}.Freeze()
	n := 0
	return func(recs []sim.Record) []sim.Record {
		for i, r := range recs {
			e, ok := toAvroEvent(r.Value)
			if !ok {
				continue
			}
			body, err := api.Marshal(writer, &e)
			if err != nil {
				t.Fatalf("encode %s: %v", r.Value, err)
			}
			id := uint32(1)
			if n++; n%50 == 0 {
				id = unknownSchemaID
			}
			recs[i].Value = append(avro.AppendHeader(nil, id), body...)
		}
		return recs
	}
}

func toAvroEvent(value []byte) (avroEvent, bool) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil {
		return avroEvent{}, false
	}
	str := func(k string) (string, bool) { s, ok := m[k].(string); return s, ok }
	integer := func(k string) (int64, bool) {
		n, ok := m[k].(json.Number)
		if !ok {
			return 0, false
		}
		v, err := n.Int64()
		return v, err == nil
	}
	var e avroEvent
	var ok [9]bool
	e.EventID, ok[0] = str("event_id")
	e.MachineID, ok[1] = str("machine_id")
	e.SensorID, ok[2] = str("sensor_id")
	e.Unit, ok[3] = str("unit")
	e.Quality, ok[4] = str("quality")
	if s, isStr := str("ts"); isStr {
		e.TS, ok[5] = s, true
	} else if v, isInt := integer("ts"); isInt {
		e.TS, ok[5] = v, true
	}
	e.Seq, ok[6] = integer("seq")
	if n, isNum := m["value"].(json.Number); isNum {
		v, err := n.Float64()
		e.Value, ok[7] = v, err == nil
	}
	e.SchemaVersion, ok[8] = integer("schema_version")
	for _, b := range ok {
		if !b {
			return avroEvent{}, false
		}
	}
	switch c := m["clock"].(type) {
	case string:
		e.Clock = &c
	case nil:
	default:
		return avroEvent{}, false
	}
	return e, true
}

// avroProcessed runs the processor with an Avro source and Avro alerts
// over total simulated records (the rules file rulesText, or the rule:
// block when empty) and returns its configuration and the registry.
func avroProcessed(t *testing.T, rulesText string, o sim.Options, total int) (config.Config, *fakeRegistry) {
	t.Helper()
	reg := newFakeRegistry(t)
	if id := reg.register(eventWriter); id != 1 {
		t.Fatalf("writer schema id %d, want 1", id)
	}
	cfg := kafkatest.Config(kafkatest.Cluster(t, 3, "vibration.events").ListenAddrs(), t.TempDir(), "avro")
	if rulesText != "" {
		cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", rulesText)
	}
	cfg.Sources = []config.Source{{Topic: cfg.Topics.Input, Format: config.FormatAvro}}
	cfg.AlertsFormat = config.FormatAvro
	cfg.Registry.URL = reg.srv.URL
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
func reencoded(t *testing.T, reg *fakeRegistry, r *kgo.Record, change func(*alerts.Alert)) *kgo.Record {
	t.Helper()
	a := decodeAvroAlert(t, reg, r.Value)
	change(&a)
	id, _ := avro.SchemaID(r.Value)
	enc, err := avro.NewAlertEncoder(id)
	if err != nil {
		t.Fatal(err)
	}
	v, err := enc.EncodeAlert(a)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: v, Headers: r.Headers}
}

// movedEvidence makes a an alert of its own (a new id, revision 0) whose
// first evidence sample names an offset that is not in the input.
func movedEvidence(a *alerts.Alert) {
	a.AlertID, a.Revision, a.Status, a.MergedInto = strings.Repeat("f", 32), 0, alerts.StatusOpen, ""
	a.Evidence[0].Offset += 1_000_000
}

func decodeAvroAlert(t *testing.T, reg *fakeRegistry, value []byte) alerts.Alert {
	t.Helper()
	client, err := avro.NewClient(avro.ClientOptions{URL: reg.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r, err := avro.NewRegistry(avro.RegistryOptions{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Prepare(context.Background(), [][]byte{value}); err != nil {
		t.Fatal(err)
	}
	dec, err := avro.NewAlertDecoder(r)
	if err != nil {
		t.Fatal(err)
	}
	a, err := dec.DecodeAlert(value)
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
		reg.setDown(true)
		defer reg.setDown(false)
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
func testRegistryDown(t *testing.T, o Options, reg *fakeRegistry) {
	t.Helper()
	rep, err := Run(context.Background(), o)
	if err == nil {
		t.Fatalf("the registry is down, yet reconcile reported:\n%s", rep)
	}
	if rep != nil {
		t.Errorf("a report with an error: %s", rep)
	}
	for _, want := range []string{reg.srv.URL, "schema id ", "unavailable"} {
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
		reg.setDown(true)
		defer reg.setDown(false)
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
