package deliver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vibeline/processor/internal/kafkasec/kgosec"
)

// Options are the injected dependencies of a Service.
type Options struct {
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the delivery collectors. Required.
	Registerer prometheus.Registerer
	// Now, After and Rand are the clock and the jitter source of retries
	// and breakers. Defaults time.Now, time.After and math/rand/v2.Float64.
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
	Rand  func() float64
	// ExtraKgoOpts are appended to the Kafka client options (TLS, SASL, tests).
	ExtraKgoOpts []kgo.Opt
	// Decode reads alert record values. Default nil: the alert JSON format
	// (leniently, the webhook body is the value as is). NewAvroDecoder
	// reads Avro alerts (alerts_format avro).
	Decode DecodeFunc
}

// Service is the delivery stage: one member of the delivery consumer group.
type Service struct {
	cfg     Config
	log     *slog.Logger
	met     *Metrics
	clk     clock
	runners []*sinkRunner
	extra   []kgo.Opt
	ready   atomic.Bool

	cl *kgo.Client // set by Run before the first poll
	// clSet is closed once Run set cl: the client's own goroutines call
	// back (pinStart, onAssigned, onRevoked, onLost) as soon as the group
	// is joined, possibly before NewClient returned to Run; they wait on
	// it before anything that reads cl.
	clSet chan struct{}
	base  context.Context // parent of the partitions' contexts (Run's, without its cancellation)
	wg    sync.WaitGroup  // partition goroutines

	// mu guards parts and each running.committed: the poll loop, the
	// rebalance callbacks (which BlockRebalanceOnPoll already serialises)
	// and the lag refresh use them. Lock order: mu, then a partition's mu.
	mu    sync.Mutex
	parts map[int32]*running

	lastFetchErr map[string]time.Time // poll loop only: log rate limit
}

// running is one assigned partition and its goroutine.
type running struct {
	p         *partition
	cancel    context.CancelFunc
	done      chan struct{}
	committed int64 // last offset committed by this member; -1 none
}

// pollRecords bounds one poll.
const pollRecords = 1000

