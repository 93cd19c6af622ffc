package txn

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// MetaFunc returns the offset-commit metadata of one input partition, and
// the offset to commit for it: at.Offset < 0 commits the polled position.
// exactly_once commits at instead (franz-go's End would commit every polled
// offset): records polled after the batch was staged, and handled while
// its End runs, belong to the next batch (consume.Processor.endBatch).
type MetaFunc func(topic string, partition int32) (at kgo.EpochOffset, meta string, err error)

// Session is one instance's consuming and producing client with its commit
// protocol. Produce may be called from several goroutines, also while the
// client polls; Begin and End must not run concurrently with a poll or a
// Produce (franz-go's GroupTransactSession).
type Session interface {
	// Client is the underlying client (polling, producing, pausing).
	Client() *kgo.Client
	// Begin starts a batch.
	Begin() error
	// Produce buffers one output record of the current batch.
	Produce(ctx context.Context, r *kgo.Record)
	// End flushes the batch's records and commits them with the polled
	// offsets, or those meta returns (and its metadata), when commit is
	// true and nothing failed; otherwise it aborts and rewinds the consumer
	// to the committed offsets. committed=false with err=nil is an
	// ordinary abort. exactly_once's End may run while workers handle
	// records polled before it (meta then names the batch's own offsets);
	// never with a poll, a Produce or Begin. at_least_once commits the
	// polled offsets: nothing may be polled between a batch's last
	// records and its End.
	End(ctx context.Context, commit bool, meta MetaFunc) (committed bool, err error)
	// AllowRebalance lets a pending rebalance run (between batches).
	AllowRebalance()
	// Close leaves the group and closes the client.
	Close()
}

// ErrProduce wraps a failed produce of the batch (the batch was aborted).
var ErrProduce = errors.New("txn: produce failed")

// NewExactlyOnce builds a transactional group session. opts must include the
// group, topics and transactional ID; the producer ID is fetched at once so
// a previous incarnation with the same transactional ID is fenced now.
func NewExactlyOnce(ctx context.Context, opts ...kgo.Opt) (Session, error) {
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, fmt.Errorf("txn: new transact session: %w", err)
	}
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		sess.Close()
		return nil, fmt.Errorf("txn: init producer id (fencing the previous incarnation): %w", err)
	}
	return &eos{sess: sess}, nil
}

type eos struct {
	sess    *kgo.GroupTransactSession
	promise *kgo.FirstErrPromise
}

func (e *eos) Client() *kgo.Client { return e.sess.Client() }

func (e *eos) Begin() error {
	if err := e.sess.Begin(); err != nil {
		return fmt.Errorf("txn: begin: %w", err)
	}
	e.promise = kgo.AbortingFirstErrPromise(e.sess.Client())
	return nil
}

func (e *eos) Produce(ctx context.Context, r *kgo.Record) {
	e.sess.Produce(ctx, r, e.promise.Promise())
}

func (e *eos) End(ctx context.Context, commit bool, meta MetaFunc) (bool, error) {
	// Flush first (or, for an abort, fail what is still buffered): without
	// it every batch would wait out the linger, which the processor sets to
	// the whole transaction, and the promise's error is only final once
	// every record was acknowledged or failed.
	var produceErr error
	if commit {
		if err := e.sess.Client().Flush(ctx); err != nil {
			return false, fmt.Errorf("txn: flush: %w", err)
		}
	} else if err := e.sess.Client().AbortBufferedRecords(ctx); err != nil {
		return false, fmt.Errorf("txn: abort buffered records: %w", err)
	}
	if e.promise != nil {
		produceErr = e.promise.Err()
		e.promise = nil
		if !commit && errors.Is(produceErr, kgo.ErrAborting) {
			produceErr = nil // the records this abort failed itself
		}
	}
	try := kgo.TryAbort
	if commit && produceErr == nil {
		try = kgo.TryCommit
	}
	endCtx := kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		for i := range req.Topics {
			t := &req.Topics[i]
			for j := range t.Partitions {
				tp := &t.Partitions[j]
				at, m, err := meta(t.Topic, tp.Partition)
				if err != nil {
					return err
				}
				if at.Offset >= 0 {
					// franz-go records what was sent as committed,
					// and an abort rewinds the consumer to it.
					tp.Offset, tp.LeaderEpoch = at.Offset, at.Epoch
				}
				tp.Metadata = &m
			}
		}
		return nil
	})
	committed, err := e.sess.End(endCtx, try)
	if err != nil {
		return false, fmt.Errorf("txn: end transaction: %w", err)
	}
	if produceErr != nil {
		return false, fmt.Errorf("%w: %w", ErrProduce, produceErr)
	}
	return committed, nil
}

