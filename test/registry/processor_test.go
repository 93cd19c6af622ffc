package registry

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/test/e2e/harness"
)

// The processor binary end to end with a real schema registry and a real
// Kafka broker: Avro input of two writer schemas, Avro alerts (one
// deployment) and JSON alerts (another, the default), a schema_unknown dead
// letter, and a registry outage during which records of a schema id the
// processor never fetched arrive: the partitions pause, nothing is
// dead-lettered, and once the registry is back every record is processed
// and accounted for once.

const (
	e2eMachines = 9
	// unknownSchemaID is never registered: its record is schema_unknown.
	unknownSchemaID = 987653
)

// e2eT0 is the event time of the first second of the fixture.
var e2eT0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// eventV3 is eventV2 plus one more defaulted field: the version the
// producers switch to while the registry is down.
func eventV3(t *testing.T) string {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal([]byte(eventV2(t)), &s); err != nil {
		t.Fatal(err)
	}
	s["fields"] = append(s["fields"].([]any), map[string]any{"name": "site", "type": "string", "default": "plant-1"})
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fixture returns one record per machine per second for the seconds
// [from, to): a high-vibration episode (three events of 8 mm/s within five
// seconds) every five minutes per machine, 2 mm/s otherwise.
func fixture(t *testing.T, from, to int, schema func(sec, m int) (string, uint32)) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for sec := from; sec < to; sec++ {
		for m := range e2eMachines {
			ts := e2eT0.Add(time.Duration(sec) * time.Second)
			value := 2.0
			if phase := (sec + 37*m) % 300; phase == 10 || phase == 12 || phase == 14 {
				value = 8.0
			}
			text, id := schema(sec, m)
			machine := fmt.Sprintf("M-%d", m)
			rec := record{EventID: fmt.Sprintf("ev-%d-%d", m, sec), MachineID: machine, SensorID: fmt.Sprintf("S-%d", m),
				TS: ts, Seq: int64(sec), Value: value, Unit: "mm/s", SchemaVersion: 1, Quality: "good", Gateway: "gw-1"}
			out = append(out, &kgo.Record{Key: []byte(machine), Value: produce(t, text, id, rec), Timestamp: ts.Add(50 * time.Millisecond)})
		}
	}
	return out
}

