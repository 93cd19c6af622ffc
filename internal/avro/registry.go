package avro

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	hamba "github.com/hamba/avro/v2"
	"golang.org/x/sync/singleflight"
)

// Source gives writer schemas by id without any I/O, so that decoding stays
// a pure function of the record. Registry (after Prepare) and LocalSource
// implement it.
type Source interface {
	// Schema returns the writer schema of id, or an error that is
	//   - a *SchemaError (permanent; ErrSchemaNotFound when the id does not
	//     exist): the record is dead-lettered as schema_unknown;
	//   - ErrNotPrepared: the id was never fetched (a caller bug).
	Schema(id uint32) (hamba.Schema, error)
}

// Defaults of RegistryOptions, in one place.
const (
	// DefaultNotFoundTTL is how long a "not found" answer is trusted before
	// Prepare asks the registry again: 1 minute.
	DefaultNotFoundTTL = time.Minute
	// DefaultMaxNotFound bounds the ids remembered as not found: 10000.
	DefaultMaxNotFound = 10000
)

// RegistryOptions configure a Registry. Client is required.
type RegistryOptions struct {
	// Client talks to the registry.
	Client *Client
	// NotFoundTTL is how long Prepare trusts a "not found" answer before it
	// asks again (a schema may be registered later, and a dead-letter
	// replay should then succeed). Decode always uses the cached answer.
	// Default DefaultNotFoundTTL (1m); zero or negative means the default.
	NotFoundTTL time.Duration
	// MaxNotFound bounds the ids cached as not found (values with random
	// ids must not grow memory without bound); the oldest are forgotten
	// first. Default DefaultMaxNotFound (10000); zero or negative means the
	// default. Found schemas are never evicted: a schema id's schema never
	// changes, and their number is that of the registered schemas.
	MaxNotFound int
	// Logger logs state transitions (registry unavailable, available
	// again), never one line per record. Default: discard.
	Logger *slog.Logger
	// Metrics records the cache sizes and the unavailable state. Default
	// nil: none.
	Metrics *Metrics
	// Now is the clock of the not-found TTL. Default time.Now.
	Now func() time.Time
}

