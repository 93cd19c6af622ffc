package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
	"github.com/vibeline/processor/test/e2e/harness"
)

// rulesDeployment is a deployment that runs a rules file of one rule of
// each window type, all reading its input in place and writing to its
// alerts, dead-letter and late topics.
func rulesDeployment(t *testing.T, seeds []string, input, name string) *deployment {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	d := newDeployment(t, seeds, input, name, config.Default().Rule, "PROCESSOR_RULES_FILE="+path)
	text := fmt.Sprintf(`rules:
  - id: vibration-high
    version: 1
    source: %[1]s
    filter: value >= 7.1 && quality == "good"
    window: {type: sliding, size: 2m}
    threshold: count >= 3
    outputs: {alerts: %[2]s, dlq: %[3]s, late: %[4]s}
  - id: machine-max
    version: 1
    source: %[1]s
    window: {type: tumbling, size: 1m}
    aggregate: {fn: max}
    threshold: agg >= 9
    outputs: {alerts: %[2]s, dlq: %[3]s, late: %[4]s}
  - id: machine-peak
    version: 1
    source: %[1]s
    window: {type: hopping, size: 5m, advance: 1m}
    aggregate: {fn: avg}
    threshold: agg >= 3.5
    cooldown: 2m
    outputs: {alerts: %[2]s, dlq: %[3]s, late: %[4]s}
  - id: machine-episode
    version: 1
    source: %[1]s
    filter: value >= 4.5
    window: {type: session, gap: 90s}
    threshold: count > 4
    outputs: {alerts: %[2]s, dlq: %[3]s, late: %[4]s}
`, input, d.alerts, d.dlq, d.late)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, internal := rulesFileTopics(t, d.group, path)
	t.Cleanup(func() { deleteTopicsAndGroup(t, seeds, d.group, internal...) })
	return d
}

// TestCrashEquivalenceRulesFile is TestCrashEquivalence for a rules file of
// sliding, tumbling, hopping (with a cooldown) and session rules: a run
// SIGKILLed at random moments while processing commits exactly the records
// of a clean run, per output and key, in the same order, and processor
// reconcile --recompute finds each run correct.
func TestCrashEquivalenceRulesFile(t *testing.T) {
	t.Parallel()
	const minRecords, minKills = 30_000, 4
	seeds := harness.Bootstrap(t)
	input := newInput(t, seeds, "e2e-crashrules.in", inputPartitions)
	clean := rulesDeployment(t, seeds, input, "rclean")
	crash := rulesDeployment(t, seeds, input, "rcrash")
	c := newCrasher(t, crash, "k0", false)

	cleanProc := clean.start("c0", clean.stateDir("c0"))
	pr := produceStream(t, seeds, input, sim.New(streamOptions(13)), produceRate, minRecords, 5*minRecords,
		func(int) bool { return c.midStream.Load() < minKills })
	crashProc := c.run(t, pr)
	sent := pr.wait(t)
	_, ends := readLog(t, seeds, input)
	waitConsumed(t, clean, ends, consumeTimeout)
	waitConsumed(t, crash, ends, consumeTimeout)
	cleanProc.stop(t, clean)
	crashProc.stop(t, crash)

	gotClean, gotCrash := readRuleOutputs(t, clean), readRuleOutputs(t, crash)
	t.Logf("input %d records; clean run: %d alert revisions, %d dead letters, %d too late; crash run: %d, %d, %d",
		sent, len(gotClean.alerts), len(gotClean.dlq), len(gotClean.late), len(gotCrash.alerts), len(gotCrash.dlq), len(gotCrash.late))
	perRule := map[string]int{}
	for _, r := range gotClean.alerts {
		a, err := alerts.Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		perRule[a.RuleID]++
	}
	for _, id := range []string{"vibration-high", "machine-max", "machine-peak", "machine-episode"} {
		if perRule[id] == 0 {
			t.Errorf("the clean run has no alert of %s: the fixture proves nothing for it (%v)", id, perRule)
		}
	}
	if len(gotClean.dlq) == 0 {
		t.Error("the clean run has no dead letter: the fixture proves nothing for them")
	}
	if diff := pipeline.Diff(gotClean.outputs, gotCrash.outputs); diff != "" {
		t.Errorf("the crash run committed other records than the clean run:\n%s", diff)
	}
	for _, d := range []*deployment{clean, crash} {
		code, stderr, _ := runBinaryOut(t, 2*time.Minute, d.env, "reconcile", "--recompute", "--quiet")
		if code != 0 || !strings.Contains(stderr, "OK: no violation") {
			t.Errorf("%s: processor reconcile exited %d:\n%s", d.name, code, stderr)
		}
		t.Logf("%s: processor reconcile --recompute: %s", d.name, lastLine(stderr))
	}
	aborted := abortedRecords(t, crash.seeds, len(gotCrash.alerts)+len(gotCrash.dlq)+len(gotCrash.late), crash.alerts, crash.dlq, crash.late)
	t.Logf("crash run: %d SIGKILLs, %d while processing with the input being written, %d during start-up; %d records of aborted transactions in its outputs; alerts per rule %v",
		c.kills, c.midStream.Load(), c.starting, aborted, perRule)
	if n := c.midStream.Load(); n < minKills {
		t.Errorf("%d kills while processing with the input being written, want at least %d", n, minKills)
	}
}

// readRuleOutputs is readOutputs for a rules file: the outputs only (the
// rules' changelogs are checked by processor reconcile).
func readRuleOutputs(t *testing.T, d *deployment) *committed {
	t.Helper()
	c := &committed{
		alerts:  harness.ReadCommitted(t, d.seeds, d.alerts, readTimeout),
		dlq:     harness.ReadCommitted(t, d.seeds, d.dlq, readTimeout),
		late:    harness.ReadCommitted(t, d.seeds, d.late, readTimeout),
		outputs: pipeline.Outputs{},
	}
	for kind, recs := range map[pipeline.Kind][]*kgo.Record{pipeline.Alert: c.alerts, pipeline.DeadLetter: c.dlq, pipeline.TooLate: c.late} {
		for _, r := range recs {
			c.outputs.Add(kind, r.Key, r.Value, headers(r))
		}
	}
	c.outputs.Canonical()
	return c
}
