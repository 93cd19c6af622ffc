package deliver

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/avro/avrotest"
	"github.com/vibeline/processor/schemas"
)

// alertSchemaID is the id of schemas/alert.avsc in the fake registry.
const alertSchemaID = 7

// newSchemaRegistry returns a fake schema registry (not serving) that has
// schemas/alert.avsc as alertSchemaID.
func newSchemaRegistry() *avrotest.Registry {
	f := avrotest.NewHandler()
	f.Add(alertSchemaID, schemas.Alert())
	return f
}

// avroDecode returns the Avro DecodeFunc over a registry client at url
// (httpClient nil: the client's own).
func avroDecode(t *testing.T, url string, httpClient *http.Client) DecodeFunc {
	t.Helper()
	reg := avrotest.NewCache(t, avro.ClientOptions{URL: url, Timeout: 2 * time.Second, HTTPClient: httpClient})
	dec, err := NewAvroDecoder(reg)
	if err != nil {
		t.Fatal(err)
	}
	return dec
}

// richAlert is a revision using every member of the format.
func richAlert(id string, rev int) alerts.Alert {
	return alerts.Alert{
		AlertID: id, Revision: rev, Status: alerts.StatusUpdated, RuleID: "sensor-peak", RuleVersion: 2, MachineID: "M-7",
		Start: 1767348000000, End: 1767348090000, Count: 2, KeyField: "sensor_id", Key: "S-7-3",
		Aggregate: &alerts.Aggregate{Fn: "max", Value: 12.5},
		Evidence: []alerts.Evidence{
			{EventID: "e-1", SensorID: "S-7-3", TS: 1767348000000, Value: 7.5, Partition: 3, Offset: 41},
			{EventID: "e-2", SensorID: "S-7-3", TS: 1767348090000, Value: 12.5, Partition: 3, Offset: 42},
		},
		Late: true, Watermark: 1767348060000, Reason: "2 high-vibration events on sensor S-7-3",
	}
}

// recorder is a sink that accepts everything and keeps the deliveries.
type recorder struct {
	name string
	mu   sync.Mutex
	got  []Delivery
	at   []time.Time
}

func (r *recorder) Name() string { return r.name }
func (r *recorder) Send(_ context.Context, d Delivery) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, d)
	r.at = append(r.at, time.Now())
	return nil
}

func (r *recorder) deliveries() ([]Delivery, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.got...), append([]time.Time(nil), r.at...)
}

// An Avro alert reaches a sink decoded, and a webhook receives its JSON
// encoding (not the Avro bytes), signed over exactly those bytes. The
// Service passes Options.Decode to every sink's lane.
func TestAvroAlertDeliveredAsJSON(t *testing.T) {
	fr := newSchemaRegistry()
	regSrv := httptest.NewServer(fr)
	defer regSrv.Close()
	type seen struct {
		ctype, key, sig string
		body            []byte
	}
	hooks := make(chan seen, 1)
	hookSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hooks <- seen{r.Header.Get("Content-Type"), r.Header.Get(HeaderIdempotencyKey), r.Header.Get(HeaderSignature), b}
	}))
	defer hookSrv.Close()
	const secret = "avro-hook-secret"
	sinks, err := NewSinks([]SinkConfig{{Type: TypeWebhook, Name: "hook", URL: hookSrv.URL, SecretEnv: "S"}},
		SinkOptions{LookupEnv: func(string) (string, bool) { return secret, true }})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{name: "rec"}
	svc, err := New(Default(), []Sink{rec, sinks[0]}, Options{
		Registerer: prometheus.NewRegistry(), Logger: quietLogger(), Decode: avroDecode(t, regSrv.URL, nil),
	})
	if err != nil {
		t.Fatal(err)
	}

	a := richAlert("fcbb6ffe4c70e9d58d7550aa08757d6c", 3)
	wantJSON, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	value := avrotest.AlertValue(t, alertSchemaID, a)
	r := Record{Topic: "vibration.alerts", Partition: 0, Offset: 0, Key: []byte("M-7"), Value: value, Timestamp: time.Now()}
	var dlq dlqLog
	for _, run := range svc.runners {
		if err := run.handle(context.Background(), r, dlq.write); err != nil {
			t.Fatal(err)
		}
	}
	if dls := dlq.all(); len(dls) != 0 {
		t.Fatalf("dead letters %+v", dls)
	}

	got, _ := rec.deliveries()
	if len(got) != 1 {
		t.Fatalf("%d deliveries to the recording sink, want 1", len(got))
	}
	d := got[0]
	if !reflect.DeepEqual(d.Alert, a) {
		t.Errorf("decoded alert\n%+v\nwant\n%+v", d.Alert, a)
	}
	if !bytes.Equal(d.Body, wantJSON) {
		t.Errorf("body %s, want the alert JSON %s", d.Body, wantJSON)
	}
	if !bytes.Equal(d.Record.Value, value) {
		t.Error("the delivery's record value is not the original Avro value")
	}
	if d.IdempotencyKey != "fcbb6ffe4c70e9d58d7550aa08757d6c-3" {
		t.Errorf("idempotency key %q", d.IdempotencyKey)
	}

	h := <-hooks
	if !bytes.Equal(h.body, wantJSON) || h.ctype != "application/json" {
		t.Errorf("webhook got %q (Content-Type %q), want the alert JSON %s", h.body, h.ctype, wantJSON)
	}
	want, _ := hex.DecodeString(Sign([]byte(secret), h.body))
	sig, err := hex.DecodeString(h.sig)
	if err != nil || !hmac.Equal(sig, want) {
		t.Errorf("signature %q does not verify over the received body", h.sig)
	}
	if h.key != d.IdempotencyKey {
		t.Errorf("Idempotency-Key %q", h.key)
	}
	if fetches := fr.Fetches(); fetches[alertSchemaID] != 1 {
		t.Errorf("schema id %d fetched %d times, want once (cached for every lane)", alertSchemaID, fetches[alertSchemaID])
	}
}

