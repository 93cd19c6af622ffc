package consume

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/dedup"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/internal/state"
	"github.com/vibeline/processor/internal/txn"
	"github.com/vibeline/processor/internal/window"
)

// Options are the injected dependencies of a Processor.
type Options struct {
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	// Now paces commits; it never influences a decision. Default time.Now.
	Now func() time.Time
	// ExtraKgoOpts are appended to the client options (tests, TLS, SASL).
	ExtraKgoOpts []kgo.Opt
	// OnCommit, if set, is called after each committed batch (tests, demo).
	OnCommit func()
	// AbortBatch, if set, is asked before each commit; true aborts the
	// batch instead (fault injection for tests).
	AbortBatch func() bool
	// PurgeEvery overrides PurgeEvery (tests).
	PurgeEvery time.Duration

	// afterJob, if set, is called by a worker after it handled n polled
	// records (tests in this package: when the records are in the open
	// batch).
	afterJob func(n int)
	// onOverlap, if set, is called after each End that ran while records
	// were handled (tests in this package): how many, and whether it
	// committed.
	onOverlap func(records int, committed bool)
	// noKeepers plans no dedup keepers: each aggregating rule persists
	// its own dedup ids, as processors before keepers did (tests in this
	// package: the state an upgrade starts from).
	noKeepers bool
}

// Processor is one running instance of the processor.
type Processor struct {
	cfg       config.Config
	log       *slog.Logger
	met       *metrics.Metrics
	now       func() time.Time
	extra     []kgo.Opt
	onCmt     func()
	abortFn   func() bool
	onOverlap func(records int, committed bool)
	afterJob  func(n int)
	noKeepers bool // Options.noKeepers
	workers   int  // partitions processed in parallel

	// The open batch's partition jobs (dispatch): jobs counts the
	// unfinished ones, running bounds the ones that run at once (workers),
	// queued the dispatched, unfinished ones (the loop waits beyond it).
	jobs    sync.WaitGroup
	running chan struct{}
	queued  chan struct{}

	tasks   []*task            // one per rule
	keepers []*task            // dedup keepers of the rules' dedup groups (planKeepers)
	sources map[string]*source // by subscribed topic
	topics  []string           // subscribed topics, sorted
	primary string             // the first rule's source: its partitions are labelled by number alone
	sess    txn.Session
	fatal   atomic.Pointer[error] // set by a rebalance callback: Run stops with it

	// mu guards parts and fresh: the restore callback (a franz-go
	// goroutine) installs partitions, Run's goroutine uses them.
	mu    sync.Mutex
	parts map[pkey]*part
	fresh map[pkey]bool // newly assigned, awaiting restore

	// Of the open batch (Run's goroutine only):
	inTxn    bool
	txnStart time.Time
	batch    []*part

	board     statusBoard
	storesRef atomic.Pointer[[]*state.Store] // for the scrape-time disk gauge
	kprom     *kprom.Metrics
	rm        ruleMetrics

	fm   *formats // value formats of sources and alerts (docs/AVRO.md)
	gate *gate    // nil without a registry

	lastPurge  time.Time // of repartition topics (Run's goroutine)
	purgeEvery time.Duration
	lastAllow  time.Time // when the loop last let a rebalance run (Run's goroutine)
	// ovFits is how many records the workers handle in the time of an
	// End, as the last overlapped commit measured it (0: not measured;
	// overlapTake; Run's goroutine).
	ovFits float64
}

// ruleMetrics are the per-rule series (label values pre-created at New).
type ruleMetrics struct {
	records *prometheus.CounterVec // rule, outcome
	delay   *prometheus.GaugeVec   // rule, partition: the adaptive watermark's delay
	atRisk  *prometheus.CounterVec // rule
	chunked *prometheus.CounterVec // rule
}

func newRuleMetrics(m *metrics.Metrics, tasks []*task) (ruleMetrics, error) {
	rm := ruleMetrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "processor_rule_records_total", Help: "Input records by rule and outcome, counted at commit (each rule counts every record of its input).",
		}, []string{"rule", "outcome"}),
		delay: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "processor_watermark_delay_seconds", Help: "Current delay of a rule's adaptive watermark per input partition (W = max event time - delay).",
		}, []string{"rule", "partition"}),
		atRisk: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "processor_alerts_at_risk_total", Help: "Events a rule's adaptive watermark applied that its fixed delay would have called too late.",
		}, []string{"rule"}),
		chunked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "processor_state_chunked_writes_total", Help: "State entries larger than one changelog record (512 KiB) written as chunks and a manifest, by rule, counted at commit.",
		}, []string{"rule"}),
	}
	for _, c := range []prometheus.Collector{rm.records, rm.delay, rm.atRisk, rm.chunked} {
		if err := m.Register(c); err != nil {
			return rm, err
		}
	}
	for _, t := range tasks {
		for _, o := range []string{"processed", "filtered", "duplicate", "dead_lettered", "too_late"} {
			rm.records.WithLabelValues(t.ns, o)
		}
		rm.atRisk.WithLabelValues(t.ns)
		rm.chunked.WithLabelValues(t.ns)
	}
	return rm, nil
}

// task is one rule running in this processor: its stage, its local store
// and its changelog. Its input is the rule's source topic, or its
// repartition topic when the rule is repartitioned.
type task struct {
	rule    *rules.Compiled
	hash    string // stored with the state: config.StateHash
	clFixed bool   // cl is topics.changelog, which does not follow the version
	stage   *pipeline.Stage
	ns      string // "<rule id>.v<version>": the rule's name in commit metadata
	input   string // the topic whose records feed the rule's state
	cl      string // changelog topic
	dir     string // local store directory
	store   *state.Store
	restore *changelogReader
	alerts  string
	dlq     string
	late    string
	enc     *avro.AlertEncoder // Avro alerts: set by Run before any record

	// keeper is the dedup keeper of an aggregating rule (the task that
	// persists the dedup store the rule shares with the other rules of its
	// DedupGroup), nil for a sliding rule.
	keeper *task
	// Of a dedup keeper task (rule nil): its group over the input topic
	// (with the members' indexes in src.tasks), the member rules' tasks,
	// and the source topic whose partition count its changelog mirrors.
	group   pipeline.DedupGroup
	members []*task
	like    string
}

// source is one subscribed topic: the rules whose state it feeds, the
// repartitioned rules it feeds through their repartition topics, and the
// dead-letter topics of its records.
type source struct {
	topic    string
	check    *pipeline.Stage // decodes and validates the topic's records
	tasks    []*task         // rules whose state this topic feeds
	keepers  []*task         // dedup keepers of those rules (planKeepers)
	forwards []*task         // repartitioned rules fed from this topic
	dlqs     []string        // distinct dead-letter topics of tasks and forwards
	// dlqRules is, per dlqs topic, the dlq.rules value of the letters
	// written there (pipeline.HeaderDeadLetterRules).
	dlqRules [][]byte
	// markers: the topic is a repartition topic, whose keyless records
	// without value are watermark markers.
	markers    bool
	partitions int // partition count (known once Run checked the topics)
	// prepare: the values are Avro whose writer schemas come from the
	// registry; the gate prepares them before they are decoded.
	prepare bool
}

// New builds a processor for cfg. It does not contact Kafka; Run does.
func New(cfg config.Config, o Options) (*Processor, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Metrics == nil {
		return nil, errors.New("consume: Options.Metrics is required")
	}
	rs, err := cfg.Rules()
	if err != nil {
		return nil, err
	}
	p := &Processor{
		cfg:        cfg,
		log:        o.Logger,
		met:        o.Metrics,
		now:        o.Now,
		extra:      o.ExtraKgoOpts,
		onCmt:      o.OnCommit,
		abortFn:    o.AbortBatch,
		onOverlap:  o.onOverlap,
		afterJob:   o.afterJob,
		noKeepers:  o.noKeepers,
		workers:    runtime.GOMAXPROCS(0),
		running:    make(chan struct{}, runtime.GOMAXPROCS(0)),
		queued:     make(chan struct{}, 4*runtime.GOMAXPROCS(0)),
		purgeEvery: cmp.Or(o.PurgeEvery, PurgeEvery),
		sources:    map[string]*source{},
		parts:      map[pkey]*part{},
		fresh:      map[pkey]bool{},
	}
	if p.fm, err = newFormats(cfg, rs, o.Metrics, o.Logger, o.Now); err != nil {
		return nil, err
	}
	if p.fm.reg != nil {
		if p.gate, err = newGate(p.fm.reg, cfg.Registry, o.Metrics, o.Logger, o.Now); err != nil {
			return nil, err
		}
	}
	if err := p.plan(rs); err != nil {
		return nil, err
	}
	if err := o.Metrics.Register(newCollector(p)); err != nil {
		return nil, err
	}
	if err := o.Metrics.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "processor_state_disk_bytes", Help: "Disk space of the local Pebble stores.",
	}, func() float64 {
		var n uint64
		if sts := p.storesRef.Load(); sts != nil {
			for _, st := range *sts {
				n += st.Stats().DiskBytes
			}
		}
		return float64(n)
	})); err != nil {
		return nil, err
	}
	p.kprom = kprom.NewMetrics("processor_kafka", kprom.Registerer(o.Metrics.Registerer()))
	if p.rm, err = newRuleMetrics(o.Metrics, p.tasks); err != nil {
		return nil, err
	}
	return p, nil
}

