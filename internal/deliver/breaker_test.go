package deliver

import (
	"fmt"
	"testing"
	"time"
)

type manualClock struct{ t time.Time }

func (c *manualClock) now() time.Time          { return c.t }
func (c *manualClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestBreakerStateMachine(t *testing.T) {
	clk := &manualClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var changes []string
	b := NewBreaker(BreakerConfig{Failures: 3, Cooldown: 10 * time.Second}, clk.now, func(from, to State) {
		changes = append(changes, fmt.Sprintf("%s>%s", from, to))
	})
	mustOK := func(step string) Permit {
		t.Helper()
		p := b.Acquire()
		if !p.OK {
			t.Fatalf("%s: Acquire refused (state %s, wait %s)", step, b.State(), p.Wait)
		}
		return p
	}
	mustWait := func(step string, wait time.Duration) Permit {
		t.Helper()
		p := b.Acquire()
		if p.OK || p.Wait != wait || p.Changed == nil {
			t.Fatalf("%s: Acquire = %+v, want a wait of %s", step, p, wait)
		}
		return p
	}

	// Closed: K-1 failures keep it closed; a success resets the count.
	mustOK("closed")
	if s := b.Failure(); s != StateClosed {
		t.Fatalf("1 failure: %s", s)
	}
	if s := b.Failure(); s != StateClosed {
		t.Fatalf("2 failures: %s", s)
	}
	b.Success()
	b.Failure()
	b.Failure()
	if b.State() != StateClosed {
		t.Fatalf("success did not reset the consecutive count: %s", b.State())
	}
	// The K-th consecutive failure opens it.
	if s := b.Failure(); s != StateOpen {
		t.Fatalf("3 consecutive failures: %s, want open", s)
	}
	// Open: callers wait for the rest of the cool-down.
	mustWait("open", 10*time.Second)
	clk.advance(4 * time.Second)
	w := mustWait("open later", 6*time.Second)
	// A late failure of an attempt started before opening changes nothing.
	if s := b.Failure(); s != StateOpen {
		t.Fatalf("failure while open: %s", s)
	}
	clk.advance(6 * time.Second)
	// Half-open: exactly one probe; the others wait for its verdict.
	probe := mustOK("half-open probe")
	if !probe.Probe || b.State() != StateHalfOpen {
		t.Fatalf("probe = %+v, state %s", probe, b.State())
	}
	select {
	case <-w.Changed:
	default:
		t.Fatal("waiters were not woken by open -> half-open")
	}
	other := mustWait("second caller while probing", 10*time.Second)
	// The probe fails: open again for a whole cool-down.
	if s := b.Failure(); s != StateOpen {
		t.Fatalf("probe failure: %s, want open", s)
	}
	select {
	case <-other.Changed:
	default:
		t.Fatal("waiters were not woken by the probe's verdict")
	}
	mustWait("reopened", 10*time.Second)
	clk.advance(10 * time.Second)
	probe = mustOK("second probe")
	// A stopped probe frees the slot for another caller.
	b.Release(probe)
	probe = mustOK("probe after release")
	if !probe.Probe {
		t.Fatal("the caller after a released probe is not the probe")
	}
	b.Release(Permit{OK: true}) // not a probe: no effect
	mustWait("still probing", 10*time.Second)
	// The probe succeeds: closed, everyone goes.
	b.Success()
	mustOK("closed again")
	mustOK("closed again, second caller")

	want := []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Errorf("transitions %v, want %v", changes, want)
	}
}

func TestBreakerPermanentAnswerClosesHalfOpen(t *testing.T) {
	clk := &manualClock{t: time.Unix(0, 0)}
	b := NewBreaker(BreakerConfig{Failures: 1, Cooldown: time.Second}, clk.now, nil)
	b.Failure()
	clk.advance(time.Second)
	if p := b.Acquire(); !p.Probe {
		t.Fatalf("want a probe, got %+v", p)
	}
	// The runner reports a permanent (4xx) answer as Success: the receiver is up.
	b.Success()
	if b.State() != StateClosed {
		t.Fatalf("state %s, want closed", b.State())
	}
}
