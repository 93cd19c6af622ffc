package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/schemas"
)

// formats are the value formats of the processor (docs/AVRO.md): the
// decoder of each Avro source, the schema registry those decoders and the
// Avro alerts use, and whether alerts are Avro.
type formats struct {
	reg        *avro.Registry           // nil: no registry configured
	decoders   map[string]event.Decoder // by source topic; absent: JSON
	prepare    map[string]bool          // sources whose writer schemas come from the registry
	avroAlerts bool
}

// newFormats builds the decoders of cfg.Sources and the registry client
// (no I/O): the registry's collectors go on m's registerer.
func newFormats(cfg config.Config, rs []*rules.Compiled, m *metrics.Metrics, log *slog.Logger, now func() time.Time) (*formats, error) {
	f := &formats{decoders: map[string]event.Decoder{}, prepare: map[string]bool{}, avroAlerts: cfg.AlertsFormat == config.FormatAvro}
	var am *avro.Metrics
	if r := cfg.Registry; r.URL != "" {
		var err error
		if am, err = avro.NewMetrics(m.Registerer()); err != nil {
			return nil, fmt.Errorf("consume: %w", err)
		}
		client, err := avro.NewClient(avro.ClientOptions{
			URL: r.URL, Username: r.Username, Password: r.Password.Reveal(), Timeout: r.Timeout, Metrics: am,
		})
		if err != nil {
			return nil, fmt.Errorf("consume: registry.url: %w", err)
		}
		if f.reg, err = avro.NewRegistry(avro.RegistryOptions{
			Client: client, NotFoundTTL: r.NotFoundTTL, Logger: log, Metrics: am, Now: now,
		}); err != nil {
			return nil, fmt.Errorf("consume: %w", err)
		}
	}
	ruleSources := map[string]bool{}
	var names []string
	for _, r := range rs {
		if !ruleSources[r.Rule.Source] {
			ruleSources[r.Rule.Source] = true
			names = append(names, r.Rule.Source)
		}
	}
	for i, s := range cfg.Sources {
		if !ruleSources[s.Topic] {
			return nil, fmt.Errorf("consume: config: sources[%d].topic = %q is not the source of any rule: want one of %q", i, s.Topic, names)
		}
		s = cfg.SourceFormat(s.Topic)
		if s.Format != config.FormatAvro {
			continue
		}
		a := s.Avro
		d, fromRegistry, err := avro.SourceDecoder(f.reg, a.SchemaFile, uint32(a.SchemaID), a.Framing == config.FramingBare, am)
		if err != nil {
			return nil, fmt.Errorf("consume: config: sources[%d].%w", i, err)
		}
		f.decoders[s.Topic], f.prepare[s.Topic] = d, fromRegistry
	}
	return f, nil
}

// registerAlertSchemas registers schemas/alert.avsc under the subject of
// every rule's alerts topic and gives each task its encoder: at start-up,
// retried while the registry is unavailable until ctx (startup_timeout)
// ends. A registry that refuses the schema (409: the subject's
// compatibility rule) stops start-up.
func (p *Processor) registerAlertSchemas(ctx context.Context) error {
	if !p.fm.avroAlerts {
		return nil
	}
	encs := map[string]*avro.AlertEncoder{}
	for _, t := range p.tasks {
		if encs[t.alerts] == nil {
			enc, err := p.registerAlertSchema(ctx, t.alerts)
			if err != nil {
				return err
			}
			encs[t.alerts] = enc
			p.log.Info("consume: alert schema registered", "subject", avro.TopicValueSubject(t.alerts),
				"schema_id", enc.SchemaID(), "alert_schema_version", schemas.AlertVersion)
		}
		t.enc = encs[t.alerts]
	}
	return nil
}