// New builds the delivery stage for cfg (validated by the caller) and sinks
// (NewSinks). It does not contact Kafka; Run does.
func New(cfg Config, sinks []Sink, o Options) (*Service, error) {
	if o.Registerer == nil {
		return nil, errors.New("deliver: Options.Registerer is required")
	}
	if len(sinks) == 0 {
		return nil, errors.New("deliver: no sinks: configure at least one in delivery.sinks")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.After == nil {
		o.After = time.After
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	cfg.EnsureDefaults()
	names := make([]string, len(sinks))
	for i, s := range sinks {
		names[i] = s.Name()
	}
	met, err := NewMetrics(o.Registerer, names)
	if err != nil {
		return nil, err
	}
	s := &Service{
		cfg: cfg, log: o.Logger, met: met, extra: o.ExtraKgoOpts,
		clk:          clock{now: o.Now, after: o.After, rand: o.Rand},
		parts:        map[int32]*running{},
		lastFetchErr: map[string]time.Time{},
		clSet:        make(chan struct{}),
	}
	for _, sk := range sinks {
		r := newSinkRunner(sk, cfg.Retry, cfg.Breaker, s.clk, met, o.Logger)
		r.decode = o.Decode
		s.runners = append(s.runners, r)
	}
	return s, nil
}

// Ready reports whether the stage is connected and consuming (/readyz).
func (s *Service) Ready() bool { return s.ready.Load() }

// Run consumes the alerts topic and delivers until ctx ends (a clean stop:
// in-flight attempts finish, finished offsets are committed, the member
// leaves the group) or start-up fails.
func (s *Service) Run(ctx context.Context) error {
	startCtx, cancel := context.WithTimeout(ctx, s.cfg.StartupTimeout)
	err := s.ensureTopics(startCtx)
	cancel()
	if err != nil {
		return err
	}
	reset := kgo.NewOffset().AtStart()
	if s.cfg.StartFrom == StartLatest {
		reset = kgo.NewOffset().AtEnd()
	}
	opts := append(s.baseOpts(),
		kgo.ConsumerGroup(s.cfg.GroupID),
		kgo.ConsumeTopics(s.cfg.Topics.Alerts),
		kgo.ConsumeResetOffset(reset),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(500*time.Millisecond), // resumed partitions are fetched soon
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(s.cfg.SessionTimeout),
		kgo.HeartbeatInterval(min(3*time.Second, s.cfg.SessionTimeout/3)),
		kgo.DefaultProduceTopic(s.cfg.Topics.DLQ),
		kgo.OnPartitionsAssigned(s.onAssigned),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onLost),
	)
	if s.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(s.cfg.InstanceID))
	}
	if s.cfg.StartFrom == StartLatest {
		opts = append(opts, kgo.AdjustFetchOffsetsFn(s.pinStart))
	}
	// Partitions outlive ctx: a stop lets in-flight attempts finish, then
	// commits (two-phase shutdown). Set before the client can call back.
	s.base = context.WithoutCancel(ctx)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("deliver: kafka client: %w", err)
	}
	s.cl = cl
	close(s.clSet)
	s.log.Info("deliver: started", "group", s.cfg.GroupID, "topic", s.cfg.Topics.Alerts, "dlq", s.cfg.Topics.DLQ,
		"sinks", len(s.runners), "instance", s.cfg.InstanceID)
	s.ready.Store(true)
	err = s.loop(ctx)
	s.ready.Store(false)
	// Rebalances are blocked here (the loop returned after a poll): stop
	// every lane, commit what they finished, then allow the leave.
	s.stopAndCommit(s.cl, s.ids())
	cl.AllowRebalance()
	cl.Close()
	s.wg.Wait()
	for _, r := range s.runners {
		if c, ok := r.sink.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
	s.log.Info("deliver: stopped")
	return err
}

func (s *Service) baseOpts() []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.ClientID("processor-deliver"),
		kgo.ProducerLinger(0),
	}, s.extra...)
}

// loop polls, hands records to the partitions and commits, until ctx ends.
// It returns right after a poll, with rebalances still blocked.
func (s *Service) loop(ctx context.Context) error {
	lastCommit, lastRefresh := s.clk.now(), s.clk.now()
	for {
		if s.clk.now().Sub(lastRefresh) >= lagRefresh {
			s.refreshEnds(ctx)
			lastRefresh = s.clk.now()
		}
		pctx, cancel := context.WithTimeout(ctx, s.cfg.CommitInterval)
		fs := s.cl.PollRecords(pctx, pollRecords)
		cancel()
		if fs.IsClientClosed() {
			return errors.New("deliver: kafka client closed")
		}
		fs.EachError(s.fetchError)
		s.dispatch(fs)
		if ctx.Err() != nil {
			return nil
		}
		if s.clk.now().Sub(lastCommit) >= s.cfg.CommitInterval {
			s.commit(ctx, s.cl, s.snapshot(nil))
			lastCommit = s.clk.now()
		}
		s.cl.AllowRebalance()
	}
}

// fetchError logs fetch errors other than the poll's own timeout, at most
// once per 30 s per message.
func (s *Service) fetchError(topic string, p int32, err error) {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return
	}
	key := err.Error()
	if t, seen := s.lastFetchErr[key]; seen && s.clk.now().Sub(t) < 30*time.Second {
		return
	}
	s.lastFetchErr[key] = s.clk.now()
	s.log.Warn("deliver: fetch error", "topic", topic, "partition", p, "err", err)
}

