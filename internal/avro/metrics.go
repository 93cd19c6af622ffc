package avro

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Request outcomes, the values of the outcome label of
// processor_registry_requests_total.
const (
	OutcomeOK          = "ok"          // 2xx
	OutcomeNotFound    = "not_found"   // the schema id does not exist (permanent)
	OutcomeUnavailable = "unavailable" // transient: see ErrRegistryUnavailable
	OutcomeRejected    = "rejected"    // any other answer (e.g. 409 incompatible on register)
)

// Request operations, the values of the op label.
const (
	OpGetSchema = "get_schema"
	OpRegister  = "register"
)

// Metrics are the collectors of the schema registry client, its cache and
// the Avro decoder. A nil *Metrics records nothing.
type Metrics struct {
	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	cachedSchemas  prometheus.Gauge
	cachedNotFound prometheus.Gauge
	unavailable    prometheus.Gauge
	unprepared     prometheus.Counter
}

// NewMetrics registers the collectors on reg (never the global registry):
//
//	processor_registry_requests_total{op,outcome}       counter
//	processor_registry_request_duration_seconds{op}     histogram
//	processor_registry_cache_schemas                     gauge: schema ids cached with their schema
//	processor_registry_cache_not_found                   gauge: schema ids cached as not found
//	processor_registry_unavailable                       gauge: 1 while the last fetch failed transiently
//	processor_registry_unprepared_decodes_total          counter: Decode of an id never fetched (caller bug)
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "processor_registry_requests_total",
			Help: "Schema registry requests by operation and outcome (ok, not_found, unavailable, rejected).",
		}, []string{"op", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "processor_registry_request_duration_seconds",
			Help:    "Schema registry request duration by operation.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"op"}),
		cachedSchemas: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "processor_registry_cache_schemas",
			Help: "Schema ids in the schema cache with their schema (usable or not).",
		}),
		cachedNotFound: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "processor_registry_cache_not_found",
			Help: "Schema ids in the schema cache that the registry does not know.",
		}),
		unavailable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "processor_registry_unavailable",
			Help: "1 while the schema registry is unavailable (the last fetch failed transiently), else 0.",
		}),
		unprepared: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "processor_registry_unprepared_decodes_total",
			Help: "Avro values decoded with a schema id that was never fetched (a caller bug; the record is dead-lettered).",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.cachedSchemas, m.cachedNotFound, m.unavailable, m.unprepared} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("avro: register metrics: %w", err)
		}
	}
	for _, op := range []string{OpGetSchema, OpRegister} {
		for _, o := range []string{OutcomeOK, OutcomeNotFound, OutcomeUnavailable, OutcomeRejected} {
			m.requests.WithLabelValues(op, o)
		}
	}
	return m, nil
}

func (m *Metrics) request(op, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(op, outcome).Inc()
	m.duration.WithLabelValues(op).Observe(d.Seconds())
}

func (m *Metrics) cacheSizes(schemas, notFound int) {
	if m == nil {
		return
	}
	m.cachedSchemas.Set(float64(schemas))
	m.cachedNotFound.Set(float64(notFound))
}

func (m *Metrics) setUnavailable(down bool) {
	if m == nil {
		return
	}
	v := 0.0
	if down {
		v = 1
	}
	m.unavailable.Set(v)
}

func (m *Metrics) unpreparedDecode() {
	if m == nil {
		return
	}
	m.unprepared.Inc()
}
