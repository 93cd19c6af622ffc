package delivery

import (
	"testing"
	"time"

	"github.com/vibeline/processor/internal/deliver"
)

// TestRebalanceHandsOverWithoutRepeats: a second delivery member joins
// while the first is delivering, then the first stops. Revoked partitions
// stop their lanes (in-flight attempts finish) and commit what they
// finished before they move, and a stopping member commits before it
// leaves: every revision is delivered exactly once, in order per machine.
func TestRebalanceHandsOverWithoutRepeats(t *testing.T) {
	seeds := newCluster(t, alertsTopic)
	rcv := newReceiver(t)
	rcv.delay = 40 * time.Millisecond
	cfg := testConfig(seeds, deliver.SinkConfig{Type: deliver.TypeWebhook, Name: "hook", URL: rcv.url(), Timeout: time.Second})
	cfg.GroupID = "delivery-rebalance"
	cfg.CommitInterval = time.Minute // only revoke and stop commit: the hand-over is what is tested

	revs := makeRevisions(t, "reb", 12, 3, 4)
	produce(t, seeds, revs)
	a := startStage(t, cfg)
	waitAcceptedN(t, rcv, len(revs)/4, 20*time.Second)
	b := startStage(t, cfg)
	// b delivers while a still runs: partitions moved from a to b.
	for deadline := time.Now().Add(20 * time.Second); metric(t, b.reg, "processor_delivery_total", nil) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second member delivered nothing within 20s of joining")
		}
	}
	aBefore := metric(t, a.reg, "processor_delivery_total", nil)
	time.Sleep(100 * time.Millisecond)
	if metric(t, a.reg, "processor_delivery_total", nil) == aBefore {
		t.Log("the first member delivered nothing more after the rebalance (it may have lost every partition)")
	}
	a.stop(t)
	rcv.waitAccepted(t, 30*time.Second, revs)
	b.stop(t)
	waitCommitted(t, seeds, cfg.GroupID, alertsTopic, 5*time.Second)

	acc, order, _, repeats := rcv.snapshot()
	aDone := metric(t, a.reg, "processor_delivery_total", map[string]string{"sink": "hook"})
	bDone := metric(t, b.reg, "processor_delivery_total", map[string]string{"sink": "hook"})
	t.Logf("member a delivered %v, member b %v; %d repeats", aDone, bDone, repeats)
	if len(acc) != len(revs) || repeats != 0 {
		t.Errorf("%d keys delivered (want %d), %d repeats (want 0: revoke and stop commit what they finished)", len(acc), len(revs), repeats)
	}
	if aDone == 0 || bDone == 0 {
		t.Errorf("delivered by a %v, by b %v: want both members to have delivered", aDone, bDone)
	}
	checkOrder(t, order, expectedOrder(revs))
}

// waitAcceptedN waits until the receiver accepted at least n keys.
func waitAcceptedN(t *testing.T, rcv *receiver, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		acc, _, _, _ := rcv.snapshot()
		if len(acc) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys accepted within %s, want %d", len(acc), timeout, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
