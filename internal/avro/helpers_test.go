package avro

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	hamba "github.com/hamba/avro/v2"

	"github.com/vibeline/processor/schemas"
)

// Writer schemas of the tests. v1 is what a producer would register first
// (another record name than the reader's, an int schema_version, ts as a
// timestamp-millis long); v2 adds a defaulted field and an array.
const (
	writerV1 = `{"type":"record","name":"VibrationEvent","namespace":"com.acme.iot","fields":[
		{"name":"event_id","type":"string"},
		{"name":"machine_id","type":"string"},
		{"name":"sensor_id","type":"string"},
		{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"seq","type":"long"},
		{"name":"value","type":"double"},
		{"name":"unit","type":"string"},
		{"name":"schema_version","type":"int"},
		{"name":"quality","type":"string"},
		{"name":"clock","type":["null","string"],"default":null}]}`
	writerV2 = `{"type":"record","name":"VibrationEvent","namespace":"com.acme.iot","fields":[
		{"name":"event_id","type":"string"},
		{"name":"machine_id","type":"string"},
		{"name":"sensor_id","type":"string"},
		{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"seq","type":"long"},
		{"name":"value","type":"double"},
		{"name":"unit","type":"string"},
		{"name":"schema_version","type":"int"},
		{"name":"quality","type":"string"},
		{"name":"clock","type":["null","string"],"default":null},
		{"name":"gateway","type":"string","default":"gw-0"},
		{"name":"tags","type":{"type":"array","items":"string"},"default":[]},
		{"name":"extra","type":{"type":"map","values":["null","double"]},"default":{}}]}`
	// writerNoClock has no clock and promotes: seq int, value float.
	writerNoClock = `{"type":"record","name":"E","fields":[
		{"name":"event_id","type":"string"},
		{"name":"machine_id","type":"string"},
		{"name":"sensor_id","type":"string"},
		{"name":"ts","type":"string"},
		{"name":"seq","type":"int"},
		{"name":"value","type":"float"},
		{"name":"unit","type":"string"},
		{"name":"schema_version","type":"long"},
		{"name":"quality","type":"string"}]}`
	// writerNoSeq lacks a field the reader has without default.
	writerNoSeq = `{"type":"record","name":"E","fields":[
		{"name":"event_id","type":"string"},
		{"name":"machine_id","type":"string"},
		{"name":"sensor_id","type":"string"},
		{"name":"ts","type":"long"},
		{"name":"value","type":"double"},
		{"name":"unit","type":"string"},
		{"name":"schema_version","type":"int"},
		{"name":"quality","type":"string"}]}`
	// writerMicros sends ts in microseconds.
	writerMicros = `{"type":"record","name":"E","fields":[
		{"name":"event_id","type":"string"},
		{"name":"machine_id","type":"string"},
		{"name":"sensor_id","type":"string"},
		{"name":"ts","type":{"type":"long","logicalType":"timestamp-micros"}},
		{"name":"seq","type":"long"},
		{"name":"value","type":"double"},
		{"name":"unit","type":"string"},
		{"name":"schema_version","type":"int"},
		{"name":"quality","type":"string"}]}`
)

// recordTS is the Kafka record timestamp of the tests: 2026-01-02T03:04:05.678Z.
const recordTS int64 = 1767323045678

