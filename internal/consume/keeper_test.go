package consume

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/dedup"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/internal/sim"
	"github.com/vibeline/processor/internal/txn"
)

// Two aggregating rules that take (almost) every event, sharing one dedup
// store and so one keeper, beside a sliding rule, which has none.
const keeperRules = "rules:\n" + ruleVibrationHigh + `  - id: machine-max
    version: 1
    description: vibration events
    source: vibration.events
    window: {type: tumbling, size: 1m}
    aggregate: {fn: max}
    threshold: agg >= 9
    outputs: {alerts: machine.max.alerts}
  - id: machine-avg
    version: 1
    description: good events
    source: vibration.events
    filter: quality == "good"
    window: {type: tumbling, size: 1m}
    aggregate: {fn: avg}
    threshold: agg > 4 && count >= 10
    outputs: {alerts: machine.avg.alerts}
`

// latest returns the latest value of each record key of a topic (nil: a
// tombstone), per partition.
func latest(recs []*kgo.Record) map[int32]map[string][]byte {
	m := map[int32]map[string][]byte{}
	for _, r := range recs {
		if m[r.Partition] == nil {
			m[r.Partition] = map[string][]byte{}
		}
		m[r.Partition][string(r.Key)] = r.Value
	}
	return m
}

// TestUpgradeToDedupKeepers: state written before dedup keepers (each
// aggregating rule its own dedup entries) is taken over by the rules'
// keeper at the first commit: the keeper's changelog then holds the ids,
// the rules' changelogs none (tombstoned) and the keeper's name
// (changelogKept); redeliveries of records read before the upgrade are
// duplicates, and after aborts, restarts and a restore from the changelogs
// alone (state directory deleted) every output and accounting record
// matches the reference.
// beforeKeepers runs keeperRules (in mode) over the first 4,000 of 8,000
// simulated records as processors before dedup keepers did, and returns
// the configuration, its rules, the log so far and the records.
func beforeKeepers(t *testing.T, instance, mode string) (seeds []string, cfg config.Config, rs []*rules.Compiled, log pipeline.Log, recs []sim.Record) {
	t.Helper()
	seeds = newCluster(t)
	cfg = testConfig(seeds, t.TempDir(), instance)
	cfg.Mode = mode
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", keeperRules)
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	log = pipeline.Log{}
	recs = simRecords(8000, 17)
	produce(t, seeds, cfg.Topics.Input, recs[:4000], log)
	in := start(t, cfg, Options{noKeepers: true})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	return seeds, cfg, rs, log, recs
}

func TestUpgradeToDedupKeepers(t *testing.T) {
	seeds, cfg, rs, log, recs := beforeKeepers(t, "k", config.ExactlyOnce)
	ownDedup := func(topic string) int {
		n := 0
		for _, kv := range latest(readAll(t, seeds, topic)) {
			for k, v := range kv {
				if strings.HasPrefix(k, "kd") && v != nil {
					n++
				}
			}
		}
		return n
	}
	for _, r := range rs[1:] {
		if n := ownDedup(cfg.ChangelogFor(r)); n == 0 {
			t.Fatalf("before keepers, rule %s wrote no dedup entry of its own: the fixture proves nothing", r.Rule.ID)
		}
	}

	n := 0
	abort := func() bool { n++; return n%3 == 0 }
	in := start(t, cfg, Options{AbortBatch: abort})
	// Redeliveries of records the rules read before the upgrade, then new
	// records.
	produce(t, seeds, cfg.Topics.Input, recs[3000:4000], log)
	produce(t, seeds, cfg.Topics.Input, recs[4000:6000], log)
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		t.Fatal(err)
	}
	in = start(t, cfg, Options{AbortBatch: abort})
	// Redelivered again, from before the upgrade (ids the keeper took
	// over from the rules' own entries) and from after it.
	produce(t, seeds, cfg.Topics.Input, recs[2000:2500], log)
	produce(t, seeds, cfg.Topics.Input, recs[5000:5500], log)
	produce(t, seeds, cfg.Topics.Input, recs[6000:], log)
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)

	// The layout: one keeper for the two aggregating rules.
	p := planned(t, cfg)
	if len(p.keepers) != 1 || len(p.keepers[0].members) != 2 {
		t.Fatalf("keepers %v, want one of the two aggregating rules", p.keepers)
	}
	kt := p.keepers[0]
	for _, r := range rs[1:] {
		if n := ownDedup(cfg.ChangelogFor(r)); n != 0 {
			t.Errorf("rule %s: %d dedup entries of its own left after the upgrade", r.Rule.ID, n)
		}
		for part, kv := range latest(readAll(t, seeds, cfg.ChangelogFor(r))) {
			if string(kv[changelogKept]) != kt.ns {
				t.Errorf("rule %s partition %d: kept by %q, want %q", r.Rule.ID, part, kv[changelogKept], kt.ns)
			}
		}
	}
	if n := ownDedup(kt.cl); n == 0 {
		t.Errorf("the keeper's changelog %s holds no dedup entry", kt.cl)
	}

	named := pipeline.DeadLetterRules(rs, "vibration.events", "vibration.events.dlq")
	want, _ := refFingerprints(t, rs, log, named)
	topics := []string{"vibration.alerts", "machine.max.alerts", "machine.avg.alerts", "vibration.events.dlq", "vibration.events.late"}
	checkOutputs(t, seeds, want, topics...)
	checkKeptAccounting(t, seeds, cfg, log, 2000)
}

