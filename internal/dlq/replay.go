package dlq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vibeline/processor/internal/config"
)

// ErrSourceTopic is returned when a chosen dead letter did not come from the
// input topic (or has no source headers) and no target topic was given: it
// is not replayed, and its batch is aborted, so nothing past it counts as
// examined.
var ErrSourceTopic = errors.New("dlq: a chosen dead letter does not come from the input topic")

// ReplayOptions configure Replay. Defaults are set in ensureDefaults.
type ReplayOptions struct {
	Config config.Config
	// Selection chooses the letters to replay; the others are skipped.
	Selection Selection
	// Group is the replay's consumer group on the DLQ; its committed
	// position marks what was examined. Default "<group_id>.dlq-replay".
	// The transactional id is "<Group>.txn".
	Group string
	// ToTopic is where replays go. Default: topics.input, and then every
	// chosen letter must have come from topics.input (ErrSourceTopic);
	// when set, every chosen letter goes there, whatever its source.
	ToTopic string
	// DryRun reads what a run would examine and counts what it would
	// replay and skip; it joins no group and writes nothing.
	DryRun bool
	// Reset re-examines the DLQ from its start: the group's offsets are set
	// to the log start first, so letters replayed before are replayed again.
	Reset bool
	// Batch is the number of dead letters per transaction. Default 500.
	Batch int
	// IdleTimeout fails the run when no record arrives for this long while
	// the end is not reached. Default 30s.
	IdleTimeout time.Duration
	Logger      *slog.Logger // default: discard
	// ExtraKgoOpts are appended to the client options (TLS, SASL).
	ExtraKgoOpts []kgo.Opt
	// AfterProduce, if set, is called after each batch's replays were
	// produced and acknowledged, before its transaction commits (fault
	// injection for tests). An error aborts the transaction and ends Run
	// with that error.
	AfterProduce func(batch int) error
}