// countingHandler counts the log records whose message contains substr.
type countingHandler struct {
	substr string
	mu     *sync.Mutex
	n      *int
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.substr) {
		h.mu.Lock()
		*h.n++
		h.mu.Unlock()
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// The schema registry answers 503 for the first 2 minutes (virtual time):
// the lanes keep their head record, retry the decode with backoff (well
// past retry.max_attempts and retry.max_elapsed, which bound deliveries,
// not an unavailable registry), commit nothing, dead-letter nothing, and
// deliver every revision in order once the registry is back.
func TestAvroRegistryOutageWaitsNeverDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		const outage = 2 * time.Minute
		fr := newSchemaRegistry()
		fr.DownWhile(func() bool { return time.Since(start) < outage })
		pn := newPipeNet()
		srv := &http.Server{Handler: fr}
		go srv.Serve(pn)
		tr := &http.Transport{DialContext: pn.DialContext}
		dec := avroDecode(t, "http://registry:8081", &http.Client{Transport: tr})

		a, b := &recorder{name: "a"}, &recorder{name: "b"}
		retry := RetryConfig{Initial: time.Second, Max: 10 * time.Second, MaxAttempts: 3, MaxElapsed: 30 * time.Second}
		rs, met := testRunners(t, retry, BreakerConfig{Failures: 3, Cooldown: 30 * time.Second}, a, b)
		var mu sync.Mutex
		var warnings int
		for _, r := range rs {
			r.decode = dec
			r.log = slog.New(countingHandler{substr: "schema registry unavailable", mu: &mu, n: &warnings})
		}
		var dlq dlqLog
		p := newPartition("vibration.alerts", 0, rs, dlq.write, nil)
		var recs []Record
		for i := range 3 {
			v := avrotest.AlertValue(t, alertSchemaID, richAlert("a1", i))
			recs = append(recs, Record{Topic: "vibration.alerts", Offset: int64(i), Key: []byte("M-7"), Value: v, Timestamp: time.Now()})
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { p.run(ctx); close(done) }()
		p.push(recs...)

		time.Sleep(outage - 10*time.Second)
		if off, _, ok := p.commitPos(); ok {
			t.Errorf("commit position %d during the registry outage, want none", off)
		}
		if got, _ := a.deliveries(); len(got) != 0 {
			t.Errorf("%d deliveries during the registry outage", len(got))
		}
		refused := fr.Refused()
		t.Logf("%d registry requests refused in %s", refused, outage-10*time.Second)
		// Backoff, not a hot loop: two lanes, ceilings 1s, 2s, 4s, 8s, then
		// 10s, over 110s: a few dozen attempts at most.
		if refused < 2*retry.MaxAttempts || refused > 120 {
			t.Errorf("%d registry requests refused in %s, want more than %d (the decode is retried beyond retry.max_attempts) and at most 120 (backoff)",
				refused, outage-10*time.Second, 2*retry.MaxAttempts)
		}
		mu.Lock()
		if warnings < 2 || warnings >= refused {
			t.Errorf("%d warnings for %d failed attempts, want one per lane at the first failure and every 10th after", warnings, refused)
		}
		mu.Unlock()

		time.Sleep(time.Minute) // the registry is back for 50s: more than a backoff ceiling
		cancel()
		<-done
		srv.Close()
		tr.CloseIdleConnections()

		if off, _, _ := p.commitPos(); off != 3 {
			t.Errorf("commit position %d after the registry recovered, want 3", off)
		}
		if dls := dlq.all(); len(dls) != 0 {
			t.Fatalf("the registry outage dead-lettered %d records, the first with %s: %s", len(dls), dls[0].Reason, dls[0].Detail)
		}
		for _, r := range []*recorder{a, b} {
			got, at := r.deliveries()
			var keys []string
			for _, d := range got {
				keys = append(keys, d.IdempotencyKey)
			}
			if fmt.Sprint(keys) != "[a1-0 a1-1 a1-2]" {
				t.Errorf("sink %s got %v, want the 3 revisions in order", r.name, keys)
			}
			if len(at) > 0 && at[0].Sub(start) < outage {
				t.Errorf("sink %s got a revision %s after the start, during the registry outage", r.name, at[0].Sub(start))
			}
		}
		if n := value(t, met.Deliveries.WithLabelValues("a", OutcomeDeadLettered)); n != 0 {
			t.Errorf("dead_lettered{a} = %v", n)
		}
	})
}