func (p *Processor) registerAlertSchema(ctx context.Context, topic string) (*avro.AlertEncoder, error) {
	subject, url := avro.TopicValueSubject(topic), p.fm.reg.Client().URL()
	for attempt := 0; ; attempt++ {
		enc, err := p.fm.reg.RegisterAlertSchema(ctx, subject)
		if err == nil {
			return enc, nil
		}
		if !avro.IsTransient(err) {
			return nil, fmt.Errorf("consume: the schema registry at %s refused the alert schema (schemas/alert.avsc, version %d) under subject %s: %w "+
				"(HTTP 409: the subject's compatibility rule does not accept it; see docs/AVRO.md, \"Alert output in Avro\")",
				url, schemas.AlertVersion, subject, err)
		}
		if attempt == 0 {
			p.log.Warn("consume: schema registry unavailable at start-up; retrying until startup_timeout",
				"subject", subject, "url", url, "startup_timeout", p.cfg.StartupTimeout.String(), "err", err)
		}
		t := time.NewTimer(backoffDelay(p.cfg.Registry.RetryBackoff, p.cfg.Registry.RetryBackoffMax, attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("consume: register the alert schema under subject %s: the schema registry at %s stayed unavailable (start-up ended after startup_timeout %s or a signal: %v): %w",
				subject, url, p.cfg.StartupTimeout, context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

// encodeAlert is the alert encoder of a task whose alerts are Avro.
func (t *task) encodeAlert(a alerts.Alert) ([]byte, error) {
	if t.enc == nil {
		return nil, fmt.Errorf("consume: rule %s: the alert schema of %s was not registered", t.ns, t.alerts)
	}
	return t.enc.EncodeAlert(a)
}

// backoffDelay is the pause before retry attempt n (0, 1, ...): base
// doubled n times, capped at max, with "equal jitter" (half fixed, half
// random) so that replicas do not retry in step. It only paces retries.
func backoffDelay(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half)
}

// gate holds back the records of partitions of registry-backed Avro
// sources whose writer schemas cannot be fetched because the schema
// registry is unavailable (docs/AVRO.md, "Registry outage"). Run's
// goroutine calls prepare, hold and release; the retrier goroutine (run)
// asks the registry again with backoff; rebalance callbacks call forget.
type gate struct {
	reg       *avro.Registry
	log       *slog.Logger
	base, max time.Duration
	now       func() time.Time
	paused    prometheus.Gauge
	pauses    prometheus.Counter
	retries   prometheus.Counter
	kick      chan struct{} // buffered: a new id to resolve

	mu       sync.Mutex        // guards the fields below
	held     map[pkey]heldPart // partitions paused, with the schema id each waits for
	answered map[uint32]bool   // held ids the registry answered for since they failed
	dropped  []pkey            // held partitions revoked or lost: resume them
	wake     context.CancelFunc
}

type heldPart struct {
	id    uint32
	since time.Time
}

func newGate(reg *avro.Registry, cfg config.Registry, m *metrics.Metrics, log *slog.Logger, now func() time.Time) (*gate, error) {
	g := &gate{
		reg: reg, log: log, base: cfg.RetryBackoff, max: cfg.RetryBackoffMax, now: now,
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "processor_registry_paused_partitions",
			Help: "Input partitions paused because the schema registry cannot give a writer schema their records need (registry unavailable).",
		}),
		pauses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "processor_registry_pauses_total",
			Help: "Times an input partition was paused for an unavailable schema registry (its records wait; nothing is dead-lettered).",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "processor_registry_retries_total",
			Help: "Requests to an unavailable schema registry on behalf of paused partitions (paced by registry.retry_backoff .. retry_backoff_max).",
		}),
		kick:     make(chan struct{}, 1),
		held:     map[pkey]heldPart{},
		answered: map[uint32]bool{},
	}
	for _, c := range []prometheus.Collector{g.paused, g.pauses, g.retries} {
		if err := m.Register(c); err != nil {
			return nil, fmt.Errorf("consume: %w", err)
		}
	}
	return g, nil
}

// prepare makes sure the writer schema of every wire-format value of recs
// is cached (found or known not to exist) so that decoding needs no I/O.
// It returns the schema id that could not be fetched, and why. While other
// partitions wait for the registry, a value whose id is not cached fails
// at once, without a request: only the retrier asks an unavailable
// registry, at its pace.
func (g *gate) prepare(ctx context.Context, recs []*kgo.Record) (uint32, error) {
	values := make([][]byte, len(recs))
	for i, r := range recs {
		values[i] = r.Value
	}
	if g.outage() {
		for _, v := range values {
			if id, ok := avro.SchemaID(v); ok {
				if _, err := g.reg.Schema(id); errors.Is(err, avro.ErrNotPrepared) {
					return id, fmt.Errorf("schema id %d is not cached and the registry is unavailable: %w", id, avro.ErrRegistryUnavailable)
				}
			}
		}
	}
	// Not canceled by a shutdown: the client's timeout bounds it, and a
	// failure only holds the records back.
	err := g.reg.Prepare(context.WithoutCancel(ctx), values)
	if err == nil {
		return 0, nil
	}
	var pe *avro.PrepareError
	if errors.As(err, &pe) {
		return pe.ID, err
	}
	return 0, err
}

