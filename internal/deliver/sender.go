package deliver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/vibeline/processor/internal/avro"
)

// clock is the injected time source of the retry and breaker logic.
type clock struct {
	now   func() time.Time
	after func(time.Duration) <-chan time.Time
	rand  func() float64
}

// sleep waits d or until ctx ends.
func (c clock) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.after(d):
		return nil
	}
}

// sinkRunner delivers to one sink with retries, behind the sink's breaker.
// One runner is shared by the lanes of every partition.
type sinkRunner struct {
	sink    Sink
	name    string
	breaker *Breaker
	retry   RetryConfig
	clk     clock
	met     *Metrics
	log     *slog.Logger
	// decode reads a record value (Options.Decode); nil: the alert JSON
	// format (NewDelivery).
	decode DecodeFunc
}

func newSinkRunner(s Sink, retry RetryConfig, br BreakerConfig, clk clock, met *Metrics, log *slog.Logger) *sinkRunner {
	r := &sinkRunner{sink: s, name: s.Name(), retry: retry, clk: clk, met: met, log: log.With("sink", s.Name())}
	gauge := met.BreakerState.WithLabelValues(r.name)
	var openedAt time.Time // guarded by the breaker's lock (onChange runs under it)
	r.breaker = NewBreaker(br, clk.now, func(from, to State) {
		gauge.Set(float64(to))
		switch {
		case from == StateClosed && to == StateOpen:
			openedAt = clk.now()
			r.log.Warn("deliver: breaker open: sink failing, deliveries wait for it", "cooldown", br.Cooldown)
		case to == StateClosed:
			r.log.Info("deliver: breaker closed: sink accepts again", "down_for", clk.now().Sub(openedAt).Round(time.Millisecond))
		default: // probing, or a failed probe: once per cool-down
			r.log.Debug("deliver: breaker "+to.String(), "from", from.String())
		}
	})
	return r
}

// attemptResult is how delivering one revision to one sink ended.
type attemptResult struct {
	accepted   bool
	attempts   int
	lastStatus int
	reason     string // dead-letter reason when !accepted
	detail     string
}

// deliver tries d until the sink accepts it, rejects it permanently or the
// retry bound is reached; it returns ctx's error if stopped first. A started
// attempt is never cancelled by ctx (it is bounded by the sink's timeout),
// so a stop does not turn an accepted delivery into an unknown one.
//
// Counting: a transient failure after which the breaker is not closed (it
// opened the breaker, or the breaker was already open or half-open) is an
// outage, not a problem of this revision: it does not count towards
// retry.max_attempts or retry.max_elapsed, and the lane then waits on the
// breaker instead of backing off. Time spent waiting on the breaker does not
// count either.
func (s *sinkRunner) deliver(ctx context.Context, d Delivery) (attemptResult, error) {
	var (
		res     attemptResult
		counted int
		spent   time.Duration
	)
	for {
		if err := s.acquire(ctx); err != nil {
			return res, err
		}
		if res.attempts > 0 {
			s.met.Retries.WithLabelValues(s.name).Inc()
		}
		start := s.clk.now()
		err := s.sink.Send(context.WithoutCancel(ctx), d)
		took := s.clk.now().Sub(start)
		res.attempts++
		if err == nil {
			s.breaker.Success()
			res.accepted = true
			return res, nil
		}
		res.lastStatus = statusOf(err)
		if IsPermanent(err) {
			s.breaker.Success() // the receiver is up: it answered
			res.reason, res.detail = ReasonRejected, err.Error()
			return res, nil
		}
		if s.breaker.Failure() != StateClosed {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			continue // wait on the breaker
		}
		counted++
		spent += took
		backoff := s.retry.Backoff(counted, s.clk.rand)
		delay := backoff
		var se *SendError
		if errors.As(err, &se) && se.RetryAfter > delay {
			delay = min(se.RetryAfter, s.retry.Max)
		}
		// Only the backoff counts towards retry.max_elapsed, not a longer
		// Retry-After: the receiver asked for that wait (a maintenance
		// page answering 503 with Retry-After: 3600 is an outage), and
		// the configuration guarantees that breaker.failures attempts with
		// their backoff fit in max_elapsed, so that an outage opens the
		// breaker before a revision runs out of budget (outageBudget).
		if counted >= s.retry.MaxAttempts || (s.retry.MaxElapsed > 0 && spent+backoff > s.retry.MaxElapsed) {
			res.reason = ReasonRetriesExhausted
			res.detail = fmt.Sprintf("%d counted failures (of %d attempts) over %s counted time: last: %v",
				counted, res.attempts, spent.Round(time.Millisecond), err)
			return res, nil
		}
		if err := s.clk.sleep(ctx, delay); err != nil {
			return res, err
		}
		spent += backoff
	}
}

