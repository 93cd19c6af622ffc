package deliver

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Delivery outcomes (label outcome of processor_delivery_total). Every
// (revision, sink) pair is counted once, when it is finished.
const (
	// OutcomeDelivered: accepted at the first attempt.
	OutcomeDelivered = "delivered"
	// OutcomeRetried: accepted after at least one failed attempt.
	OutcomeRetried = "retried"
	// OutcomeDeadLettered: written to the delivery DLQ for this sink.
	OutcomeDeadLettered = "dead_lettered"
)

// Metrics are the delivery stage's collectors, registered on an injected
// registry.
type Metrics struct {
	// Deliveries counts finished (revision, sink) pairs by sink and outcome.
	Deliveries *prometheus.CounterVec
	// Latency is the time from the alert record's timestamp to the sink's
	// acceptance, by sink.
	Latency *prometheus.HistogramVec
	// Retries counts attempts after the first, by sink (including probes
	// and attempts while the breaker was open).
	Retries *prometheus.CounterVec
	// BreakerState is each sink's breaker: 0 closed, 1 half-open, 2 open.
	BreakerState *prometheus.GaugeVec
	// Lag is, per assigned alerts-topic partition, the offsets between the
	// partition's last stable offset and the oldest record not yet finished
	// by every sink (transaction markers included).
	Lag *prometheus.GaugeVec
}

// NewMetrics registers the collectors on reg and initialises the series of
// every sink name (so they exist at zero before the first delivery).
func NewMetrics(reg prometheus.Registerer, sinks []string) (*Metrics, error) {
	m := &Metrics{
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "processor_delivery_total",
			Help: "Alert revisions finished per sink, by outcome (delivered at the first attempt, retried = delivered after retries, dead_lettered).",
		}, []string{"sink", "outcome"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "processor_delivery_latency_seconds",
			Help:    "Alert record timestamp to acceptance by the sink.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 20),
		}, []string{"sink"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "processor_delivery_retries_total", Help: "Delivery attempts after the first, per sink.",
		}, []string{"sink"}),
		BreakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "processor_delivery_breaker_state", Help: "Circuit breaker per sink: 0 closed, 1 half-open, 2 open.",
		}, []string{"sink"}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "processor_delivery_lag_records",
			Help: "Per assigned alerts partition: last stable offset minus the oldest offset not yet finished by every sink.",
		}, []string{"partition"}),
	}
	for _, c := range []prometheus.Collector{m.Deliveries, m.Latency, m.Retries, m.BreakerState, m.Lag} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("deliver: register metrics: %w", err)
		}
	}
	for _, s := range sinks {
		for _, o := range []string{OutcomeDelivered, OutcomeRetried, OutcomeDeadLettered} {
			m.Deliveries.WithLabelValues(s, o)
		}
		m.Retries.WithLabelValues(s)
		m.BreakerState.WithLabelValues(s).Set(float64(StateClosed))
	}
	return m, nil
}

func partLabel(p int32) string { return strconv.Itoa(int(p)) }
