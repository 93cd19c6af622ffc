package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/pipeline"
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
}

// Processor is one running instance of the processor.
type Processor struct {
	cfg     config.Config
	log     *slog.Logger
	met     *metrics.Metrics
	now     func() time.Time
	extra   []kgo.Opt
	onCmt   func()
	abortFn func() bool
	stage   *pipeline.Stage
	workers int // partitions processed in parallel
	store   *state.Store
	sess    txn.Session
	restore *changelogReader
	input   string
	cl      string // changelog topic

	// mu guards parts and fresh: the restore callback (a franz-go
	// goroutine) installs partitions, Run's goroutine uses them.
	mu    sync.Mutex
	parts map[int32]*part
	fresh map[int32]bool // newly assigned, awaiting restore

	// Of the open batch (Run's goroutine only):
	inTxn    bool
	txnStart time.Time
	batch    []*part

	board    statusBoard
	storeRef atomic.Pointer[state.Store] // for the scrape-time disk gauge
	kprom    *kprom.Metrics
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
	stage, err := pipeline.NewStage(cfg.Rule)
	if err != nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	p := &Processor{
		cfg:     cfg,
		log:     o.Logger,
		met:     o.Metrics,
		now:     o.Now,
		extra:   o.ExtraKgoOpts,
		onCmt:   o.OnCommit,
		abortFn: o.AbortBatch,
		stage:   stage,
		workers: runtime.GOMAXPROCS(0),
		input:   cfg.Topics.Input,
		cl:      cfg.ChangelogTopic(),
		parts:   map[int32]*part{},
		fresh:   map[int32]bool{},
	}
	if err := o.Metrics.Register(newCollector(p)); err != nil {
		return nil, err
	}
	if err := o.Metrics.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "processor_state_disk_bytes", Help: "Disk space of the local Pebble store.",
	}, func() float64 {
		if st := p.storeRef.Load(); st != nil {
			return float64(st.Stats().DiskBytes)
		}
		return 0
	})); err != nil {
		return nil, err
	}
	p.kprom = kprom.NewMetrics("processor_kafka", kprom.Registerer(o.Metrics.Registerer()))
	return p, nil
}

// StateDir is where the rule's local store lives: one directory per rule id
// and version, so two versions never share state.
func StateDir(cfg config.Config) string {
	return filepath.Join(cfg.StateDir, fmt.Sprintf("%s-v%d", cfg.Rule.ID, cfg.Rule.Version))
}

// Run runs the processor until ctx ends (a clean shutdown: the open batch
// commits, then the member leaves the group) or a fatal error.
func (p *Processor) Run(ctx context.Context) error {
	startCtx, cancel := context.WithTimeout(ctx, p.cfg.StartupTimeout)
	defer cancel()
	if err := ensureTopics(startCtx, p.cfg, p.baseOpts(), p.log); err != nil {
		return err
	}
	st, err := state.Open(StateDir(p.cfg), p.log)
	if err != nil {
		return err
	}
	p.store = st
	p.storeRef.Store(st)
	defer func() {
		p.storeRef.Store(nil)
		st.Close()
	}()
	p.restore = &changelogReader{topic: p.cl, opts: p.baseOpts()}

	opts := append(p.baseOpts(),
		kgo.WithHooks(p.kprom),
		kgo.ConsumerGroup(p.cfg.GroupID),
		kgo.ConsumeTopics(p.input),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(p.cfg.SessionTimeout),
		kgo.HeartbeatInterval(min(3*time.Second, p.cfg.SessionTimeout/3)),
		kgo.InstanceID(p.cfg.InstanceID),
		kgo.RecordPartitioner(partitioner{manual: p.cl, def: kgo.StickyKeyPartitioner(nil)}),
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
		)
		p.sess, err = txn.NewExactlyOnce(startCtx, opts...)
	}
	if err != nil {
		return fmt.Errorf("consume: start (kafka %v): %w", p.cfg.Brokers, err)
	}
	p.log.Info("processor started", "group", p.cfg.GroupID, "instance", p.cfg.InstanceID,
		"mode", p.cfg.Mode, "topic", p.input, "changelog", p.cl, "rule", p.cfg.Rule.ID, "rule_version", p.cfg.Rule.Version)
	err = p.loop(ctx)
	p.sess.Close()
	p.setReady(false)
	if err == nil && p.cfg.LeaveGroupOnShutdown {
		p.leaveGroup()
	}
	return err
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
	for {
		if ctx.Err() != nil {
			return p.shutdown()
		}
		pollCtx, cancel := context.WithTimeout(ctx, p.pollTimeout())
		fetches := p.sess.Client().PollRecords(pollCtx, p.cfg.MaxPollRecords)
		cancel()
		if fetches.IsClientClosed() {
			return errors.New("consume: client closed")
		}
		fetches.EachError(func(t string, part int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			p.log.Warn("consume: fetch error", "topic", t, "partition", part, "err", err)
		})
		if !fetches.Empty() {
			if err := p.processFetches(ctx, fetches); err != nil {
				return err
			}
		}
		if p.inTxn && (p.now().Sub(p.txnStart) >= p.cfg.CommitInterval || ctx.Err() != nil) {
			if err := p.commit(context.WithoutCancel(ctx)); err != nil {
				return err
			}
		}
		if !p.inTxn {
			// Rebalances run only between batches.
			p.sess.AllowRebalance()
		}
	}
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