// plan builds the tasks and sources of the rules. A repartition topic
// carries its source's values unchanged, so it has the source's format.
func (p *Processor) plan(rs []*rules.Compiled) error {
	skew := p.cfg.Rule.MaxFutureSkew.Milliseconds()
	src := func(topic string, repartitioned bool, t *task) (*source, error) {
		if s := p.sources[topic]; s != nil {
			return s, nil
		}
		from := t.rule.Rule.Source
		st, err := pipeline.NewRuleStage(t.rule, pipeline.Options{MaxFutureSkewMs: skew, Repartitioned: repartitioned, Decoder: p.fm.decoders[from]})
		if err != nil {
			return nil, fmt.Errorf("consume: %w", err)
		}
		s := &source{topic: topic, check: st, prepare: p.fm.prepare[from]}
		p.sources[topic] = s
		p.topics = append(p.topics, topic)
		return s, nil
	}
	for _, r := range rs {
		t := &task{
			rule:    r,
			hash:    p.cfg.StateHash(r),
			clFixed: p.cfg.RulesFile == "" && p.cfg.Topics.Changelog != "",
			ns:      fmt.Sprintf("%s.v%d", r.Rule.ID, r.Rule.Version),
			input:   r.Rule.Source,
			cl:      p.cfg.ChangelogFor(r),
			dir:     RuleStateDir(p.cfg, r),
			alerts:  r.Rule.Outputs.Alerts,
			dlq:     r.Rule.Outputs.DLQ,
			late:    r.Rule.Outputs.Late,
		}
		repart := r.Rule.Repartitioned()
		if repart {
			t.input = p.cfg.RepartitionFor(r)
		}
		o := pipeline.Options{MaxFutureSkewMs: skew, Repartitioned: repart, Decoder: p.fm.decoders[r.Rule.Source]}
		if p.fm.avroAlerts {
			o.EncodeAlert = t.encodeAlert
		}
		st, err := pipeline.NewRuleStage(r, o)
		if err != nil {
			return fmt.Errorf("consume: %w", err)
		}
		t.stage = st
		p.tasks = append(p.tasks, t)
		from, err := src(r.Rule.Source, false, t)
		if err != nil {
			return err
		}
		if !slices.Contains(from.dlqs, t.dlq) {
			from.dlqs = append(from.dlqs, t.dlq)
		}
		if !repart {
			from.tasks = append(from.tasks, t)
			continue
		}
		from.forwards = append(from.forwards, t)
		in, err := src(t.input, true, t)
		if err != nil {
			return err
		}
		in.tasks = append(in.tasks, t)
		in.dlqs = []string{t.dlq}
		in.markers = true
	}
	if err := CheckCommitMetadata(rs); err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	if err := CheckDeadLetterRules(rs); err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	// The dlq.rules value of each source's letters on each of its
	// dead-letter topics (bounded by CheckDeadLetterRules above, so that a
	// letter always fits the producer's records; a repartition topic's
	// names one rule).
	for _, topic := range p.topics {
		s := p.sources[topic]
		s.dlqRules = make([][]byte, len(s.dlqs))
		for i, dlq := range s.dlqs {
			if s.markers { // a repartition topic: its one rule
				s.dlqRules[i] = pipeline.EncodeDeadLetterRules([]pipeline.RuleVersion{{ID: s.tasks[0].rule.Rule.ID, Version: s.tasks[0].rule.Rule.Version}})
			} else {
				s.dlqRules[i] = pipeline.DeadLetterRules(rs, topic, dlq)
			}
		}
	}
	p.primary = rs[0].Rule.Source
	slices.Sort(p.topics)
	for _, topic := range p.topics {
		if p.noKeepers {
			break
		}
		p.planKeepers(p.sources[topic])
	}
	return nil
}

// planKeepers gives each dedup group of a source's aggregating rules
// (pipeline.DedupGroups) a keeper task: the rules of a group share one
// dedup store per input partition, which the keeper persists once for all
// of them in a changelog and local store of its own, instead of each rule
// persisting a copy (docs/ARCHITECTURE.md, "Dedup keepers"). Its name
// depends only on the input topic, the group's share key and chunk, so it
// stays the same while rules join and leave the group.
func (p *Processor) planKeepers(src *source) {
	stages := make([]*pipeline.Stage, len(src.tasks))
	for i, t := range src.tasks {
		stages[i] = t.stage
	}
	for _, g := range pipeline.DedupGroups(stages) {
		id := keeperID(p.cfg.GroupID, src.topic, g)
		kt := &task{
			group: g,
			ns:    keeperNS(id),
			input: src.topic,
			cl:    keeperChangelog(p.cfg, src.topic, g),
			dir:   filepath.Join(p.cfg.StateDir, "dedup-"+id),
			like:  src.tasks[g.Members[0]].rule.Rule.Source,
		}
		for _, i := range g.Members {
			kt.members = append(kt.members, src.tasks[i])
			src.tasks[i].keeper = kt
		}
		src.keepers = append(src.keepers, kt)
		p.keepers = append(p.keepers, kt)
	}
}

// Keeper describes one dedup keeper of a configuration (planKeepers).
type Keeper struct {
	Changelog string   // its changelog topic
	Input     string   // the topic its rules read
	Rules     []string // the rules whose ids it keeps, "<id>.v<version>"
}

// Keepers returns the dedup keepers a processor of cfg runs, with the
// changelog topics it creates for them (`processor rules check --config`).
func Keepers(cfg config.Config) ([]Keeper, error) {
	rs, err := cfg.Rules()
	if err != nil {
		return nil, err
	}
	byInput := map[string][]*rules.Compiled{}
	var inputs []string
	for _, r := range rs {
		in := r.Rule.Source
		if r.Rule.Repartitioned() {
			in = cfg.RepartitionFor(r)
		}
		if byInput[in] == nil {
			inputs = append(inputs, in)
		}
		byInput[in] = append(byInput[in], r)
	}
	slices.Sort(inputs)
	var ks []Keeper
	for _, in := range inputs {
		members := byInput[in]
		for _, g := range pipeline.DedupGroupsOf(members) {
			k := Keeper{Changelog: keeperChangelog(cfg, in, g), Input: in}
			for _, i := range g.Members {
				k.Rules = append(k.Rules, fmt.Sprintf("%s.v%d", members[i].Rule.ID, members[i].Rule.Version))
			}
			ks = append(ks, k)
		}
	}
	return ks, nil
}

// keeperChangelog is the changelog topic of the keeper of group g of the
// rules of cfg reading topic.
func keeperChangelog(cfg config.Config, topic string, g pipeline.DedupGroup) string {
	return fmt.Sprintf("%s.dedup-%s.changelog", cfg.GroupID, keeperID(cfg.GroupID, topic, g))
}

// keeperID names the dedup keeper of group g of the rules of consumer
// group group reading topic: 16 hex digits of a SHA-256 of the consumer
// group, the topic, the share key and the chunk (the consumer group too,
// so that processors of two groups can share a state_dir at once).
func keeperID(group, topic string, g pipeline.DedupGroup) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%d", group, topic, g.Key, g.Chunk))
	return hex.EncodeToString(h[:8])
}

// keeperNS is a keeper's name in commit metadata: "~" is not in a rule id,
// so it never equals a rule's "<id>.v<version>".
func keeperNS(id string) string { return "~dedup-" + id }

// keeperNSBytes is the length of a keeper's name in commit metadata.
const keeperNSBytes = len("~dedup-") + 16

// allTasks returns the rules' tasks, then the dedup keepers'.
func (p *Processor) allTasks() []*task { return append(slices.Clip(p.tasks), p.keepers...) }

// MaxCommitMetadataBytes is Kafka's default offset.metadata.max.bytes: the
// largest commit metadata a broker accepts unless configured otherwise.
const MaxCommitMetadataBytes = 4096

// CheckCommitMetadata refuses a set of rules whose commit metadata could
// exceed MaxCommitMetadataBytes. A committed input offset carries the
// changelog position of every rule that commits offsets of that topic
// (txn.EncodePositions: "v2", then " <rule id>.v<version>=<offset>" per
// rule): the rules reading a source topic directly share its offsets, a
// repartitioned rule commits its own repartition topic's. Kafka refuses
// commit metadata over offset.metadata.max.bytes, which would abort every
// transaction, so the processor refuses such rules at start-up and
// `processor rules check --config` reports them.
func CheckCommitMetadata(rs []*rules.Compiled) error {
	need := map[string]int{}
	ids := map[string][]string{}
	aggs := map[[2]string]int{} // aggregating rules per (topic, dedup share key)
	var topics []string
	for _, r := range rs {
		topic := r.Rule.Source
		if r.Rule.Repartitioned() {
			topic = "repartition topic of " + r.Rule.ID // one rule each
		}
		if _, ok := need[topic]; !ok {
			need[topic] = len("v2")
			topics = append(topics, topic)
		}
		ns := fmt.Sprintf("%s.v%d", r.Rule.ID, r.Rule.Version)
		need[topic] += len(" ") + len(ns) + len("=") + 19 // 19: the longest int64
		ids[topic] = append(ids[topic], r.Rule.ID)
		if r.Rule.Window.Type != rules.Sliding {
			// An aggregating rule's dedup keeper (planKeepers): one per
			// pipeline.DedupGroup, that is per share key and MaxViews rules.
			k := [2]string{topic, pipeline.DedupShareKey(r)}
			if aggs[k]%dedup.MaxViews == 0 {
				need[topic] += len(" ") + keeperNSBytes + len("=") + 19
			}
			aggs[k]++
		}
	}
	for _, topic := range topics {
		if n := need[topic]; n > MaxCommitMetadataBytes {
			return fmt.Errorf("the %d rules reading %s (%s) need up to %d bytes of commit metadata (their changelog positions), more than Kafka's default offset.metadata.max.bytes of %d: use shorter rule ids, or fewer rules per source topic",
				len(ids[topic]), topic, strings.Join(ids[topic], ", "), n, MaxCommitMetadataBytes)
		}
	}
	return nil
}

