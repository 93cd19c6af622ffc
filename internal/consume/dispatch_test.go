package consume

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// dispatch runs the jobs of one partition one at a time, in the order they
// were dispatched, at most workers jobs at once, without making the loop
// wait for a job; drain returns once all have finished. A job that touched
// its partition's log while another job of the same partition ran would be
// reported by -race; one run out of order fails the test.
func TestDispatchKeepsPartitionOrderAndBoundsWorkers(t *testing.T) {
	const workers, nParts, nJobs = 2, 4, 400
	p := &Processor{
		workers: workers,
		running: make(chan struct{}, workers),
		queued:  make(chan struct{}, 4*workers),
	}
	parts := make([]*part, nParts)
	logs := make([][]int, nParts) // logs[i]: sequence numbers of parts[i]'s jobs, as run
	for i := range parts {
		parts[i] = &part{}
	}
	var running, peak atomic.Int32
	rng := rand.New(rand.NewPCG(1, 2))
	next := make([]int, nParts)
	for range nJobs {
		i := rng.IntN(nParts)
		seq := next[i]
		next[i]++
		pause := time.Duration(rng.IntN(200)) * time.Microsecond
		p.dispatch(parts[i], func() {
			n := running.Add(1)
			for {
				m := peak.Load()
				if n <= m || peak.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(pause)
			logs[i] = append(logs[i], seq)
			running.Add(-1)
		})
	}
	p.drain()
	for i, l := range logs {
		if len(l) != next[i] {
			t.Fatalf("partition %d: %d jobs ran, want %d", i, len(l), next[i])
		}
		for j, seq := range l {
			if seq != j {
				t.Fatalf("partition %d: job %d ran as the %dth: %v", i, seq, j, l)
			}
		}
	}
	if got := peak.Load(); got > workers {
		t.Fatalf("%d jobs ran at once, want at most %d", got, workers)
	}
}

// dispatch returns while a job still runs: the loop polls on. Only when
// 4*workers jobs are unfinished does it wait.
func TestDispatchDoesNotWaitForJobs(t *testing.T) {
	p := &Processor{workers: 2, running: make(chan struct{}, 2), queued: make(chan struct{}, 8)}
	release := make(chan struct{})
	pt := &part{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 8 { // the queue's capacity: none of these may block
			p.dispatch(pt, func() { <-release })
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("dispatch waited for a running job")
	}
	blocked := make(chan struct{})
	go func() {
		p.dispatch(pt, func() {})
		close(blocked)
	}()
	select {
	case <-blocked:
		t.Fatal("a ninth unfinished job did not make dispatch wait")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-blocked
	p.drain()
}

// With one worker the job runs in the caller, before dispatch returns.
func TestDispatchWithOneWorkerRunsInline(t *testing.T) {
	p := &Processor{workers: 1}
	ran := false
	p.dispatch(&part{}, func() { ran = true })
	if !ran {
		t.Fatal("the job had not run when dispatch returned")
	}
	p.drain()
}