// processFetches runs the polled records through the pipeline. Each input
// partition's records are handled by one goroutine, in offset order, on
// that partition's own state; partitions run in parallel (up to GOMAXPROCS
// at once). Nothing is shared between them but the transactional producer,
// which is safe for concurrent use; a key's outputs come from one goroutine,
// so their order is kept.
func (p *Processor) processFetches(ctx context.Context, fetches kgo.Fetches) error {
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
		pt := p.parts[fp.Partition]
		p.mu.Unlock()
		if pt == nil {
			err = fmt.Errorf("consume: records of partition %d arrived before its state was restored", fp.Partition)
			return
		}
		todo = append(todo, work{pt, fp})
	})
	if err != nil || len(todo) == 0 {
		return err
	}
	if !p.inTxn {
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
	run := func(w work) {
		w.pt.endOffset = w.fp.LastStableOffset
		for _, r := range w.fp.Records {
			p.handle(ctx, w.pt, r)
		}
		w.pt.lastRecord = w.fp.Records[len(w.fp.Records)-1].Timestamp
	}
	if len(todo) == 1 || p.workers <= 1 {
		for _, w := range todo {
			run(w)
		}
		return nil
	}
	sem := make(chan struct{}, p.workers)
	var wg sync.WaitGroup
	for _, w := range todo {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			run(w)
		}()
	}
	wg.Wait()
	return nil
}

// handle runs one input record through the pipeline stage and produces its
// outputs into the open batch.
func (p *Processor) handle(ctx context.Context, pt *part, r *kgo.Record) {
	in := pipeline.Input{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Key: r.Key, Value: r.Value, TimestampMs: r.Timestamp.UnixMilli(),
	}
	if len(r.Headers) > 0 {
		in.Headers = make([]pipeline.Header, len(r.Headers))
		for i, h := range r.Headers {
			in.Headers[i] = pipeline.Header{Key: h.Key, Value: h.Value}
		}
	}
	p.stage.Process(pt.win, in, &pt.batchAcct, func(o pipeline.Output) {
		rec := &kgo.Record{Key: o.Key, Value: o.Value}
		switch o.Kind {
		case pipeline.Alert:
			rec.Topic = p.cfg.Topics.Alerts
			pt.stats.alerts[o.Status]++
			pt.stats.vals = append(pt.stats.vals, o.Value)
			pt.stats.ts = append(pt.stats.ts, r.Timestamp)
		case pipeline.DeadLetter:
			rec.Topic = p.cfg.Topics.DLQ
			pt.stats.dlq[o.Reason]++
		case pipeline.TooLate:
			rec.Topic = p.cfg.Topics.Late
		}
		if len(o.Headers) > 0 {
			rec.Headers = make([]kgo.RecordHeader, len(o.Headers))
			for i, h := range o.Headers {
				rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
			}
		}
		p.sess.Produce(ctx, rec)
	})
}