// CheckDeadLetterRules refuses a set of rules whose dead letters would
// need a dlq.rules header (pipeline.HeaderDeadLetterRules) longer than
// pipeline.MaxDeadLetterRulesBytes: the letters of a source topic's
// records on one dead-letter topic name every rule of that source with
// that dead-letter topic, in place or repartitioned (a repartition topic's
// letters name its one rule). The processor refuses such rules at
// start-up and `processor rules check` reports them.
func CheckDeadLetterRules(rs []*rules.Compiled) error {
	type pair struct{ topic, dlq string }
	seen := map[pair]bool{}
	for _, r := range rs {
		k := pair{r.Rule.Source, r.Rule.Outputs.DLQ}
		if seen[k] {
			continue
		}
		seen[k] = true
		if n := len(pipeline.DeadLetterRules(rs, k.topic, k.dlq)); n > pipeline.MaxDeadLetterRulesBytes {
			return fmt.Errorf("the rules reading %s with dead-letter topic %s need a %s header of %d bytes on each dead letter, more than %d: use shorter rule ids, or fewer rules per source topic and dead-letter topic",
				k.topic, k.dlq, pipeline.HeaderDeadLetterRules, n, pipeline.MaxDeadLetterRulesBytes)
		}
	}
	return nil
}

// StateDir is where the local store of the configuration's first rule
// lives (see RuleStateDir).
func StateDir(cfg config.Config) string {
	rs, err := cfg.Rules()
	if err != nil || len(rs) == 0 {
		return filepath.Join(cfg.StateDir, fmt.Sprintf("%s-v%d", cfg.Rule.ID, cfg.Rule.Version))
	}
	return RuleStateDir(cfg, rs[0])
}

// RuleStateDir is where a rule's local store lives: one directory per rule
// id and version, so two versions never share state.
func RuleStateDir(cfg config.Config, r *rules.Compiled) string {
	return filepath.Join(cfg.StateDir, fmt.Sprintf("%s-v%d", r.Rule.ID, r.Rule.Version))
}

// label is the metric label of an input partition: its number on the
// primary input topic, "<topic>/<number>" on any other.
func (p *Processor) label(k pkey) string {
	if k.topic == p.primary {
		return strconv.Itoa(int(k.id))
	}
	return k.topic + "/" + strconv.Itoa(int(k.id))
}

// Run runs the processor until ctx ends (a clean shutdown: the open batch
// commits, then the member leaves the group) or a fatal error.
//
// A shutdown requested during start-up (before the loop runs) returns nil:
// nothing was consumed, so there is nothing to commit.
func (p *Processor) Run(ctx context.Context) (err error) {
	started := false
	defer func() {
		if err != nil && !started && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			p.log.Info("processor stopped during start-up")
			err = nil
		}
	}()
	startCtx, cancel := context.WithTimeout(ctx, p.cfg.StartupTimeout)
	defer cancel()
	if p.fm.reg != nil {
		defer p.fm.reg.Client().Close()
	}
	if p.fm.reg != nil {
		if err := p.fm.reg.Client().CheckBase(startCtx); err != nil {
			return err
		}
	}
	if err := p.registerAlertSchemas(startCtx); err != nil {
		return err
	}
	counts, err := ensureTopics(startCtx, p.cfg, p.wantTopics(), p.baseOpts(), p.log)
	if err != nil {
		return err
	}
	for topic, src := range p.sources {
		src.partitions = int(counts[topic])
	}
	var stores []*state.Store
	defer func() {
		p.storesRef.Store(nil)
		for _, st := range stores {
			st.Close()
		}
	}()
	manual, markers := map[string]bool{}, map[string]bool{}
	for _, src := range p.sources {
		for _, t := range src.forwards {
			markers[t.input] = true
		}
	}
	for _, t := range p.allTasks() {
		st, err := state.Open(t.dir, p.log)
		if err != nil {
			return err
		}
		stores = append(stores, st)
		// state_dir is not namespaced by group_id: a store left by another
		// group's processor is dropped, not trusted.
		if _, err := st.Claim(t.cl); err != nil {
			return fmt.Errorf("consume: rule %s: %w", t.ns, err)
		}
		t.store = st
		t.restore = &changelogReader{topic: t.cl, opts: p.baseOpts()}
		manual[t.cl] = true
	}
	p.storesRef.Store(&stores)

	opts := append(p.baseOpts(),
		kgo.WithHooks(p.kprom),
		kgo.ConsumerGroup(p.cfg.GroupID),
		kgo.ConsumeTopics(p.topics...),
		// Range assignment gives partition n of every subscribed topic to
		// the same member (all have the same partition count).
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(p.cfg.SessionTimeout),
		kgo.HeartbeatInterval(min(3*time.Second, p.cfg.SessionTimeout/3)),
		kgo.InstanceID(p.cfg.InstanceID),
		kgo.RecordPartitioner(partitioner{manual: manual, markers: markers, def: kgo.StickyKeyPartitioner(nil)}),
		kgo.OnPartitionsAssigned(p.onAssigned),
		kgo.OnPartitionsRevoked(p.onRevoked),
		kgo.OnPartitionsLost(p.onLost),
		kgo.OnOffsetsFetched(p.onFetched),
	)
	switch p.cfg.Mode {
	case config.AtLeastOnce:
		p.sess, err = txn.NewAtLeastOnce(startCtx, opts...)
	default:
		opts = append(opts,
			kgo.TransactionalID(p.cfg.TransactionalID()),
			kgo.TransactionTimeout(p.cfg.TransactionTimeout),
			kgo.ProducerLinger(time.Minute),
			kgo.MaxBufferedRecords(100_000),
		)
		p.sess, err = txn.NewExactlyOnce(startCtx, opts...)
	}
	if err != nil {
		return fmt.Errorf("consume: start (kafka %v): %w", p.cfg.Brokers, err)
	}
	for _, t := range p.tasks {
		p.log.Info("processor rule", "rule", t.rule.Rule.ID, "rule_version", t.rule.Rule.Version, "hash", t.hash[:16],
			"input", t.input, "source", t.rule.Rule.Source, "changelog", t.cl, "alerts", t.alerts)
	}
	for _, t := range p.keepers {
		names := make([]string, len(t.members))
		for i, m := range t.members {
			names[i] = m.ns
		}
		p.log.Info("processor dedup keeper", "keeper", t.ns, "input", t.input, "changelog", t.cl, "rules", names)
	}
	p.log.Info("processor started", "group", p.cfg.GroupID, "instance", p.cfg.InstanceID,
		"mode", p.cfg.Mode, "topics", p.topics, "rules", len(p.tasks))
	if p.gate != nil {
		// The retrier lives exactly as long as the loop.
		rctx, stopRetrier := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.gate.run(rctx)
		}()
		defer func() {
			stopRetrier()
			wg.Wait()
		}()
	}
	started = true
	err = p.loop(ctx)
	p.sess.Close()
	p.setReady(false)
	if err == nil && p.cfg.LeaveGroupOnShutdown {
		p.leaveGroup()
	}
	return err
}

// wantTopics lists the topics the rules read and write, for ensureTopics.
func (p *Processor) wantTopics() []wantTopic {
	var want []wantTopic
	add := func(w wantTopic) {
		for _, x := range want {
			if x.name == w.name {
				return
			}
		}
		want = append(want, w)
	}
	for _, t := range p.tasks {
		src := t.rule.Rule.Source
		add(wantTopic{name: src, source: true})
		if t.input != src {
			add(wantTopic{name: t.input, like: src, mirror: true, configs: repartitionConfigs})
		}
		add(wantTopic{name: t.cl, like: src, mirror: true, configs: changelogConfigs})
		add(wantTopic{name: t.alerts, like: src})
		add(wantTopic{name: t.dlq, like: src})
		add(wantTopic{name: t.late, like: src})
	}
	for _, t := range p.keepers {
		add(wantTopic{name: t.cl, like: t.like, mirror: true, configs: changelogConfigs})
	}
	return want
}

// leaveGroup removes this instance's static membership after a clean
// shutdown, so that the group rebalances now rather than after the session
// timeout. Best effort: on failure the membership simply expires.
func (p *Processor) leaveGroup() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(p.baseOpts()...)
	if err != nil {
		p.log.Warn("consume: leave group", "err", err)
		return
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(p.cfg.GroupID).InstanceIDs(p.cfg.InstanceID).Reason("clean shutdown"))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		p.log.Warn("consume: leave group (the membership expires after session_timeout instead)", "err", err)
		return
	}
	p.log.Info("consume: left the group", "group", p.cfg.GroupID, "instance", p.cfg.InstanceID)
}

func (p *Processor) baseOpts() []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(p.cfg.Brokers...),
		kgo.ClientID("processor-" + p.cfg.InstanceID),
		kgo.ProducerLinger(0),
		// Kafka 4 answers a produce right after a commit with
		// CONCURRENT_TRANSACTIONS now and then; franz-go retries it after a
		// metadata refresh, which the default minimum age (5s) would delay.
		kgo.MetadataMinAge(250 * time.Millisecond),
	}, p.extra...)
}

func (p *Processor) loop(ctx context.Context) error {
	// Outputs are produced, and batches committed, with octx: a shutdown
	// request (ctx cancelled) must not cancel them, since franz-go fails a
	// lingering record whose context ended and the open batch is to commit;
	// but a broker that cannot be reached must not hold the process
	// forever either, so octx ends TransactionTimeout after ctx (when the
	// broker would have aborted the transaction anyway). The commit then
	// fails and Run returns its error; the batch's records are processed
	// again after the restart. (A liveness bound only: no output depends
	// on it.)
	octx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	unwatch := context.AfterFunc(ctx, func() { time.AfterFunc(p.cfg.TransactionTimeout, stop) })
	defer unwatch()
	defer p.drain() // no job outlives the loop, whatever it returns
	for {
		if ctx.Err() != nil {
			return p.shutdown()
		}
		pollCtx, cancel := context.WithTimeout(ctx, p.pollTimeout())
		if p.gate != nil {
			p.gate.pollStarted(cancel)
		}
		fetches := p.sess.Client().PollRecords(pollCtx, p.cfg.MaxPollRecords)
		cancel()
		if p.gate != nil {
			p.gate.pollEnded()
			p.gate.release(p.sess.Client())
		}
		if fetches.IsClientClosed() {
			return errors.New("consume: client closed")
		}
		if err := p.fatal.Load(); err != nil {
			return *err
		}
		p.logFetchErrors(fetches)
		if !fetches.Empty() {
			if err := p.processFetches(ctx, octx, fetches, false); err != nil {
				return err
			}
		}
		if p.inTxn && (p.now().Sub(p.txnStart) >= p.cfg.CommitInterval || ctx.Err() != nil) {
			// While a shutdown is asked for, nothing more is polled.
			if err := p.endBatch(octx, true, nil, ctx.Err() == nil); err != nil {
				return err
			}
		}
		if !p.inTxn {
			// Rebalances run only between batches.
			p.sess.AllowRebalance()
			p.lastAllow = p.now()
		}
	}
}

