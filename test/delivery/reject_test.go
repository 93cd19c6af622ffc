package delivery

import (
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/deliver"
)

// TestPermanentRejection: the receiver answers 422 for one alert: each of
// its revisions lands in the delivery DLQ (original key and value, headers
// naming sink, reason, attempts and last status), every other revision is
// delivered, and all offsets are committed.
func TestPermanentRejection(t *testing.T) {
	seeds := newCluster(t, alertsTopic)
	rcv := newReceiver(t)
	cfg := testConfig(seeds, deliver.SinkConfig{Type: deliver.TypeWebhook, Name: "hook", URL: rcv.url(), Timeout: time.Second})
	cfg.GroupID = "delivery-reject"
	st := startStage(t, cfg)

	revs := makeRevisions(t, "rej", 5, 2, 3)
	d, err := deliver.NewDelivery(deliver.Record{Value: revs[3].value})
	if err != nil {
		t.Fatal(err)
	}
	bad := d.Alert.AlertID
	rcv.mu.Lock()
	rcv.reject[bad] = true
	rcv.mu.Unlock()
	var good, rejected []revision
	for _, r := range revs {
		if strings.HasPrefix(r.key, bad+"-") {
			rejected = append(rejected, r)
		} else {
			good = append(good, r)
		}
	}
	produce(t, seeds, revs)
	rcv.waitAccepted(t, 20*time.Second, good)
	waitCommitted(t, seeds, cfg.GroupID, alertsTopic, 10*time.Second)

	acc, order, answered, repeats := rcv.snapshot()
	if len(acc) != len(good) || repeats != 0 {
		t.Errorf("%d keys accepted (want %d), %d repeats", len(acc), len(good), repeats)
	}
	checkOrder(t, order, expectedOrder(good))
	if answered[422] != len(rejected) {
		t.Errorf("%d answers 422, want %d: a permanent rejection must not be retried", answered[422], len(rejected))
	}
	dl := readTopic(t, seeds, dlqTopic)
	if len(dl) != len(rejected) {
		t.Fatalf("%d dead letters, want the %d revisions of %s", len(dl), len(rejected), bad)
	}
	for i, r := range dl {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		want := rejected[i]
		if string(r.Key) != want.machine || string(r.Value) != string(want.value) {
			t.Errorf("dead letter %d: key %s value %s, want the original record", i, r.Key, r.Value)
		}
		if h["delivery.sink"] != "hook" || h["delivery.reason"] != deliver.ReasonRejected || h["delivery.attempts"] != "1" ||
			h["delivery.last_status"] != "422" || h["delivery.idempotency_key"] != want.key || h["source.topic"] != alertsTopic {
			t.Errorf("dead letter %d headers: %v", i, h)
		}
		if !strings.Contains(h["delivery.detail"], "422") || !strings.Contains(h["delivery.detail"], "unknown machine") {
			t.Errorf("dead letter %d detail %q: want the status and the receiver's answer", i, h["delivery.detail"])
		}
	}
	if got := metric(t, st.reg, "processor_delivery_total", map[string]string{"sink": "hook", "outcome": "dead_lettered"}); got != float64(len(rejected)) {
		t.Errorf("processor_delivery_total{outcome=dead_lettered} = %v, want %d", got, len(rejected))
	}
	if got := metric(t, st.reg, "processor_delivery_total", map[string]string{"sink": "hook", "outcome": "delivered"}); got != float64(len(good)) {
		t.Errorf("processor_delivery_total{outcome=delivered} = %v, want %d", got, len(good))
	}
}