// commit ends the open batch: it writes each touched partition's changed
// state to the changelog, then commits (or, on failure, aborts) the
// transaction, and applies the state to the local store only once Kafka
// committed it.
func (p *Processor) commit(ctx context.Context) error {
	start := p.now()
	b := p.store.NewBatch()
	var stageErr error
	stage := func(pt *part, name []byte, value []byte) {
		if stageErr != nil {
			return
		}
		rec := &kgo.Record{Topic: p.cl, Partition: pt.id, Key: name, Value: value}
		p.sess.Produce(ctx, rec)
		pt.lastCL = rec
		stageErr = b.Put(pt.id, name, value)
	}
	for _, pt := range p.batch {
		pt.win.Sweep()
		keys, meta := pt.win.Dirty()
		for _, k := range keys {
			stage(pt, append([]byte{changelogKeyPrefix}, k...), pt.win.EncodeKey(k))
		}
		if meta {
			stage(pt, []byte(changelogMeta), pt.win.EncodeMeta())
		}
		acct, err := jsonMarshal(pt.batchAcct)
		if err != nil {
			stageErr = err
		}
		stage(pt, []byte(changelogAcct), acct)
	}
	want := stageErr == nil && (p.abortFn == nil || !p.abortFn())
	committed, err := p.sess.End(ctx, want, func(topic string, partition int32) (string, error) {
		pt := p.batchPart(partition)
		if pt == nil {
			return "", fmt.Errorf("consume: commit of partition %d without its state", partition)
		}
		return txn.EncodeMeta(pt.nextTarget()), nil
	})
	p.inTxn = false
	dur := p.now().Sub(start)
	p.met.CommitSeconds.Observe(dur.Seconds())
	if stageErr != nil {
		b.Discard()
		return fmt.Errorf("consume: stage state: %w", stageErr)
	}
	if err != nil && !errors.Is(err, txn.ErrProduce) {
		b.Discard()
		p.met.Transactions.WithLabelValues("failed").Inc()
		return err
	}
	if !committed {
		b.Discard()
		p.met.Transactions.WithLabelValues("aborted").Inc()
		p.log.Info("consume: batch aborted, rewinding to the committed state", "partitions", len(p.batch), "err", err)
		aborted := make([]int32, len(p.batch))
		for i, pt := range p.batch {
			aborted[i] = pt.id
		}
		if err := p.reloadAll(); err != nil {
			return err
		}
		if p.cfg.Mode == config.AtLeastOnce {
			p.rewind(aborted)
		}
		return nil
	}
	for _, pt := range p.batch {
		if err := b.SetCheckpoint(pt.id, pt.nextTarget()); err != nil {
			b.Discard()
			return err
		}
	}
	if err := b.Commit(); err != nil {
		return err
	}
	for _, pt := range p.batch {
		p.countCommitted(pt)
		pt.target = pt.nextTarget()
		pt.acct = pt.batchAcct
		pt.lastCL = nil
		pt.touched = false
		pt.win.ClearDirty()
		if w := pt.win.Watermark(); w != window.NoWatermark {
			p.met.Watermark.WithLabelValues(strconv.Itoa(int(pt.id))).Set(float64(w) / 1000)
		}
		st := pt.win.Stats()
		p.met.StateKeys.WithLabelValues(strconv.Itoa(int(pt.id))).Set(float64(st.Keys))
		p.board.update(pt.id, func(ps *PartitionStatus) {
			ps.CommittedOffset = pt.acct.NextOffset
			ps.EndOffset = max(pt.endOffset, ps.EndOffset)
			ps.Lag = ps.EndOffset - ps.CommittedOffset
			ps.Watermark = pt.win.Watermark()
			ps.LastRecord = pt.lastRecord
			ps.Keys, ps.Events, ps.OpenIncidents = st.Keys, st.Events, st.OpenIncidents
			ps.ChangelogNext = pt.target
		})
	}
	now := p.now()
	for _, pt := range p.batch {
		for _, ts := range pt.stats.ts {
			p.met.AlertLatency.Observe(now.Sub(ts).Seconds())
		}
		p.board.addAlerts(pt.stats.vals)
		for status, n := range pt.stats.alerts {
			p.met.Alerts.WithLabelValues(status).Add(float64(n))
		}
		for reason, n := range pt.stats.dlq {
			p.met.DeadLetters.WithLabelValues(reason).Add(float64(n))
		}
		pt.stats.reset()
	}
	p.board.mu.Lock()
	p.board.cmts++
	p.board.mu.Unlock()
	p.batch = p.batch[:0]
	p.met.Transactions.WithLabelValues("committed").Inc()
	if p.onCmt != nil {
		p.onCmt()
	}
	return nil
}

