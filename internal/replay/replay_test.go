package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/reconcile"
	"github.com/vibeline/processor/internal/sim"
)

type running struct {
	cancel context.CancelFunc
	done   chan error
}

func startProcessor(t *testing.T, cfg config.Config) *running {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	p, err := consume.New(cfg, consume.Options{Metrics: met, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(ctx) }()
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
}

func TestReplayIntoNewVersion(t *testing.T) {
	v1 := kafkatest.Config(kafkatest.Cluster(t, 3, "vibration.events").ListenAddrs(), t.TempDir(), "r")
	v1.SessionTimeout = 2 * time.Second

	o := sim.Demo()
	o.Machines = 10
	o.EpisodeRate = 0.05
	const n = 6000
	input := kafkatest.NextOffsets(kafkatest.Produce(t, v1.Brokers, v1.Topics.Input, kafkatest.Records(sim.New(o), n)...))
	p := startProcessor(t, v1)
	kafkatest.WaitCommitted(t, v1.Brokers, v1.GroupID, "vibration.events", input, 30*time.Second)

	v2 := v1
	v2.Rule.Version = 2
	v2.Rule.Threshold = 4 // the rule change

	// Refused while the group has a live member.
	if _, err := Run(context.Background(), Options{Config: v2}); !errors.Is(err, ErrLiveMembers) || !strings.Contains(err.Error(), "r (client") {
		t.Fatalf("replay with a live member: %v", err)
	}
	p.stop(t)
	// A stopped static member expires after the session timeout.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := Run(context.Background(), Options{Config: v2, DryRun: true})
		if !errors.Is(err, ErrLiveMembers) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member did not expire: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Refused for a version that already has state.
	if _, err := Run(context.Background(), Options{Config: v1}); !errors.Is(err, ErrStateExists) {
		t.Fatalf("replay into v1 (has state): %v", err)
	}
	// Dry run changes nothing.
	plan, err := Run(context.Background(), Options{Config: v2, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Applied || len(plan.Moves) != 3 || plan.Moves[0].To != 0 || plan.Moves[0].From <= 0 {
		t.Fatalf("dry-run plan: %+v", plan)
	}
	t.Log("\n" + plan.String())
	plan, err = Run(context.Background(), Options{Config: v2})
	if err != nil || !plan.Applied {
		t.Fatalf("replay: %+v %v", plan, err)
	}

	// v2 reprocesses everything on fresh state, and its outputs are a
	// correct v2 computation (reconcile recomputes them).
	p = startProcessor(t, v2)
	kafkatest.WaitCommitted(t, v2.Brokers, v2.GroupID, "vibration.events", input, 30*time.Second)
	p.stop(t)
	rep, err := reconcile.Run(context.Background(), reconcile.Options{Config: v2, Recompute: true, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The alerts topic holds both versions: reconcile v2 over v2's alerts only.
	var v1n, v2n int
	all, err := reconcile.ReadCommitted(context.Background(), v2.Brokers, v2.Topics.Alerts, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		a, err := alerts.Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		switch a.RuleVersion {
		case 1:
			v1n++
		case 2:
			v2n++
			if len(a.Evidence) != 4 {
				t.Fatalf("v2 alert with %d evidence samples", len(a.Evidence))
			}
		}
	}
	if v1n == 0 || v2n == 0 {
		t.Fatalf("alerts: %d of v1, %d of v2", v1n, v2n)
	}
	// The replayed range's records were dead-lettered again, by v2: each
	// letter names the version that wrote it (dlq.rules), so reconcile
	// checks v2's letters alone, and reports nothing (v1's alerts and
	// dead letters on the same topics are noted, not checked). Before
	// dead letters named their rule version, it reported every letter of
	// the range as appearing twice and the dead-letter counts as above the
	// accounting.
	if !rep.OK() {
		t.Errorf("reconcile after the replay:\n%s", rep)
	}
	letters, err := reconcile.ReadCommitted(context.Background(), v2.Brokers, v2.Topics.DLQ, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	byRules := map[string]int{}
	for _, r := range letters {
		v := "(none)"
		for _, h := range r.Headers {
			if h.Key == pipeline.HeaderDeadLetterRules {
				v = string(h.Value)
			}
		}
		byRules[v]++
	}
	if byRules["vibration-high@1"] == 0 || byRules["vibration-high@1"] != byRules["vibration-high@2"] || len(byRules) != 2 || rep.DeadLetters != byRules["vibration-high@2"] {
		t.Errorf("dead letters by dlq.rules %v, reconcile counted %d: want each record's letter once per version", byRules, rep.DeadLetters)
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool {
		return strings.Contains(n, "dead letters of other rule versions (not checked): vibration-high@1: ")
	}) {
		t.Errorf("reconcile notes %q, want v1's dead letters noted as another version's", rep.Notes)
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "vibration-high v1") }) {
		t.Errorf("reconcile notes %q, want v1's alerts noted as another version's", rep.Notes)
	}
	for p, a := range rep.Partitions {
		if !a.Balanced() || a.Records == 0 {
			t.Errorf("v2 partition %d accounting %+v", p, a)
		}
	}
	var total int64
	for _, a := range rep.Partitions {
		total += a.Records
	}
	if total != n {
		t.Fatalf("v2 accounted %d records, want all %d", total, n)
	}
}

// A rules file of two rules over one input: replay into new versions of
// both resets the input once, with both rules' empty-state positions in
// the offsets' metadata, and both recompute everything.
func TestReplayRulesFile(t *testing.T) {
	seeds := kafkatest.Cluster(t, 3, "vibration.events").ListenAddrs()
	file := func(version int) string {
		text := fmt.Sprintf(`rules:
  - id: high
    version: %[1]d
    source: vibration.events
    filter: value >= 7.1
    window: {type: sliding, size: 2m}
    threshold: count >= 3
    outputs: {alerts: high.alerts}
  - id: avg
    version: %[1]d
    source: vibration.events
    window: {type: tumbling, size: 1m}
    aggregate: {fn: avg}
    threshold: agg > 4
    outputs: {alerts: avg.alerts}
`, version)
		return kafkatest.WriteFile(t, "rules.yaml", text)
	}
	v1 := kafkatest.Config(seeds, t.TempDir(), "r")
	v1.SessionTimeout = 2 * time.Second
	v1.RulesFile = file(1)
	const n = 3000
	input := kafkatest.NextOffsets(kafkatest.Produce(t, v1.Brokers, "vibration.events", kafkatest.Records(sim.New(sim.Demo()), n)...))
	p := startProcessor(t, v1)
	kafkatest.WaitCommitted(t, v1.Brokers, v1.GroupID, "vibration.events", input, 30*time.Second)
	p.stop(t)

	v2 := v1
	v2.RulesFile = file(2)
	deadline := time.Now().Add(15 * time.Second)
	var plan Plan
	var err error
	for {
		plan, err = Run(context.Background(), Options{Config: v2})
		if !errors.Is(err, ErrLiveMembers) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || !plan.Applied || len(plan.Moves) != 3 || len(plan.Changelogs) != 2 {
		t.Fatalf("replay: %+v %v", plan, err)
	}
	if _, err := Run(context.Background(), Options{Config: v1}); !errors.Is(err, ErrStateExists) {
		t.Fatalf("replay into v1 (has state): %v", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(v1.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), v2.GroupID)
	if err != nil {
		t.Fatal(err)
	}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.At != 0 || o.Metadata != "v2 avg.v2=0 high.v2=0" {
			t.Errorf("%s/%d committed at %d with metadata %q", o.Topic, o.Partition, o.At, o.Metadata)
		}
	})
	p = startProcessor(t, v2)
	kafkatest.WaitCommitted(t, v2.Brokers, v2.GroupID, "vibration.events", input, 30*time.Second)
	p.stop(t)
	for _, topic := range []string{"high.alerts", "avg.alerts"} {
		recs, err := reconcile.ReadCommitted(context.Background(), v2.Brokers, topic, 10*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		versions := map[int]int{}
		for _, r := range recs {
			a, err := alerts.Decode(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			versions[a.RuleVersion]++
		}
		if versions[1] == 0 || versions[1] != versions[2] {
			t.Errorf("%s: alert revisions by version %v: want v2 to recompute exactly v1's (same definition)", topic, versions)
		}
	}
	// Both versions' dead letters are on the shared dead-letter topic, each
	// naming the versions that wrote it: reconcile checks v2's alone.
	rep, err := reconcile.Run(context.Background(), reconcile.Options{Config: v2, Recompute: true, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || !slices.ContainsFunc(rep.Notes, func(n string) bool {
		return strings.Contains(n, "dead letters of rule versions not in the file (not checked), by dlq.rules: avg@1,high@1: ")
	}) {
		t.Errorf("reconcile of v2 after the replay, want OK and v1's letters noted:\n%s", rep)
	}
	for _, rr := range rep.Rules {
		if rr.DeadLetters == 0 {
			t.Errorf("rule %s v%d: no dead letter checked", rr.ID, rr.Version)
		}
	}
}