// outage reports whether some held partition still waits for the registry.
func (g *gate) outage() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, h := range g.held {
		if !g.answered[h.id] {
			return true
		}
	}
	return false
}

// hold records that k is paused until the registry answers for schema id.
func (g *gate) hold(k pkey, id uint32, err error) {
	g.mu.Lock()
	g.held[k] = heldPart{id: id, since: g.now()}
	delete(g.answered, id)
	n := len(g.held)
	g.mu.Unlock()
	g.paused.Set(float64(n))
	g.pauses.Inc()
	g.log.Warn("consume: partition paused: the schema registry cannot give a writer schema its records need; they wait (nothing is dead-lettered) and the registry is asked again with backoff",
		"topic", k.topic, "partition", k.id, "schema_id", id, "retry_backoff", g.base.String(), "retry_backoff_max", g.max.String(), "err", err)
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// release resumes fetching the held partitions whose schema id the
// registry answered for, and the held partitions that were revoked.
func (g *gate) release(cl *kgo.Client) {
	g.mu.Lock()
	resume := map[string][]int32{}
	add := func(k pkey) { resume[k.topic] = append(resume[k.topic], k.id) }
	type done struct {
		k pkey
		h heldPart
	}
	var back []done
	for k, h := range g.held {
		if g.answered[h.id] {
			back = append(back, done{k, h})
			delete(g.held, k)
			add(k)
		}
	}
	for _, k := range g.dropped {
		add(k)
	}
	g.dropped = nil
	if len(g.held) == 0 {
		clear(g.answered)
	}
	n := len(g.held)
	g.mu.Unlock()
	if len(resume) == 0 {
		return
	}
	cl.ResumeFetchPartitions(resume)
	g.paused.Set(float64(n))
	slices.SortFunc(back, func(a, b done) int { return int(a.k.id - b.k.id) })
	for _, d := range back {
		g.log.Info("consume: partition resumed: the schema registry answered for the schema its records need",
			"topic", d.k.topic, "partition", d.k.id, "schema_id", d.h.id, "paused_for", g.now().Sub(d.h.since).Round(time.Millisecond).String())
	}
}

// forget drops revoked or lost partitions: they are resumed (a partition
// assigned again starts unpaused and prepares its records anew).
func (g *gate) forget(ks []pkey) {
	g.mu.Lock()
	for _, k := range ks {
		if _, ok := g.held[k]; ok {
			delete(g.held, k)
			g.dropped = append(g.dropped, k)
		}
	}
	n := len(g.held)
	g.mu.Unlock()
	g.paused.Set(float64(n))
}

// pollStarted registers the cancel function of the poll in progress, so
// that an answer of the registry ends the poll and the loop resumes the
// partition at once; pollEnded unregisters it.
func (g *gate) pollStarted(cancel context.CancelFunc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.wake = cancel
	for _, h := range g.held {
		if g.answered[h.id] {
			cancel()
			return
		}
	}
}

func (g *gate) pollEnded() {
	g.mu.Lock()
	g.wake = nil
	g.mu.Unlock()
}

// waiting returns the schema ids held partitions wait for, ascending.
func (g *gate) waiting() []uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ids []uint32
	for _, h := range g.held {
		if !g.answered[h.id] && !slices.Contains(ids, h.id) {
			ids = append(ids, h.id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (g *gate) setAnswered(id uint32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.answered[id] = true
	if g.wake != nil {
		g.wake()
	}
}

// run is the retrier: while held partitions wait, it asks the registry for
// their schema ids with capped exponential backoff and jitter
// (registry.retry_backoff .. retry_backoff_max). Resolve caches the answer
// (found, or not found: those records are then dead-lettered as
// schema_unknown); release resumes the partitions. The clock only paces the
// requests. It returns when ctx ends.
func (g *gate) run(ctx context.Context) {
	attempt := 0
	for {
		ids := g.waiting()
		if len(ids) == 0 {
			attempt = 0
			select {
			case <-ctx.Done():
				return
			case <-g.kick:
			}
			continue
		}
		t := time.NewTimer(backoffDelay(g.base, g.max, attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		attempt++
		for _, id := range ids {
			g.retries.Inc()
			if err := g.reg.Resolve(ctx, id); err != nil {
				if ctx.Err() != nil {
					return
				}
				g.log.Debug("consume: schema registry still unavailable", "schema_id", id, "attempt", attempt, "err", err)
				break
			}
			g.setAnswered(id)
		}
	}
}
