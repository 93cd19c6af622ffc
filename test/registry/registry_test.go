package registry

import (
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/event"
)

const (
	eventsSubject = "vibration.events-value"
	alertsSubject = "vibration.alerts-value"
	// recordTS is the Kafka record timestamp of the tests.
	recordTS int64 = 1767323045678
)

func ptr[T any](v T) *T { return &v }

// register registers schema under subject with the production client and
// returns its id.
func register(t *testing.T, subject, schema string) uint32 {
	t.Helper()
	c, err := avro.NewClient(avro.ClientOptions{URL: registryURL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id, err := c.Register(t.Context(), subject, schema)
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	return id
}

func validator(t *testing.T, r *avro.Registry) *event.Validator {
	t.Helper()
	d, err := avro.NewDecoder(r, avro.DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return event.NewValidator(d, event.Options{})
}

// TestEvolution registers v1 and v2 of the event schema under
// vibration.events-value (BACKWARD compatibility, so the registry itself
// vets v2), produces a record with each, and decodes both with the reader
// schema through a fresh cache. An incompatible v3 is refused by the
// registry, and that refusal is permanent, not transient.
func TestEvolution(t *testing.T) {
	if status, body := api(t, "PUT", "/config/"+eventsSubject, map[string]string{"compatibility": "BACKWARD"}); status != 200 {
		t.Fatalf("set compatibility: HTTP %d %s", status, body)
	}
	v1 := register(t, eventsSubject, eventV1())
	v2 := register(t, eventsSubject, eventV2(t))
	if v1 == v2 {
		t.Fatalf("v1 and v2 got the same id %d", v1)
	}
	if again := register(t, eventsSubject, eventV1()); again != v1 {
		t.Fatalf("registering v1 again gave id %d, want %d", again, v1)
	}
	status, body := api(t, "GET", "/subjects/"+eventsSubject+"/versions", nil)
	var versions []int
	if status != 200 || json.Unmarshal(body, &versions) != nil || len(versions) < 2 {
		t.Fatalf("versions of %s: HTTP %d %s", eventsSubject, status, body)
	}

	c, err := avro.NewClient(avro.ClientOptions{URL: registryURL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Register(t.Context(), eventsSubject, eventV3Incompatible(t))
	var apiErr *avro.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 409 || avro.IsTransient(err) || errors.Is(err, avro.ErrSchemaNotFound) {
		t.Fatalf("incompatible v3: %v, want a permanent HTTP 409", err)
	}

	ts := time.UnixMilli(recordTS - 60_000).UTC()
	values := [][]byte{
		produce(t, eventV1(), v1, record{EventID: "e-1", MachineID: "M-7", SensorID: "S-1", TS: ts, Seq: 1, Value: 7.5,
			Unit: "mm/s", SchemaVersion: 1, Quality: "good"}),
		produce(t, eventV2(t), v2, record{EventID: "e-2", MachineID: "M-7", SensorID: "S-2", TS: ts.Format(time.RFC3339Nano), Seq: 2, Value: 0.3,
			Unit: "in/s", SchemaVersion: 1, Quality: "good", Clock: ptr("unsynced"), Gateway: "gw-12", Firmware: ptr("1.4.2")}),
	}
	r := newRegistry(t, registryURL)
	if err := r.Prepare(t.Context(), values); err != nil {
		t.Fatal(err)
	}
	v := validator(t, r)
	want := []event.Event{
		{EventID: "e-1", MachineID: "M-7", SensorID: "S-1", TS: recordTS - 60_000, Seq: 1, Value: 7.5, RawValue: 7.5,
			Unit: "mm/s", SchemaVersion: 1, Quality: "good", Clock: "synced"},
		{EventID: "e-2", MachineID: "M-7", SensorID: "S-2", TS: recordTS - 60_000, Seq: 2, Value: 7.62, RawValue: 0.3,
			Unit: "in/s", SchemaVersion: 1, Quality: "good", Clock: "unsynced"},
	}
	for i, val := range values {
		ev, cerr := v.Check([]byte("M-7"), val, recordTS)
		if cerr != nil {
			t.Fatalf("record %d: %s: %s", i, cerr.Reason, cerr.Detail)
		}
		if ev != want[i] {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, ev, want[i])
		}
	}
	// The contract's checks apply to Avro records as to JSON ones.
	bad := produce(t, eventV2(t), v2, record{EventID: "e-3", MachineID: "M-7", SensorID: "S-2", TS: ts, Seq: 3, Value: 7.5,
		Unit: "furlong/s", SchemaVersion: 1, Quality: "good"})
	if err := r.Prepare(t.Context(), [][]byte{bad}); err != nil {
		t.Fatal(err)
	}
	if _, cerr := v.Check(nil, bad, recordTS); cerr == nil || cerr.Reason != event.ReasonInvalidField || cerr.Field != "unit" {
		t.Fatalf("bad unit: %+v", cerr)
	}
}

// TestUnknownID: the registry answers 40403 for an id it never gave; the
// record is schema_unknown and the detail names the id.
func TestUnknownID(t *testing.T) {
	id := uint32(987654)
	val := produce(t, eventV1(), id, record{EventID: "e-1", MachineID: "M-7", SensorID: "S-1", TS: time.UnixMilli(recordTS).UTC(),
		Unit: "mm/s", SchemaVersion: 1, Quality: "good"})
	r := newRegistry(t, registryURL)
	if err := r.Prepare(t.Context(), [][]byte{val}); err != nil {
		t.Fatalf("Prepare: %v (a missing schema is not a registry fault)", err)
	}
	_, cerr := validator(t, r).Check(nil, val, recordTS)
	if cerr == nil || cerr.Reason != event.ReasonSchemaUnknown || cerr.Detail != "schema id 987654 not found in the registry" {
		t.Fatalf("Check = %+v", cerr)
	}
}

// TestOutage: with the registry unreachable, Prepare of a value whose id is
// not cached is transient, and values with cached ids still decode; once
// the registry is back, the same value resolves. First through a proxy that
// refuses connections, then (when the test started the registry) by
// stopping the real registry with scripts/registry.sh down --keep and
// starting it again.
func TestOutage(t *testing.T) {
	cached := register(t, eventsSubject, eventV1())
	newID := register(t, "outage-test-value", eventV2(t))
	rec := record{EventID: "e-9", MachineID: "M-1", SensorID: "S-1", TS: time.UnixMilli(recordTS).UTC(), Seq: 9, Value: 8,
		Unit: "mm/s", SchemaVersion: 1, Quality: "good", Gateway: "gw"}
	cachedVal := produce(t, eventV1(), cached, rec)
	newVal := produce(t, eventV2(t), newID, rec)

	u, err := url.Parse(registryURL)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, u.Host)
	viaProxy := "http://" + p.addr + u.Path

	t.Run("proxy", func(t *testing.T) {
		r := newRegistry(t, viaProxy)
		v := validator(t, r)
		if err := r.Prepare(t.Context(), [][]byte{cachedVal}); err != nil {
			t.Fatal(err)
		}
		p.close()
		checkOutage(t, r, v, cachedVal, newVal, "connection refused")
		p.reopen(t)
		checkRecovered(t, r, v, newVal)
	})

	t.Run("registry stopped", func(t *testing.T) {
		if !requireManaged(t) {
			return
		}
		r := newRegistry(t, registryURL)
		v := validator(t, r)
		if err := r.Prepare(t.Context(), [][]byte{cachedVal}); err != nil {
			t.Fatal(err)
		}
		if out, err := registryScript("--keep", "down"); err != nil {
			t.Fatalf("scripts/registry.sh --keep down: %v\n%s", err, out)
		}
		checkOutage(t, r, v, cachedVal, newVal, "connection refused")
		start := time.Now()
		out, err := registryScript("up")
		if err != nil {
			t.Fatalf("scripts/registry.sh up: %v\n%s", err, out)
		}
		if got := lastLine(out); got != registryURL {
			t.Fatalf("restarted at %q, want %q", got, registryURL)
		}
		t.Logf("registry restarted in %s", time.Since(start).Round(100*time.Millisecond))
		checkRecovered(t, r, v, newVal)
	})
}

func checkOutage(t *testing.T, r *avro.Registry, v *event.Validator, cachedVal, newVal []byte, want string) {
	t.Helper()
	for range 3 { // the consume loop retries with backoff; each try is transient
		err := r.Prepare(t.Context(), [][]byte{cachedVal, newVal})
		if !errors.Is(err, avro.ErrRegistryUnavailable) || errors.Is(err, avro.ErrSchemaNotFound) || !strings.Contains(err.Error(), want) {
			t.Fatalf("Prepare during the outage = %v, want ErrRegistryUnavailable (%s)", err, want)
		}
	}
	if !r.Unavailable() {
		t.Fatal("Unavailable() = false during the outage")
	}
	// A value whose schema is cached needs no registry.
	if err := r.Prepare(t.Context(), [][]byte{cachedVal}); err != nil {
		t.Fatalf("Prepare of a cached id during the outage: %v", err)
	}
	if _, cerr := v.Check(nil, cachedVal, recordTS); cerr != nil {
		t.Fatalf("cached id during the outage: %+v", cerr)
	}
}

func checkRecovered(t *testing.T, r *avro.Registry, v *event.Validator, newVal []byte) {
	t.Helper()
	if err := r.Prepare(t.Context(), [][]byte{newVal}); err != nil {
		t.Fatalf("Prepare after the outage: %v", err)
	}
	if r.Unavailable() {
		t.Fatal("still unavailable")
	}
	ev, cerr := v.Check(nil, newVal, recordTS)
	if cerr != nil || ev.EventID != "e-9" || ev.Value != 8 {
		t.Fatalf("after the outage: %+v, %+v", ev, cerr)
	}
}

// TestAlerts registers schemas/alert.avsc under vibration.alerts-value, as
// the processor does at start-up, writes alert revisions with it, and reads
// them back through another cache (as a consumer would).
func TestAlerts(t *testing.T) {
	r := newRegistry(t, registryURL)
	enc, err := r.RegisterAlertSchema(t.Context(), avro.TopicValueSubject("vibration.alerts"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := newRegistry(t, registryURL).RegisterAlertSchema(t.Context(), alertsSubject)
	if err != nil || again.SchemaID() != enc.SchemaID() {
		t.Fatalf("second registration (a restart): %v, %v; want id %d", again, err, enc.SchemaID())
	}
	status, body := api(t, "GET", "/subjects/"+alertsSubject+"/versions/latest", nil)
	var latest struct {
		ID     int    `json:"id"`
		Schema string `json:"schema"`
	}
	if status != 200 || json.Unmarshal(body, &latest) != nil || latest.ID != int(enc.SchemaID()) || !strings.Contains(latest.Schema, "vibeline.alerts") {
		t.Fatalf("latest %s: HTTP %d %s", alertsSubject, status, body)
	}

	files, err := filepath.Glob("../../internal/alerts/testdata/alert_*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("alert testdata: %v", err)
	}
	consumer := newRegistry(t, registryURL)
	dec, err := avro.NewAlertDecoder(consumer)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		a, err := alerts.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		val, err := enc.EncodeAlert(a)
		if err != nil {
			t.Fatal(err)
		}
		if err := consumer.Prepare(t.Context(), [][]byte{val}); err != nil {
			t.Fatal(err)
		}
		got, err := dec.DecodeAlert(val)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !reflect.DeepEqual(got, a) {
			t.Fatalf("%s:\n got %+v\nwant %+v", f, got, a)
		}
	}
	t.Logf("alert schema id %s under %s", strconv.FormatUint(uint64(enc.SchemaID()), 10), alertsSubject)
}
