package reconcile

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/pipeline"
)

// Input records deleted by retention before the checked range (--from
// after the deletion): the dead letters and too-late copies that name them
// are not checked (a note says how many), instead of "names a record that
// does not exist", in the rule: block path and the rules-file path.
func TestReconcileRetentionDeletedInput(t *testing.T) {
	t.Run("rule block", func(t *testing.T) {
		cfg := processed(t)
		from := deleteInputBefore(t, cfg.Brokers, cfg.Topics.Input, []string{cfg.ChangelogTopic()}, []string{cfg.Topics.DLQ, cfg.Topics.Late})
		rep, err := Run(context.Background(), Options{Config: cfg, From: from, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() || !strings.Contains(strings.Join(rep.Notes, "\n"), "deleted by retention") {
			t.Fatalf("after retention deleted the input before the range: %s", rep)
		}
	})
	t.Run("rules file", func(t *testing.T) {
		cfg := processedRules(t)
		rs, err := cfg.Rules()
		if err != nil {
			t.Fatal(err)
		}
		var changelogs []string
		copies := map[string]bool{}
		for _, r := range rs {
			if r.Rule.Repartitioned() {
				continue // its changelog counts repartition offsets
			}
			changelogs = append(changelogs, cfg.ChangelogFor(r))
			copies[r.Rule.Outputs.DLQ], copies[r.Rule.Outputs.Late] = true, true
		}
		var copyTopics []string
		for c := range copies {
			copyTopics = append(copyTopics, c)
		}
		from := deleteInputBefore(t, cfg.Brokers, rs[0].Rule.Source, changelogs, copyTopics)
		rep := runOK(t, Options{Config: cfg, From: from, Timeout: 30 * time.Second})
		if !strings.Contains(rep.String(), "deleted by retention") {
			t.Fatalf("the report does not say that copies of deleted records were not checked:\n%s", rep)
		}
	})
}

// deleteInputBefore deletes, in every partition of input, the records
// before the range that starts at the middle accounting record of the
// first changelog (below the smallest NextOffset of the last accounting
// record before it in every changelog), as retention would, and returns
// that start. It fails unless some copy in copyTopics names a deleted
// record: otherwise the test would prove nothing.
func deleteInputBefore(t *testing.T, brokers []string, input string, changelogs, copyTopics []string) time.Time {
	t.Helper()
	ctx := context.Background()
	stamps := accountingStamps(t, brokers, changelogs[0])
	from := stamps[len(stamps)/2]
	upTo := map[int32]int64{}
	for i, name := range changelogs {
		cl, err := ReadCommitted(ctx, brokers, name, 10*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		base, top := map[int32]pipeline.Accounting{}, map[int32]pipeline.Accounting{}
		readAccounting(cl, from, time.Time{}, base, top, func(f string, a ...any) { t.Fatalf(f, a...) })
		for p, a := range base {
			if o, ok := upTo[p]; i == 0 || !ok || a.NextOffset < o {
				upTo[p] = a.NextOffset
			}
		}
	}
	named := 0
	for _, topic := range copyTopics {
		recs, err := ReadCommitted(ctx, brokers, topic, 10*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			p, _ := strconv.ParseInt(header(r, pipeline.HeaderSourcePartition), 10, 32)
			off, _ := strconv.ParseInt(header(r, pipeline.HeaderSourceOffset), 10, 64)
			if header(r, pipeline.HeaderSourceTopic) == input && off < upTo[int32(p)] {
				named++
			}
		}
	}
	if named == 0 {
		t.Fatalf("no dead letter or too-late copy names a record before offsets %v: the fixture proves nothing", upTo)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	del := kadm.Offsets{}
	for p, off := range upTo {
		del.Add(kadm.Offset{Topic: input, Partition: p, At: off, LeaderEpoch: -1})
	}
	resp, err := kadm.NewClient(cl).DeleteRecords(ctx, del)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("deleting the records of %s before %v: %v", input, upTo, err)
	}
	t.Logf("deleted %s before %v: %d copies name deleted records", input, upTo, named)
	return from
}