func (o *ReplayOptions) ensureDefaults() {
	o.Group = cmp.Or(o.Group, o.Config.GroupID+".dlq-replay")
	o.ToTopic = cmp.Or(o.ToTopic, o.Config.Topics.Input)
	if o.Batch <= 0 {
		o.Batch = 500
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// TransactionalID is the stable transactional id of a replay group: a re-run
// fences (and aborts the open transaction of) a crashed or zombie run.
func TransactionalID(group string) string { return group + ".txn" }

// Range is the part of one DLQ partition a run examined: [From, To).
type Range struct {
	Partition int32 `json:"partition"`
	From      int64 `json:"from"`
	To        int64 `json:"to"`
}

// Report is what a replay did (or, dry, would do).
type Report struct {
	DLQ, Group, TransactionalID, Target, Selection string
	DryRun, Reset                                  bool
	// Ranges are the DLQ offsets the run set out to examine, per partition:
	// from the group's position to the last stable offset at the start.
	Ranges []Range
	// Examined counts the dead letters examined (committed, if not dry).
	Examined int
	// Replayed and Skipped count them by reason.
	Replayed, Skipped map[string]int
	// Omitted counts the skipped letters that the selection chose but that
	// were written without their value (dlq.omitted): they cannot be
	// replayed from the DLQ; their originals are in the source topic at
	// source.offset.
	Omitted int
	// Transactions counts committed transactions, Aborted the ones the
	// group aborted (a rebalance) and that were redone.
	Transactions, Aborted int
}

// ReplayedTotal is the number of letters replayed.
func (r *Report) ReplayedTotal() int { return sum(r.Replayed) }

// SkippedTotal is the number of letters skipped.
func (r *Report) SkippedTotal() int { return sum(r.Skipped) }

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// String renders the report for people.
func (r *Report) String() string {
	var b strings.Builder
	verb := "replayed"
	if r.DryRun {
		verb = "would replay"
		b.WriteString("DRY RUN: nothing was written\n")
	}
	fmt.Fprintf(&b, "dead-letter topic %s -> %s, group %s (transactional id %s)\nselection: %s\n", r.DLQ, r.Target, r.Group, r.TransactionalID, r.Selection)
	if r.Reset {
		b.WriteString("reset: the group re-examines from the start of the dead-letter topic\n")
	}
	for _, g := range r.Ranges {
		fmt.Fprintf(&b, "  partition %d: offsets [%d, %d)\n", g.Partition, g.From, g.To)
	}
	fmt.Fprintf(&b, "examined %d, %s %d, skipped %d", r.Examined, verb, r.ReplayedTotal(), r.SkippedTotal())
	if !r.DryRun {
		fmt.Fprintf(&b, " (%d transactions committed, %d aborted and redone)", r.Transactions, r.Aborted)
	}
	b.WriteString("\n")
	for _, reason := range slices.Sorted(maps.Keys(r.Replayed)) {
		fmt.Fprintf(&b, "  %s %s: %d\n", verb, reason, r.Replayed[reason])
	}
	for _, reason := range slices.Sorted(maps.Keys(r.Skipped)) {
		fmt.Fprintf(&b, "  skipped %s: %d\n", reason, r.Skipped[reason])
	}
	if r.Omitted > 0 {
		fmt.Fprintf(&b, "%d selected letters were written without their value (dlq.omitted: the record was too large) and cannot be replayed from here: re-inject their originals from the source topic at source.offset (processor dlq inspect lists them)\n", r.Omitted)
	}
	if r.SkippedTotal() > r.Omitted && !r.DryRun {
		fmt.Fprintf(&b, "skipped letters count as examined by group %s: replay them later with another --group\n", r.Group)
	}
	return b.String()
}

// Replay re-injects the chosen dead letters into the target topic, exactly
// once per dead letter and group (see the package documentation), and
// returns what it did. It examines the DLQ from the group's committed
// position (or its start, with Reset) up to the last stable offsets listed
// when it starts, in transactions of at most Batch letters. On an error the
// report counts what the committed transactions did.
func Replay(ctx context.Context, o ReplayOptions) (*Report, error) {
	namedTarget := o.ToTopic != ""
	o.ensureDefaults()
	cfg := o.Config
	rep := &Report{DLQ: cfg.Topics.DLQ, Group: o.Group, TransactionalID: TransactionalID(o.Group), Target: o.ToTopic,
		Selection: o.Selection.String(), DryRun: o.DryRun, Reset: o.Reset, Replayed: map[string]int{}, Skipped: map[string]int{}}
	if err := o.Selection.Validate(); err != nil {
		return rep, err
	}
	if o.ToTopic == cfg.Topics.DLQ {
		return rep, fmt.Errorf("dlq: the target topic %s is the dead-letter topic itself", o.ToTopic)
	}
	base := append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID("processor-dlq-replay")}, o.ExtraKgoOpts...)
	cl, err := kgo.NewClient(base...)
	if err != nil {
		return rep, fmt.Errorf("dlq: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	targetParts, err := adm.ListEndOffsets(ctx, o.ToTopic)
	if err == nil {
		err = targetParts.Error()
	}
	if err != nil {
		return rep, fmt.Errorf("dlq: target topic %s (it must exist): %w", o.ToTopic, err)
	}
	start, end, err := bounds(ctx, adm, cfg.Topics.DLQ)
	if err != nil {
		return rep, err
	}
	if !o.DryRun {
		if err := liveMembers(ctx, adm, o.Group); err != nil {
			return rep, err
		}
	}
	choose := func(l Letter) (bool, error) {
		if !o.Selection.Match(l) || l.Omitted != "" {
			return false, nil // a letter without its value cannot be replayed
		}
		if !namedTarget && (!l.SourceOK || l.SourceTopic != cfg.Topics.Input) {
			return false, fmt.Errorf("%w: %s came from %s, not %s; to re-inject it anyway name the target with --to-topic, or narrow the selection",
				ErrSourceTopic, l.Position(), l.Source(), cfg.Topics.Input)
		}
		return true, nil
	}

	if o.DryRun {
		pos := start
		if !o.Reset {
			if pos, err = groupPositions(ctx, adm, o.Group, cfg.Topics.DLQ, start); err != nil {
				return rep, err
			}
		}
		rep.Ranges = ranges(pos, end)
		var chooseErr error
		err := scan(ctx, base, cfg.Topics.DLQ, pos, end, o.IdleTimeout, func(r *kgo.Record) {
			if chooseErr != nil {
				return
			}
			l := Parse(r)
			ok, err := choose(l)
			if err != nil {
				chooseErr = err
				return
			}
			rep.Examined++
			count(rep, o.Selection, l, ok)
		})
		return rep, cmp.Or(chooseErr, err)
	}

	if o.Reset {
		offs := kadm.Offsets{}
		for p, s := range start {
			offs.Add(kadm.Offset{Topic: cfg.Topics.DLQ, Partition: p, At: s, LeaderEpoch: -1})
		}
		resp, err := adm.CommitOffsets(ctx, o.Group, offs)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return rep, fmt.Errorf("dlq: reset group %s to the start of %s: %w", o.Group, cfg.Topics.DLQ, err)
		}
		o.Logger.Warn("dlq replay group reset to the start: letters replayed before are replayed again", "group", o.Group, "topic", cfg.Topics.DLQ)
	}

	r := &replayer{o: o, rep: rep, end: end, choose: choose}
	if err := r.open(ctx, base); err != nil {
		return rep, err
	}
	defer r.sess.CloseAllowingRebalance()
	// The position is read after the producer id was initialised: that
	// fenced any earlier run with this transactional id and aborted its open
	// transaction, so the committed offsets are final.
	if r.pos, err = groupPositions(ctx, adm, o.Group, cfg.Topics.DLQ, start); err != nil {
		return rep, err
	}
	rep.Ranges = ranges(r.pos, end)
	r.pauseDone() // partitions with nothing to examine are never fetched
	o.Logger.Info("dlq replay started", "topic", cfg.Topics.DLQ, "group", o.Group, "target", o.ToTopic,
		"selection", rep.Selection, "behind", behind(r.pos, end))
	err = r.run(ctx)
	o.Logger.Info("dlq replay ended", "topic", cfg.Topics.DLQ, "group", o.Group, "examined", rep.Examined,
		"replayed", rep.ReplayedTotal(), "skipped", rep.SkippedTotal(), "err", err)
	return rep, err
}

// count adds one examined letter to the report.
func count(rep *Report, sel Selection, l Letter, replayed bool) {
	reason := cmp.Or(l.Reason, noReason)
	if replayed {
		rep.Replayed[reason]++
		return
	}
	rep.Skipped[reason]++
	if l.Omitted != "" && sel.Match(l) {
		rep.Omitted++
	}
}

func ranges(pos, end map[int32]int64) []Range {
	var out []Range
	for _, p := range slices.Sorted(maps.Keys(end)) {
		out = append(out, Range{Partition: p, From: min(pos[p], end[p]), To: end[p]})
	}
	return out
}

// replayer is one run's transactional consume-produce loop.
type replayer struct {
	o      ReplayOptions
	rep    *Report
	end    map[int32]int64
	pos    map[int32]int64 // committed position per DLQ partition
	choose func(Letter) (bool, error)
	sess   *kgo.GroupTransactSession
	paused map[int32]bool
}

// open starts the group transact session and initialises the producer id at
// once, which fences an earlier incarnation. It follows the rules of
// internal/txn's exactly-once session (eager fencing, flush before judging,
// any produce error aborts) but cannot use it: txn's End owns the offset
// commit hook (for its metadata), and this loop must set the committed
// offsets itself (commitOffsets).
func (r *replayer) open(ctx context.Context, base []kgo.Opt) error {
	cfg := r.o.Config
	hash := kgo.StickyKeyPartitioner(nil)
	sess, err := kgo.NewGroupTransactSession(append(slices.Clone(base),
		kgo.ConsumerGroup(r.o.Group),
		kgo.ConsumeTopics(cfg.Topics.DLQ),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.KeepControlRecords(), // the position must move past transaction markers to reach the end
		kgo.RequireStableFetchOffsets(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.TransactionalID(TransactionalID(r.o.Group)),
		kgo.TransactionTimeout(cfg.TransactionTimeout),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.BasicConsistentPartitioner(func(topic string) func(*kgo.Record, int) int {
			byKey := hash.ForTopic(topic)
			return func(rec *kgo.Record, n int) int {
				// The source partition when the topic has it, else the
				// key's partition as the default producer would choose it.
				if p := int(rec.Partition); p >= 0 && p < n {
					return p
				}
				if rec.Key != nil {
					return byKey.Partition(rec, n)
				}
				return int(max(rec.Partition, 0)) % n
			}
		})),
	)...)
	if err != nil {
		return fmt.Errorf("dlq: transact session: %w", err)
	}
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		sess.Close()
		return fmt.Errorf("dlq: init producer id %s (fencing an earlier run): %w", TransactionalID(r.o.Group), err)
	}
	r.sess = sess
	r.paused = map[int32]bool{}
	return nil
}