// Values that are not Avro alerts are dead-lettered as undecodable with the
// cause in the detail and the original bytes, without calling the sink;
// the lane then goes on.
func TestAvroUndecodableValuesAreDeadLettered(t *testing.T) {
	fr := newSchemaRegistry()
	fr.Add(8, schemas.Event()) // a schema that is not an alert's
	regSrv := httptest.NewServer(fr)
	defer regSrv.Close()
	rec := &recorder{name: "rec"}
	rs, met := testRunners(t, quickRetry, quickBreaker, rec)
	rs[0].decode = avroDecode(t, regSrv.URL, nil)

	good := avrotest.AlertValue(t, alertSchemaID, richAlert("a1", 0))
	jsonValue, err := richAlert("a1", 0).Encode()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		value  []byte
		detail string
	}{
		{"unknown schema id", avrotest.AlertValue(t, 99, richAlert("a1", 0)), "schema id 99 not found in the registry"},
		{"not the wire format (a JSON alert)", jsonValue, "want the magic byte 0x00 of the Confluent wire format"},
		{"too short", []byte{0, 0, 0}, "shorter than the 5-byte Confluent wire-format header"},
		{"schema that is not an alert", avrotest.Wire(8, good[avro.HeaderSize:]), "schema id 8 cannot be read as an alert"},
		{"truncated body", good[:len(good)-4], "schema id 7"},
	}
	var dlq dlqLog
	for i, c := range cases {
		r := Record{Topic: "vibration.alerts", Offset: int64(i), Key: []byte("M-7"), Value: c.value}
		if err := rs[0].handle(context.Background(), r, dlq.write); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	if err := rs[0].handle(context.Background(), Record{Topic: "vibration.alerts", Offset: 9, Value: good}, dlq.write); err != nil {
		t.Fatal(err)
	}
	dls := dlq.all()
	if len(dls) != len(cases) {
		t.Fatalf("%d dead letters, want %d: %+v", len(dls), len(cases), dls)
	}
	for i, c := range cases {
		dl := dls[i]
		if dl.Reason != ReasonUndecodable || dl.Attempts != 0 || dl.IdempotencyKey != "" || !strings.Contains(dl.Detail, c.detail) {
			t.Errorf("%s: dead letter reason %q attempts %d key %q detail %q, want undecodable naming %q",
				c.name, dl.Reason, dl.Attempts, dl.IdempotencyKey, dl.Detail, c.detail)
		}
		if !bytes.Equal(dl.Record.Value, c.value) {
			t.Errorf("%s: the dead letter does not keep the original value", c.name)
		}
	}
	if got, _ := rec.deliveries(); len(got) != 1 || got[0].IdempotencyKey != "a1-0" {
		t.Errorf("sink got %d deliveries, want only the good revision after the undecodable ones", len(got))
	}
	if n := value(t, met.Deliveries.WithLabelValues("rec", OutcomeDeadLettered)); n != float64(len(cases)) {
		t.Errorf("dead_lettered = %v, want %d", n, len(cases))
	}
	if fetches := fr.Fetches(); fetches[99] != 1 {
		t.Errorf("unknown schema id fetched %d times, want once (its absence is cached)", fetches[99])
	}
}

// JSON alerts (no Options.Decode) are delivered with the record value
// itself as body: the same bytes, not a copy or a re-encoding, so webhook
// bodies and signatures are unchanged.
func TestJSONBodyIsTheRecordValue(t *testing.T) {
	rec := &recorder{name: "rec"}
	svc, err := New(Default(), []Sink{rec}, Options{Registerer: prometheus.NewRegistry(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// Not the canonical encoding (member order, spacing, an unknown member),
	// so a re-encoding would show.
	v := []byte(`{"revision":4, "alert_id":"a1","status":"updated","rule_id":"r","rule_version":2,"machine_id":"M-1",` +
		`"start":"2026-01-02T10:00:00.000Z","end":"2026-01-02T10:01:00.000Z","severity":"new-in-v2","evidence":[]}`)
	var dlq dlqLog
	if err := svc.runners[0].handle(context.Background(), Record{Topic: "vibration.alerts", Value: v}, dlq.write); err != nil {
		t.Fatal(err)
	}
	got, _ := rec.deliveries()
	if len(got) != 1 || len(dlq.all()) != 0 {
		t.Fatalf("%d deliveries, %d dead letters", len(got), len(dlq.all()))
	}
	if b := got[0].Body; !bytes.Equal(b, v) || &b[0] != &v[0] {
		t.Errorf("body %s, want the record value itself", b)
	}
}
