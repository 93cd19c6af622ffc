package deliver

import (
	"sync"
	"time"
)

// State is a circuit breaker state; its value is the metric
// processor_delivery_breaker_state.
type State int

const (
	// StateClosed: deliveries flow.
	StateClosed State = 0
	// StateHalfOpen: the cool-down passed; one probe delivery is let through.
	StateHalfOpen State = 1
	// StateOpen: the sink failed breaker.failures times in a row; deliveries
	// wait until the cool-down has passed.
	StateOpen State = 2
)

func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateHalfOpen:
		return "half-open"
	default:
		return "open"
	}
}

// Breaker is one sink's circuit breaker, shared by every lane (partition)
// delivering to that sink. Closed, it opens after Failures consecutive
// transient failures; open, it lets one probe through once Cooldown has
// passed (half-open); the probe's success closes it, its failure opens it
// for another Cooldown. Permanent failures are answers of a live receiver
// and count as successes. Waiting lanes do not poll the receiver: they
// wait for the cool-down or for a state change.
type Breaker struct {
	failures int
	cooldown time.Duration
	now      func() time.Time
	onChange func(from, to State)

	mu struct {
		sync.Mutex
		state       State
		consecutive int
		openedAt    time.Time
		probing     bool
		changed     chan struct{} // closed and replaced on every state change
	}
}

// NewBreaker returns a closed breaker. now is the clock; onChange, if not
// nil, is called after every state change, under the breaker's lock (so
// calls are in order): it must be quick and must not call the breaker.
func NewBreaker(cfg BreakerConfig, now func() time.Time, onChange func(from, to State)) *Breaker {
	b := &Breaker{failures: max(cfg.Failures, 1), cooldown: cfg.Cooldown, now: now, onChange: onChange}
	b.mu.changed = make(chan struct{})
	return b
}

// Permit is the answer of Acquire.
type Permit struct {
	// OK: attempt now. The caller must then report Success, Failure or
	// (when the attempt ended without a verdict) Release.
	OK bool
	// Probe: this attempt is the half-open probe.
	Probe bool
	// Wait and Changed, when !OK: ask again after Wait or once Changed is
	// closed, whichever comes first.
	Wait    time.Duration
	Changed <-chan struct{}
}

// Acquire asks whether a delivery attempt may start now.
func (b *Breaker) Acquire() Permit {
	b.mu.Lock()
	defer b.mu.Unlock()
	var p Permit
	switch b.mu.state {
	case StateClosed:
		p.OK = true
	case StateOpen:
		if left := b.cooldown - b.now().Sub(b.mu.openedAt); left > 0 {
			p.Wait, p.Changed = left, b.mu.changed
			break
		}
		b.setLocked(StateHalfOpen)
		b.mu.probing = true
		p.OK, p.Probe = true, true
	case StateHalfOpen:
		if b.mu.probing {
			// Someone else probes: wait for its verdict (a state change);
			// Wait only bounds the wait.
			p.Wait, p.Changed = b.cooldown, b.mu.changed
			break
		}
		b.mu.probing = true
		p.OK, p.Probe = true, true
	}
	return p
}

// Success reports an attempt the receiver answered (accepted, or rejected
// permanently): the breaker closes.
func (b *Breaker) Success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.consecutive = 0
	b.mu.probing = false
	b.setLocked(StateClosed)
}

// Failure reports a transient failure and returns the state after it. A
// state other than StateClosed means the sink is considered down: the
// failure does not count against the revision's retry bound.
func (b *Breaker) Failure() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.mu.state {
	case StateClosed:
		b.mu.consecutive++
		if b.mu.consecutive >= b.failures {
			b.openLocked()
		}
	case StateHalfOpen:
		b.openLocked()
	case StateOpen:
		// An attempt that started before the breaker opened: the sink is
		// already known to be down.
	}
	return b.mu.state
}

// Release reports that an attempt ended without a verdict (the lane was
// stopped). A probe's slot is freed for another lane.
func (b *Breaker) Release(p Permit) {
	if !p.Probe {
		return
	}
	b.mu.Lock()
	if b.mu.state == StateHalfOpen && b.mu.probing {
		b.mu.probing = false
		close(b.mu.changed)
		b.mu.changed = make(chan struct{})
	}
	b.mu.Unlock()
}

// State is the current state.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.state
}

func (b *Breaker) openLocked() {
	b.mu.openedAt = b.now()
	b.mu.probing = false
	b.mu.consecutive = 0
	b.setLocked(StateOpen)
}

func (b *Breaker) setLocked(s State) {
	from := b.mu.state
	if from == s {
		return
	}
	b.mu.state = s
	close(b.mu.changed)
	b.mu.changed = make(chan struct{})
	if b.onChange != nil {
		b.onChange(from, s)
	}
}
