package consume

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	hamba "github.com/hamba/avro/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/avro/avrotest"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
)

// These tests run the processor with Avro sources (docs/AVRO.md) against
// the in-process cluster and a fake Confluent-API schema registry on
// 127.0.0.1, and compare what it committed with the reference: the same
// pipeline with the same Avro decoder over the same log, and, for alerts,
// the JSON pipeline over the JSON equivalent of the log.

// Writer schemas of the producers. v2 adds a field with a default and the
// optional clock; v3 adds one more defaulted field (the schema the
// processor has not seen when the registry goes down).
var (
	writerV1 = avrotest.EventWriter()
	writerV2 = avrotest.EventWriter(avrotest.ClockField, avrotest.StringField("gateway", "gw-0"))
	writerV3 = avrotest.EventWriter(avrotest.ClockField, avrotest.StringField("gateway", "gw-0"), avrotest.StringField("site", "plant-1"))
)

// unknownID is a schema id the registry does not know.
const unknownID = 999

// encoder turns simulator records into wire-format Avro records.
type encoder struct {
	t       *testing.T
	schemas map[uint32]hamba.Schema
}

func newEncoder(t *testing.T, ids map[uint32]string) *encoder {
	e := &encoder{t: t, schemas: map[uint32]hamba.Schema{}}
	for id, text := range ids {
		e.schemas[id] = avrotest.ParseSchema(t, text)
	}
	return e
}

// wire returns r with its value as Avro of schema id (unchanged when not
// convertible), and the JSON value it stands for.
func (e *encoder) wire(r sim.Record, id uint32) (sim.Record, []byte) {
	body, ok := avrotest.EventBody(e.t, e.schemas[id], r.Value)
	jsonValue := r.Value
	if ok {
		r.Value = avrotest.Wire(id, body)
	}
	return r, jsonValue
}

// produceAvro writes recs synchronously and appends them to log as the
// broker stored them, and the same records with the JSON values jsonVals
// to jsonLog (the JSON equivalent of the log, at the same offsets).
func produceAvro(t *testing.T, seeds []string, topic string, recs []sim.Record, jsonVals [][]byte, log, jsonLog pipeline.Log) {
	t.Helper()
	batch := kafkatest.Produce(t, seeds, topic, recs...)
	for i, r := range batch {
		in := pipeline.Input{Topic: topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, TimestampMs: r.Timestamp.UnixMilli()}
		log[r.Partition] = append(log[r.Partition], in)
		in.Value = jsonVals[i]
		jsonLog[r.Partition] = append(jsonLog[r.Partition], in)
	}
}

// headerText renders a record's headers for messages.
func headerText(r *kgo.Record) string {
	var b strings.Builder
	for _, h := range r.Headers {
		fmt.Fprintf(&b, "%s=%q ", h.Key, h.Value)
	}
	return b.String()
}

// startWith runs a processor with its metrics on reg.
func startWith(t *testing.T, cfg config.Config, o Options, reg *prometheus.Registry) *instance {
	t.Helper()
	met, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	o.Metrics = met
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		o.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	p, err := New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := p.Run(ctx)
		if err != nil {
			t.Logf("processor %s stopped: %v", cfg.InstanceID, err)
		}
		in.done <- err
	}()
	return in
}

// metricValue is the value of a gauge or counter without labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.Metric) == 0 {
			continue
		}
		m := mf.Metric[0]
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// committed returns the group's committed offsets of topic by partition.
func committed(t *testing.T, seeds []string, group, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), group)
	if err != nil {
		return nil
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			out[o.Partition] = o.At
		}
	})
	return out
}

func avroConfig(seeds []string, dir string, f *avrotest.Registry) config.Config {
	cfg := testConfig(seeds, dir, "avro")
	cfg.Sources = []config.Source{{Topic: cfg.Topics.Input, Format: config.FormatAvro}}
	cfg.Registry.URL = f.URL()
	cfg.Registry.Timeout = 2 * time.Second
	cfg.Registry.RetryBackoff = 20 * time.Millisecond
	cfg.Registry.RetryBackoffMax = 200 * time.Millisecond
	return cfg
}

