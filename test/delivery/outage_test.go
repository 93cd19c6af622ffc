package delivery

import (
	"net/http"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/deliver"
)

// TestOutageThenRecovery: the receiver answers 503 for a while, then is
// down (connections refused), then comes back. Every revision arrives
// exactly once at the receiver (which honours Idempotency-Key and counts
// repeats), in order per machine; nothing is dead-lettered; revisions of an
// aborted transaction are never delivered; during the outage the breaker
// opens and the lag grows; afterwards every offset is committed.
// (The same in 5 minutes of virtual time: internal/deliver
// TestOutageFiveMinutesVirtualTime.)
func TestOutageThenRecovery(t *testing.T) {
	seeds := newCluster(t, alertsTopic)
	rcv := newReceiver(t)
	rcv.secret = []byte("outage-secret")
	t.Setenv("TEST_HOOK_SECRET", "outage-secret")
	cfg := testConfig(seeds, deliver.SinkConfig{Type: deliver.TypeWebhook, Name: "hook", URL: rcv.url(), Timeout: time.Second, SecretEnv: "TEST_HOOK_SECRET"})
	cfg.GroupID = "delivery-outage"
	st := startStage(t, cfg)

	before := makeRevisions(t, "before", 6, 2, 3)
	produce(t, seeds, before)
	rcv.waitAccepted(t, 20*time.Second, before)

	// Outage, phase 1: 503 answers.
	rcv.setStatus(http.StatusServiceUnavailable)
	during := makeRevisions(t, "during", 6, 2, 3)
	produce(t, seeds, during)
	rcv.waitAnswered(t, http.StatusServiceUnavailable, cfg.Breaker.Failures, 10*time.Second)
	maxBreaker, maxLag := 0.0, 0.0
	watch := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			maxBreaker = max(maxBreaker, metric(t, st.reg, "processor_delivery_breaker_state", map[string]string{"sink": "hook"}))
			maxLag = max(maxLag, metric(t, st.reg, "processor_delivery_lag_records", nil))
		}
	}
	watch(1500 * time.Millisecond)
	// Phase 2: the receiver is down; connections are refused.
	rcv.down()
	aborted := makeRevisions(t, "aborted", 6, 1, 1)
	produceAborted(t, seeds, aborted)
	late := makeRevisions(t, "late", 6, 1, 2)
	produce(t, seeds, late)
	watch(1500 * time.Millisecond)
	checkCommitNotAhead(t, seeds, cfg.GroupID, rcv, before, during, late)
	acc, _, answered, _ := rcv.snapshot()
	for _, r := range during {
		if acc[r.key] > 0 {
			t.Fatalf("%s accepted during the outage", r.key)
		}
	}
	// Recovery.
	rcv.setStatus(0)
	rcv.up()
	rcv.waitAccepted(t, 20*time.Second, before, during, late)
	waitCommitted(t, seeds, cfg.GroupID, alertsTopic, 10*time.Second)

	acc, order, answered, repeats := rcv.snapshot()
	t.Logf("outage: %d answers 503, breaker max %v, lag max %v; %d keys accepted, %d repeats", answered[503], maxBreaker, maxLag, len(acc), repeats)
	all := len(before) + len(during) + len(late)
	if len(acc) != all || repeats != 0 {
		t.Errorf("%d keys accepted (want %d), %d repeats (want 0)", len(acc), all, repeats)
	}
	for k, n := range acc {
		if n != 1 {
			t.Errorf("key %s accepted %d times", k, n)
		}
	}
	for _, r := range aborted {
		if acc[r.key] > 0 {
			t.Errorf("revision %s of an aborted transaction was delivered", r.key)
		}
	}
	checkOrder(t, order, expectedOrder(before, during, late))
	if rcv.badSig != 0 {
		t.Errorf("%d requests with a wrong X-Signature-SHA256", rcv.badSig)
	}
	if dl := readTopic(t, seeds, dlqTopic); len(dl) != 0 {
		t.Errorf("the outage dead-lettered %d revisions", len(dl))
	}
	if maxBreaker != float64(deliver.StateOpen) {
		t.Errorf("breaker state peaked at %v during the outage, want %d (open)", maxBreaker, deliver.StateOpen)
	}
	if maxLag < float64(len(during))/partitions {
		t.Errorf("lag peaked at %v during the outage, want it to grow (%d revisions waiting)", maxLag, len(during))
	}
	// The breaker held the lanes: a bounded number of 503s, not a storm.
	// 3 s of outage / 300 ms cool-down = 10 probes, plus the attempts
	// before the breaker opened.
	if answered[503] > 3*cfg.Breaker.Failures+20 {
		t.Errorf("%d answers 503 in 1.5 s of outage: the breaker did not hold the retries", answered[503])
	}
	if got := metric(t, st.reg, "processor_delivery_breaker_state", map[string]string{"sink": "hook"}); got != 0 {
		t.Errorf("breaker state %v after recovery, want 0", got)
	}
	if got := metric(t, st.reg, "processor_delivery_total", map[string]string{"sink": "hook", "outcome": "retried"}); got < 1 {
		t.Errorf("processor_delivery_total{outcome=retried} = %v, want > 0", got)
	}
	if got := metric(t, st.reg, "processor_delivery_total", map[string]string{"sink": "hook"}); got != float64(all) {
		t.Errorf("processor_delivery_total = %v, want %d", got, all)
	}
	if got := metric(t, st.reg, "processor_delivery_retries_total", map[string]string{"sink": "hook"}); got < float64(cfg.Breaker.Failures) {
		t.Errorf("processor_delivery_retries_total = %v", got)
	}
	if got := metric(t, st.reg, "processor_delivery_latency_seconds", map[string]string{"sink": "hook"}); got != float64(all) {
		t.Errorf("latency observations %v, want %d", got, all)
	}
}