func produceSync(t *testing.T, seeds []string, topic string, recs []*kgo.Record) {
	t.Helper()
	cl := harness.NewClient(t, seeds, kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// e2eProc is one processor process.
type e2eProc struct {
	name, log, metrics string
	cmd                *exec.Cmd
	exited             chan struct{}
	err                error
}

// deployment is one consumer group of the processor over the input topic
// with its own output topics.
type deployment struct {
	name, group, alerts, dlq, late, changelog string
	proc                                      *e2eProc
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startDeployment writes the deployment's YAML configuration (sources
// and the registry can only be set in the file) and starts the binary.
func startDeployment(t *testing.T, seeds []string, input, regURL, alertsFormat, name string) *deployment {
	t.Helper()
	d := &deployment{
		name:      name,
		group:     harness.UniqueName("avro-e2e-" + name),
		alerts:    harness.UniqueName("avro-e2e-" + name + ".alerts"),
		dlq:       harness.UniqueName("avro-e2e-" + name + ".dlq"),
		late:      harness.UniqueName("avro-e2e-" + name + ".late"),
		changelog: harness.UniqueName("avro-e2e-" + name + ".changelog"),
	}
	dir := t.TempDir()
	metricsAddr := freeAddr(t)
	cfg := fmt.Sprintf(`brokers: [%s]
group_id: %s
instance_id: %s-0
state_dir: %s
commit_interval: 100ms
session_timeout: 6s
startup_timeout: 60s
metrics_addr: %s
topics:
  input: %s
  alerts: %s
  dlq: %s
  late: %s
  changelog: %s
sources:
  - topic: %s
    format: avro
alerts_format: %s
registry:
  url: %s
  timeout: 2s
  retry_backoff: 200ms
  retry_backoff_max: 2s
`, strings.Join(seeds, ", "), d.group, name, filepath.Join(dir, "state"), metricsAddr,
		input, d.alerts, d.dlq, d.late, d.changelog, input, alertsFormat, regURL)
	cfgPath := filepath.Join(dir, "processor.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(harness.BuildBinary(t), "run", "--config", cfgPath)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PROCESSOR_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &e2eProc{name: name, log: logPath, metrics: "http://" + metricsAddr + "/metrics", cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	d.proc = p
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		adm := kadm.NewClient(cl)
		_, _ = adm.DeleteTopics(ctx, d.alerts, d.dlq, d.late, d.changelog)
		_, _ = adm.DeleteGroup(ctx, d.group)
	})
	return d
}

// tail returns the last n lines of the process log.
func (p *e2eProc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (p *e2eProc) alive(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("processor %s exited (%v); log tail:\n%s", p.name, p.err, p.tail(30))
	default:
	}
}

// stop sends SIGTERM and requires exit code 0.
func (p *e2eProc) stop(t *testing.T) {
	t.Helper()
	p.alive(t)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(40 * time.Second):
		t.Fatalf("processor %s did not stop within 40s of SIGTERM; log tail:\n%s", p.name, p.tail(30))
	}
	if p.err != nil {
		t.Fatalf("processor %s stopped with %v; log tail:\n%s", p.name, p.err, p.tail(30))
	}
}

// metric scrapes /metrics for an unlabelled series (-1: not there yet).
func (p *e2eProc) metric(name string) float64 {
	resp, err := http.Get(p.metrics)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// committedOffsets returns the group's committed offsets of topic.
func committedOffsets(t *testing.T, seeds []string, group, topic string) map[int32]int64 {
	t.Helper()
	adm := harness.NewAdmin(t, seeds)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, group)
	out := map[int32]int64{}
	if err != nil {
		return out
	}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

func endOffsets(t *testing.T, seeds []string, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := harness.NewAdmin(t, seeds).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

func waitUntil(t *testing.T, what string, timeout time.Duration, ds []*deployment, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, d := range ds {
			d.proc.alive(t)
		}
		if time.Now().After(deadline) {
			var tails strings.Builder
			for _, d := range ds {
				fmt.Fprintf(&tails, "\n--- %s:\n%s", d.name, d.proc.tail(20))
			}
			t.Fatalf("timed out after %s waiting for %s%s", timeout, what, tails.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// allCommitted reports whether d's group committed every input record.
func allCommitted(t *testing.T, seeds []string, d *deployment, input string, ends map[int32]int64) bool {
	c := committedOffsets(t, seeds, d.group, input)
	for p, end := range ends {
		if end > 0 && c[p] < end {
			return false
		}
	}
	return true
}

// outageControls returns the URL the processors use and the functions
// that take the registry down and bring it back: the real registry stopped
// with scripts/registry.sh --keep down and started again when this test
// binary manages it, else a TCP proxy in front of REGISTRY_URL closed and
// opened again.
func outageControls(t *testing.T) (string, func(), func()) {
	t.Helper()
	if managed {
		down := func() {
			if out, err := registryScript("--keep", "down"); err != nil {
				t.Fatalf("scripts/registry.sh --keep down: %v\n%s", err, out)
			}
		}
		up := func() {
			start := time.Now()
			out, err := registryScript("up")
			if err != nil {
				t.Fatalf("scripts/registry.sh up: %v\n%s", err, out)
			}
			if got := lastLine(out); got != registryURL {
				t.Fatalf("registry restarted at %q, want %q", got, registryURL)
			}
			t.Logf("registry restarted in %s", time.Since(start).Round(100*time.Millisecond))
		}
		return registryURL, down, up
	}
	t.Logf("registry at REGISTRY_URL: the outage is a TCP proxy in front of it, closed and opened again")
	u, err := url.Parse(registryURL)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, u.Host)
	return "http://" + p.addr + u.Path, p.close, func() { p.reopen(t) }
}

// TestProcessorEndToEnd runs the processor binary twice over one Avro input
// topic on the real broker and the real registry (see the package doc).
func TestProcessorEndToEnd(t *testing.T) {
	seeds := harness.Bootstrap(t)
	// The records' timestamps are fixed dates, older than the broker's
	// default 7-day retention by the time the test runs: without
	// retention.ms=-1 the broker's retention check could delete the input
	// in the middle of the test.
	input := harness.NewTopic(t, seeds, harness.UniqueName("avro-e2e.events"), 3, map[string]*string{"retention.ms": kadm.StringPtr("-1")})
	subject := avro.TopicValueSubject(input)
	v1 := register(t, subject, eventV1())
	v2 := register(t, subject, eventV2(t))
	v3 := register(t, subject, eventV3(t)) // registered now, used only while the registry is down
	regURL, registryDown, registryUp := outageControls(t)
	texts := map[uint32]string{v1: eventV1(), v2: eventV2(t), v3: eventV3(t)}
	alternate := func(sec, m int) (string, uint32) {
		id := []uint32{v1, v2}[(sec+m)%2]
		return texts[id], id
	}

	// Phase 1: v1 and v2 records, and one of a schema id the registry
	// does not know.
	phase1 := fixture(t, 0, 600, alternate)
	unknown := fixture(t, 600, 601, func(int, int) (string, uint32) { return eventV1(), unknownSchemaID })[:1]
	produceSync(t, seeds, input, append(phase1, unknown...))
	avroAlerts := startDeployment(t, seeds, input, regURL, config.FormatAvro, "avro-alerts")
	jsonAlerts := startDeployment(t, seeds, input, regURL, config.FormatJSON, "json-alerts")
	ds := []*deployment{avroAlerts, jsonAlerts}
	ends1 := endOffsets(t, seeds, input)
	waitUntil(t, "phase 1 committed", 3*time.Minute, ds, func() bool {
		return allCommitted(t, seeds, avroAlerts, input, ends1) && allCommitted(t, seeds, jsonAlerts, input, ends1)
	})

	// Phase 2: the registry goes down; the producers switch to v3, which
	// neither processor has fetched.
	registryDown()
	phase2 := fixture(t, 601, 900, func(int, int) (string, uint32) { return texts[v3], v3 })
	produceSync(t, seeds, input, phase2)
	waitUntil(t, "the partitions to pause", 2*time.Minute, ds, func() bool {
		return avroAlerts.proc.metric("processor_registry_paused_partitions") >= 1 && jsonAlerts.proc.metric("processor_registry_paused_partitions") >= 1
	})
	waitUntil(t, "retries with backoff", time.Minute, ds, func() bool {
		return avroAlerts.proc.metric("processor_registry_retries_total") >= 2 && jsonAlerts.proc.metric("processor_registry_retries_total") >= 2
	})
	for _, d := range ds {
		c := committedOffsets(t, seeds, d.group, input)
		for p, end := range ends1 {
			if c[p] > end {
				t.Fatalf("%s: partition %d committed %d during the outage, past the records before it (%d)", d.name, p, c[p], end)
			}
		}
		if n := len(harness.ReadCommitted(t, seeds, d.dlq, 30*time.Second)); n != 1 {
			t.Fatalf("%s: %d dead letters during the outage, want only the schema_unknown one", d.name, n)
		}
		t.Logf("%s during the outage: %v partitions paused, %v retries", d.name,
			d.proc.metric("processor_registry_paused_partitions"), d.proc.metric("processor_registry_retries_total"))
	}

	// Phase 3: the registry is back: the paused partitions resume.
	registryUp()
	phase3 := fixture(t, 900, 1200, alternate)
	produceSync(t, seeds, input, phase3)
	ends := endOffsets(t, seeds, input)
	waitUntil(t, "every record committed", 3*time.Minute, ds, func() bool {
		return allCommitted(t, seeds, avroAlerts, input, ends) && allCommitted(t, seeds, jsonAlerts, input, ends)
	})
	waitUntil(t, "the partitions to resume", time.Minute, ds, func() bool {
		return avroAlerts.proc.metric("processor_registry_paused_partitions") == 0 && jsonAlerts.proc.metric("processor_registry_paused_partitions") == 0
	})
	for _, d := range ds {
		pauses := d.proc.metric("processor_registry_pauses_total")
		if pauses < 1 {
			t.Errorf("%s: processor_registry_pauses_total = %v, want >= 1", d.name, pauses)
		}
		d.proc.stop(t)
		// One log line per change of state, never one per retry or record.
		b, err := os.ReadFile(d.proc.log)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		msgs := func(prefix string) int { return strings.Count(text, `"msg":"`+prefix) }
		paused, resumed := msgs("consume: partition paused"), msgs("consume: partition resumed")
		down, back := msgs("avro: schema registry unavailable"), msgs("avro: schema registry available again")
		if testing.Verbose() {
			for _, l := range strings.Split(text, "\n") {
				if strings.Contains(l, `"msg":"consume: partition`) || strings.Contains(l, `"msg":"avro: schema registry`) ||
					strings.Contains(l, `"msg":"consume: alert schema`) || strings.Contains(l, `"msg":"consume: batch aborted`) {
					t.Logf("%s: %s", d.name, l)
				}
			}
		}
		if paused != int(pauses) || resumed != paused || down != 1 || back != 1 {
			t.Errorf("%s: log lines: %d paused (metric %v), %d resumed, %d registry unavailable, %d available again; want one per change of state",
				d.name, paused, pauses, resumed, down, back)
		}
	}

	// The reference: the pipeline with the Avro decoder over the input as
	// the broker stored it.
	log := pipeline.Log{}
	for _, r := range harness.ReadCommitted(t, seeds, input, time.Minute) {
		log[r.Partition] = append(log[r.Partition], pipeline.Input{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
			Key: r.Key, Value: r.Value, TimestampMs: r.Timestamp.UnixMilli()})
	}
	total := 0
	for _, l := range log {
		total += len(l)
	}
	if want := len(phase1) + 1 + len(phase2) + len(phase3); total != want {
		t.Fatalf("input has %d records, want %d", total, want)
	}
	cache := newRegistry(t, registryURL)
	var vals [][]byte
	for _, l := range log {
		for _, in := range l {
			vals = append(vals, in.Value)
		}
	}
	if err := cache.Prepare(t.Context(), vals); err != nil {
		t.Fatal(err)
	}
	dec, err := avro.NewDecoder(cache, avro.DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	stage, err := pipeline.NewRuleStage(rs[0], pipeline.Options{MaxFutureSkewMs: cfg.Rule.MaxFutureSkew.Milliseconds(), Decoder: dec})
	if err != nil {
		t.Fatal(err)
	}
	want, wantAcct := stage.Reference(log)
	if want.Count(pipeline.Alert) == 0 || want.Count(pipeline.DeadLetter) != 1 {
		t.Fatalf("the reference has %d alert revisions and %d dead letters, want some and 1", want.Count(pipeline.Alert), want.Count(pipeline.DeadLetter))
	}
	alertDec, err := avro.NewAlertDecoder(cache)
	if err != nil {
		t.Fatal(err)
	}

	for _, d := range ds {
		got := pipeline.Outputs{}
		for kind, topic := range map[pipeline.Kind]string{pipeline.Alert: d.alerts, pipeline.DeadLetter: d.dlq, pipeline.TooLate: d.late} {
			for _, r := range harness.ReadCommitted(t, seeds, topic, time.Minute) {
				v := r.Value
				if kind == pipeline.Alert && d == avroAlerts {
					// Avro alerts, decoded with the schema registered under
					// the alerts topic's subject.
					if id, ok := avro.SchemaID(v); !ok || !containsID(t, avro.TopicValueSubject(d.alerts), id) {
						t.Fatalf("%s: alert value of schema id %d (%v), not one registered under %s-value", d.name, id, ok, d.alerts)
					}
					if err := cache.Prepare(t.Context(), [][]byte{v}); err != nil {
						t.Fatal(err)
					}
					a, err := alertDec.DecodeAlert(v)
					if err != nil {
						t.Fatalf("%s: %v", d.name, err)
					}
					if v, err = a.Encode(); err != nil {
						t.Fatal(err)
					}
				}
				hs := make([]pipeline.Header, len(r.Headers))
				for i, h := range r.Headers {
					hs[i] = pipeline.Header{Key: h.Key, Value: h.Value}
				}
				got.Add(kind, r.Key, v, hs)
				if kind == pipeline.DeadLetter {
					checkUnknownDeadLetter(t, d.name, r)
				}
			}
		}
		if diff := pipeline.Diff(want, got.Canonical()); diff != "" {
			t.Fatalf("%s: committed outputs differ from the reference:\n%s", d.name, diff)
		}
		acct := map[int32]pipeline.Accounting{}
		for _, r := range harness.ReadCommitted(t, seeds, d.changelog, time.Minute) {
			if string(r.Key) == "a" && r.Value != nil {
				a, err := consume.DecodeAccounting(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				acct[r.Partition] = a
			}
		}
		for p, w := range wantAcct {
			if g := acct[p]; g != w || !g.Balanced() || g.Records != int64(len(log[p])) {
				t.Errorf("%s: partition %d accounting %+v, want %+v (%d records)", d.name, p, g, w, len(log[p]))
			}
		}
		t.Logf("%s: %d alert revisions, %d dead letter, %d too late; accounting %v", d.name,
			got.Count(pipeline.Alert), got.Count(pipeline.DeadLetter), got.Count(pipeline.TooLate), acct)
	}
}

// containsID reports whether the registry lists id under subject.
func containsID(t *testing.T, subject string, id uint32) bool {
	t.Helper()
	status, body := api(t, "GET", "/subjects/"+subject+"/versions/latest", nil)
	var latest struct {
		ID uint32 `json:"id"`
	}
	if status != 200 || json.Unmarshal(body, &latest) != nil {
		t.Fatalf("latest of %s: HTTP %d %s", subject, status, body)
	}
	return latest.ID == id
}

// checkUnknownDeadLetter: the only dead letter is the record of the unknown
// schema id, schema_unknown, naming the id, with its original bytes.
func checkUnknownDeadLetter(t *testing.T, name string, r *kgo.Record) {
	t.Helper()
	hs := map[string]string{}
	for _, h := range r.Headers {
		hs[h.Key] = string(h.Value)
	}
	id, ok := avro.SchemaID(r.Value)
	if !ok || id != unknownSchemaID || hs[pipeline.HeaderErrorReason] != "schema_unknown" ||
		!strings.Contains(hs[pipeline.HeaderErrorDetail], strconv.Itoa(unknownSchemaID)) {
		t.Fatalf("%s: dead letter %v (schema id %d): want the record of schema id %d as schema_unknown naming the id", name, hs, id, unknownSchemaID)
	}
}