// avroStage is the reference stage of cfg's rule with the Avro decoder,
// its registry prepared with every value of log.
func avroStage(t *testing.T, f *avrotest.Registry, cfg config.Config, log pipeline.Log) *pipeline.Stage {
	t.Helper()
	r, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	st, err := pipeline.NewRuleStage(r[0], pipeline.Options{MaxFutureSkewMs: cfg.Rule.MaxFutureSkew.Milliseconds(), Decoder: avroDecoder(t, f, log)})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// avroDecoder is an Avro decoder whose registry cache holds the writer
// schema of every value of log.
func avroDecoder(t *testing.T, f *avrotest.Registry, log pipeline.Log) event.Decoder {
	t.Helper()
	reg := f.Cache(t)
	var vals [][]byte
	for _, l := range log {
		for _, in := range l {
			vals = append(vals, in.Value)
		}
	}
	if err := reg.Prepare(context.Background(), vals); err != nil {
		t.Fatal(err)
	}
	dec, err := avro.NewDecoder(reg, avro.DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return dec
}

// jsonAlerts rewrites the Avro alert values of recs as their JSON (alerts
// decoded with the registered schema), so that they compare with a
// reference that writes JSON.
func jsonAlerts(t *testing.T, f *avrotest.Registry, alertsTopic string, recs []*kgo.Record) {
	t.Helper()
	reg := f.Cache(t)
	for _, r := range recs {
		if r.Topic != alertsTopic {
			continue
		}
		a, err := avrotest.DecodeAlert(t, reg, r.Value)
		if err != nil {
			t.Fatalf("alert at %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		if r.Value, err = a.Encode(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAvroSourceMatchesReference: Avro records of two writer schemas (v2
// adds a field with a default), records whose schema id the registry does
// not know, and records that are not Avro at all, with Avro alerts and
// aborted batches: the committed outputs equal the reference of the Avro
// pipeline exactly, the alerts equal those of the JSON pipeline over the
// JSON equivalent of the log, unknown ids are dead-lettered schema_unknown
// naming the id, the accounting balances, and the alert schema is
// registered under the alerts topic's subject.
func TestAvroSourceMatchesReference(t *testing.T) {
	f := avrotest.NewRegistry(t)
	v1 := f.Register("vibration.events-value", writerV1)
	v2 := f.Register("vibration.events-value", writerV2)
	seeds := newCluster(t)
	cfg := avroConfig(seeds, t.TempDir(), f)
	cfg.AlertsFormat = config.FormatAvro
	enc := newEncoder(t, map[uint32]string{v1: writerV1, v2: writerV2})

	recs := simRecords(14000, 11)
	log, jsonLog := pipeline.Log{}, pipeline.Log{}
	var unknown int
	convert := func(in []sim.Record) ([]sim.Record, [][]byte) {
		out := make([]sim.Record, len(in))
		js := make([][]byte, len(in))
		for i, r := range in {
			id := v1
			if i%2 == 1 {
				id = v2
			}
			out[i], js[i] = enc.wire(r, id)
			if i%397 == 5 { // a schema the registry does not know
				out[i].Value = avrotest.Wire(unknownID, out[i].Value[avro.HeaderSize:])
				js[i] = []byte(`{"not":"an event"}`) // dead-lettered in JSON too
				unknown++
			}
		}
		return out, js
	}
	n := 0
	abort := func() bool { n++; return n%5 == 0 }
	a, aj := convert(recs[:6000])
	produceAvro(t, seeds, cfg.Topics.Input, a, aj, log, jsonLog)
	in := start(t, cfg, Options{AbortBatch: abort})
	for i := 6000; i < len(recs); i += 1000 {
		b, bj := convert(recs[i : i+1000])
		produceAvro(t, seeds, cfg.Topics.Input, b, bj, log, jsonLog)
		time.Sleep(30 * time.Millisecond)
	}
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)

	if ids := f.SubjectIDs(cfg.Topics.Alerts + "-value"); len(ids) != 1 {
		t.Fatalf("subject %s-value has ids %v, want the alert schema once", cfg.Topics.Alerts, ids)
	}
	got := readAll(t, seeds, cfg.Topics.Alerts, cfg.Topics.DLQ, cfg.Topics.Late)
	jsonAlerts(t, f, cfg.Topics.Alerts, got)
	gotOut := outputsOf(cfg, got)

	want, wantAcct := avroStage(t, f, cfg, log).Reference(log)
	if want.Count(pipeline.Alert) == 0 || want.Count(pipeline.TooLate) == 0 {
		t.Fatalf("reference has %d alerts and %d too late: the fixture proves nothing", want.Count(pipeline.Alert), want.Count(pipeline.TooLate))
	}
	if d := pipeline.Diff(want, gotOut); d != "" {
		t.Fatalf("committed outputs differ from the Avro reference:\n%s", d)
	}
	jsonStage, err := pipeline.NewStage(cfg.Rule)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := jsonStage.Reference(jsonLog)
	if d := pipeline.Diff(pipeline.Outputs{pipeline.Alert: wantJSON[pipeline.Alert]}, pipeline.Outputs{pipeline.Alert: gotOut[pipeline.Alert]}); d != "" {
		t.Fatalf("alerts differ from those of the JSON equivalent:\n%s", d)
	}
	gotAcct := latestAccounting(t, seeds, cfg)
	for p, w := range wantAcct {
		if g := gotAcct[p]; g != w || !g.Balanced() || g.Records != int64(len(log[p])) {
			t.Errorf("partition %d accounting = %+v, want %+v", p, g, w)
		}
	}
	// The unknown ids: schema_unknown, naming the id.
	var schemaUnknown int
	for _, r := range got {
		if r.Topic != cfg.Topics.DLQ {
			continue
		}
		hs := map[string]string{}
		for _, h := range r.Headers {
			hs[h.Key] = string(h.Value)
		}
		if id, ok := avro.SchemaID(r.Value); ok && id == unknownID {
			schemaUnknown++
			if hs[pipeline.HeaderErrorReason] != "schema_unknown" || !strings.Contains(hs[pipeline.HeaderErrorDetail], "schema id 999") {
				t.Errorf("dead letter of schema id 999: reason %q detail %q", hs[pipeline.HeaderErrorReason], hs[pipeline.HeaderErrorDetail])
			}
		}
	}
	if schemaUnknown != unknown || unknown == 0 {
		t.Errorf("%d schema_unknown dead letters of id %d, want %d", schemaUnknown, unknownID, unknown)
	}
	t.Logf("%d alert revisions (Avro), %d dead letters (%d schema_unknown), %d too late; accounting %v",
		gotOut.Count(pipeline.Alert), gotOut.Count(pipeline.DeadLetter), schemaUnknown, gotOut.Count(pipeline.TooLate), gotAcct)
}

// TestRegistryOutagePausesPartition: the registry goes down (HTTP 503, or
// connections hung up) while records of a schema id the processor has not
// cached arrive on one partition. That partition pauses (gauge up, retries
// counted), nothing is dead-lettered for it and its offsets do not move,
// while the other partitions, whose ids are cached, keep going. Once the
// registry is back the partition resumes (gauge down) and every record is
// accounted for once: the outputs equal the reference (exactly_once) or
// contain it (at_least_once, where the abort that pauses may repeat
// outputs).
func TestRegistryOutagePausesPartition(t *testing.T) {
	for _, tc := range []struct {
		down avrotest.Mode
		mode string
	}{{avrotest.Unavailable, config.ExactlyOnce}, {avrotest.HangUp, config.AtLeastOnce}} {
		t.Run(string(tc.down)+"/"+tc.mode, func(t *testing.T) {
			f := avrotest.NewRegistry(t)
			v1 := f.Register("vibration.events-value", writerV1)
			v2 := f.Register("vibration.events-value", writerV2)
			v3 := f.Register("vibration.events-value", writerV3) // registered, never fetched before the outage
			seeds := newCluster(t)
			cfg := avroConfig(seeds, t.TempDir(), f)
			cfg.Mode = tc.mode
			enc := newEncoder(t, map[uint32]string{v1: writerV1, v2: writerV2, v3: writerV3})
			reg := prometheus.NewRegistry()

			recs := simRecords(9000, 21)
			log, jsonLog := pipeline.Log{}, pipeline.Log{}
			wire := func(in []sim.Record, id func(i int, r sim.Record) uint32) {
				out := make([]sim.Record, len(in))
				js := make([][]byte, len(in))
				for i, r := range in {
					out[i], js[i] = enc.wire(r, id(i, r))
				}
				produceAvro(t, seeds, cfg.Topics.Input, out, js, log, jsonLog)
			}
			alternate := func(i int, _ sim.Record) uint32 { return []uint32{v1, v2}[i%2] }
			wire(recs[:3000], alternate)
			in := startWith(t, cfg, Options{}, reg)
			waitConsumed(t, seeds, cfg, log)

			// The machines of one partition switch to v3 while the
			// registry is down.
			var heldPart int32 = -1
			keyPart := map[string]int32{}
			for p, l := range log {
				for _, r := range l {
					keyPart[string(r.Key)] = p
				}
			}
			heldPart = keyPart[string(recs[3000].Key)]
			before := map[int32]int{}
			for p, l := range log {
				before[p] = len(l)
			}
			f.SetDown(tc.down)
			wire(recs[3000:6000], func(i int, r sim.Record) uint32 {
				if p, ok := keyPart[string(r.Key)]; ok && p == heldPart {
					return v3
				}
				return alternate(i, r)
			})
			waitFor(t, "the partition to pause", 30*time.Second, func() bool {
				return metricValue(t, reg, "processor_registry_paused_partitions") == 1
			})
			waitFor(t, "retries with backoff", 30*time.Second, func() bool {
				return metricValue(t, reg, "processor_registry_retries_total") >= 3
			})
			// The other partitions keep going; the held one does not move.
			waitFor(t, "the other partitions to commit their records", 60*time.Second, func() bool {
				c := committed(t, seeds, cfg.GroupID, cfg.Topics.Input)
				for p, l := range log {
					if p != heldPart && c[p] < l[len(l)-1].Offset+1 {
						return false
					}
				}
				return true
			})
			if c := committed(t, seeds, cfg.GroupID, cfg.Topics.Input)[heldPart]; c > log[heldPart][before[heldPart]].Offset {
				t.Fatalf("partition %d committed offset %d, past its first record of schema v3 (offset %d)", heldPart, c, log[heldPart][before[heldPart]].Offset)
			}
			if got := metricValue(t, reg, "processor_registry_paused_partitions"); got != 1 {
				t.Fatalf("paused partitions = %v, want 1 (partition %d)", got, heldPart)
			}
			first := log[heldPart][before[heldPart]].Offset
			for _, r := range readAll(t, seeds, cfg.Topics.DLQ) {
				hs := map[string]string{}
				for _, h := range r.Headers {
					hs[h.Key] = string(h.Value)
				}
				off, _ := strconv.ParseInt(hs[pipeline.HeaderSourceOffset], 10, 64)
				if hs[pipeline.HeaderSourcePartition] == strconv.Itoa(int(heldPart)) && off >= first {
					t.Fatalf("a record of the paused partition %d was dead-lettered during the outage: %s", heldPart, headerText(r))
				}
			}

			f.SetDown(avrotest.Up)
			wire(recs[6000:], alternate)
			waitConsumed(t, seeds, cfg, log)
			waitFor(t, "the partition to resume", 30*time.Second, func() bool {
				return metricValue(t, reg, "processor_registry_paused_partitions") == 0
			})
			in.stop(t)
			if metricValue(t, reg, "processor_registry_pauses_total") < 1 {
				t.Fatal("no pause counted")
			}

			got := readAll(t, seeds, cfg.Topics.Alerts, cfg.Topics.DLQ, cfg.Topics.Late)
			for _, r := range got {
				if id, ok := avro.SchemaID(r.Value); r.Topic == cfg.Topics.DLQ && ok && id == v3 &&
					(strings.Contains(headerText(r), "schema_unknown") || strings.Contains(headerText(r), "decode_error")) {
					t.Fatalf("a record of schema v3 was dead-lettered for its schema: %s", headerText(r))
				}
			}
			gotOut := outputsOf(cfg, got)
			want, wantAcct := avroStage(t, f, cfg, log).Reference(log)
			if want.Count(pipeline.Alert) == 0 || want.Count(pipeline.DeadLetter) == 0 {
				t.Fatalf("reference has %d alerts and %d dead letters: the fixture proves nothing", want.Count(pipeline.Alert), want.Count(pipeline.DeadLetter))
			}
			if tc.mode == config.ExactlyOnce {
				if d := pipeline.Diff(want, gotOut); d != "" {
					t.Fatalf("committed outputs differ from the reference:\n%s", d)
				}
			} else {
				for kind, byKey := range want {
					for key, recs := range byKey {
						have := map[string]int{}
						for _, r := range gotOut[kind][key] {
							have[r]++
						}
						for _, r := range recs {
							if have[r] == 0 {
								t.Fatalf("kind %d key %q: a reference output is missing: %.200q", kind, key, r)
							}
						}
					}
				}
			}
			gotAcct := latestAccounting(t, seeds, cfg)
			for p, w := range wantAcct {
				if g := gotAcct[p]; g != w || !g.Balanced() || g.Records != int64(len(log[p])) {
					t.Errorf("partition %d accounting = %+v, want %+v", p, g, w)
				}
			}
			t.Logf("partition %d paused; %v retries; %d alert revisions, %d dead letters; accounting %v", heldPart,
				metricValue(t, reg, "processor_registry_retries_total"), gotOut.Count(pipeline.Alert), gotOut.Count(pipeline.DeadLetter), gotAcct)
		})
	}
}

// TestAlertSchemaRegistrationAtStartup: a registry that refuses the alert
// schema (409, incompatible) stops start-up with a message naming the
// subject; one that stays unavailable stops it after startup_timeout.
func TestAlertSchemaRegistrationAtStartup(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(f *avrotest.Registry)
		want []string
	}{
		{"incompatible", func(f *avrotest.Registry) { f.Refuse(http.StatusConflict) }, []string{"refused the alert schema", "vibration.alerts-value", "409"}},
		{"unavailable", func(f *avrotest.Registry) { f.SetDown(avrotest.Unavailable) }, []string{"stayed unavailable", "vibration.alerts-value", "startup_timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := avrotest.NewRegistry(t)
			tc.set(f)
			seeds := newCluster(t)
			cfg := avroConfig(seeds, t.TempDir(), f)
			cfg.AlertsFormat = config.FormatAvro
			cfg.StartupTimeout = 2 * time.Second
			in := startWith(t, cfg, Options{}, prometheus.NewRegistry())
			select {
			case err := <-in.done:
				if err == nil {
					t.Fatal("start-up succeeded")
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
			case <-time.After(30 * time.Second):
				in.cancel()
				t.Fatal("start-up did not fail")
			}
		})
	}
}

// TestLocalSchemaSources: without a registry, a local .avsc serves wire
// format values (any schema id, or only schema_id) and bare Avro bodies.
func TestLocalSchemaSources(t *testing.T) {
	dir := t.TempDir()
	avsc := filepath.Join(dir, "event.avsc")
	if err := os.WriteFile(avsc, []byte(writerV2), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		src     config.AvroSource
		id      uint32 // header id written; 0: bare
		unknown bool   // records of another id are schema_unknown
	}{
		{"wire any id", config.AvroSource{SchemaFile: avsc}, 42, false},
		{"wire one id", config.AvroSource{SchemaFile: avsc, SchemaID: 7}, 7, true},
		{"bare", config.AvroSource{SchemaFile: avsc, Framing: config.FramingBare}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seeds := newCluster(t)
			cfg := testConfig(seeds, t.TempDir(), "local")
			cfg.Sources = []config.Source{{Topic: cfg.Topics.Input, Format: config.FormatAvro, Avro: tc.src}}
			w := avrotest.ParseSchema(t, writerV2)
			recs := simRecords(3000, 31)
			var other int
			for i := range recs {
				body, ok := avrotest.EventBody(t, w, recs[i].Value)
				if !ok {
					continue
				}
				if tc.id != 0 {
					id := tc.id
					if tc.unknown && i%101 == 3 {
						id, other = tc.id+1, other+1
					}
					body = avrotest.Wire(id, body)
				}
				recs[i].Value = body
			}
			log := pipeline.Log{}
			produce(t, seeds, cfg.Topics.Input, recs, log)
			in := start(t, cfg, Options{})
			waitConsumed(t, seeds, cfg, log)
			in.stop(t)

			var d event.Decoder
			if tc.id == 0 {
				bd, err := avro.NewBareDecoder(w, avro.DecoderOptions{})
				if err != nil {
					t.Fatal(err)
				}
				d = bd
			} else {
				ld, err := avro.NewDecoder(avro.NewLocalSource(w, uint32(tc.src.SchemaID)), avro.DecoderOptions{})
				if err != nil {
					t.Fatal(err)
				}
				d = ld
			}
			rs, err := cfg.Rules()
			if err != nil {
				t.Fatal(err)
			}
			st, err := pipeline.NewRuleStage(rs[0], pipeline.Options{MaxFutureSkewMs: cfg.Rule.MaxFutureSkew.Milliseconds(), Decoder: d})
			if err != nil {
				t.Fatal(err)
			}
			want, wantAcct := st.Reference(log)
			got := outputsOf(cfg, readAll(t, seeds, cfg.Topics.Alerts, cfg.Topics.DLQ, cfg.Topics.Late))
			if want.Count(pipeline.Alert) == 0 {
				t.Fatal("no alert in the reference")
			}
			if d := pipeline.Diff(want, got); d != "" {
				t.Fatalf("outputs differ from the reference:\n%s", d)
			}
			for p, w := range wantAcct {
				if g := latestAccounting(t, seeds, cfg)[p]; g != w || !g.Balanced() {
					t.Errorf("partition %d accounting = %+v, want %+v", p, g, w)
				}
			}
			if tc.unknown && other == 0 {
				t.Fatal("no record of another schema id")
			}
		})
	}
}

// avroRules: the vibration rule, an average over tumbling windows and a
// per-sensor maximum repartitioned by sensor_id, all over one Avro source,
// with Avro alerts on three alerts topics.
const avroRules = "rules:\n" + ruleVibrationHigh + ruleVibrationAvg + ruleSensorPeak

// TestAvroSeveralRules: several rules over one Avro source, one of them
// repartitioned (its repartition topic carries the Avro values, decoded
// there with the source's format), with Avro alerts: the alert schema is
// registered under each alerts topic's subject, the in-place rules' alerts
// equal their references, and the repartitioned rule's alerts carry
// key_field, key and aggregate (alert schema version 2).
func TestAvroSeveralRules(t *testing.T) {
	f := avrotest.NewRegistry(t)
	v1 := f.Register("vibration.events-value", writerV1)
	v2 := f.Register("vibration.events-value", writerV2)
	seeds := newCluster(t)
	cfg := avroConfig(seeds, t.TempDir(), f)
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", avroRules)
	cfg.AlertsFormat = config.FormatAvro
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	enc := newEncoder(t, map[uint32]string{v1: writerV1, v2: writerV2})
	o := sim.Demo()
	o.Machines, o.Seed, o.EpisodeRate, o.OutageRate = 12, 6, 0.05, 0
	line := sim.New(o)
	recs := make([]sim.Record, 6000)
	js := make([][]byte, len(recs))
	for i := range recs {
		recs[i], js[i] = enc.wire(line.Next(), []uint32{v1, v2}[i%2])
	}
	log, jsonLog := pipeline.Log{}, pipeline.Log{}
	produceAvro(t, seeds, cfg.Topics.Input, recs[:3000], js[:3000], log, jsonLog)
	in := start(t, cfg, Options{})
	produceAvro(t, seeds, cfg.Topics.Input, recs[3000:], js[3000:], log, jsonLog)
	waitConsumed(t, seeds, cfg, log)
	waitRepartitioned(t, seeds, cfg.GroupID, cfg.RepartitionFor(rs[2]))
	in.stop(t)

	for _, topic := range []string{"vibration.alerts", "vibration.avg.alerts", "vibration.peak.alerts"} {
		if ids := f.SubjectIDs(topic + "-value"); len(ids) != 1 {
			t.Errorf("subject %s-value has ids %v, want the alert schema once", topic, ids)
		}
	}
	dec := avroDecoder(t, f, log)
	got := readAll(t, seeds, "vibration.alerts", "vibration.avg.alerts", "vibration.peak.alerts")
	for _, topic := range []string{"vibration.alerts", "vibration.avg.alerts", "vibration.peak.alerts"} {
		jsonAlerts(t, f, topic, got)
	}
	gotFP := fingerprints(got)
	for _, r := range rs[:2] {
		st, err := pipeline.NewRuleStage(r, pipeline.Options{Decoder: dec})
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
		if len(want) == 0 {
			t.Fatalf("rule %s: no alert in the reference", r.Rule.ID)
		}
		if topic := r.Rule.Outputs.Alerts; !slices.Equal(gotFP[topic], want) {
			t.Errorf("rule %s: %d alert revisions on %s, want %d (reference)", r.Rule.ID, len(gotFP[topic]), topic, len(want))
		}
	}
	var peaks int
	for _, r := range got {
		if r.Topic != "vibration.peak.alerts" {
			continue
		}
		a, err := alerts.Decode(r.Value) // the JSON of the Avro alert
		if err != nil {
			t.Fatal(err)
		}
		if a.KeyField != "sensor_id" || a.Key != string(r.Key) || a.Aggregate == nil || a.Aggregate.Fn != "max" {
			t.Fatalf("peak alert: key_field %q key %q (record key %q) aggregate %+v", a.KeyField, a.Key, r.Key, a.Aggregate)
		}
		peaks++
	}
	if peaks == 0 {
		t.Fatal("no alert of the repartitioned rule")
	}
	t.Logf("alert revisions: %d vibration, %d avg, %d peak", len(gotFP["vibration.alerts"]), len(gotFP["vibration.avg.alerts"]), peaks)
}

// New refuses sources that no rule reads and local schemas that cannot be
// read as events, at start-up rather than record by record.
func TestNewRefusesBadSources(t *testing.T) {
	dir := t.TempDir()
	notEvent := filepath.Join(dir, "other.avsc")
	if err := os.WriteFile(notEvent, []byte(`{"type":"record","name":"X","fields":[{"name":"a","type":"string"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src  config.Source
		want string
	}{
		{config.Source{Topic: "typo.events", Format: config.FormatAvro}, `sources[0].topic = "typo.events" is not the source of any rule`},
		{config.Source{Topic: "vibration.events", Format: config.FormatAvro, Avro: config.AvroSource{SchemaFile: notEvent}}, "sources[0].avro.schema_file"},
	} {
		cfg := testConfig([]string{"127.0.0.1:1"}, t.TempDir(), "x")
		cfg.Sources = []config.Source{tc.src}
		cfg.Registry.URL = "http://127.0.0.1:1"
		met, err := metrics.New(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(cfg, Options{Metrics: met})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.src, err, tc.want)
		}
	}
}

// In at_least_once mode a poll that holds one partition back (its schema
// cannot be fetched) aborts the open batch, and every partition of that
// poll must be rewound, also one whose records could be prepared and that
// the group never committed before: the session's own rewind (to the
// committed offsets) leaves it out, and its polled records were once
// skipped. Here partition 2 commits first (caching schema v1); then, with
// the registry down, partition 0 gets records of schema v3 (held) and
// partition 1, never committed, records of v1, in the same polls.
func TestAtLeastOnceHoldBackRewindsEveryPolledPartition(t *testing.T) {
	f := avrotest.NewRegistry(t)
	v1 := f.Register("vibration.events-value", writerV1)
	v3 := f.Register("vibration.events-value", writerV3)
	seeds := newCluster(t)
	cfg := avroConfig(seeds, t.TempDir(), f)
	cfg.Mode = config.AtLeastOnce
	enc := newEncoder(t, map[uint32]string{v1: writerV1, v3: writerV3})
	hash := kgo.StickyKeyPartitioner(nil).ForTopic(cfg.Topics.Input)
	byPart := map[int][]sim.Record{}
	for _, r := range simRecords(9000, 41) {
		if len(r.Key) > 0 {
			p := hash.Partition(&kgo.Record{Key: r.Key}, testPartitions)
			byPart[p] = append(byPart[p], r)
		}
	}
	log, jsonLog := pipeline.Log{}, pipeline.Log{}
	wire := func(recs []sim.Record, id uint32) {
		out, js := make([]sim.Record, len(recs)), make([][]byte, len(recs))
		for i, r := range recs {
			out[i], js[i] = enc.wire(r, id)
		}
		produceAvro(t, seeds, cfg.Topics.Input, out, js, log, jsonLog)
	}
	wire(byPart[2], v1)
	reg := prometheus.NewRegistry()
	in := startWith(t, cfg, Options{}, reg)
	waitConsumed(t, seeds, cfg, log)

	f.SetDown(avrotest.Unavailable)
	var both []sim.Record
	var ids []uint32
	// Few records, so that one poll (500 records at most) holds both
	// partitions' records when one fetch does.
	for i := 0; i < 60; i++ {
		if i < len(byPart[0]) {
			both, ids = append(both, byPart[0][i]), append(ids, v3)
		}
		if i < len(byPart[1]) {
			both, ids = append(both, byPart[1][i]), append(ids, v1)
		}
	}
	out, js := make([]sim.Record, len(both)), make([][]byte, len(both))
	for i, r := range both {
		out[i], js[i] = enc.wire(r, ids[i])
	}
	produceAvro(t, seeds, cfg.Topics.Input, out, js, log, jsonLog)
	waitFor(t, "partition 0 to pause", 30*time.Second, func() bool {
		return metricValue(t, reg, "processor_registry_paused_partitions") >= 1
	})
	waitFor(t, "retries with backoff", 30*time.Second, func() bool {
		return metricValue(t, reg, "processor_registry_retries_total") >= 3
	})
	f.SetDown(avrotest.Up)
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)

	acct := latestAccounting(t, seeds, cfg)
	for p, recs := range log {
		if g := acct[p]; g.Records != int64(len(recs)) || !g.Balanced() {
			t.Errorf("partition %d: accounting %+v, want %d records (a record skipped or counted twice)", p, g, len(recs))
		}
	}
	if len(log) != testPartitions {
		t.Fatalf("records on %d partitions, want %d: the fixture proves nothing", len(log), testPartitions)
	}
}

// A registry.url that is not a registry API's base URL (a wrong prefix:
// GET /subjects answers 404) stops the processor at start-up with the
// reason, rather than making every lookup "not found" and every Avro
// record a dead letter.
func TestWrongRegistryBaseURLFailsStartUp(t *testing.T) {
	f := avrotest.NewRegistry(t)
	f.Register("vibration.events-value", writerV1)
	seeds := newCluster(t)
	cfg := avroConfig(seeds, t.TempDir(), f)
	cfg.Registry.URL = f.URL() + "/wrong-prefix"
	in := start(t, cfg, Options{})
	select {
	case err := <-in.done:
		if err == nil || !strings.Contains(err.Error(), "not the base URL of a schema registry API") {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(30 * time.Second):
		in.cancel()
		t.Fatal("the processor started with a wrong registry base URL")
	}
}
