package reconcile

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/txn"
)

const gapT0 = int64(1_700_000_000_000)

// gapFixture writes 5 filtered events to each of the 3 input partitions and
// the accounting of partitions 0 and 1 only to changelog, and commits the
// group's offsets of partitions 0 and 1 (and of partition 2 when claim2)
// with the rule's changelog position, as the processor commits them.
func gapFixture(t *testing.T, cfg config.Config, changelog, ns string, claim2 bool) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(context.Background(), 3, 1, nil, changelog); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for p := int32(0); p < 3; p++ {
		for i := range 5 {
			ts := gapT0 + int64(i)*1000
			m := fmt.Sprintf("m-%d", p)
			v := fmt.Sprintf(`{"event_id":"e-%d-%d","machine_id":%q,"sensor_id":"s-1","ts":%d,"seq":%d,"value":1,"unit":"mm/s","schema_version":1,"quality":"good"}`, p, i, m, ts, i)
			recs = append(recs, &kgo.Record{Topic: cfg.Topics.Input, Partition: p, Key: []byte(m), Value: []byte(v), Timestamp: time.UnixMilli(ts)})
		}
	}
	for p := int32(0); p < 2; p++ {
		recs = append(recs, &kgo.Record{Topic: changelog, Partition: p, Key: []byte("a"),
			Value: []byte(`{"v":1,"next_offset":5,"records":5,"processed":0,"filtered":5,"duplicate":0,"dead_lettered":0,"too_late":0}`)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var offs kadm.Offsets
	for p := int32(0); p < 3; p++ {
		if p == 2 && !claim2 {
			continue
		}
		offs.Add(kadm.Offset{Topic: cfg.Topics.Input, Partition: p, At: 5, LeaderEpoch: -1,
			Metadata: txn.EncodePositions(map[string]int64{ns: 2})})
	}
	if resp, err := adm.CommitOffsets(context.Background(), cfg.GroupID, offs); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
}

// A partition whose records have no accounting at all is not yet
// processed (a note), unless the group's committed offset carries a
// changelog position of the rule there: then the state the processor
// committed is missing from the changelog, and reconcile says so (it once
// reported OK, whatever the group had committed). Both the rule: block and
// a rules file.
func TestPartitionWithoutAccountingThatTheGroupCommitted(t *testing.T) {
	for _, withRules := range []bool{false, true} {
		for _, claim2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("rules_file=%v/claimed=%v", withRules, claim2), func(t *testing.T) {
				cfg := kafkatest.Config(kafkatest.Cluster(t, 3, "vibration.events", "vibration.alerts", "vibration.events.dlq",
					"vibration.events.late").ListenAddrs(), t.TempDir(), "gap")
				if withRules {
					cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", `rules:
  - id: vib
    version: 1
    source: vibration.events
    filter: value >= 7.1
    window: {type: sliding, size: 2m}
    threshold: count >= 3
    outputs: {alerts: vibration.alerts, dlq: vibration.events.dlq, late: vibration.events.late}
`)
				}
				rs, err := cfg.Rules()
				if err != nil {
					t.Fatal(err)
				}
				changelog := cfg.ChangelogTopic()
				if withRules {
					changelog = cfg.ChangelogFor(rs[0])
				}
				gapFixture(t, cfg, changelog, fmt.Sprintf("%s.v%d", rs[0].Rule.ID, rs[0].Rule.Version), claim2)
				rep, err := Run(context.Background(), Options{Config: cfg, Timeout: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if rep.OK() == claim2 {
					t.Fatalf("partition 2 without accounting, group offset claimed=%v: OK=%v\n%s", claim2, rep.OK(), rep)
				}
			})
		}
	}
}