// event1 is a valid event as a map for hamba, for writerV1 and writerV2.
func event1(over map[string]any) map[string]any {
	m := map[string]any{
		"event_id": "e-1", "machine_id": "M-7", "sensor_id": "S-7-3",
		"ts": recordTS - 1000, "seq": int64(42), "value": 7.5, "unit": "mm/s",
		"schema_version": 1, "quality": "good", "clock": nil,
	}
	for k, v := range over {
		if _, ok := v.(absent); ok {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	return m
}

// absent in event1's over removes the field.
type absent struct{}

// encode writes rec with the writer schema text, in the wire format with id.
func encode(t testing.TB, schema string, id uint32, rec any) []byte {
	t.Helper()
	body := encodeBare(t, schema, rec)
	return append(AppendHeader(nil, id), body...)
}

func encodeBare(t testing.TB, schema string, rec any) []byte {
	t.Helper()
	s, err := parseSchema(schema)
	if err != nil {
		t.Fatalf("parse writer schema: %v", err)
	}
	body, err := newAPI().Marshal(s, rec)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return body
}

// fakeRegistry is a Confluent-API registry on 127.0.0.1 with switchable
// faults and request counters.
type fakeRegistry struct {
	srv *httptest.Server

	mu       sync.Mutex
	schemas  map[uint32]string
	types    map[uint32]string
	subjects map[string][]uint32
	fetches  map[uint32]int
	requests int
	status   int           // non-zero: answer every request with it
	body     string        // body of those answers
	delay    time.Duration // before answering
	auth     string        // "user:pass" required when set
	nextID   uint32
}

func newFakeRegistry(t testing.TB) *fakeRegistry {
	f := &fakeRegistry{
		schemas: map[uint32]string{}, types: map[uint32]string{}, subjects: map[string][]uint32{},
		fetches: map[uint32]int{}, nextID: 1,
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeRegistry) add(id uint32, schema string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.schemas[id] = schema
	if id >= f.nextID {
		f.nextID = id + 1
	}
}

func (f *fakeRegistry) fail(status int, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.body = status, body
}

func (f *fakeRegistry) fetchCount(id uint32) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fetches[id]
}

func (f *fakeRegistry) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests++
	status, body, delay, auth := f.status, f.body, f.delay, f.auth
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if auth != "" {
		u, p, ok := r.BasicAuth()
		if !ok || u+":"+p != auth {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error_code": 40101, "message": "Unauthorized"})
			return
		}
	}
	if status != 0 {
		w.WriteHeader(status)
		fmt.Fprint(w, body)
		return
	}
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/schemas/ids/"):
		n, err := strconv.ParseUint(strings.TrimPrefix(r.URL.Path, "/schemas/ids/"), 10, 32)
		if err != nil {
			writeJSON(w, http.StatusNotFound, map[string]any{"error_code": 40403, "message": "Schema not found"})
			return
		}
		id := uint32(n)
		f.mu.Lock()
		f.fetches[id]++
		s, ok := f.schemas[id]
		typ := f.types[id]
		f.mu.Unlock()
		if !ok {
			writeJSON(w, http.StatusNotFound, map[string]any{"error_code": 40403, "message": fmt.Sprintf("Schema %d not found", id)})
			return
		}
		out := map[string]any{"schema": s}
		if typ != "" {
			out["schemaType"] = typ
		}
		writeJSON(w, http.StatusOK, out)
	case r.Method == http.MethodGet && r.URL.Path == "/subjects":
		writeJSON(w, http.StatusOK, []string{})
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/subjects/") && strings.HasSuffix(r.URL.Path, "/versions"):
		subject := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/subjects/"), "/versions")
		var in struct {
			Schema string `json:"schema"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error_code": 42201, "message": "Invalid schema"})
			return
		}
		if _, err := parseSchema(in.Schema); err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error_code": 42201, "message": "Invalid schema " + err.Error()})
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for id, s := range f.schemas {
			if s == in.Schema {
				f.subjects[subject] = append(f.subjects[subject], id)
				writeJSON(w, http.StatusOK, map[string]any{"id": id})
				return
			}
		}
		id := f.nextID
		f.nextID++
		f.schemas[id] = in.Schema
		f.subjects[subject] = append(f.subjects[subject], id)
		writeJSON(w, http.StatusOK, map[string]any{"id": id})
	default:
		http.NotFound(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// newTestRegistry returns a Registry on f with short timeouts.
func newTestRegistry(t testing.TB, f *fakeRegistry, o RegistryOptions) *Registry {
	t.Helper()
	c, err := NewClient(ClientOptions{URL: f.srv.URL, Timeout: 2 * time.Second, Metrics: o.Metrics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	o.Client = c
	r, err := NewRegistry(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// mapSource is a Source with fixed schemas, for tests without a registry.
type mapSource map[uint32]hamba.Schema

func (m mapSource) Schema(id uint32) (hamba.Schema, error) {
	if s, ok := m[id]; ok {
		return s, nil
	}
	return nil, &SchemaError{ID: id, Problem: "not found in the registry", Err: ErrSchemaNotFound}
}

func mustParse(t testing.TB, s string) hamba.Schema {
	t.Helper()
	p, err := parseSchema(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// readerSchema is schemas/event.avsc, for producers that write with it.
func readerSchema() string { return schemas.Event() }
