package consume

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vibeline/processor/internal/window"
)

// PartitionStatus is what an operator sees of one owned input partition.
// It is updated when a batch commits (and when a partition is restored).
type PartitionStatus struct {
	Topic           string
	Partition       int32
	CommittedOffset int64     // next input offset after the last committed batch
	EndOffset       int64     // last stable offset of the input partition at the last fetch
	Lag             int64     // EndOffset - CommittedOffset
	Watermark       int64     // ms, window.NoWatermark when none
	LastRecord      time.Time // record timestamp of the last record consumed (zero: none yet)
	Keys            int
	Events          int
	OpenIncidents   int
	Restore         string // "restoring", or what the last restore did
	ChangelogNext   int64
}

// Status is a snapshot of the processor for the status page and metrics.
type Status struct {
	Instance   string
	Group      string
	Rule       string
	Mode       string
	Ready      bool
	Partitions []PartitionStatus
	// RecentAlerts are the last committed alert revisions (JSON values),
	// newest first.
	RecentAlerts [][]byte
	Commits      int64
	Aborts       int64
}

const recentAlerts = 20

// statusBoard holds the snapshot; Run's goroutine and the rebalance
// callbacks write it, HTTP handlers and collectors read it.
type statusBoard struct {
	mu     sync.Mutex
	parts  map[pkey]PartitionStatus
	recent [][]byte // ring, newest last
	ready  bool
	cmts   int64
	aborts int64
}

func (b *statusBoard) update(k pkey, fn func(*PartitionStatus)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.parts == nil {
		b.parts = map[pkey]PartitionStatus{}
	}
	s, ok := b.parts[k]
	if !ok {
		s = PartitionStatus{Topic: k.topic, Partition: k.id, Watermark: window.NoWatermark}
	}
	fn(&s)
	b.parts[k] = s
}

func (b *statusBoard) remove(ks []pkey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range ks {
		delete(b.parts, k)
	}
}

func (b *statusBoard) addAlerts(vals [][]byte) {
	if len(vals) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recent = append(b.recent, vals...)
	if n := len(b.recent); n > recentAlerts {
		b.recent = slices.Clone(b.recent[n-recentAlerts:])
	}
}

// Status returns a snapshot of the processor.
func (p *Processor) Status() Status {
	b := &p.board
	b.mu.Lock()
	defer b.mu.Unlock()
	s := Status{
		Instance: p.cfg.InstanceID, Group: p.cfg.GroupID, Mode: p.cfg.Mode,
		Rule:  p.ruleNames(),
		Ready: b.ready, Commits: b.cmts, Aborts: b.aborts,
	}
	for _, ps := range b.parts {
		s.Partitions = append(s.Partitions, ps)
	}
	slices.SortFunc(s.Partitions, func(a, b PartitionStatus) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	for i := len(b.recent) - 1; i >= 0; i-- {
		s.RecentAlerts = append(s.RecentAlerts, b.recent[i])
	}
	return s
}

// ruleNames lists the running rules as "<id> v<version>".
func (p *Processor) ruleNames() string {
	names := make([]string, len(p.tasks))
	for i, t := range p.tasks {
		names[i] = t.rule.Rule.ID + " v" + strconv.Itoa(t.rule.Rule.Version)
	}
	return strings.Join(names, ", ")
}

// collector exports the per-partition gauges that depend on the wall clock
// at scrape time (watermark lag, last-record age) or on the snapshot.
type collector struct {
	p                                   *Processor
	lag, wmLag, lastAge, keys, incident *prometheus.Desc
}

func newCollector(p *Processor) *collector {
	lbl := []string{"partition"}
	return &collector{
		p:        p,
		lag:      prometheus.NewDesc("processor_consumer_lag_records", "Input records not yet committed: last stable offset minus committed offset.", lbl, nil),
		wmLag:    prometheus.NewDesc("processor_watermark_lag_seconds", "Processing time minus the partition's event-time watermark.", lbl, nil),
		lastAge:  prometheus.NewDesc("processor_last_record_age_seconds", "Processing time minus the record timestamp of the last record consumed (a silent source grows it, a slow processor grows lag).", lbl, nil),
		keys:     prometheus.NewDesc("processor_state_events", "Applied events held in the partition's window state.", lbl, nil),
		incident: prometheus.NewDesc("processor_open_incidents", "Open incidents (alerts not yet closed) of the partition.", lbl, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.wmLag
	ch <- c.lastAge
	ch <- c.keys
	ch <- c.incident
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	now := c.p.now()
	for _, ps := range c.p.Status().Partitions {
		lbl := c.p.label(pkey{ps.Topic, ps.Partition})
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(max(ps.Lag, 0)), lbl)
		if ps.Watermark != window.NoWatermark {
			ch <- prometheus.MustNewConstMetric(c.wmLag, prometheus.GaugeValue, now.Sub(time.UnixMilli(ps.Watermark)).Seconds(), lbl)
		}
		if !ps.LastRecord.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.lastAge, prometheus.GaugeValue, now.Sub(ps.LastRecord).Seconds(), lbl)
		}
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(ps.Events), lbl)
		ch <- prometheus.MustNewConstMetric(c.incident, prometheus.GaugeValue, float64(ps.OpenIncidents), lbl)
	}
}