func (r *replayer) run(ctx context.Context) error {
	topic := r.o.Config.Topics.DLQ
	cl := r.sess.Client()
	last := time.Now()
	for batch := 1; !done(r.pos, r.end); {
		if err := ctx.Err(); err != nil {
			// Between transactions: everything examined so far is committed.
			return fmt.Errorf("dlq: replay interrupted; a re-run continues where it stopped: %w", err)
		}
		pollCtx, cancel := context.WithTimeout(ctx, time.Second)
		fs := r.sess.PollRecords(pollCtx, r.o.Batch)
		cancel()
		if fs.IsClientClosed() {
			return errors.New("dlq: client closed")
		}
		if err := fetchErr(fs); err != nil {
			return fmt.Errorf("dlq: fetch %s: %w", topic, err)
		}
		// The records of this batch below the end, in order per partition.
		next := maps.Clone(r.pos)
		var recs []*kgo.Record
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Topic == topic && rec.Offset < r.end[rec.Partition] && rec.Offset >= next[rec.Partition] {
				next[rec.Partition] = rec.Offset + 1
				recs = append(recs, rec)
			}
		})
		if len(recs) == 0 {
			cl.AllowRebalance()
			if time.Since(last) > r.o.IdleTimeout {
				return fmt.Errorf("dlq: replay made no progress for %s; partitions behind: %s (is another member in group %s?)",
					r.o.IdleTimeout, behind(r.pos, r.end), r.o.Group)
			}
			continue
		}
		last = time.Now()
		// A cancelled ctx (SIGINT) lets the open batch finish: stopping
		// happens between transactions.
		committed, stats, err := r.transact(context.WithoutCancel(ctx), batch, recs, next)
		cl.AllowRebalance()
		if err != nil {
			return err
		}
		if !committed {
			// The group rebalanced: the session aborted and rewound to the
			// committed offsets; the same letters come again.
			r.rep.Aborted++
			r.o.Logger.Info("dlq replay transaction aborted by a rebalance; redoing it", "group", r.o.Group)
			continue
		}
		r.pos = next
		r.rep.Transactions++
		r.rep.Examined += stats.Examined
		for k, v := range stats.Replayed {
			r.rep.Replayed[k] += v
		}
		for k, v := range stats.Skipped {
			r.rep.Skipped[k] += v
		}
		r.rep.Omitted += stats.Omitted
		batch++
		r.pauseDone()
	}
	return nil
}