// EnsureDefaults fills every unset field but Client with its default and
// returns o.
func (o *RegistryOptions) EnsureDefaults() *RegistryOptions {
	if o.NotFoundTTL <= 0 {
		o.NotFoundTTL = DefaultNotFoundTTL
	}
	if o.MaxNotFound <= 0 {
		o.MaxNotFound = DefaultMaxNotFound
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Registry is a cache of writer schemas by id in front of a Confluent-
// compatible schema registry. The I/O happens in Prepare (or Resolve), on
// the caller's schedule; Schema, and so Decode, only read the cache.
//
// Contract with the caller (the consume loop): call Prepare with the values
// of a batch before decoding any of them. When Prepare returns nil, every
// wire-format value of the batch has its schema id cached (found, or known
// not to exist), so Decode judges each record without I/O. When it returns
// an error wrapping ErrRegistryUnavailable, decode none of them: keep the
// records, pause, retry Prepare with backoff.
//
// A Registry is safe for concurrent use.
type Registry struct {
	opts RegistryOptions
	sf   singleflight.Group

	// schemas holds *entry by uint32 id: written once per id, never
	// deleted, read on every Decode (sync.Map suits exactly that).
	schemas sync.Map

	mu struct {
		sync.Mutex
		notFound    map[uint32]notFound
		order       []uint32 // not-found ids, oldest first (may hold stale ids)
		nSchemas    int
		unavailable bool
	}
}

// entry is a fetched schema id: its schema, or why it cannot be used.
type entry struct {
	schema hamba.Schema
	err    *SchemaError
}

type notFound struct {
	err *SchemaError
	at  time.Time
}

// NewRegistry returns an empty cache in front of o.Client.
func NewRegistry(o RegistryOptions) (*Registry, error) {
	if o.Client == nil {
		return nil, errors.New("avro: registry: no client")
	}
	o.EnsureDefaults()
	r := &Registry{opts: o}
	r.mu.notFound = make(map[uint32]notFound)
	return r, nil
}

// Client returns the registry's client.
func (r *Registry) Client() *Client { return r.opts.Client }

// Schema implements Source: it reads the cache only.
func (r *Registry) Schema(id uint32) (hamba.Schema, error) {
	if v, ok := r.schemas.Load(id); ok {
		e := v.(*entry)
		if e.err != nil {
			return nil, e.err
		}
		return e.schema, nil
	}
	if id > MaxSchemaID {
		return nil, outOfRange(id)
	}
	r.mu.Lock()
	nf, ok := r.mu.notFound[id]
	r.mu.Unlock()
	if ok {
		return nil, nf.err
	}
	return nil, fmt.Errorf("%w: schema id %d (call Prepare with the value before decoding it)", ErrNotPrepared, id)
}

func outOfRange(id uint32) *SchemaError {
	return &SchemaError{ID: id, Problem: fmt.Sprintf("is out of range (registry ids are at most %d), so not in the registry", MaxSchemaID), Err: ErrSchemaNotFound}
}

// Prepare fetches and caches the schema of every schema id among values
// that is not cached yet (or whose "not found" answer is older than
// NotFoundTTL). Values not in the wire format are skipped: Decode
// dead-letters them as decode_error without a schema.
//
// It returns nil when every id is cached (found or not found), and a
// *PrepareError wrapping ErrRegistryUnavailable, naming the id, as soon as
// one id cannot be fetched; the ids fetched before stay cached.
func (r *Registry) Prepare(ctx context.Context, values [][]byte) error {
	var small [8]uint32
	ids := small[:0]
	var seen map[uint32]struct{}
	for _, v := range values {
		id, ok := SchemaID(v)
		if !ok || r.fresh(id) {
			continue
		}
		if seen == nil {
			dup := false
			for _, x := range ids {
				if x == id {
					dup = true
					break
				}
			}
			if dup {
				continue
			}
			if len(ids) == len(small) {
				seen = make(map[uint32]struct{}, 2*len(ids))
				for _, x := range ids {
					seen[x] = struct{}{}
				}
			}
		}
		if seen != nil {
			if _, dup := seen[id]; dup {
				continue
			}
			seen[id] = struct{}{}
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if err := r.Resolve(ctx, id); err != nil {
			return &PrepareError{ID: id, Err: err}
		}
	}
	return nil
}

// PrepareError is Prepare's error: the schema id that could not be fetched
// (retry with Resolve(ctx, ID) before resuming the paused partitions) and
// why (it wraps ErrRegistryUnavailable, or the context's error).
type PrepareError struct {
	ID  uint32
	Err error
}

func (e *PrepareError) Error() string { return e.Err.Error() }

func (e *PrepareError) Unwrap() error { return e.Err }

// Resolve fetches and caches the schema of id unless it is cached (and, if
// not found, fresh). Errors wrap ErrRegistryUnavailable; a schema that does
// not exist or cannot be used is cached as such and is not an error here.
func (r *Registry) Resolve(ctx context.Context, id uint32) error {
	if r.fresh(id) {
		return nil
	}
	_, err, _ := r.sf.Do(strconv.FormatUint(uint64(id), 10), func() (any, error) {
		if r.fresh(id) {
			return nil, nil
		}
		return nil, r.fetch(ctx, id)
	})
	return err
}

// fresh reports whether id needs no fetch.
func (r *Registry) fresh(id uint32) bool {
	if _, ok := r.schemas.Load(id); ok || id > MaxSchemaID {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	nf, ok := r.mu.notFound[id]
	return ok && r.opts.Now().Sub(nf.at) < r.opts.NotFoundTTL
}

func (r *Registry) fetch(ctx context.Context, id uint32) error {
	text, typ, err := r.opts.Client.SchemaByID(ctx, id)
	switch {
	case errors.Is(err, ErrSchemaNotFound):
		r.setAvailable(nil, id)
		r.addNotFound(id)
		return nil
	case err != nil:
		if !errors.Is(err, ErrRegistryUnavailable) {
			err = newClassified(ErrRegistryUnavailable, fmt.Sprintf("get schema id %d", id), "registry unavailable", err)
		}
		r.setAvailable(err, id)
		return err
	}
	r.setAvailable(nil, id)
	e := &entry{}
	if typ != "AVRO" {
		e.err = &SchemaError{ID: id, Problem: fmt.Sprintf("is a %s schema, want AVRO", clean(typ))}
	} else if s, perr := parseSchema(text); perr != nil {
		e.err = &SchemaError{ID: id, Problem: "is not a valid Avro schema: " + clean(perr.Error())}
	} else {
		e.schema = s
	}
	r.addSchema(id, e)
	return nil
}

// parseSchema parses a schema text with a cache of named types of its own:
// hamba's Parse would share named types between all schemas through a
// package-level cache.
func parseSchema(text string) (hamba.Schema, error) {
	return hamba.ParseWithCache(text, "", &hamba.SchemaCache{})
}

func (r *Registry) addSchema(id uint32, e *entry) {
	if _, loaded := r.schemas.LoadOrStore(id, e); loaded {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.nSchemas++
	delete(r.mu.notFound, id)
	r.opts.Metrics.cacheSizes(r.mu.nSchemas, len(r.mu.notFound))
}

func (r *Registry) addNotFound(id uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.mu.notFound[id]; !ok {
		r.mu.order = append(r.mu.order, id)
	}
	r.mu.notFound[id] = notFound{
		err: &SchemaError{ID: id, Problem: "not found in the registry", Err: ErrSchemaNotFound},
		at:  r.opts.Now(),
	}
	for len(r.mu.notFound) > r.opts.MaxNotFound && len(r.mu.order) > 0 {
		delete(r.mu.notFound, r.mu.order[0])
		r.mu.order = r.mu.order[1:]
	}
	if len(r.mu.order) > 2*r.opts.MaxNotFound { // drop ids already forgotten
		live := r.mu.order[:0]
		for _, x := range r.mu.order {
			if _, ok := r.mu.notFound[x]; ok {
				live = append(live, x)
			}
		}
		r.mu.order = live
	}
	r.opts.Metrics.cacheSizes(r.mu.nSchemas, len(r.mu.notFound))
}

// setAvailable records the outcome of a fetch (err nil: the registry
// answered) and logs and meters transitions.
func (r *Registry) setAvailable(err error, id uint32) {
	r.mu.Lock()
	was := r.mu.unavailable
	r.mu.unavailable = err != nil
	r.mu.Unlock()
	r.opts.Metrics.setUnavailable(err != nil)
	switch {
	case err != nil && !was:
		r.opts.Logger.Warn("avro: schema registry unavailable; records that need a schema wait",
			"url", r.opts.Client.URL(), "schema_id", id, "err", err)
	case err == nil && was:
		r.opts.Logger.Info("avro: schema registry available again", "url", r.opts.Client.URL(), "schema_id", id)
	}
}

// Unavailable reports whether the last fetch failed transiently.
func (r *Registry) Unavailable() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.unavailable
}

// Register registers schema under subject and caches it under the id it
// got, so that values written with it decode without a fetch.
func (r *Registry) Register(ctx context.Context, subject, schema string) (uint32, error) {
	s, err := parseSchema(schema)
	if err != nil {
		return 0, fmt.Errorf("avro: register subject %s: %w", subject, err)
	}
	id, err := r.opts.Client.Register(ctx, subject, schema)
	if err != nil {
		return 0, err
	}
	r.addSchema(id, &entry{schema: s})
	return id, nil
}