func (p *Processor) logFetchErrors(fetches kgo.Fetches) {
	fetches.EachError(func(t string, part int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		p.log.Warn("consume: fetch error", "topic", t, "partition", part, "err", err)
	})
}

func (p *Processor) pollTimeout() time.Duration {
	if !p.inTxn {
		return time.Second
	}
	left := p.cfg.CommitInterval - p.now().Sub(p.txnStart)
	return max(left, time.Millisecond)
}

func (p *Processor) shutdown() error {
	if p.inTxn {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.TransactionTimeout)
		defer cancel()
		if err := p.commit(ctx); err != nil {
			return err
		}
	}
	p.sess.AllowRebalance()
	p.log.Info("processor stopped")
	return nil
}

// processFetches hands the polled records to the pipeline (dispatch). Each
// input partition's records are handled by one goroutine at a time, in
// offset order, on that partition's own state; partitions run in parallel
// (up to GOMAXPROCS at once), also with the loop's next polls. Nothing is
// shared between them but the transactional producer, which is safe for
// concurrent use; a key's outputs come from one goroutine at a time, in
// order.
// ctx is Run's (the registry gate's retries stop with it), octx the
// outputs' (loop). With hold, no batch is open (the previous one's End
// runs: endBatch): the records are handled into the next batch, their
// outputs held until it begins.
func (p *Processor) processFetches(ctx, octx context.Context, fetches kgo.Fetches, hold bool) error {
	type work struct {
		pt *part
		fp kgo.FetchTopicPartition
	}
	var todo []work
	var err error
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if err != nil || len(fp.Records) == 0 {
			return
		}
		p.mu.Lock()
		pt := p.parts[pkey{fp.Topic, fp.Partition}]
		p.mu.Unlock()
		if pt == nil {
			err = fmt.Errorf("consume: records of %s/%d arrived before its state was restored", fp.Topic, fp.Partition)
			return
		}
		todo = append(todo, work{pt, fp})
	})
	if err != nil || len(todo) == 0 {
		return err
	}
	if p.gate != nil {
		var held []pkey
		for _, w := range todo {
			if !w.pt.src.prepare {
				continue
			}
			if id, perr := p.gate.prepare(ctx, w.fp.Records); perr != nil {
				p.gate.hold(w.pt.pkey, id, perr)
				held = append(held, w.pt.pkey)
			}
		}
		if len(held) > 0 {
			polled := make([]pkey, len(todo))
			for i, w := range todo {
				polled[i] = w.pt.pkey
			}
			return p.holdBack(octx, held, polled)
		}
	}
	if !p.inTxn && !hold {
		if err := p.sess.Begin(); err != nil {
			return err
		}
		p.inTxn, p.txnStart = true, p.now()
	}
	for _, w := range todo {
		if !w.pt.touched {
			w.pt.touched = true
			p.batch = append(p.batch, w.pt)
		}
	}
	// The jobs' records linger in the producer until the batch's flush
	// (exactly_once), and franz-go fails a buffered record whose context
	// ended: a shutdown (Run's ctx cancelled) must still commit the open
	// batch, so the outputs are produced with octx (see loop).
	for _, w := range todo {
		p.dispatch(w.pt, func() {
			w.pt.holding = hold
			w.pt.endOffset = w.fp.LastStableOffset
			p.handleRecords(octx, w.pt, w.fp.Records)
			w.pt.lastRecord = w.fp.Records[len(w.fp.Records)-1].Timestamp
			if p.afterJob != nil {
				p.afterJob(len(w.fp.Records))
			}
		})
	}
	return nil
}

// dispatch runs job, which handles polled records of pt, on a worker
// goroutine after pt's previously dispatched job, and returns without
// waiting for it, so that the loop polls on while the workers process:
// a poll usually holds one or two partitions' records (franz-go hands out
// a partition's fetched records before the next one's), and waiting for
// each poll would leave the other cores idle. At most p.workers jobs run
// at once; dispatch blocks while 4*p.workers are unfinished. drain waits
// for all of them: the batch ends (commit or abort) only after it.
func (p *Processor) dispatch(pt *part, job func()) {
	if p.workers <= 1 {
		job()
		return
	}
	p.queued <- struct{}{}
	prev, done := pt.lastJob, make(chan struct{})
	pt.lastJob = done
	p.jobs.Add(1)
	go func() {
		defer func() {
			close(done)
			<-p.queued
			p.jobs.Done()
		}()
		if prev != nil {
			<-prev // a partition's records are handled in offset order
		}
		p.running <- struct{}{}
		defer func() { <-p.running }()
		job()
	}()
}

// drain waits until every dispatched job has finished.
func (p *Processor) drain() { p.jobs.Wait() }

// parallel calls fn(0) ... fn(n-1), up to p.workers at once, and returns
// when all have returned.
func (p *Processor) parallel(n int, fn func(i int)) {
	if n == 1 || p.workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	sem := make(chan struct{}, p.workers)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}

// emit produces an output of pt's record into the open batch, or holds it
// until the batch begins (pt.holding).
func (p *Processor) emit(ctx context.Context, pt *part, r *kgo.Record) {
	if pt.holding {
		pt.held = append(pt.held, r)
		return
	}
	p.sess.Produce(ctx, r)
}

// displayValue is what the status page shows of an alert: its JSON.
func displayValue(o pipeline.Output) []byte {
	if o.JSON != nil {
		return o.JSON
	}
	return o.Value
}

