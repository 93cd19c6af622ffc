package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the processor's collectors.
type Metrics struct {
	// Records counts input records by partition and outcome (processed,
	// filtered, duplicate, dead_lettered, too_late), counted when the
	// transaction that carried them committed.
	Records *prometheus.CounterVec
	// DeadLetters counts dead-lettered records by reason code.
	DeadLetters *prometheus.CounterVec
	// Alerts counts alert revisions by status.
	Alerts *prometheus.CounterVec
	// Transactions counts ended transactions by result (committed, aborted,
	// failed: the session is unusable and the instance exits).
	Transactions *prometheus.CounterVec
	// CommitSeconds is the duration of ending a transaction.
	CommitSeconds prometheus.Histogram
	// OverlapRecords counts input records handled while the previous
	// transaction ended (they start the next one).
	OverlapRecords prometheus.Counter
	// Watermark is each partition's event-time watermark in seconds since the epoch.
	Watermark *prometheus.GaugeVec
	// Restores counts partition restores; RestoreSeconds their duration.
	Restores       prometheus.Counter
	RestoreSeconds prometheus.Histogram
	// RestoredRecords counts changelog records applied by restores.
	RestoredRecords prometheus.Counter
	// StateKeys is the number of keys in each partition's window state.
	StateKeys *prometheus.GaugeVec
	// Rebalances counts assignment changes by kind (assigned, revoked, lost).
	Rebalances *prometheus.CounterVec
	// AlertLatency is the time from the append of the input record that
	// caused an alert revision to the commit of that revision.
	AlertLatency prometheus.Histogram
	// Restoring is the number of partitions being restored right now.
	Restoring prometheus.Gauge
	// Ready is 1 while the instance is ready (see /readyz), else 0.
	Ready prometheus.Gauge

	reg   prometheus.Registerer
	ready atomic.Bool
}

// New registers the collectors on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "processor_records_total", Help: "Input records by partition and outcome, counted at commit.",
		}, []string{"partition", "outcome"}),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "processor_dlq_records_total", Help: "Dead-lettered input records by reason code.",
		}, []string{"reason"}),
		Alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "processor_alerts_revisions_total", Help: "Alert revisions committed, by status.",
		}, []string{"status"}),
		Transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "processor_txn_total", Help: "Ended transactions by result.",
		}, []string{"result"}),
		CommitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "processor_txn_commit_duration_seconds", Help: "Time to flush and end one transaction.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		OverlapRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "processor_txn_overlap_records_total", Help: "Input records handled while the previous transaction ended.",
		}),
		Watermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "processor_watermark_seconds", Help: "Partition event-time watermark, seconds since the epoch.",
		}, []string{"partition"}),
		Restores: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "processor_restore_total", Help: "Partition restores from the changelog.",
		}),
		RestoreSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "processor_restore_duration_seconds", Help: "Duration of one partition restore.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		RestoredRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "processor_restore_records_total", Help: "Changelog records applied by restores.",
		}),
		StateKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "processor_state_keys", Help: "Keys held in each partition's window state.",
		}, []string{"partition"}),
		Rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "processor_rebalance_total", Help: "Partition assignment changes by kind.",
		}, []string{"kind"}),
		AlertLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "processor_alert_latency_seconds", Help: "Record timestamp of the input record that caused an alert revision to the revision's commit (the append time on LogAppendTime topics; with CreateTime it includes the producer's buffering).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		Restoring: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "processor_restore_in_progress", Help: "Partitions being restored from the changelog now.",
		}),
		Ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "processor_ready", Help: "1 while assigned partitions are restored and consuming (/readyz), else 0.",
		}),
		reg: reg,
	}
	// Every known label value exists from the start at 0, so increase()
	// and rate() see the first event.
	for _, r := range []string{"committed", "aborted", "failed"} {
		m.Transactions.WithLabelValues(r)
	}
	for _, k := range []string{"assigned", "revoked", "lost"} {
		m.Rebalances.WithLabelValues(k)
	}
	for _, st := range []string{"open", "updated", "merged", "closed"} {
		m.Alerts.WithLabelValues(st)
	}
	for _, r := range []string{"too_large", "decode_error", "invalid_field", "schema_unknown", "key_mismatch", "clock_ahead"} {
		m.DeadLetters.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.Records, m.DeadLetters, m.Alerts, m.Transactions, m.CommitSeconds, m.OverlapRecords,
		m.Watermark, m.Restores, m.RestoreSeconds, m.RestoredRecords, m.StateKeys, m.Rebalances, m.AlertLatency, m.Restoring, m.Ready} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return m, nil
}

// Registerer is the registry the collectors are on (for client plugins).
func (m *Metrics) Registerer() prometheus.Registerer { return m.reg }

// Register adds a component's own collector to the same registry.
func (m *Metrics) Register(c prometheus.Collector) error {
	if err := m.reg.Register(c); err != nil {
		return fmt.Errorf("metrics: register: %w", err)
	}
	return nil
}

// SetReady marks the processor ready (assigned partitions restored and consuming).
func (m *Metrics) SetReady(ok bool) {
	m.ready.Store(ok)
	if ok {
		m.Ready.Set(1)
	} else {
		m.Ready.Set(0)
	}
}

// ForgetPartition deletes the per-partition series of a partition this
// instance no longer owns, so no frozen values linger after a rebalance.
func (m *Metrics) ForgetPartition(p string) {
	m.Watermark.DeleteLabelValues(p)
	m.StateKeys.DeleteLabelValues(p)
}

// Serve exposes /metrics, /healthz and /readyz on addr until ctx ends;
// extra maps further paths to handlers (the status page at "/").
func (m *Metrics) Serve(ctx context.Context, addr string, g prometheus.Gatherer, logger *slog.Logger, extra map[string]http.Handler) error {
	return Serve(ctx, addr, g, m.ready.Load, logger, extra)
}

// Serve exposes g on /metrics, /healthz (always 200) and /readyz (200 when
// ready() is true, else 503) plus the extra handlers on addr, until ctx
// ends. Both the processor and the delivery stage use it.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer, ready func() bool, logger *slog.Logger, extra map[string]http.Handler) error {
	mux := http.NewServeMux()
	for path, h := range extra {
		mux.Handle(path, h)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready\n", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	logger.Info("metrics: serving", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		shutCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shutCtx)
		<-errc
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("metrics: serve: %w", err)
	}
}