// dispatch appends polled records to their partitions and pauses the
// fetching of partitions whose buffer is full.
func (s *Service) dispatch(fs kgo.Fetches) {
	fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
		if ftp.Topic != s.cfg.Topics.Alerts {
			return
		}
		s.mu.Lock()
		rp := s.parts[ftp.Partition]
		s.mu.Unlock()
		if rp == nil {
			return // not ours (cannot happen with BlockRebalanceOnPoll)
		}
		if ftp.Err == nil {
			end := ftp.LastStableOffset
			if end < 0 {
				end = ftp.HighWatermark
			}
			rp.p.setHWM(end)
		}
		if len(ftp.Records) > 0 {
			recs := make([]Record, len(ftp.Records))
			for i, r := range ftp.Records {
				recs[i] = fromKgo(r)
			}
			if rp.p.push(recs...) >= s.cfg.MaxBuffered {
				s.pause(rp.p)
			}
		}
		s.updateLag(rp.p)
	})
}

func fromKgo(r *kgo.Record) Record {
	var hs []Header
	for _, h := range r.Headers {
		hs = append(hs, Header{Key: h.Key, Value: h.Value})
	}
	return Record{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, LeaderEpoch: r.LeaderEpoch,
		Key: r.Key, Value: r.Value, Headers: hs, Timestamp: r.Timestamp,
	}
}

// pause stops fetching a partition whose buffer is full. The pause state
// changes under the partition's lock, so a concurrent resume cannot be lost.
func (s *Service) pause(p *partition) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.paused || len(p.mu.buf) < s.cfg.MaxBuffered {
		return
	}
	p.mu.paused = true
	s.cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.id}})
	s.log.Info("deliver: buffer full: fetching paused until the slowest sink catches up",
		"topic", p.topic, "partition", p.id, "buffered", len(p.mu.buf))
}

// progress is called by a lane after records were finished: resume a
// paused partition once half its buffer drained, and update the lag.
func (s *Service) progress(p *partition) {
	p.mu.Lock()
	if p.mu.paused && len(p.mu.buf) <= s.cfg.MaxBuffered/2 {
		p.mu.paused = false
		s.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.id}})
	}
	p.mu.Unlock()
	s.updateLag(p)
}

func (s *Service) updateLag(p *partition) {
	if n, ok := p.lag(); ok {
		s.met.Lag.WithLabelValues(partLabel(p.id)).Set(float64(n))
	}
}

// lagRefresh is how often the end offsets are listed, so the lag of a
// paused partition (which is not fetched) keeps growing in the metric.
const lagRefresh = 5 * time.Second

func (s *Service) refreshEnds(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	listed, err := kadm.NewClient(s.cl).ListCommittedOffsets(ctx, s.cfg.Topics.Alerts)
	if err != nil {
		return
	}
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil || o.Topic != s.cfg.Topics.Alerts {
			return
		}
		s.mu.Lock()
		rp := s.parts[o.Partition]
		s.mu.Unlock()
		if rp != nil {
			rp.p.setHWM(o.Offset)
			s.updateLag(rp.p)
		}
	})
}

// deadLetter writes one dead letter to the delivery DLQ topic and waits
// for Kafka's acknowledgement.
func (s *Service) deadLetter(ctx context.Context, dl DeadLetter) error {
	key, value, hs := dl.Fit()
	kh := make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		kh[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
	}
	rec := &kgo.Record{Topic: s.cfg.Topics.DLQ, Key: key, Value: value, Headers: kh}
	if err := s.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("deliver: produce to %s: %w", s.cfg.Topics.DLQ, err)
	}
	return nil
}

func (s *Service) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	<-s.clSet // its lanes use s.cl
	ids := assigned[s.cfg.Topics.Alerts]
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.parts[id] != nil {
			continue
		}
		p := newPartition(s.cfg.Topics.Alerts, id, s.runners, s.deadLetter, s.progress)
		ctx, cancel := context.WithCancel(s.base)
		rp := &running{p: p, cancel: cancel, done: make(chan struct{}), committed: -1}
		s.parts[id] = rp
		s.wg.Go(func() {
			defer close(rp.done)
			p.run(ctx)
		})
	}
	if len(ids) > 0 {
		s.log.Info("deliver: partitions assigned", "topic", s.cfg.Topics.Alerts, "partitions", ids)
	}
}