// checkKeptAccounting compares the committed accounting of the
// aggregating rules of keeperRules (records, duplicates, processed, over
// all partitions) with the reference's, which must count at least minDup
// duplicates.
func checkKeptAccounting(t *testing.T, seeds []string, cfg config.Config, log pipeline.Log, minDup int64) {
	t.Helper()
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	named := pipeline.DeadLetterRules(rs, "vibration.events", "vibration.events.dlq")
	for _, r := range rs[1:] {
		st, err := pipeline.NewRuleStage(r, pipeline.Options{DeadLetterRules: named})
		if err != nil {
			t.Fatal(err)
		}
		_, wantAcct := refOutputs(st, log)
		var gotAcct pipeline.Accounting
		for _, kv := range latest(readAll(t, seeds, cfg.ChangelogFor(r))) {
			a, err := DecodeAccounting(kv[changelogAcct])
			if err != nil {
				t.Fatal(err)
			}
			gotAcct.Records += a.Records
			gotAcct.Duplicate += a.Duplicate
			gotAcct.Processed += a.Processed
		}
		if wantAcct.Duplicate < minDup {
			t.Errorf("rule %s: the reference counts %d duplicates, want at least the %d redeliveries of this test", r.Rule.ID, wantAcct.Duplicate, minDup)
		}
		if gotAcct.Records != wantAcct.Records || gotAcct.Duplicate != wantAcct.Duplicate || gotAcct.Processed != wantAcct.Processed {
			t.Errorf("rule %s: records/duplicates/processed %d/%d/%d, want %d/%d/%d", r.Rule.ID,
				gotAcct.Records, gotAcct.Duplicate, gotAcct.Processed, wantAcct.Records, wantAcct.Duplicate, wantAcct.Processed)
		}
	}
}