// transact replays one batch in one transaction and commits the group's
// offsets next (the position after the batch) in it.
func (r *replayer) transact(ctx context.Context, batch int, recs []*kgo.Record, next map[int32]int64) (bool, *Report, error) {
	stats := &Report{Replayed: map[string]int{}, Skipped: map[string]int{}}
	if err := r.sess.Begin(); err != nil {
		return false, nil, fmt.Errorf("dlq: begin transaction: %w", err)
	}
	abort := func(cause error) (bool, *Report, error) {
		if _, err := r.sess.End(ctx, kgo.TryAbort); err != nil {
			cause = errors.Join(cause, fmt.Errorf("dlq: abort transaction: %w", err))
		}
		return false, nil, cause
	}
	promise := kgo.AbortingFirstErrPromise(r.sess.Client())
	for _, rec := range recs {
		if rec.Attrs.IsControl() {
			continue
		}
		l := Parse(rec)
		ok, err := r.choose(l)
		if err != nil {
			return abort(err)
		}
		stats.Examined++
		count(stats, r.o.Selection, l, ok)
		if ok {
			r.sess.Produce(ctx, l.ReplayRecord(r.o.ToTopic), promise.Promise())
		}
	}
	// Flush before judging: the first produce error is final only once
	// every record was acknowledged.
	if err := r.sess.Client().Flush(ctx); err != nil {
		return false, nil, fmt.Errorf("dlq: flush: %w", err) // the open transaction is aborted by the next run's fencing
	}
	if err := promise.Err(); err != nil {
		return abort(fmt.Errorf("dlq: produce to %s: %w", r.o.ToTopic, err))
	}
	if r.o.AfterProduce != nil {
		if err := r.o.AfterProduce(batch); err != nil {
			return abort(err)
		}
	}
	committed, err := r.sess.End(r.commitOffsets(ctx, next), kgo.TryCommit)
	if err != nil {
		return false, nil, fmt.Errorf("dlq: end transaction: %w", err)
	}
	return committed, stats, nil
}

// commitOffsets makes the transaction commit exactly next for the DLQ
// partitions: the client would commit after the last record it polled,
// which may lie beyond the end this run stops at and was not examined.
func (r *replayer) commitOffsets(ctx context.Context, next map[int32]int64) context.Context {
	topic := r.o.Config.Topics.DLQ
	return kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		for i := range req.Topics {
			t := &req.Topics[i]
			if t.Topic != topic {
				continue
			}
			for j := range t.Partitions {
				if n, ok := next[t.Partitions[j].Partition]; ok {
					t.Partitions[j].Offset = n
				}
			}
		}
		return nil
	})
}

// pauseDone stops fetching partitions that reached the end.
func (r *replayer) pauseDone() {
	var ps []int32
	for p, e := range r.end {
		if r.pos[p] >= e && !r.paused[p] {
			r.paused[p] = true
			ps = append(ps, p)
		}
	}
	if len(ps) > 0 {
		r.sess.Client().PauseFetchPartitions(map[string][]int32{r.o.Config.Topics.DLQ: ps})
	}
}