// pinStart fixes where a partition without a committed offset starts under
// start_from: latest: at the alerts topic's last stable offset as listed
// now, which is also the partition's first finished position, committed
// with the next commit. Without it a partition that finished nothing
// before a stop (no alert came, or the receiver was down) had no commit
// and started at the end again after the restart, skipping every revision
// written meanwhile, although the group had joined before them.
func (s *Service) pinStart(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	<-s.clSet
	var fresh []int32
	for id, o := range offsets[s.cfg.Topics.Alerts] {
		if o.EpochOffset().Offset < 0 { // the reset offset: no commit
			fresh = append(fresh, id)
		}
	}
	if len(fresh) == 0 {
		return offsets, nil
	}
	listed, err := kadm.NewClient(s.cl).ListCommittedOffsets(ctx, s.cfg.Topics.Alerts)
	if err != nil {
		return nil, fmt.Errorf("deliver: the end of %s for start_from latest: %w", s.cfg.Topics.Alerts, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range fresh {
		lo, ok := listed.Lookup(s.cfg.Topics.Alerts, id)
		switch {
		case !ok:
			return nil, fmt.Errorf("deliver: the end of %s/%d for start_from latest: not listed", s.cfg.Topics.Alerts, id)
		case lo.Err != nil:
			return nil, fmt.Errorf("deliver: the end of %s/%d for start_from latest: %w", s.cfg.Topics.Alerts, id, lo.Err)
		}
		offsets[s.cfg.Topics.Alerts][id] = kgo.NewOffset().At(lo.Offset).WithEpoch(-1)
		if rp := s.parts[id]; rp != nil {
			rp.p.startAt(lo.Offset)
		}
	}
	return offsets, nil
}

// onRevoked stops the revoked partitions' lanes (in-flight attempts
// finish), then commits what they finished, before the partitions move on.
func (s *Service) onRevoked(_ context.Context, cl *kgo.Client, revoked map[string][]int32) {
	<-s.clSet
	ids := revoked[s.cfg.Topics.Alerts]
	if len(ids) == 0 {
		return
	}
	s.stopAndCommit(cl, ids)
	s.log.Info("deliver: partitions revoked", "topic", s.cfg.Topics.Alerts, "partitions", ids)
}

// onLost stops the lost partitions' lanes; their offsets cannot be
// committed any more (the next owner repeats what was not committed).
func (s *Service) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	<-s.clSet
	ids := lost[s.cfg.Topics.Alerts]
	if len(ids) == 0 {
		return
	}
	s.stop(ids)
	s.log.Warn("deliver: partitions lost: their unfinished records will be delivered again by the next owner",
		"topic", s.cfg.Topics.Alerts, "partitions", ids)
}

func (s *Service) ids() []int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int32, 0, len(s.parts))
	for id := range s.parts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// stop cancels the given partitions, waits for their lanes and removes
// them; it returns them for a final commit.
func (s *Service) stop(ids []int32) map[int32]*running {
	s.mu.Lock()
	stopped := map[int32]*running{}
	for _, id := range ids {
		if rp := s.parts[id]; rp != nil {
			rp.cancel()
			stopped[id] = rp
			delete(s.parts, id)
		}
	}
	s.mu.Unlock()
	for id, rp := range stopped {
		<-rp.done
		rp.p.mu.Lock()
		if rp.p.mu.paused {
			rp.p.mu.paused = false
			s.cl.ResumeFetchPartitions(map[string][]int32{rp.p.topic: {id}})
		}
		rp.p.mu.Unlock()
		s.met.Lag.DeleteLabelValues(partLabel(id))
	}
	return stopped
}

func (s *Service) stopAndCommit(cl *kgo.Client, ids []int32) {
	stopped := s.stop(ids)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.commit(ctx, cl, stopped)
}

// snapshot returns the running partitions (all when ids is nil).
func (s *Service) snapshot(ids []int32) map[int32]*running {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int32]*running{}
	for id, rp := range s.parts {
		if ids == nil || slices.Contains(ids, id) {
			out[id] = rp
		}
	}
	return out
}