func outRecord(topic string, o pipeline.Output) *kgo.Record {
	rec := &kgo.Record{Topic: topic, Key: o.Key, Value: o.Value}
	if len(o.Headers) > 0 {
		rec.Headers = make([]kgo.RecordHeader, len(o.Headers))
		for i, h := range o.Headers {
			rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	return rec
}

// commit ends the open batch: it writes each touched partition's changed
// state of every rule to the rule's changelog, then commits (or, on
// failure, aborts) the transaction, and applies the state to the local
// stores only once Kafka committed it.
func (p *Processor) commit(ctx context.Context) error { return p.endBatch(ctx, true, nil, false) }

// holdBack pauses fetching of held partitions, whose polled records could
// not be prepared (the schema registry is unavailable), and aborts the open
// batch so that no offset past a record that was not processed is
// committed: the consumer rewinds every partition to its committed offset
// (docs/AVRO.md, "Registry outage"). The held partitions are resumed by the
// gate once the registry answers; the others go on at once. polled are
// all the partitions of the poll, held or not: the consumer moved past
// their records too, and at_least_once's abort rewinds only the partitions
// the group has committed before, so each is rewound here by name.
func (p *Processor) holdBack(ctx context.Context, held, polled []pkey) error {
	pause := map[string][]int32{}
	for _, k := range held {
		pause[k.topic] = append(pause[k.topic], k.id)
	}
	p.sess.Client().PauseFetchPartitions(pause)
	if !p.inTxn {
		// The poll moved the consumer past the held records: an empty
		// batch, aborted, rewinds it.
		if err := p.sess.Begin(); err != nil {
			return err
		}
		p.inTxn, p.txnStart = true, p.now()
	}
	return p.endBatch(ctx, false, polled, false)
}

// endBatch commits the open batch when commit is true (and nothing failed),
// else aborts it; an abort also rewinds the partitions of rewind, which the
// batch did not touch (at_least_once rewinds by itself; exactly_once's
// session rewinds every polled partition).
//
// With overlap (exactly_once, no schema registry, no shutdown asked, a
// rebalance let run less than RebalanceEvery ago), the records already
// fetched are polled once the batch is staged and handled while the
// batch's End waits for the broker (the flush and EndTxn, most of a
// commit): they start the next batch, their outputs held until it begins.
// The batch commits its own offsets (for a partition polled again, that
// of the first record polled then, which txn.MetaFunc hands to the
// session's PreTxnCommitFnContext hook), not the polled ones; an abort
// drops both batches' state (reloadAll) and the session rewinds the
// consumer to the committed offsets. What a batch
// decides does not depend on where batches end, so neither does any
// output.
func (p *Processor) endBatch(ctx context.Context, commit bool, rewind []pkey, overlap bool) error {
	p.drain()
	start := p.now()
	batch := p.batch
	p.batch = nil // the next batch's, which may start during End
	// Each partition's entries are encoded, produced and staged in its
	// own Pebble batch per store by one goroutine, the partitions in
	// parallel: a partition's entries touch only its own state and its
	// own changelog partitions, so the records of one changelog
	// partition keep their order, and each batch holds its partition's
	// checkpoint (endBatch commits them after the transaction).
	staged := make([]stagedPart, len(batch))
	if commit { // nothing to write for an abort
		p.markers(ctx)
		p.parallel(len(batch), func(i int) { staged[i] = p.stage(ctx, batch[i]) })
	}
	var stageErr error
	for _, sp := range staged {
		if sp.err != nil {
			stageErr = sp.err
			break
		}
	}
	discard := func() {
		for _, sp := range staged {
			for _, b := range sp.batches {
				b.Discard()
			}
		}
	}
	staging := commit && stageErr == nil
	want := staging && (p.abortFn == nil || !p.abortFn())
	if staging {
		// (For an abort too, which reloads every partition, so that the
		// tests' AbortBatch also aborts batches whose End overlaps.)
		p.settle(batch)
	}
	var pre kgo.Fetches
	if staging && overlap && p.cfg.Mode != config.AtLeastOnce && p.gate == nil &&
		p.now().Sub(p.lastAllow) < RebalanceEvery {
		pre = p.sess.Client().PollRecords(nil, p.overlapTake()) // what is fetched already, at once
		p.logFetchErrors(pre)
	}
	at := firstOffsets(pre)
	meta := func(topic string, partition int32) (kgo.EpochOffset, string, error) {
		next, ok := at[pkey{topic, partition}]
		if !ok {
			next = kgo.EpochOffset{Epoch: -1, Offset: -1} // the polled position
		}
		pt := p.batchPart(batch, pkey{topic, partition})
		if pt == nil {
			return next, "", fmt.Errorf("consume: commit of %s/%d without its state", topic, partition)
		}
		return next, pt.meta(), nil
	}
	var committed bool
	var err, preErr error
	var ended time.Time // when End returned
	if pre.NumRecords() == 0 {
		committed, err = p.sess.End(ctx, want, meta)
		ended = p.now()
	} else {
		// End reads only the staged batch (meta: its changelog
		// positions), the workers only the next batch's records and
		// state, and nothing is produced meanwhile.
		done := make(chan struct{})
		go func() {
			defer close(done)
			committed, err = p.sess.End(ctx, want, meta)
			ended = p.now()
		}()
		t0 := p.now()
		preErr = p.processFetches(ctx, ctx, pre, true)
		p.met.OverlapRecords.Add(float64(pre.NumRecords()))
		p.drain()
		handled := p.now().Sub(t0)
		<-done
		p.ovFits = 0
		if end := ended.Sub(t0); handled > 0 && end > 0 {
			p.ovFits = float64(pre.NumRecords()) * end.Seconds() / handled.Seconds()
		}
		if p.onOverlap != nil {
			p.onOverlap(pre.NumRecords(), committed && err == nil)
		}
	}
	p.inTxn = false
	p.met.CommitSeconds.Observe(ended.Sub(start).Seconds())
	if stageErr != nil {
		discard()
		return fmt.Errorf("consume: stage state: %w", stageErr)
	}
	if err != nil && !errors.Is(err, txn.ErrProduce) {
		discard()
		p.met.Transactions.WithLabelValues("failed").Inc()
		return err
	}
	if !committed {
		discard()
		p.met.Transactions.WithLabelValues("aborted").Inc()
		p.log.Info("consume: batch aborted, rewinding to the committed state", "partitions", len(batch), "err", err)
		aborted := make([]pkey, len(batch), len(batch)+len(rewind))
		for i, pt := range batch {
			aborted[i] = pt.pkey
		}
		aborted = append(aborted, rewind...)
		if p.cfg.Mode == config.AtLeastOnce {
			// Its changelog records were flushed (alo.End): the next
			// commit writes their keys' committed values again.
			for _, sp := range staged {
				rewriteFlushed(sp.entries)
			}
		}
		if err := p.reloadAll(); err != nil { // the next batch's state too
			return err
		}
		if p.cfg.Mode == config.AtLeastOnce {
			p.rewind(aborted)
		}
		return preErr
	}
	var all []*state.Batch
	for i, pt := range batch {
		for _, rp := range pt.all() {
			if b := staged[i].batches[rp.t]; b != nil {
				if err := b.SetCheckpoint(pt.id, rp.nextTarget()); err != nil {
					discard()
					return err
				}
				all = append(all, b)
			}
		}
	}
	// One Pebble store per rule, one batch per store and partition: they
	// commit in parallel (a restore compares each store's checkpoint of a
	// partition with the committed offsets, so a crash may leave any
	// subset of them written).
	commitErrs := make([]error, len(all))
	p.parallel(len(all), func(i int) { commitErrs[i] = all[i].Commit() })
	if err := errors.Join(commitErrs...); err != nil {
		for i, b := range all {
			if commitErrs[i] != nil {
				b.Discard() // a failed Commit did not close it
			}
		}
		return err
	}
	p.mu.Lock()
	for _, pt := range p.parts {
		pt.committedFwd = pt.staged.fwd
	}
	p.mu.Unlock()
	for _, pt := range batch {
		p.countCommitted(pt)
		for _, rp := range pt.rs {
			rp.target = rp.nextTarget()
			rp.acct = rp.stagedAcct
			rp.lastCL = nil
			rp.hashOK = true
			if rp.t.keeper != nil {
				rp.keptBy = rp.t.keeper.ns
			}
			rp.tombstones, rp.rewrite, rp.dropOwn = nil, nil, nil
			rp.commitChunks()
		}
		for _, rp := range pt.ks {
			rp.target = rp.nextTarget()
			rp.lastCL = nil
			rp.tombstones, rp.rewrite = nil, nil
			if rp.chunked > 0 {
				p.rm.chunked.WithLabelValues(rp.t.ns).Add(float64(rp.chunked))
			}
			rp.commitChunks()
		}
		lbl := p.label(pt.pkey)
		wm, st := pt.staged.wm, pt.staged.st
		if wm != window.NoWatermark {
			p.met.Watermark.WithLabelValues(lbl).Set(float64(wm) / 1000)
		}
		p.met.StateKeys.WithLabelValues(lbl).Set(float64(st.Keys))
		p.board.update(pt.pkey, func(ps *PartitionStatus) {
			ps.CommittedOffset = pt.nextOffset(ps.CommittedOffset)
			ps.EndOffset = max(pt.staged.endOffset, ps.EndOffset)
			ps.Lag = ps.EndOffset - ps.CommittedOffset
			ps.Watermark = wm
			ps.LastRecord = pt.staged.lastRecord
			ps.Keys, ps.Events, ps.OpenIncidents = st.Keys, st.Events, st.OpenIncidents
			ps.ChangelogNext = pt.changelogNext()
		})
	}
	now := p.now()
	for _, pt := range batch {
		for _, ts := range pt.done.ts {
			p.met.AlertLatency.Observe(now.Sub(ts).Seconds())
		}
		p.board.addAlerts(pt.done.vals)
		for status, n := range pt.done.alerts {
			p.met.Alerts.WithLabelValues(status).Add(float64(n))
		}
		for reason, n := range pt.done.dlq {
			p.met.DeadLetters.WithLabelValues(reason).Add(float64(n))
		}
		pt.done.reset()
	}
	p.board.mu.Lock()
	p.board.cmts++
	p.board.mu.Unlock()
	p.met.Transactions.WithLabelValues("committed").Inc()
	p.purgeRepartitions(ctx)
	if p.onCmt != nil {
		p.onCmt()
	}
	if preErr != nil {
		return preErr
	}
	if len(p.batch) > 0 { // records handled during End: the next batch begins
		if err := p.sess.Begin(); err != nil {
			return err
		}
		p.inTxn, p.txnStart = true, p.now()
		for _, pt := range p.batch {
			for i, r := range pt.held {
				p.sess.Produce(ctx, r)
				pt.held[i] = nil
			}
			pt.held = pt.held[:0]
		}
	}
	return nil
}

// firstOffsets returns, per partition with records in fs, the offset of its
// first record: what a batch staged before fs were polled commits of it
// (the session would commit the polled position, past the records of the
// next batch).
func firstOffsets(fs kgo.Fetches) map[pkey]kgo.EpochOffset {
	at := map[pkey]kgo.EpochOffset{}
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		// (One poll hands out a partition's records in order; the smallest
		// offset is taken all the same.)
		k, r := pkey{fp.Topic, fp.Partition}, fp.Records[0]
		if cur, ok := at[k]; !ok || r.Offset < cur.Offset {
			at[k] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
		}
	})
	return at
}

// OverlapPolls is how many polls' worth of records (max_poll_records
// each) an overlapped commit takes at most from what the client has
// fetched: the workers handle them while End waits for the broker. One
// poll's worth kept them busy for about a third of a 10-rule commit
// (5,000 records, about 23 ms, against End's 60-70 ms), the rest of End
// idle; franz-go buffers one fetch response per broker (up to 1 MiB per
// partition), so there is usually more. The records taken are bounded,
// and so are the outputs held until the next batch begins.
const OverlapPolls = 8

// overlapTake is how many fetched records an overlapped commit takes:
// about what the workers handle while End runs (ovFits, from the last
// overlapped commit's End and handling rate), in whole polls' worth, at
// least one and at most OverlapPolls (the first time, and when the last
// one measured nothing). Taking more than End lasts would leave the loop waiting for
// the workers' slowest partition after End returned, with cores idle.
// It changes only where batches end, never an output (rule 13).
func (p *Processor) overlapTake() int {
	m := p.cfg.MaxPollRecords
	if p.ovFits <= 0 {
		return OverlapPolls * m
	}
	k := int(math.Ceil(1.25 * p.ovFits / float64(m))) // a margin: End's length varies
	return min(max(k, 1), OverlapPolls) * m
}

// RebalanceEvery bounds how long the commits that overlap the next
// batch (endBatch), which leave no moment between batches, keep a pending
// rebalance waiting: once the loop last let one run longer ago, the next
// commit does not overlap.
const RebalanceEvery = time.Second