func (e *eos) AllowRebalance() { e.sess.Client().AllowRebalance() }

func (e *eos) Close() { e.sess.CloseAllowingRebalance() }

// NewAtLeastOnce builds a plain group client: outputs are produced without a
// transaction and offsets are committed after they were acknowledged. A crash
// between the two repeats the batch's outputs.
func NewAtLeastOnce(ctx context.Context, opts ...kgo.Opt) (Session, error) {
	cl, err := kgo.NewClient(append(opts, kgo.DisableAutoCommit())...)
	if err != nil {
		return nil, fmt.Errorf("txn: new client: %w", err)
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("txn: reach kafka: %w", err)
	}
	return &alo{cl: cl}, nil
}

type alo struct {
	cl      *kgo.Client
	promise *kgo.FirstErrPromise
}

func (a *alo) Client() *kgo.Client { return a.cl }

func (a *alo) Begin() error {
	a.promise = new(kgo.FirstErrPromise)
	return nil
}

func (a *alo) Produce(ctx context.Context, r *kgo.Record) {
	a.cl.Produce(ctx, r, a.promise.Promise())
}

func (a *alo) End(ctx context.Context, commit bool, meta MetaFunc) (bool, error) {
	if err := a.cl.Flush(ctx); err != nil {
		return false, fmt.Errorf("txn: flush: %w", err)
	}
	var produceErr error
	if a.promise != nil {
		produceErr = a.promise.Err()
		a.promise = nil
	}
	if !commit || produceErr != nil {
		a.cl.SetOffsets(a.cl.CommittedOffsets())
		if produceErr != nil {
			return false, fmt.Errorf("%w: %w", ErrProduce, produceErr)
		}
		return false, nil
	}
	var metaErr error
	commitCtx := kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			t := &req.Topics[i]
			for j := range t.Partitions {
				_, m, err := meta(t.Topic, t.Partitions[j].Partition)
				if err != nil {
					metaErr = err
					return err
				}
				t.Partitions[j].Metadata = &m
			}
		}
		return nil
	})
	if err := a.cl.CommitUncommittedOffsets(commitCtx); err != nil {
		a.cl.SetOffsets(a.cl.CommittedOffsets())
		if metaErr != nil {
			return false, fmt.Errorf("txn: commit metadata: %w", metaErr)
		}
		// A failed commit after a rebalance is an ordinary abort here.
		return false, nil
	}
	return true, nil
}

func (a *alo) AllowRebalance() { a.cl.AllowRebalance() }

func (a *alo) Close() { a.cl.CloseAllowingRebalance() }

// Metadata of a committed input offset: "v1 cl=<next changelog offset>".
const metaPrefix = "v1 cl="

// EncodeMeta returns the commit metadata recording a changelog position.
func EncodeMeta(changelogNext int64) string {
	return metaPrefix + strconv.FormatInt(changelogNext, 10)
}

// DecodeMeta parses commit metadata; ok is false when it carries no
// changelog position (not written by this processor, or by an older one).
func DecodeMeta(s string) (changelogNext int64, ok bool) {
	rest, found := strings.CutPrefix(s, metaPrefix)
	if !found {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// Metadata of a committed input offset read by several rules:
// "v2 <ns>=<next changelog offset> ..." with one member per rule, ns being
// "<rule id>.v<rule version>", in ascending order of ns. A rule's changelog
// position is the next offset of its own changelog topic.
const metaV2Prefix = "v2"

// EncodePositions returns the v2 commit metadata of changelog positions by
// rule namespace.
func EncodePositions(pos map[string]int64) string {
	names := make([]string, 0, len(pos))
	for ns := range pos {
		names = append(names, ns)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(metaV2Prefix)
	for _, ns := range names {
		b.WriteByte(' ')
		b.WriteString(ns)
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(pos[ns], 10))
	}
	return b.String()
}

// DecodePositions parses v2 commit metadata; ok is false when s is not v2
// metadata (v1 is read by DecodeMeta).
func DecodePositions(s string) (pos map[string]int64, ok bool) {
	rest, found := strings.CutPrefix(s, metaV2Prefix)
	if !found || (rest != "" && rest[0] != ' ') {
		return nil, false
	}
	pos = map[string]int64{}
	for _, f := range strings.Fields(rest) {
		i := strings.LastIndexByte(f, '=')
		if i <= 0 {
			return nil, false
		}
		n, err := strconv.ParseInt(f[i+1:], 10, 64)
		if err != nil || n < 0 {
			return nil, false
		}
		pos[f[:i]] = n
	}
	return pos, true
}