// commit commits, synchronously, the finished position of each partition
// that moved since its last commit. It is called only while rebalances are
// blocked (after a poll) or from the revoke callback.
func (s *Service) commit(ctx context.Context, cl *kgo.Client, parts map[int32]*running) {
	offsets := map[int32]kgo.EpochOffset{}
	s.mu.Lock()
	for id, rp := range parts {
		if off, epoch, ok := rp.p.commitPos(); ok && off > rp.committed {
			offsets[id] = kgo.EpochOffset{Epoch: epoch, Offset: off}
		}
	}
	s.mu.Unlock()
	if len(offsets) == 0 {
		return
	}
	failed := map[int32]error{}
	var reqErr error
	cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{s.cfg.Topics.Alerts: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				reqErr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
						failed[p.Partition] = e
					}
				}
			}
		})
	if reqErr != nil {
		s.log.Warn("deliver: commit failed: retried at the next commit", "topic", s.cfg.Topics.Alerts, "err", reqErr)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, eo := range offsets {
		if err := failed[id]; err != nil {
			s.log.Warn("deliver: commit failed: retried at the next commit", "topic", s.cfg.Topics.Alerts, "partition", id, "offset", eo.Offset, "err", err)
			continue
		}
		parts[id].committed = eo.Offset
	}
}

// ensureTopics waits for the alerts topic and creates the DLQ topic when
// missing.
func (s *Service) ensureTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(append(s.baseOpts(), kgo.MetadataMinAge(50*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("deliver: admin client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last error
	for {
		if last = s.ensureTopicsOnce(ctx, adm); last == nil || errors.Is(last, errStartup) {
			return last
		}
		if kgosec.Permanent(last) {
			return fmt.Errorf("deliver: kafka at %v refuses this client (not retried): %w", s.cfg.Brokers, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deliver: kafka at %v not usable within %s: %w", s.cfg.Brokers, s.cfg.StartupTimeout, last)
		case <-s.clk.after(500 * time.Millisecond):
			s.log.Info("deliver: waiting for kafka", "brokers", s.cfg.Brokers, "err", last)
		}
	}
}

var errStartup = errors.New("cannot start")

func (s *Service) ensureTopicsOnce(ctx context.Context, adm *kadm.Client) error {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	alerts, dlq := s.cfg.Topics.Alerts, s.cfg.Topics.DLQ
	details, err := adm.ListTopics(rctx, alerts, dlq)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	at, ok := details[alerts]
	if !ok || at.Err != nil {
		return fmt.Errorf("alerts topic %q (delivery.topics.alerts) not found yet: the processor creates it", alerts)
	}
	if dt, ok := details[dlq]; ok && dt.Err == nil {
		return nil
	}
	if !s.cfg.CreateTopics {
		return fmt.Errorf("deliver: DLQ topic %q (delivery.topics.dlq) does not exist and delivery.create_topics is false: %w", dlq, errStartup)
	}
	parts := int32(len(at.Partitions))
	resp, err := adm.CreateTopic(rctx, parts, int16(s.cfg.ReplicationFactor), nil, dlq)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", dlq, err)
	}
	if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", dlq, resp.Err)
	}
	s.log.Info("deliver: created topic", "topic", dlq, "partitions", parts)
	for {
		td, err := adm.ListTopics(rctx, dlq)
		if err == nil {
			if d, ok := td[dlq]; ok && d.Err == nil && int32(len(d.Partitions)) == parts {
				leaders := true
				for _, pd := range d.Partitions {
					leaders = leaders && pd.Err == nil && pd.Leader >= 0
				}
				if leaders {
					return nil
				}
			}
		}
		select {
		case <-rctx.Done():
			return fmt.Errorf("topic %s has no leader for every partition yet: %w", dlq, rctx.Err())
		case <-s.clk.after(100 * time.Millisecond):
		}
	}
}
