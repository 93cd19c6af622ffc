package avrotest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vibeline/processor/internal/avro"
)

// Mode is how a Registry answers (SetDown).
type Mode string

const (
	// Up answers every request.
	Up Mode = ""
	// Unavailable answers every request with HTTP 503 (error_code 50301).
	Unavailable Mode = "503"
	// HangUp closes every connection without an answer.
	HangUp Mode = "hangup"
)

// Registry is a fake Confluent-API schema registry:
//
//   - GET /schemas/ids/{id} answers {"schema": "<text>"}, or 404 with
//     error_code 40403 for an id it does not have;
//   - GET /subjects answers the registered subjects;
//   - POST /subjects/{subject}/versions with {"schema": "<text>"}
//     registers the text under the subject as Register does and answers
//     {"id": N}, or the status set by Refuse;
//   - anything else is 404 with error_code 404.
//
// It can be taken down (SetDown, DownWhile). It is an http.Handler;
// NewRegistry also serves it on 127.0.0.1.
type Registry struct {
	srv *httptest.Server

	mu        sync.Mutex
	byID      map[uint32]string
	ids       map[string]uint32 // schema text -> id
	subjects  map[string][]uint32
	mode      Mode
	downWhile func() bool
	refuse    int
	fetches   map[uint32]int
	refused   int
}

// NewHandler returns a Registry without a server, for a server of the
// test's own (URL is empty).
func NewHandler() *Registry {
	return &Registry{byID: map[uint32]string{}, ids: map[string]uint32{}, subjects: map[string][]uint32{}, fetches: map[uint32]int{}}
}

// NewRegistry returns a Registry served on 127.0.0.1 until the end of the
// test.
func NewRegistry(t testing.TB) *Registry {
	t.Helper()
	f := NewHandler()
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the base URL of the registry's API.
func (f *Registry) URL() string {
	if f.srv == nil {
		return ""
	}
	return f.srv.URL
}

// Cache returns a new, empty schema cache (an avro.Registry) over the
// registry's URL with the client's default options.
func (f *Registry) Cache(t testing.TB) *avro.Registry {
	t.Helper()
	return NewCache(t, avro.ClientOptions{URL: f.URL()})
}

// Add puts schema under id (not under any subject).
func (f *Registry) Add(id uint32, schema string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.byID[id] = schema
	if _, ok := f.ids[schema]; !ok {
		f.ids[schema] = id
	}
}

// Register adds schema under subject, as a producer's serializer would, and
// returns its id: the id the text already has, or the next one (1 for the
// first).
func (f *Registry) Register(subject, schema string) uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.ids[schema]
	if !ok {
		for known := range f.byID {
			id = max(id, known)
		}
		id++
		f.ids[schema], f.byID[id] = id, schema
	}
	if !slices.Contains(f.subjects[subject], id) {
		f.subjects[subject] = append(f.subjects[subject], id)
	}
	return id
}

// SubjectIDs returns the ids registered under subject, in order.
func (f *Registry) SubjectIDs(subject string) []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.subjects[subject])
}

// SetDown sets how the registry answers from now on.
func (f *Registry) SetDown(m Mode) {
	f.mu.Lock()
	f.mode = m
	f.mu.Unlock()
}

// DownWhile makes the registry answer 503 to every request for which
// down(), called then, returns true (nil: never).
func (f *Registry) DownWhile(down func() bool) {
	f.mu.Lock()
	f.downWhile = down
	f.mu.Unlock()
}

// Refuse makes registrations answer status (with a Confluent error body
// whose error_code is status); 0 accepts them again.
func (f *Registry) Refuse(status int) {
	f.mu.Lock()
	f.refuse = status
	f.mu.Unlock()
}

// Fetches returns how many times each schema id was asked for and
// answered (200 or 404; not while down).
func (f *Registry) Fetches() map[uint32]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[uint32]int, len(f.fetches))
	for k, v := range f.fetches {
		m[k] = v
	}
	return m
}

// Refused returns how many requests were answered 503 while down.
func (f *Registry) Refused() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refused
}

// ServeHTTP answers one request of the Confluent API.
func (f *Registry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	answer := func(status int, v any) {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	f.mu.Lock()
	mode, refuse := f.mode, f.refuse
	if f.downWhile != nil && f.downWhile() {
		mode = Unavailable
	}
	if mode == Unavailable {
		f.refused++
	}
	f.mu.Unlock()
	switch mode {
	case Unavailable:
		answer(http.StatusServiceUnavailable, map[string]any{"error_code": 50301, "message": "registry down for the test"})
		return
	case HangUp:
		if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
			c.Close()
		}
		return
	}
	idText, isGet := strings.CutPrefix(r.URL.Path, "/schemas/ids/")
	rest, isSubject := strings.CutPrefix(r.URL.Path, "/subjects/")
	subject, isVersions := strings.CutSuffix(rest, "/versions")
	switch {
	case r.Method == http.MethodGet && isGet:
		n, err := strconv.ParseUint(idText, 10, 32)
		if err != nil {
			answer(http.StatusNotFound, map[string]any{"error_code": 40403, "message": "Schema not found"})
			return
		}
		f.mu.Lock()
		f.fetches[uint32(n)]++
		s, ok := f.byID[uint32(n)]
		f.mu.Unlock()
		if !ok {
			answer(http.StatusNotFound, map[string]any{"error_code": 40403, "message": "Schema not found"})
			return
		}
		answer(http.StatusOK, map[string]any{"schema": s})
	case r.Method == http.MethodGet && r.URL.Path == "/subjects":
		f.mu.Lock()
		subjects := make([]string, 0, len(f.subjects))
		for s := range f.subjects {
			subjects = append(subjects, s)
		}
		f.mu.Unlock()
		slices.Sort(subjects)
		answer(http.StatusOK, subjects)
	case r.Method == http.MethodPost && isSubject && isVersions:
		if refuse != 0 {
			answer(refuse, map[string]any{"error_code": refuse, "message": "Schema being registered is incompatible with an earlier schema for subject"})
			return
		}
		var body struct{ Schema string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			answer(http.StatusUnprocessableEntity, map[string]any{"error_code": 42201, "message": "invalid schema"})
			return
		}
		answer(http.StatusOK, map[string]uint32{"id": f.Register(subject, body.Schema)})
	default:
		answer(http.StatusNotFound, map[string]any{"error_code": 404, "message": "no such path"})
	}
}