// settle takes what the staged batch commits before the next batch may
// change it: its accounting, stats, forwarder state and summary, and
// forgets what its changelog entries wrote (dirty marks). An abort reloads
// every partition (reloadAll), so nothing here needs undoing.
func (p *Processor) settle(batch []*part) {
	for _, pt := range batch {
		for _, rp := range pt.rs {
			rp.stagedAcct, rp.stagedRisk = rp.batchAcct, rp.win.TakeAtRisk()
			rp.win.ClearDirty()
		}
		for _, rp := range pt.ks {
			rp.kp.ClearDirty()
		}
		pt.done, pt.stats = pt.stats, pt.done
		pt.staged.wm, pt.staged.st = pt.summary()
		pt.staged.endOffset, pt.staged.lastRecord = pt.endOffset, pt.lastRecord
		pt.touched = false
	}
	p.mu.Lock()
	for _, pt := range p.parts {
		pt.staged.fwd = pt.fwd
	}
	p.mu.Unlock()
}

// stagedPart is what endBatch staged of one partition: its changelog
// entries (produced into the open transaction), its Pebble batch of each
// store they went to, and the first error.
type stagedPart struct {
	entries []clEntry
	batches map[*task]*state.Batch
	err     error
}

// stage encodes pt's changelog entries, produces them and stages them in
// one batch per store. It touches only pt's state (run for several
// partitions at once: Produce is safe for concurrent use, and Pebble's
// Get and NewBatch too).
func (p *Processor) stage(ctx context.Context, pt *part) stagedPart {
	es, err := pt.changelogEntries()
	sp := stagedPart{entries: es, err: err}
	if err != nil {
		return sp
	}
	size := map[*task]int{}
	for _, e := range es {
		size[e.rp.t] += state.BatchSize(len(e.name), len(e.value))
	}
	for _, e := range es {
		rp := e.rp
		b := sp.batches[rp.t]
		if b == nil {
			if sp.batches == nil {
				sp.batches = make(map[*task]*state.Batch, len(size))
			}
			b = rp.t.store.NewBatchSize(size[rp.t])
			sp.batches[rp.t] = b
		}
		rec := &kgo.Record{Topic: rp.t.cl, Partition: pt.id, Key: e.name, Value: e.value}
		p.sess.Produce(ctx, rec)
		rp.lastCL = rec
		if err := b.Put(pt.id, e.name, e.value); err != nil {
			sp.err = fmt.Errorf("%s/%d: %w", rp.t.cl, pt.id, err)
			return sp
		}
	}
	return sp
}

// IdleAfter is how long a caught-up source partition forwards nothing
// before its forwarder reports it idle, so that it stops holding back the
// watermarks of the repartition topics it feeds (Flink's idleness).
const IdleAfter = 30 * time.Second