func (pt *part) nextTarget() int64 {
	if pt.lastCL != nil {
		return pt.lastCL.Offset + 1
	}
	return pt.target
}

func (p *Processor) batchPart(id int32) *part {
	for _, pt := range p.batch {
		if pt.id == id {
			return pt
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parts[id]
}

func (p *Processor) countCommitted(pt *part) {
	lbl := strconv.Itoa(int(pt.id))
	n, o := pt.batchAcct, pt.acct
	p.met.Records.WithLabelValues(lbl, "processed").Add(float64(n.Processed - o.Processed))
	p.met.Records.WithLabelValues(lbl, "filtered").Add(float64(n.Filtered - o.Filtered))
	p.met.Records.WithLabelValues(lbl, "duplicate").Add(float64(n.Duplicate - o.Duplicate))
	p.met.Records.WithLabelValues(lbl, "dead_lettered").Add(float64(n.DeadLettered - o.DeadLettered))
	p.met.Records.WithLabelValues(lbl, "too_late").Add(float64(n.TooLate - o.TooLate))
}

// rewind points the consumer of each partition at the offset after the last
// record its committed state counted. The transactional session rewinds by
// itself; a plain client's CommittedOffsets leaves out partitions the group
// never committed, which would skip the aborted batch's records there.
func (p *Processor) rewind(ids []int32) {
	to := map[int32]kgo.EpochOffset{}
	p.mu.Lock()
	for _, id := range ids {
		if pt := p.parts[id]; pt != nil {
			to[id] = kgo.EpochOffset{Epoch: -1, Offset: pt.acct.NextOffset}
		}
	}
	p.mu.Unlock()
	p.sess.Client().SetOffsets(map[string]map[int32]kgo.EpochOffset{p.input: to})
}

// reloadAll replaces every owned partition's in-memory state by the
// committed state of the local store (after an abort).
func (p *Processor) reloadAll() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.parts {
		pt, err := loadPart(p.store, p.stage, id)
		if err != nil {
			return err
		}
		p.parts[id] = pt
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

func (p *Processor) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range assigned[p.input] {
		// Whatever we held for it is stale: another member may have
		// committed since. It is restored when its offsets are fetched.
		delete(p.parts, id)
		p.fresh[id] = true
	}
	p.met.Rebalances.WithLabelValues("assigned").Inc()
	p.setReady(false)
	p.log.Info("consume: partitions assigned", "topic", p.input, "partitions", assigned[p.input])
}

func (p *Processor) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	p.drop(revoked[p.input])
	p.met.Rebalances.WithLabelValues("revoked").Inc()
	p.log.Info("consume: partitions revoked", "topic", p.input, "partitions", revoked[p.input])
}

func (p *Processor) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	p.drop(lost[p.input])
	p.met.Rebalances.WithLabelValues("lost").Inc()
	p.log.Warn("consume: partitions lost", "topic", p.input, "partitions", lost[p.input])
}

func (p *Processor) drop(ids []int32) {
	p.board.remove(ids)
	for _, id := range ids {
		p.met.ForgetPartition(strconv.Itoa(int(id)))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		delete(p.parts, id)
		delete(p.fresh, id)
	}
}