// acquire waits until the breaker lets an attempt through.
func (s *sinkRunner) acquire(ctx context.Context) error {
	for {
		p := s.breaker.Acquire()
		if p.OK {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.Changed:
		case <-s.clk.after(p.Wait):
		}
	}
}

// handle finishes one record for this sink: delivered, or written to the
// DLQ. It returns an error only when ctx ended first (the record is then
// not finished and must not be committed).
func (s *sinkRunner) handle(ctx context.Context, rec Record, dlq DeadLetterFunc) error {
	d, decodeErr, err := s.delivery(ctx, rec)
	if err != nil {
		return err // stopped while the schema registry was unavailable
	}
	var res attemptResult
	if decodeErr != nil {
		res = attemptResult{reason: ReasonUndecodable, detail: decodeErr.Error()}
	} else if res, err = s.deliver(ctx, d); err != nil {
		return err
	}
	if res.accepted {
		outcome := OutcomeDelivered
		if res.attempts > 1 {
			outcome = OutcomeRetried
		}
		s.met.Deliveries.WithLabelValues(s.name, outcome).Inc()
		if !rec.Timestamp.IsZero() {
			s.met.Latency.WithLabelValues(s.name).Observe(max(0, s.clk.now().Sub(rec.Timestamp).Seconds()))
		}
		return nil
	}
	dl := DeadLetter{
		Record: rec, Sink: s.name, Reason: res.reason, Detail: res.detail,
		Attempts: res.attempts, LastStatus: res.lastStatus, IdempotencyKey: d.IdempotencyKey,
	}
	for n := 1; ; n++ {
		err := dlq(ctx, dl)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if n == 1 || n%10 == 0 {
			s.log.Error("deliver: writing dead letter failed: retrying (the partition waits)",
				"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "attempt", n, "err", err)
		}
		if err := s.clk.sleep(ctx, s.retry.Backoff(n, s.clk.rand)); err != nil {
			return err
		}
	}
	s.met.Deliveries.WithLabelValues(s.name, OutcomeDeadLettered).Inc()
	s.log.Warn("deliver: dead-lettered", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset,
		"idempotency_key", d.IdempotencyKey, "reason", res.reason, "attempts", res.attempts, "last_status", res.lastStatus, "err", res.detail)
	return nil
}

// delivery decodes rec. The JSON format (no decode function) never waits.
// With a decode function, a transient failure (avro.IsTransient: the schema
// registry is unavailable) is retried with the retry backoff until the
// decode succeeds or ctx ends; then stopErr is ctx's error and the record
// stays unfinished. Such a record is never dead-lettered. decodeErr is set
// when the value is not an alert revision (dead-letter it as undecodable).
func (s *sinkRunner) delivery(ctx context.Context, rec Record) (d Delivery, decodeErr, stopErr error) {
	if s.decode == nil {
		d, err := NewDelivery(rec)
		return d, err, nil
	}
	for n := 1; ; n++ {
		a, err := s.decode(ctx, rec.Value)
		if err == nil {
			body, err := a.Encode()
			if err != nil {
				return Delivery{}, fmt.Errorf("deliver: the decoded revision has no alert JSON: %w", err), nil
			}
			return Delivery{Record: rec, Alert: a, Body: body, IdempotencyKey: IdempotencyKey(a.AlertID, a.Revision)}, nil, nil
		}
		if ctx.Err() != nil {
			return Delivery{}, nil, ctx.Err()
		}
		if !avro.IsTransient(err) {
			return Delivery{}, err, nil
		}
		if n == 1 || n%10 == 0 {
			s.log.Warn("deliver: decoding alert failed: schema registry unavailable: retrying (the partition waits)",
				"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "attempt", n, "err", err)
		}
		if err := s.clk.sleep(ctx, s.retry.Backoff(n, s.clk.rand)); err != nil {
			return Delivery{}, nil, err
		}
	}
}