// markers reports, to every partition of each repartition topic fed by an
// owned source partition, that source partition's largest forwarded event
// time and whether it is idle, when that changed since the last report. The
// reports are written in the open transaction, after every record it
// forwarded, so they never run ahead of those records.
func (p *Processor) markers(ctx context.Context) {
	now := p.now()
	var out []*kgo.Record
	p.mu.Lock()
	for _, pt := range p.parts {
		src := pt.src
		if len(src.forwards) == 0 || src.partitions == 0 {
			continue
		}
		f := &pt.fwd
		idle := f.next >= pt.endOffset && (f.active.IsZero() || now.Sub(f.active) >= IdleAfter)
		if f.sent && f.sentMax == f.max && f.sentIdle == idle {
			continue
		}
		hs := pipeline.MarkerRecord(pt.id, src.partitions, f.max, idle)
		kh := make([]kgo.RecordHeader, len(hs))
		for i, h := range hs {
			kh[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
		for _, t := range src.forwards {
			for q := 0; q < src.partitions; q++ {
				out = append(out, &kgo.Record{Topic: t.input, Partition: int32(q), Headers: kh})
			}
		}
		f.sent, f.sentMax, f.sentIdle = true, f.max, idle
	}
	p.mu.Unlock()
	// Produced outside p.mu: Produce may wait for buffer space.
	for _, r := range out {
		p.sess.Produce(ctx, r)
	}
}

// PurgeEvery is how often the records of repartition topics that the group
// committed are deleted (Kafka Streams does the same): the topics keep no
// time retention, since forwarded records carry their source's timestamps,
// which may be older than any retention when old input is replayed.
const PurgeEvery = 30 * time.Second

// purgeRepartitions deletes, at most every PurgeEvery, the records of the
// owned repartition partitions below their committed offsets. Best effort:
// a failure is logged and retried at the next period.
func (p *Processor) purgeRepartitions(ctx context.Context) {
	now := p.now()
	if now.Sub(p.lastPurge) < p.purgeEvery {
		return
	}
	p.lastPurge = now
	offs := kadm.Offsets{}
	p.mu.Lock()
	for k, pt := range p.parts {
		if pt.src.markers && len(pt.rs) > 0 && pt.rs[0].acct.NextOffset > 0 {
			offs.Add(kadm.Offset{Topic: k.topic, Partition: k.id, At: pt.rs[0].acct.NextOffset, LeaderEpoch: -1})
		}
	}
	p.mu.Unlock()
	if len(offs) == 0 {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(p.sess.Client()).DeleteRecords(dctx, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		p.log.Warn("consume: purge of consumed repartition records failed (retried later)", "err", err)
	}
}

// meta is the commit metadata of the partition's input offset: the
// changelog position of every rule that reads it, by rule namespace ("v2"),
// also when one rule does: "v1 cl=<n>", which older versions wrote for a
// single rule, does not say whose position it is, so a version change
// would read it as the new version's (restored into the wrong changelog).
func (pt *part) meta() string {
	pos := make(map[string]int64, len(pt.rs)+len(pt.ks))
	for _, rp := range pt.all() {
		pos[rp.t.ns] = rp.nextTarget()
	}
	return txn.EncodePositions(pos)
}

// summary is the partition's watermark (the earliest of its rules') and
// state size (summed over its rules).
func (pt *part) summary() (int64, pipeline.Stats) {
	wm := window.NoWatermark
	var st pipeline.Stats
	for i, rp := range pt.rs {
		if w := rp.win.Watermark(); i == 0 || w < wm {
			wm = w
		}
		s := rp.win.Stats()
		st.Keys += s.Keys
		st.Events += s.Events
		st.Dedup += s.Dedup
		st.OpenIncidents += s.OpenIncidents
	}
	return wm, st
}

// nextOffset is the next input offset after the committed records (the
// accounting's), or def when no rule counts the partition's records.
func (pt *part) nextOffset(def int64) int64 {
	if len(pt.rs) == 0 {
		return def
	}
	return pt.rs[0].acct.NextOffset
}

// changelogNext is the first rule's changelog position, for the status
// page.
func (pt *part) changelogNext() int64 {
	if len(pt.rs) == 0 {
		return 0
	}
	return pt.rs[0].target
}

// batchPart returns the part of k in batch, else the owned one (nil if
// none).
func (p *Processor) batchPart(batch []*part, k pkey) *part {
	for _, pt := range batch {
		if pt.pkey == k {
			return pt
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parts[k]
}

func (p *Processor) countCommitted(pt *part) {
	lbl := p.label(pt.pkey)
	for _, rp := range pt.rs {
		n, o := rp.stagedAcct, rp.acct
		p.met.Records.WithLabelValues(lbl, "processed").Add(float64(n.Processed - o.Processed))
		p.met.Records.WithLabelValues(lbl, "filtered").Add(float64(n.Filtered - o.Filtered))
		p.met.Records.WithLabelValues(lbl, "duplicate").Add(float64(n.Duplicate - o.Duplicate))
		p.met.Records.WithLabelValues(lbl, "dead_lettered").Add(float64(n.DeadLettered - o.DeadLettered))
		p.met.Records.WithLabelValues(lbl, "too_late").Add(float64(n.TooLate - o.TooLate))
		ns := rp.t.ns
		p.rm.records.WithLabelValues(ns, "processed").Add(float64(n.Processed - o.Processed))
		p.rm.records.WithLabelValues(ns, "filtered").Add(float64(n.Filtered - o.Filtered))
		p.rm.records.WithLabelValues(ns, "duplicate").Add(float64(n.Duplicate - o.Duplicate))
		p.rm.records.WithLabelValues(ns, "dead_lettered").Add(float64(n.DeadLettered - o.DeadLettered))
		p.rm.records.WithLabelValues(ns, "too_late").Add(float64(n.TooLate - o.TooLate))
		if rp.chunked > 0 {
			p.rm.chunked.WithLabelValues(ns).Add(float64(rp.chunked))
		}
		if k := rp.stagedRisk; k > 0 {
			p.rm.atRisk.WithLabelValues(ns).Add(float64(k))
		}
		if d, ok := rp.win.DelayMs(); ok {
			p.rm.delay.WithLabelValues(ns, lbl).Set(float64(d) / 1000)
		}
	}
}

// rewind points the consumer of each partition at the offset after the last
// record its committed state counted. The transactional session rewinds by
// itself; a plain client's CommittedOffsets leaves out partitions the group
// never committed, which would skip the aborted batch's records there.
func (p *Processor) rewind(ks []pkey) {
	to := map[string]map[int32]kgo.EpochOffset{}
	p.mu.Lock()
	for _, k := range ks {
		pt := p.parts[k]
		if pt == nil {
			continue
		}
		next := pt.committedFwd.next // a source only repartitioned rules read
		if len(pt.rs) > 0 {
			// Not before where the partition was restored: a rule added
			// to a running group (or a version changed without replay)
			// has no accounting yet and starts at the group's offset.
			next = max(pt.rs[0].acct.NextOffset, pt.restoredAt)
		} else if len(pt.src.forwards) == 0 {
			continue
		}
		if to[k.topic] == nil {
			to[k.topic] = map[int32]kgo.EpochOffset{}
		}
		to[k.topic][k.id] = kgo.EpochOffset{Epoch: -1, Offset: next}
	}
	p.mu.Unlock()
	p.sess.Client().SetOffsets(to)
}

// reloadAll replaces every owned partition's in-memory state by the
// committed state of the local stores (after an abort).
func (p *Processor) reloadAll() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, pt := range p.parts {
		n, err := loadPart(pt.src, k)
		if err != nil {
			return err
		}
		n.endOffset, n.fwd, n.committedFwd, n.restoredAt = pt.endOffset, pt.committedFwd, pt.committedFwd, pt.restoredAt
		for i, rp := range n.rs {
			rp.tombstones = pt.rs[i].tombstones // not committed yet
			rp.rewrite = pt.rs[i].rewrite
		}
		for i, rp := range n.ks {
			rp.tombstones = pt.ks[i].tombstones
			rp.rewrite = pt.ks[i].rewrite
		}
		p.parts[k] = n
	}
	p.batch = p.batch[:0]
	p.board.mu.Lock()
	p.board.aborts++
	p.board.mu.Unlock()
	return nil
}

// Rebalance callbacks. With BlockRebalanceOnPoll, assigned/revoked/lost run
// only between batches, on a franz-go goroutine while Run's goroutine waits
// in PollRecords.

func keys(m map[string][]int32) []pkey {
	var ks []pkey
	for topic, ids := range m {
		for _, id := range ids {
			ks = append(ks, pkey{topic, id})
		}
	}
	return ks
}

// onAssigned receives the member's whole assignment (eager balancing: every
// rebalance revokes everything first). A partition held from before that
// is not in it is dropped here as well as in onRevoked: franz-go's
// transactional session calls onRevoked only once between two ends of a
// transaction, so after two rebalances without a commit in between (a quiet
// input during a rolling restart) the second revoke never reaches us, and
// a partition given away in it would otherwise stay in p.parts, its state
// reported (watermark markers, status, metrics) by a member that no longer
// owns it.
func (p *Processor) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	now := map[pkey]bool{}
	for _, k := range keys(assigned) {
		now[k] = true
	}
	p.mu.Lock()
	var stale []pkey
	for k := range p.parts {
		if !now[k] {
			stale = append(stale, k)
		}
	}
	for k := range p.fresh {
		if !now[k] && p.parts[k] == nil {
			stale = append(stale, k)
		}
	}
	p.mu.Unlock()
	if len(stale) > 0 {
		p.drop(stale)
		if p.gate != nil {
			p.gate.forget(stale)
		}
		p.log.Info("consume: partitions no longer assigned dropped", "partitions", stale)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range now {
		// Whatever we held for it is stale: another member may have
		// committed since. It is restored when its offsets are fetched.
		delete(p.parts, k)
		p.fresh[k] = true
	}
	p.met.Rebalances.WithLabelValues("assigned").Inc()
	p.setReady(false)
	p.log.Info("consume: partitions assigned", "partitions", assigned)
}

func (p *Processor) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	p.drop(keys(revoked))
	if p.gate != nil {
		p.gate.forget(keys(revoked))
	}
	p.met.Rebalances.WithLabelValues("revoked").Inc()
	p.log.Info("consume: partitions revoked", "partitions", revoked)
}

func (p *Processor) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	p.drop(keys(lost))
	if p.gate != nil {
		p.gate.forget(keys(lost))
	}
	p.met.Rebalances.WithLabelValues("lost").Inc()
	p.log.Warn("consume: partitions lost", "partitions", lost)
}

func (p *Processor) drop(ks []pkey) {
	p.board.remove(ks)
	for _, k := range ks {
		p.met.ForgetPartition(p.label(k))
		for _, t := range p.tasks {
			p.rm.delay.DeleteLabelValues(t.ns, p.label(k))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range ks {
		delete(p.parts, k)
		delete(p.fresh, k)
	}
}

// onFetched restores every rule's state of every newly assigned partition
// to exactly the changelog position committed with its input offset, before
// any of its records is fetched.
func (p *Processor) onFetched(ctx context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	type committedOffset struct {
		offset int64
		meta   *string
	}
	found := map[pkey]committedOffset{}
	for _, t := range resp.Topics {
		for _, pp := range t.Partitions {
			found[pkey{t.Topic, pp.Partition}] = committedOffset{pp.Offset, pp.Metadata}
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, pp := range t.Partitions {
				found[pkey{t.Topic, pp.Partition}] = committedOffset{pp.Offset, pp.Metadata}
			}
		}
	}
	p.mu.Lock()
	var todo []pkey
	for k := range p.fresh {
		todo = append(todo, k)
	}
	p.mu.Unlock()
	slices.SortFunc(todo, func(a, b pkey) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.id - b.id)
	})
	for _, k := range todo {
		src := p.sources[k.topic]
		if src == nil {
			continue
		}
		co, ok := found[k]
		committed := ok && co.offset >= 0
		var v1 int64
		var v1ok bool
		var pos map[string]int64
		if committed && co.meta != nil {
			v1, v1ok = txn.DecodeMeta(*co.meta)
			pos, _ = txn.DecodePositions(*co.meta)
		}
		start := p.now()
		p.board.update(k, func(ps *PartitionStatus) { ps.Restore = "restoring" })
		scratch := map[*task][][]byte{} // changelog keys to delete at the first commit
		past := map[*task][][]byte{}    // changelog keys to rewrite at the first commit
		resumed := map[*task]bool{}     // restored to a non-empty changelog's end without a position
		for _, t := range src.tasks {
			var target int64
			var fromScratch bool
			n, has := pos[t.ns]
			// Whether the changelog holds position n at all: its high
			// watermark, not its last stable offset, which a zombie's open
			// transaction may hold back (Read then waits for it). Asked
			// also when the local store is at n: a changelog deleted and
			// recreated since must stop the processor, not start a new
			// history that only this replica's store knows the past of.
			holds := func(n int64) (bool, int64, error) {
				hw, err := t.restore.highWater(ctx, k.id)
				return n <= hw, hw, err
			}
			if !has && v1ok && len(src.tasks) == 1 {
				// Written by an older version for the one rule it ran:
				// this rule's only if its changelog holds the position
				// (else it is another version's: below).
				ok, hw, err := holds(v1)
				if err != nil {
					return p.fail(err)
				}
				if n, has = v1, ok; !ok {
					p.log.Warn("consume: committed offset carries a v1 changelog position beyond this rule's changelog: it is another rule version's",
						"topic", k.topic, "partition", k.id, "rule", t.ns, "position", v1, "changelog_high_watermark", hw)
				}
			}
			switch {
			case has:
				target = n
				ok, hw, err := holds(target)
				if err != nil {
					return p.fail(err)
				}
				if !ok {
					// Waiting would hang the member for ever: the
					// changelog no longer holds what was committed.
					return p.fail(fmt.Errorf("%w: rule %s, partition %s/%d: the committed offset's state is at changelog position %d, but %s/%d ends at %d: the changelog topic was deleted, recreated or truncated; restore it, or bump the rule's version and replay (docs/RUNBOOK.md, \"Replay after a rule change\")",
						errFatal, t.ns, k.topic, k.id, target, t.cl, k.id, hw))
				}
			case committed:
				end, err := t.restore.end(ctx, k.id)
				if err != nil {
					return p.fail(err)
				}
				p.log.Warn("consume: committed offset carries no changelog position of this rule; restoring to the changelog's end (a rule added to a running group starts from the group's offsets)",
					"topic", k.topic, "partition", k.id, "rule", t.ns, "offset", co.offset, "changelog_end", end)
				target, resumed[t] = end, end > 0
			default:
				// No committed offset: the partition starts from its first
				// record with empty state, from the changelog's current end.
				end, err := t.restore.end(ctx, k.id)
				if err != nil {
					return p.fail(err)
				}
				target, fromScratch = end, true
			}
			old, err := p.restorePartition(ctx, t, k.id, target, fromScratch)
			if err != nil {
				return p.fail(err)
			}
			scratch[t] = old
			if has {
				// Records past the committed position are of batches
				// whose offsets were never committed (at_least_once
				// flushed them, then aborted; also under a mode that
				// was at_least_once before a restart): the first commit
				// writes their keys' committed values again
				// (rulePart.rewrite). Under exactly_once alone, aborted
				// transactions' records are not read, and none is left.
				if past[t], err = keysPastEnd(ctx, t, k.id, target); err != nil {
					return p.fail(err)
				}
			}
		}
		for _, t := range src.keepers {
			// A dedup keeper: at the position the group's commit names,
			// or, without one (its first commit, the processor before it
			// ran the group, or a tool reset the offsets), from empty state
			// at its changelog's end, the history deleted at the first
			// commit. Never resumed at the end without a position: under
			// at_least_once that could hold ids of an aborted batch. Its
			// members' dedup ids then come from their own entries (written
			// before keepers) or are none (checked after the load).
			target, has := pos[t.ns]
			if has {
				hw, err := t.restore.highWater(ctx, k.id)
				if err != nil {
					return p.fail(err)
				}
				if target > hw {
					return p.fail(fmt.Errorf("%w: dedup keeper %s, partition %s/%d: the committed offset's state is at changelog position %d, but %s/%d ends at %d: the changelog topic was deleted, recreated or truncated; restore it, or bump the versions of its rules and replay (docs/RUNBOOK.md, \"Replay after a rule change\")",
						errFatal, t.ns, k.topic, k.id, target, t.cl, k.id, hw))
				}
			} else {
				end, err := t.restore.end(ctx, k.id)
				if err != nil {
					return p.fail(err)
				}
				target = end
			}
			old, err := p.restorePartition(ctx, t, k.id, target, !has)
			if err != nil {
				return p.fail(err)
			}
			scratch[t] = old
			if has { // as for a rule, above
				if past[t], err = keysPastEnd(ctx, t, k.id, target); err != nil {
					return p.fail(err)
				}
			}
		}
		pt, err := loadPart(src, k)
		if err != nil {
			// Not a Kafka hiccup: state that cannot be loaded (or belongs
			// to another definition of the rule) stays so; retrying would
			// hang. Stop with the reason.
			return p.fail(fmt.Errorf("%w: %w", errFatal, err))
		}
		// A rule restored to its changelog's end without a position in
		// the group's commit: its state must end where the group's offset
		// is, or be none at all (a rule added to the group, or a first
		// batch that aborted: exactly_once never commits its records).
		again := false
		alo := p.cfg.Mode == config.AtLeastOnce
		for _, rp := range pt.rs {
			a := rp.acct
			if !resumed[rp.t] || a.NextOffset == co.offset || (a.NextOffset == 0 && !alo) {
				continue
			}
			if alo && (a.NextOffset == 0 || (a.NextOffset > co.offset && a.NextOffset-a.Records >= co.offset)) {
				// at_least_once flushes an aborted batch's changelog
				// records: state that began at or after the group's offset
				// (or has no accounting: the flush stopped before it) is
				// an aborted first batch, not this rule's committed state.
				// Start it from empty state, as a rule added to the group.
				// State that began before the offset is committed history
				// (refused below: a tool moved the offsets back).
				p.log.Warn("consume: the changelog is ahead of the group's offset, which names no position of this rule (an aborted first batch): starting the rule from empty state",
					"rule", rp.t.ns, "topic", k.topic, "partition", k.id, "state_next_offset", rp.acct.NextOffset, "offset", co.offset)
				end, err := rp.t.restore.end(ctx, k.id)
				if err != nil {
					return p.fail(err)
				}
				old, err := p.restorePartition(ctx, rp.t, k.id, end, true)
				if err != nil {
					return p.fail(err)
				}
				scratch[rp.t], again = old, true
				continue
			}
			// State of this rule version exists, but the group's offset
			// was committed by something else (another version or
			// configuration of the group ran in between, or a tool reset
			// the offsets): resuming there would skip, or count twice,
			// the records between the two.
			what := "skip"
			if rp.acct.NextOffset > co.offset {
				what = "count twice"
			}
			return p.fail(fmt.Errorf("%w: rule %s, partition %s/%d: its state (changelog %s) ends at input offset %d, but the group's committed offset is %d and names no position of this rule (another rule version or configuration ran the group since, or the offsets were reset by a tool); resuming would %s the records in between: bump the rule's version and replay (processor replay)",
				errFatal, rp.t.ns, k.topic, k.id, rp.t.cl, rp.acct.NextOffset, co.offset, what))
		}
		if again {
			if pt, err = loadPart(src, k); err != nil {
				return p.fail(fmt.Errorf("%w: %w", errFatal, err))
			}
		}
		for _, rp := range pt.all() {
			rp.tombstones = append(rp.tombstones, scratch[rp.t]...) // after orphan chunks (loadRulePart)
			rp.rewrite = past[rp.t]
		}
		for _, kp := range pt.ks {
			if _, has := pos[kp.t.ns]; has {
				continue
			}
			// Started empty: a member whose committed state says the
			// keeper holds its ids would run without them.
			for _, m := range kp.t.group.Members {
				if rp := pt.rs[m]; rp.keptBy != "" {
					return p.fail(fmt.Errorf("%w: rule %s, partition %s/%d: its dedup ids are kept by %s, but the group's committed offset names no position of it (the offsets were reset by a tool, or committed by another configuration): bump the rule's version and replay (processor replay)",
						errFatal, rp.t.ns, k.topic, k.id, kp.t.ns))
				}
			}
		}
		pt.restoredAt = max(co.offset, 0)
		if len(src.forwards) > 0 {
			// Whether it is caught up (idle) is known before any fetch.
			if pt.endOffset, err = p.endOffset(ctx, k); err != nil {
				return p.fail(err)
			}
			pt.fwd.next = max(co.offset, 0)
			pt.committedFwd = pt.fwd
		}
		wm, st := pt.summary()
		p.board.update(k, func(ps *PartitionStatus) {
			ps.Restore = fmt.Sprintf("restored %d rules in %s", len(pt.rs), p.now().Sub(start).Round(time.Millisecond))
			ps.CommittedOffset = max(co.offset, 0)
			ps.Watermark = wm
			ps.Keys, ps.Events, ps.OpenIncidents = st.Keys, st.Events, st.OpenIncidents
			ps.ChangelogNext = pt.changelogNext()
		})
		p.met.Restores.Inc()
		p.met.RestoreSeconds.Observe(p.now().Sub(start).Seconds())
		p.mu.Lock()
		if p.fresh[k] {
			delete(p.fresh, k)
			p.parts[k] = pt
		}
		p.mu.Unlock()
	}
	p.setReady(true)
	return nil
}

// endOffset returns an input partition's last stable offset.
func (p *Processor) endOffset(ctx context.Context, k pkey) (int64, error) {
	c := changelogReader{topic: k.topic, opts: p.baseOpts()}
	return c.end(ctx, k.id)
}

// errFatal marks errors of a rebalance callback that stop the processor.
var errFatal = errors.New("consume: cannot go on")

// fail records a fatal error of a rebalance callback: Run stops with it
// after the poll in progress.
func (p *Processor) fail(err error) error {
	if errors.Is(err, errFatal) {
		p.fatal.CompareAndSwap(nil, &err)
	}
	return err
}

// restorePartition brings a rule's local state of partition id to the
// changelog position target: from scratch (empty state at target), or by
// reading the changelog from the local checkpoint.
//
// From scratch, the changelog below target is an earlier history (the
// group's offsets expired or were deleted, the changelog kept): it returns
// the keys live at target, which the partition's first commit deletes
// (tombstones before its own entries). Otherwise a later restore that
// starts below target (local state lost, or another replica's older
// checkpoint) would bring back whatever the new history never rewrote.
func (p *Processor) restorePartition(ctx context.Context, t *task, id int32, target int64, fromScratch bool) ([][]byte, error) {
	p.met.Restoring.Inc()
	defer p.met.Restoring.Dec()
	start := p.now()
	if fromScratch {
		var old [][]byte
		if target > 0 {
			live := map[string]bool{}
			var hash []byte
			err := t.restore.Read(ctx, id, 0, target, func(rec state.ChangelogRecord) error {
				live[string(rec.Key)] = rec.Value != nil
				if string(rec.Key) == changelogHash {
					hash = bytes.Clone(rec.Value)
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
			// The history is deleted, not loaded, but it names the
			// definition that wrote this version's alerts so far: a
			// changed rule must not add alerts of another definition
			// under the same ids (the group's offsets expired or were
			// deleted, the rule edited without a version bump).
			if same, _ := t.hashMatches(string(hash)); len(hash) > 0 && !same {
				return nil, fmt.Errorf("%w: %w: rule %s version %d: the earlier history of changelog %s (partition %d) was written by a rule with hash %.16s, this one has hash %.16s (the hash covers the rule's definition and rule.max_future_skew); %s",
					errFatal, ErrRuleChanged, t.rule.Rule.ID, t.rule.Rule.Version, t.cl, id, strings.TrimPrefix(string(hash), stateHashPrefix), t.hash, t.changedHint())
			}
			for k, ok := range live {
				if ok {
					old = append(old, []byte(k))
				}
			}
			slices.SortFunc(old, bytes.Compare)
			p.log.Warn("consume: no committed offset, but the changelog has an earlier history: starting from empty state, its keys deleted at the first commit",
				"rule", t.ns, "partition", id, "changelog_end", target, "keys", len(old))
		}
		if err := t.store.Drop(id); err != nil {
			return nil, err
		}
		b := t.store.NewBatch()
		if err := b.SetCheckpoint(id, target); err != nil {
			b.Discard()
			return nil, err
		}
		return old, b.Commit()
	}
	st, err := t.store.Restore(ctx, id, target, t.restore)
	if err != nil {
		return nil, err
	}
	p.met.RestoredRecords.Add(float64(st.Records))
	p.log.Info("consume: partition restored", "rule", t.ns, "partition", id, "from", st.From, "to", st.To,
		"records", st.Records, "full", st.Full, "duration", p.now().Sub(start))
	return nil, nil
}

func (p *Processor) setReady(ok bool) {
	p.met.SetReady(ok)
	p.board.mu.Lock()
	p.board.ready = ok
	p.board.mu.Unlock()
}

// partitioner sends changelog records to the partition they name and keys
// every other record by its key (Kafka's murmur2, so a key's alerts stay in
// order on one partition, and a repartitioned key always lands on the same
// partition of its repartition topic), except the watermark markers of a
// repartition topic (markers), which go to the partition they name: a
// marker reports one source partition to every partition of the topic.
type partitioner struct {
	manual  map[string]bool
	markers map[string]bool
	def     kgo.Partitioner
}

func (pr partitioner) ForTopic(t string) kgo.TopicPartitioner {
	if pr.manual[t] {
		return kgo.ManualPartitioner().ForTopic(t)
	}
	if pr.markers[t] {
		return markerPartitioner{pr.def.ForTopic(t)}
	}
	return pr.def.ForTopic(t)
}

// markerPartitioner partitions a repartition topic: a marker (isMarker) to
// the partition it names, every forwarded record by its key (keyed, so def
// hashes it: its sticky choice for keyless records is never asked for).
type markerPartitioner struct{ def kgo.TopicPartitioner }

func (markerPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (mp markerPartitioner) Partition(r *kgo.Record, n int) int {
	if isMarker(r) {
		return int(r.Partition)
	}
	return mp.def.Partition(r, n)
}

// isMarker reports whether r is a watermark marker, by the rule its
// readers use (pipeline.IsMarker: no key, no value, the marker's source
// header first). A forwarded record always has a key (the rule's key
// field, which validation requires).
func isMarker(r *kgo.Record) bool {
	return len(r.Key) == 0 && len(r.Value) == 0 && len(r.Headers) > 0 && r.Headers[0].Key == pipeline.HeaderMarkerSource
}