// TestUpgradeToDedupKeepersAtLeastOnce: the upgrade under at_least_once,
// whose aborted batches leave their changelog records (the keeper's too)
// past the committed position: the migrating batch aborts, later ones
// every other time, and the state is restored from the changelogs twice;
// the accounting and the distinct alert records match the reference (an
// at_least_once abort repeats outputs, never loses or adds one).
func TestUpgradeToDedupKeepersAtLeastOnce(t *testing.T) {
	seeds, cfg, rs, log, recs := beforeKeepers(t, "kalo", config.AtLeastOnce)
	n := 0
	abort := func() bool { n++; return n%2 == 1 } // the first batch (the migration) aborts
	in := start(t, cfg, Options{AbortBatch: abort})
	produce(t, seeds, cfg.Topics.Input, recs[3000:4000], log)
	produce(t, seeds, cfg.Topics.Input, recs[4000:6000], log)
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	for range 2 {
		if err := os.RemoveAll(cfg.StateDir); err != nil {
			t.Fatal(err)
		}
		in = start(t, cfg, Options{AbortBatch: abort})
		produce(t, seeds, cfg.Topics.Input, recs[2000:2500], log)
		produce(t, seeds, cfg.Topics.Input, recs[6000:7000], log)
		waitConsumed(t, seeds, cfg, log)
		in.stop(t)
		recs = append(recs[:6000], recs[7000:]...)
	}
	checkKeptAccounting(t, seeds, cfg, log, 2000)
	named := pipeline.DeadLetterRules(rs, "vibration.events", "vibration.events.dlq")
	want, _ := refFingerprints(t, rs, log, named)
	got := fingerprints(readAll(t, seeds, "vibration.alerts", "machine.max.alerts", "machine.avg.alerts"))
	for _, topic := range []string{"vibration.alerts", "machine.max.alerts", "machine.avg.alerts"} {
		g, w := slices.Compact(got[topic]), slices.Compact(want[topic])
		if len(w) == 0 || !slices.Equal(g, w) {
			t.Errorf("%s: %d distinct records, want %d (reference)", topic, len(g), len(w))
		}
	}
}

// aggRules is a rules file of the aggregating rules r<from> .. r<to-1>
// over one topic, with one share key: with more than dedup.MaxViews, two
// keepers.
func aggRules(from, to int) string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, `  - id: r%d
    version: 1
    description: count
    source: vibration.events
    window: {type: tumbling, size: 1m}
    aggregate: {fn: count}
    threshold: agg >= 1000000
    outputs: {alerts: machine.alerts}
`, i)
	}
	return b.String()
}

// TestRuleMovedToAnotherKeeperIsRefused: more than dedup.MaxViews
// aggregating rules of one share key form keepers of 64 in configuration
// order, so removing one of the first moves a later rule to another keeper
// (a documented limit, docs/RUNBOOK.md): the processor refuses to start
// with the reason rather than run the rule without its ids.
func TestRuleMovedToAnotherKeeperIsRefused(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "big")
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", aggRules(0, dedup.MaxViews+1))
	log := pipeline.Log{}
	produce(t, seeds, cfg.Topics.Input, simRecords(300, 5), log)
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)

	cfg.RulesFile = kafkatest.WriteFile(t, "rules2.yaml", aggRules(1, dedup.MaxViews+1))
	waitRefused(t, start(t, cfg, Options{}), "its dedup ids are kept by")
}

// waitRefused waits until the processor in stops with an error that says
// want.
func waitRefused(t *testing.T, in *instance, want string) {
	t.Helper()
	select {
	case err := <-in.done:
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Run returned %v, want an error saying %q", err, want)
		}
	case <-time.After(30 * time.Second):
		in.cancel()
		t.Fatal("the processor still runs after 30s")
	}
}

// TestKeepersOfTwoGroupsShareAStateDir: processors of two consumer groups
// reading one topic with one share key run at once with one state_dir:
// their keepers' stores are apart (the keeper's name covers the group).
func TestKeepersOfTwoGroupsShareAStateDir(t *testing.T) {
	seeds := newCluster(t)
	dir := t.TempDir()
	mk := func(group, ids string) *instance {
		cfg := testConfig(seeds, dir, group)
		cfg.GroupID = group
		cfg.RulesFile = kafkatest.WriteFile(t, group+".yaml", strings.ReplaceAll(aggRules(0, 2), "id: r", "id: "+ids))
		return start(t, cfg, Options{})
	}
	produce(t, seeds, "vibration.events", simRecords(100, 5), pipeline.Log{})
	a := mk("group-a", "a")
	b := mk("group-b", "b")
	select {
	case err := <-b.done:
		t.Fatalf("the second group's processor stopped: %v", err)
	case err := <-a.done:
		t.Fatalf("the first group's processor stopped: %v", err)
	case <-time.After(5 * time.Second):
	}
	a.stop(t)
	b.stop(t)
}

