package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/internal/sim"
)

// bigN is the threshold of the rules whose alerts are too large to be
// written whole: bigN evidence events with ids of control characters (six
// bytes each in the alert JSON) are about 1.5 MB.
const bigN = 120

const bigRules = `rules:
  - id: vibration-high
    version: 1
    description: high-vibration events
    source: vibration.events
    filter: value >= 7.1 && quality == "good"
    window: {type: sliding, size: 30m}
    threshold: count >= 120
    outputs: {alerts: vibration.alerts}
`

// escapedID is an id of event.MaxIDBytes bytes: prefix, then control
// characters.
func escapedID(prefix string) string {
	return prefix + strings.Repeat("\x01", event.MaxIDBytes-len(prefix))
}

// processedBig runs the processor with cfg over bigN qualifying events of
// one machine, one second apart, then a filtered event that closes the
// incident; every id is as long as ids may be.
func processedBig(t *testing.T, cfg config.Config) {
	t.Helper()
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
	for i := range bigN {
		add(escapedID(fmt.Sprintf("e%04d", i)), time.Duration(i)*time.Second, 9)
	}
	add(escapedID("close"), 3*time.Hour, 1)

	stop := startProcessor(t, cfg)
	produced := kafkatest.Produce(t, cfg.Brokers, cfg.Topics.Input, recs...)
	kafkatest.WaitCommitted(t, cfg.Brokers, cfg.GroupID, cfg.Topics.Input, kafkatest.NextOffsets(produced), 30*time.Second)
	stop()
}

// Revisions whose evidence was cut to fit the producer's record limit
// (evidence_omitted) reconcile, recomputation included: the evidence they
// name is checked, the count of what they left out makes up the rule's N,
// and the report says that the events left out were not checked. Both for
// the rule: block and for a rules file.
func TestReconcileOmittedEvidence(t *testing.T) {
	for _, file := range []bool{false, true} {
		t.Run(fmt.Sprintf("rules_file=%v", file), func(t *testing.T) {
			cfg := kafkatest.Config(kafkatest.Cluster(t, 1, "vibration.events").ListenAddrs(), t.TempDir(), "big")
			if file {
				cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", bigRules)
			} else {
				cfg.Rule.Threshold, cfg.Rule.Window = bigN, 30*time.Minute
			}
			processedBig(t, cfg)
			recs, err := ReadCommitted(context.Background(), cfg.Brokers, cfg.Topics.Alerts, 10*time.Second, nil)
			if err != nil || len(recs) != 2 {
				t.Fatalf("%d alert revisions (%v), want open and closed", len(recs), err)
			}
			for _, r := range recs {
				if a, err := alerts.Decode(r.Value); err != nil || a.EvidenceOmitted == 0 {
					t.Fatalf("the fixture proves nothing: evidence_omitted %d (%v)", a.EvidenceOmitted, err)
				}
			}
			rep, err := Run(context.Background(), Options{Config: cfg, Recompute: true, Timeout: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + rep.String())
			if !rep.OK() || rep.Alerts+len(rep.Rules) == 0 {
				t.Fatalf("alerts with evidence left out do not reconcile:\n%s", rep)
			}
			if s := rep.String(); !strings.Contains(s, "2 alert revisions name only the first events of their evidence") ||
				!strings.Contains(s, "not checked") {
				t.Fatalf("the report does not say that evidence was left out unchecked:\n%s", s)
			}
		})
	}
}

// windowProblem counts the events left out towards the rule's numbers.
func TestWindowProblemCountsOmittedEvidence(t *testing.T) {
	compile := func(text string) *rules.Compiled {
		t.Helper()
		path := kafkatest.WriteFile(t, "rules.yaml", text)
		rs, err := rules.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return rs[0]
	}
	sliding := &ruleCheck{c: compile(bigRules)}
	tumbling := &ruleCheck{c: compile(`rules:
  - id: avg
    version: 1
    description: vibration events
    source: vibration.events
    window: {type: tumbling, size: 1m}
    aggregate: {fn: avg}
    threshold: count >= 1
    outputs: {alerts: vibration.alerts}
`)}
	ev := func(n int, ts int64) []alerts.Evidence {
		out := make([]alerts.Evidence, n)
		for i := range out {
			out[i] = alerts.Evidence{EventID: fmt.Sprintf("e%04d", i), TS: ts + int64(i)}
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		rc      *ruleCheck
		a       alerts.Alert
		problem string // "" when fine
	}{
		{"sliding whole", sliding, alerts.Alert{Start: 0, End: 200, Count: bigN, Evidence: ev(bigN, 0)}, ""},
		{"sliding cut", sliding, alerts.Alert{Start: 0, End: 200, Count: bigN, Evidence: ev(70, 0), EvidenceOmitted: bigN - 70}, ""},
		{"sliding none named", sliding, alerts.Alert{Start: 0, End: 200, Count: bigN, EvidenceOmitted: bigN}, ""},
		{"sliding short", sliding, alerts.Alert{Start: 0, End: 200, Count: bigN, Evidence: ev(70, 0), EvidenceOmitted: 3},
			"70 evidence samples + 3 omitted, want 120"},
		{"sliding cut, not the first firing set", sliding, alerts.Alert{Start: 0, End: 200, Count: bigN, Evidence: ev(70, 5), EvidenceOmitted: bigN - 70},
			"is not the first firing set"},
		{"tumbling cut", tumbling, alerts.Alert{Start: 0, End: 60_000, Count: 12, Evidence: ev(4, 0), EvidenceOmitted: 6}, ""},
		{"tumbling too many", tumbling, alerts.Alert{Start: 0, End: 60_000, Count: 12, Evidence: ev(4, 0), EvidenceOmitted: 7},
			"4 evidence samples + 7 omitted, want 1 to 10"},
		{"tumbling more than the count", tumbling, alerts.Alert{Start: 0, End: 60_000, Count: 5, Evidence: ev(4, 0), EvidenceOmitted: 2},
			"at most the count 5"},
	} {
		got := tc.rc.windowProblem(&tc.a)
		if (tc.problem == "") != (got == "") || !strings.Contains(got, tc.problem) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.problem)
		}
	}
}