// onFetched restores every newly assigned partition to exactly the
// changelog position committed with its input offset, before any of its
// records is fetched.
func (p *Processor) onFetched(ctx context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	type committedOffset struct {
		offset int64
		meta   *string
	}
	found := map[int32]committedOffset{}
	for _, t := range resp.Topics {
		for _, pp := range t.Partitions {
			found[pp.Partition] = committedOffset{pp.Offset, pp.Metadata}
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, pp := range t.Partitions {
				found[pp.Partition] = committedOffset{pp.Offset, pp.Metadata}
			}
		}
	}
	p.mu.Lock()
	var todo []int32
	for id := range p.fresh {
		todo = append(todo, id)
	}
	p.mu.Unlock()
	slices.Sort(todo)
	for _, id := range todo {
		co, ok := found[id]
		var target int64
		var fromScratch bool
		switch {
		case ok && co.offset >= 0 && co.meta != nil:
			t, okMeta := txn.DecodeMeta(*co.meta)
			if okMeta {
				target = t
				break
			}
			fallthrough
		case ok && co.offset >= 0:
			end, err := p.restore.end(ctx, id)
			if err != nil {
				return err
			}
			p.log.Warn("consume: committed offset carries no changelog position; restoring to the changelog's end",
				"partition", id, "offset", co.offset, "changelog_end", end)
			target = end
		default:
			// No committed offset: the partition starts from its first
			// record with empty state, from the changelog's current end.
			end, err := p.restore.end(ctx, id)
			if err != nil {
				return err
			}
			target, fromScratch = end, true
		}
		start := p.now()
		p.board.update(id, func(ps *PartitionStatus) { ps.Restore = "restoring" })
		if err := p.restorePartition(ctx, id, target, fromScratch); err != nil {
			return err
		}
		pt, err := loadPart(p.store, p.stage, id)
		if err != nil {
			return err
		}
		st := pt.win.Stats()
		p.board.update(id, func(ps *PartitionStatus) {
			ps.Restore = fmt.Sprintf("restored to changelog offset %d in %s", target, p.now().Sub(start).Round(time.Millisecond))
			ps.CommittedOffset = max(co.offset, 0)
			ps.Watermark = pt.win.Watermark()
			ps.Keys, ps.Events, ps.OpenIncidents = st.Keys, st.Events, st.OpenIncidents
			ps.ChangelogNext = target
		})
		p.met.Restores.Inc()
		p.met.RestoreSeconds.Observe(p.now().Sub(start).Seconds())
		p.mu.Lock()
		if p.fresh[id] {
			delete(p.fresh, id)
			p.parts[id] = pt
		}
		p.mu.Unlock()
	}
	p.setReady(true)
	return nil
}

// restorePartition brings partition id's local state to the changelog
// position target: from scratch (empty state at target), or by reading the
// changelog from the local checkpoint.
func (p *Processor) restorePartition(ctx context.Context, id int32, target int64, fromScratch bool) error {
	p.met.Restoring.Inc()
	defer p.met.Restoring.Dec()
	start := p.now()
	if fromScratch {
		if err := p.store.Drop(id); err != nil {
			return err
		}
		b := p.store.NewBatch()
		if err := b.SetCheckpoint(id, target); err != nil {
			b.Discard()
			return err
		}
		return b.Commit()
	}
	st, err := p.store.Restore(ctx, id, target, p.restore)
	if err != nil {
		return err
	}
	p.met.RestoredRecords.Add(float64(st.Records))
	p.log.Info("consume: partition restored", "partition", id, "from", st.From, "to", st.To,
		"records", st.Records, "full", st.Full, "duration", p.now().Sub(start))
	return nil
}

func (p *Processor) setReady(ok bool) {
	p.met.SetReady(ok)
	p.board.mu.Lock()
	p.board.ready = ok
	p.board.mu.Unlock()
}

// partitioner sends changelog records to the partition they name and keys
// every other record by its key (Kafka's murmur2, so a key's alerts stay in
// order on one partition).
type partitioner struct {
	manual string
	def    kgo.Partitioner
}

func (pr partitioner) ForTopic(t string) kgo.TopicPartitioner {
	if t == pr.manual {
		return kgo.ManualPartitioner().ForTopic(t)
	}
	return pr.def.ForTopic(t)
}