// TestUpgradeDeletesChunkedOwnDedup: a rule's own dedup entry written in
// chunks (over 512 KiB: long ids) before keepers is deleted with its
// chunks when the keeper takes it over, and the keeper writes it chunked.
func TestUpgradeDeletesChunkedOwnDedup(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "upchunk")
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", aggRules(0, 1))
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	cl := cfg.ChangelogFor(rs[0])
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	log := pipeline.Log{}
	produce(t, seeds, cfg.Topics.Input, bigIDEvents(t, "M-chunky", base, 0, 700), log)
	in := start(t, cfg, Options{noKeepers: true})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	if c, m := liveChunksOf(t, seeds, cl); c == 0 || m == 0 {
		t.Fatalf("before keepers: %d live chunks, %d manifests in the rule's changelog: the fixture proves nothing", c, m)
	}
	produce(t, seeds, cfg.Topics.Input, bigIDEvents(t, "M-chunky", base, 700, 702), log)
	in = start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	if c, m := liveChunksOf(t, seeds, cl); c != 0 || m != 0 {
		t.Errorf("after the upgrade: %d live chunks, %d manifests left in the rule's changelog", c, m)
	}
	p := planned(t, cfg)
	if c, m := liveChunksOf(t, seeds, p.keepers[0].cl); c == 0 || m == 0 {
		t.Errorf("the keeper's changelog holds %d live chunks and %d manifests, want the ids chunked", c, m)
	}
}

// liveChunksOf counts the live chunk records and manifests of a changelog.
func liveChunksOf(t *testing.T, seeds []string, topic string) (chunks, manifests int) {
	t.Helper()
	for _, kv := range latest(readAll(t, seeds, topic)) {
		for k, v := range kv {
			switch {
			case v == nil:
			case isChunkKey([]byte(k)):
				chunks++
			case isManifest(v):
				manifests++
			}
		}
	}
	return chunks, manifests
}

// TestKeeperWithoutItsPositionIsRefused: group offsets committed without
// the dedup keeper's changelog position (a tool rewrote them) while the
// rules' state says the keeper holds their ids stop the processor with the
// reason, rather than run the rules with no ids.
func TestKeeperWithoutItsPositionIsRefused(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "nopos")
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", keeperRules)
	log := pipeline.Log{}
	produce(t, seeds, cfg.Topics.Input, simRecords(2000, 3), log)
	in := start(t, cfg, Options{})
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	fetched, err := adm.FetchOffsets(context.Background(), cfg.GroupID)
	if err != nil {
		t.Fatal(err)
	}
	var offs kadm.Offsets
	fetched.Each(func(o kadm.OffsetResponse) {
		pos, ok := txn.DecodePositions(o.Metadata)
		if !ok {
			t.Fatalf("partition %d: commit metadata %q", o.Partition, o.Metadata)
		}
		dropped := false
		for ns := range pos {
			if strings.HasPrefix(ns, "~dedup-") {
				delete(pos, ns)
				dropped = true
			}
		}
		if !dropped {
			t.Fatalf("partition %d: no keeper position in %q", o.Partition, o.Metadata)
		}
		o.Offset.Metadata = txn.EncodePositions(pos)
		offs.Add(o.Offset)
	})
	resp, err := adm.CommitOffsets(context.Background(), cfg.GroupID, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	waitRefused(t, start(t, cfg, Options{}), "names no position of it")
}

// TestKeepersAsPlanned: Keepers (what `processor rules check --config`
// prints) names the keepers a processor of the configuration runs, with
// their changelog topics and rules: here one for the in-place aggregating
// rules of the source and one for the repartitioned rule's topic.
func TestKeepersAsPlanned(t *testing.T) {
	cfg := testConfig(nil, t.TempDir(), "plan")
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", multiRules)
	p := planned(t, cfg)
	var want []Keeper
	for _, kt := range p.keepers {
		k := Keeper{Changelog: kt.cl, Input: kt.input}
		for _, m := range kt.members {
			k.Rules = append(k.Rules, m.ns)
		}
		want = append(want, k)
	}
	got, err := Keepers(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 2 || !reflect.DeepEqual(got, want) {
		t.Fatalf("Keepers = %+v, the processor plans %+v (want two)", got, want)
	}
}

// planned returns a processor of cfg, not run: its plan (tasks, keepers).
func planned(t *testing.T, cfg config.Config) *Processor {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg, Options{Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
