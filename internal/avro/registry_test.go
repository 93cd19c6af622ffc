package avro

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/vibeline/processor/internal/event"
)

// TestCacheOneFetchPerID: however many values and batches carry an id, and
// however many goroutines prepare them at once, the registry is asked once.
func TestCacheOneFetchPerID(t *testing.T) {
	f := newFakeRegistry(t)
	f.add(1, writerV1)
	f.add(2, writerV2)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := newTestRegistry(t, f, RegistryOptions{Metrics: m})
	v1 := encode(t, writerV1, 1, event1(nil))
	v2 := encode(t, writerV2, 2, event1(map[string]any{"gateway": "g", "tags": []any{}, "extra": map[string]any{}}))
	batch := [][]byte{v1, v2, v1, []byte(`{"json":true}`), v2, v1, encode(t, writerV1, 3, event1(nil))}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				if err := r.Prepare(t.Context(), batch); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for id, want := range map[uint32]int{1: 1, 2: 1, 3: 1} {
		if got := f.fetchCount(id); got != want {
			t.Errorf("id %d fetched %d times, want %d", id, got, want)
		}
	}
	d, err := NewDecoder(r, DecoderOptions{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	v := event.NewValidator(d, event.Options{})
	for _, val := range batch[:3] {
		if _, err := v.Check(nil, val, recordTS); err != nil {
			t.Fatalf("Check: %+v", err)
		}
	}
	if got := value(t, m.cachedSchemas); got != 2 {
		t.Errorf("processor_registry_cache_schemas = %v, want 2", got)
	}
	if got := value(t, m.cachedNotFound); got != 1 {
		t.Errorf("processor_registry_cache_not_found = %v, want 1", got)
	}
	if got := value(t, m.requests.WithLabelValues(OpGetSchema, OutcomeOK)); got != 2 {
		t.Errorf("ok requests = %v, want 2", got)
	}
	if got := value(t, m.requests.WithLabelValues(OpGetSchema, OutcomeNotFound)); got != 1 {
		t.Errorf("not_found requests = %v, want 1", got)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 6 {
		t.Fatalf("gather: %d families, %v; want 6", len(mfs), err)
	}
}

// TestNotFound: an id the registry does not know is cached as not found,
// Decode dead-letters it as schema_unknown naming the id, and Prepare asks
// again only after NotFoundTTL (a schema registered later then decodes).
func TestNotFound(t *testing.T) {
	f := newFakeRegistry(t)
	now := time.Unix(1000, 0)
	r := newTestRegistry(t, f, RegistryOptions{Now: func() time.Time { return now }, NotFoundTTL: time.Minute})
	v := encode(t, writerV1, 42, event1(nil))
	if err := r.Prepare(t.Context(), [][]byte{v}); err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(r, DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, cerr := event.NewValidator(d, event.Options{}).Check(nil, v, recordTS)
	if cerr == nil || cerr.Reason != event.ReasonSchemaUnknown || cerr.Detail != "schema id 42 not found in the registry" {
		t.Fatalf("Check = %+v", cerr)
	}
	_, serr := r.Schema(42)
	if !errors.Is(serr, ErrSchemaNotFound) {
		t.Fatalf("Schema(42) = %v, want ErrSchemaNotFound", serr)
	}
	f.add(42, writerV1)
	now = now.Add(59 * time.Second)
	if err := r.Prepare(t.Context(), [][]byte{v}); err != nil || f.fetchCount(42) != 1 {
		t.Fatalf("within the TTL: %v, %d fetches", err, f.fetchCount(42))
	}
	now = now.Add(2 * time.Second)
	if err := r.Prepare(t.Context(), [][]byte{v}); err != nil || f.fetchCount(42) != 2 {
		t.Fatalf("after the TTL: %v, %d fetches", err, f.fetchCount(42))
	}
	if _, err := event.NewValidator(d, event.Options{}).Check(nil, v, recordTS); err != nil {
		t.Fatalf("after registration: %+v", err)
	}
	// Ids beyond the registry's range are not asked for.
	big := encode(t, writerV1, 1<<31, event1(nil))
	if err := r.Prepare(t.Context(), [][]byte{big}); err != nil || f.fetchCount(1<<31) != 0 {
		t.Fatalf("out-of-range id: %v, %d fetches", err, f.fetchCount(1<<31))
	}
	_, cerr = event.NewValidator(d, event.Options{}).Check(nil, big, recordTS)
	if cerr == nil || cerr.Reason != event.ReasonSchemaUnknown || !strings.Contains(cerr.Detail, "schema id 2147483648 is out of range") {
		t.Fatalf("out-of-range id: %+v", cerr)
	}
}

func TestNotFoundBounded(t *testing.T) {
	f := newFakeRegistry(t)
	r := newTestRegistry(t, f, RegistryOptions{MaxNotFound: 3})
	for id := uint32(100); id < 110; id++ {
		if err := r.Resolve(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	n := len(r.mu.notFound)
	r.mu.Unlock()
	if n != 3 {
		t.Fatalf("%d ids cached as not found, want 3", n)
	}
	if _, err := r.Schema(109); !errors.Is(err, ErrSchemaNotFound) {
		t.Fatalf("newest id: %v", err)
	}
	if _, err := r.Schema(100); !errors.Is(err, ErrNotPrepared) {
		t.Fatalf("evicted id: %v", err)
	}
}

// TestTransient: every way a registry can fail to answer is
// ErrRegistryUnavailable from Prepare, caches nothing, dead-letters
// nothing, sets the unavailable gauge, and heals once the registry answers.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fakeRegistry) (url string)
		want  string
	}{
		{"500", func(f *fakeRegistry) string {
			f.fail(500, `{"error_code":50001,"message":"Error in the backend data store"}`)
			return f.srv.URL
		}, "HTTP 500 error_code 50001"},
		{"503 without body", func(f *fakeRegistry) string { f.fail(503, ""); return f.srv.URL }, "HTTP 503"},
		{"429", func(f *fakeRegistry) string {
			f.fail(429, `{"error_code":42901,"message":"slow down"}`)
			return f.srv.URL
		}, "HTTP 429"},
		{"401", func(f *fakeRegistry) string { f.auth = "u:p"; return f.srv.URL }, "HTTP 401"},
		{"wrong base URL (bare 404)", func(f *fakeRegistry) string { return f.srv.URL + "/apis/wrong" }, "is " + "%URL%/apis/wrong the API's base URL"},
		{"200 that is not the API", func(f *fakeRegistry) string { f.fail(200, "<html>proxy login</html>"); return f.srv.URL }, "not the Confluent API's JSON"},
		{"timeout", func(f *fakeRegistry) string { f.delay = 3 * time.Second; return f.srv.URL }, "timeout|deadline exceeded"},
		{"connection refused", func(*fakeRegistry) string { return closedURL(t) }, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeRegistry(t)
			f.add(1, writerV1)
			url := tc.setup(f)
			var logs bytes.Buffer
			m, err := NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			c, err := NewClient(ClientOptions{URL: url, Timeout: 500 * time.Millisecond, Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewRegistry(RegistryOptions{Client: c, Metrics: m, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			v := encode(t, writerV1, 1, event1(nil))
			for range 2 {
				err = r.Prepare(t.Context(), [][]byte{v})
				want := strings.ReplaceAll(tc.want, "%URL%", f.srv.URL)
				if !errors.Is(err, ErrRegistryUnavailable) || !IsTransient(err) || errors.Is(err, ErrSchemaNotFound) || !containsAny(err.Error(), want) {
					t.Fatalf("Prepare = %v, want ErrRegistryUnavailable containing %q", err, want)
				}
			}
			if !r.Unavailable() || value(t, m.unavailable) != 1 || value(t, m.requests.WithLabelValues(OpGetSchema, OutcomeUnavailable)) != 2 {
				t.Fatalf("unavailable state not recorded")
			}
			if n := strings.Count(logs.String(), "records that need a schema wait"); n != 1 {
				t.Fatalf("logged the outage %d times, want once at the transition:\n%s", n, logs.String())
			}
			var pe *PrepareError
			if !errors.As(err, &pe) || pe.ID != 1 {
				t.Fatalf("Prepare error %T does not name the id: %v", err, err)
			}
			if _, err := r.Schema(1); !errors.Is(err, ErrNotPrepared) {
				t.Fatalf("Schema after a failed fetch = %v, want ErrNotPrepared (nothing cached)", err)
			}

			// Heal: the same registry (or one on the same URL) answers again.
			f.fail(0, "")
			f.mu.Lock()
			f.auth, f.delay = "", 0
			f.mu.Unlock()
			c2, err := NewClient(ClientOptions{URL: f.srv.URL, Timeout: 500 * time.Millisecond, Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			r.opts.Client = c2
			if err := r.Prepare(t.Context(), [][]byte{v}); err != nil {
				t.Fatalf("Prepare after the outage: %v", err)
			}
			if r.Unavailable() || value(t, m.unavailable) != 0 || !strings.Contains(logs.String(), "available again") {
				t.Fatalf("recovery not recorded:\n%s", logs.String())
			}
			d, err := NewDecoder(r, DecoderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := event.NewValidator(d, event.Options{}).Check(nil, v, recordTS); err != nil {
				t.Fatalf("Check after the outage: %+v", err)
			}
		})
	}
}

// closedURL returns the URL of a 127.0.0.1 port that nothing listens on.
func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestUnusableSchemas(t *testing.T) {
	f := newFakeRegistry(t)
	f.add(1, `syntax = "proto3"; message E {}`)
	f.types[1] = "PROTOBUF"
	f.add(2, `{"type":"record","name":"E","fields":[{"name":"a","type":"Nope"}]}`)
	r := newTestRegistry(t, f, RegistryOptions{})
	d, err := NewDecoder(r, DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[uint32]string{1: "schema id 1 is a PROTOBUF schema, want AVRO", 2: "schema id 2 is not a valid Avro schema"} {
		v := append(AppendHeader(nil, id), 0)
		if err := r.Prepare(t.Context(), [][]byte{v}); err != nil {
			t.Fatal(err)
		}
		_, cerr := event.NewValidator(d, event.Options{}).Check(nil, v, recordTS)
		if cerr == nil || cerr.Reason != event.ReasonSchemaUnknown || !strings.Contains(cerr.Detail, want) {
			t.Fatalf("id %d: %+v, want schema_unknown %q", id, cerr, want)
		}
	}
}

func TestClient(t *testing.T) {
	f := newFakeRegistry(t)
	f.auth = "svc:s3cret"
	ctx := t.Context()
	c, err := NewClient(ClientOptions{URL: f.srv.URL + "/", Username: "svc", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Register(ctx, "vibration.events-value", writerV1)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Register(ctx, "vibration.events-value", writerV1)
	if err != nil || again != id {
		t.Fatalf("register twice: %d, %v; want %d", again, err, id)
	}
	s, typ, err := c.SchemaByID(ctx, id)
	if err != nil || s != writerV1 || typ != "AVRO" {
		t.Fatalf("SchemaByID = %q, %q, %v", s, typ, err)
	}
	_, err = c.Register(ctx, "x-value", `{"type":"nope"}`)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 422 || apiErr.Code != 42201 || IsTransient(err) || errors.Is(err, ErrSchemaNotFound) {
		t.Fatalf("register an invalid schema: %v, want a permanent 422", err)
	}
	f.fail(409, `{"error_code":409,"message":"Schema being registered is incompatible with an earlier schema"}`)
	if _, err := c.Register(ctx, "x-value", writerV1); !errors.As(err, &apiErr) || apiErr.Status != 409 || IsTransient(err) {
		t.Fatalf("incompatible: %v", err)
	}
	f.fail(0, "")
	bad, err := NewClient(ClientOptions{URL: f.srv.URL, Username: "svc", Password: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := bad.SchemaByID(ctx, id); !IsTransient(err) || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("wrong password: %v, want transient 401", err)
	}
	for _, u := range []string{"", "127.0.0.1:8081", "ftp://x", "http://u:p@host:8081", "http://host?x=1"} {
		if _, err := NewClient(ClientOptions{URL: u}); err == nil {
			t.Errorf("NewClient(%q) accepted", u)
		}
	}
	// A cancelled caller is not mistaken for a missing schema.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := c.SchemaByID(cctx, id); !IsTransient(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// value reads a counter's or gauge's value.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("not a counter or gauge: %v", &m)
	return 0
}

// containsAny reports whether s contains one of the |-separated words.
func containsAny(s, words string) bool {
	for _, w := range strings.Split(words, "|") {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// CheckBase: a base URL that is not a registry API's (404 for GET
// /subjects: a wrong prefix, which a Confluent registry answers with
// error_code 404 like an unknown id of Apicurio 2) fails; a registry, or
// one that cannot be reached now, passes (its lookups wait for it).
func TestCheckBase(t *testing.T) {
	f := newFakeRegistry(t)
	check := func(url string) error {
		c, err := NewClient(ClientOptions{URL: url, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c.CheckBase(t.Context())
	}
	if err := check(f.srv.URL); err != nil {
		t.Fatalf("the registry: %v", err)
	}
	if err := check(closedURL(t)); err != nil {
		t.Fatalf("unreachable: %v", err)
	}
	err := check(f.srv.URL + "/wrong-prefix")
	if err == nil || !strings.Contains(err.Error(), "not the base URL") || !strings.Contains(err.Error(), "/wrong-prefix") {
		t.Fatalf("wrong prefix: %v", err)
	}
	f.fail(404, `{"error_code":404,"message":"HTTP 404 Not Found"}`)
	if err := check(f.srv.URL); err == nil {
		t.Fatal("a Confluent 404 of an unknown path passed")
	}
}
