package consume

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
)

// escapedID is an id of event.MaxIDBytes bytes: prefix, then control
// characters, which the alert JSON writes as six bytes each (\u0001).
func escapedID(prefix string) string {
	return prefix + strings.Repeat("\x01", event.MaxIDBytes-len(prefix))
}

// A sliding rule whose alert, with ids as long as valid ids get, would be
// larger than the producer's records (here 120 evidence events of about
// 12 KB of JSON each: 1.5 MB; the key's changelog entry stays near 0.6 MB):
// the produce of that alert failed with MESSAGE_TOO_LARGE inside the
// transaction, which aborted and reprocessed the same records for ever.
// Now the revision goes out with its evidence cut to fit (evidence_omitted)
// and the group commits past the records, with the reference's outputs.
func TestOversizedAlertDoesNotStallThePartition(t *testing.T) {
	const n = 120
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "big")
	cfg.Rule.Threshold = n
	cfg.Rule.Window = 30 * time.Minute
	machine := escapedID("M-")
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	var recs []sim.Record
	add := func(id string, at time.Duration, value float64) {
		ts := base.Add(at)
		v, err := json.Marshal(map[string]any{"event_id": id, "machine_id": machine, "sensor_id": escapedID("S-" + id[:5]),
			"ts": ts.UnixMilli(), "seq": len(recs), "value": value, "unit": "mm/s", "schema_version": 1, "quality": "good"})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, sim.Record{Key: []byte(machine), Value: v, Timestamp: ts})
	}
	for i := range n {
		add(escapedID(fmt.Sprintf("e%04d", i)), time.Duration(i)*time.Second, 9)
	}
	add(escapedID("close"), 3*time.Hour, 1) // filtered; the watermark closes the incident
	log := pipeline.Log{}
	produce(t, seeds, cfg.Topics.Input, recs, log)

	reg := prometheus.NewRegistry()
	in := startWith(t, cfg, Options{}, reg)
	want := map[int32]int64{}
	for p, rs := range log {
		want[p] = rs[len(rs)-1].Offset + 1
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := committed(t, seeds, cfg.GroupID, cfg.Topics.Input)
		done := true
		for p, w := range want {
			done = done && got[p] >= w
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			aborted := 0.0
			if mfs, err := reg.Gather(); err == nil {
				for _, mf := range mfs {
					if mf.GetName() != "processor_txn_total" {
						continue
					}
					for _, m := range mf.Metric {
						if len(m.Label) == 1 && m.Label[0].GetValue() == "aborted" {
							aborted = m.Counter.GetValue()
						}
					}
				}
			}
			in.stop(t)
			t.Fatalf("the group did not commit past the records within 30s (committed %v, want %v): %v transactions aborted; "+
				"an alert revision the producer cannot write aborts every retry", got, want, aborted)
		}
		time.Sleep(50 * time.Millisecond)
	}
	in.stop(t)

	stage, err := pipeline.NewStage(cfg.Rule)
	if err != nil {
		t.Fatal(err)
	}
	wantOut, _ := stage.Reference(log)
	got := outputsOf(cfg, readAll(t, seeds, cfg.Topics.Alerts, cfg.Topics.DLQ, cfg.Topics.Late))
	if d := pipeline.Diff(wantOut, got); d != "" {
		t.Fatalf("committed outputs differ from the reference:\n%s", d)
	}
	revs := 0
	for _, r := range readAll(t, seeds, cfg.Topics.Alerts) {
		a, err := alerts.Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Value) > pipeline.MaxAlertBytes || a.EvidenceOmitted == 0 || len(a.Evidence)+a.EvidenceOmitted != n || a.Count != n {
			t.Fatalf("alert %s rev %d: %d bytes, %d evidence events, %d omitted, count %d", a.AlertID, a.Revision,
				len(r.Value), len(a.Evidence), a.EvidenceOmitted, a.Count)
		}
		revs++
	}
	if revs != 2 {
		t.Fatalf("%d alert revisions, want open and closed", revs)
	}
}
