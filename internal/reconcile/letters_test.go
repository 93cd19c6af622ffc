package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
)

// mixedLetters writes, to a new topic named dlq, the dead letters the
// processor wrote to from, as a dead-letter topic holding letters of
// several rule versions and of an older processor would hold them: the
// letters of source partition 0 without their dlq.rules header (written
// by a processor before the header existed), the others as they are, and
// a copy of every letter naming other versions instead (other: the
// dlq.rules value of another version's letters, after a replay into it).
// It returns the letters the processor wrote.
func mixedLetters(t *testing.T, cfg config.Config, from, dlq, other string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, 1, nil, dlq); err != nil {
		t.Fatal(err)
	}
	letters, err := ReadCommitted(context.Background(), cfg.Brokers, from, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	legacy := 0
	var out []*kgo.Record
	for _, r := range letters {
		_, at, ok := copySource(r, false)
		if !ok {
			t.Fatalf("letter %d@%d has no source headers", r.Partition, r.Offset)
		}
		if _, ok := lastHeader(r, pipeline.HeaderDeadLetterRules); !ok {
			t.Fatalf("the processor wrote letter %d@%d without %s", r.Partition, r.Offset, pipeline.HeaderDeadLetterRules)
		}
		own := relettered(r, dlq, nil)
		if at.p == 0 {
			own = relettered(r, dlq, func(kgo.RecordHeader) (kgo.RecordHeader, bool) { return kgo.RecordHeader{}, false })
			legacy++
		}
		out = append(out, own, relettered(r, dlq, func(kgo.RecordHeader) (kgo.RecordHeader, bool) {
			return kgo.RecordHeader{Key: pipeline.HeaderDeadLetterRules, Value: []byte(other)}, true
		}))
	}
	if legacy == 0 || legacy == len(letters) {
		t.Fatalf("%d of %d letters of source partition 0: the fixture proves nothing", legacy, len(letters))
	}
	produce(t, cfg, out...)
	return letters
}

// relettered is a copy of r for topic, its dlq.rules header replaced by
// what change returns (dropped when it returns false); change nil keeps it.
func relettered(r *kgo.Record, topic string, change func(kgo.RecordHeader) (kgo.RecordHeader, bool)) *kgo.Record {
	cp := &kgo.Record{Topic: topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	for _, h := range r.Headers {
		if h.Key == pipeline.HeaderDeadLetterRules && change != nil {
			var ok bool
			if h, ok = change(h); !ok {
				continue
			}
		}
		cp.Headers = append(cp.Headers, h)
	}
	return cp
}

// wantNote fails unless a note of the report contains what.
func wantNote(t *testing.T, rep *Report, what string) {
	t.Helper()
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, what) }) {
		t.Errorf("no note mentioning %q in:\n%s", what, rep)
	}
}

// The rule: block: a dead-letter topic holding the letters of the rule's
// version, of another version, and letters without dlq.rules (of an older
// processor) reconciles, with and without recomputation: each record's
// letter is counted once for the version, the other version's letters are
// noted, not checked, and the older letters count for the version as they
// did before. A second letter of the version, or an older one for a record
// that has one, still appears twice; an unreadable header is reported.
func TestReconcileDeadLettersOfTwoVersionsAndOlderOnes(t *testing.T) {
	cfg := processed(t)
	letters := mixedLetters(t, cfg, cfg.Topics.DLQ, "mixed.dlq", "vibration-high@2")
	mixed := cfg
	mixed.Topics.DLQ = "mixed.dlq"
	for _, recompute := range []bool{false, true} {
		rep := runOK(t, Options{Config: mixed, Recompute: recompute, Timeout: 30 * time.Second})
		if rep.DeadLetters != len(letters) {
			t.Errorf("recompute %v: %d dead letters checked, want %d", recompute, rep.DeadLetters, len(letters))
		}
		wantNote(t, rep, fmt.Sprintf("mixed.dlq: dead letters of other rule versions (not checked): vibration-high@2: %d", len(letters)))
	}

	// Reconciled as version 2, the same topic holds v2's letters and the
	// older ones (which count for every version): those of partition 0
	// appear twice, the others once.
	v1own := func(r *kgo.Record) bool { _, at, _ := copySource(r, false); return at.p != 0 }
	damaged := []*kgo.Record{
		relettered(letters[slices.IndexFunc(letters, v1own)], "mixed.dlq", nil), // a second v1 letter
		relettered(letters[len(letters)-1], "mixed.dlq", func(kgo.RecordHeader) (kgo.RecordHeader, bool) { // an older letter beside a v1 one
			return kgo.RecordHeader{}, false
		}),
		relettered(letters[0], "mixed.dlq", func(kgo.RecordHeader) (kgo.RecordHeader, bool) {
			return kgo.RecordHeader{Key: pipeline.HeaderDeadLetterRules, Value: []byte("vibration-high@1,vibration-high@1")}, true
		}),
	}
	if v1own(letters[len(letters)-1]) == false {
		t.Fatal("the last letter is of source partition 0: the fixture proves nothing")
	}
	produce(t, mixed, damaged...)
	rep, err := Run(context.Background(), Options{Config: mixed, Recompute: true, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(rep.Violations, "\n")
	for _, want := range []string{
		"appears twice for vibration-high v1",
		`unreadable dlq.rules header "vibration-high@1,vibration-high@1"`,
		"differ from a recomputation",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("violations do not mention %q:\n%s", want, all)
		}
	}
	if n := strings.Count(all, "appears twice"); n != 2 {
		t.Errorf("%d letters appear twice, want 2:\n%s", n, all)
	}
}

// A rules file: two rules of one source share its dead-letter topic, one
// of them repartitioned; each letter names both. With another version's
// letters and older ones beside them, every rule reconciles (the in-place
// one recomputed), the other versions' letters are noted, and a letter
// naming one of the rules alone a second time is blamed on that rule only.
func TestReconcileRulesFileDeadLettersByVersion(t *testing.T) {
	const text = `rules:
  - id: vibration-high
    version: 1
    description: high-vibration events
    source: vibration.events
    filter: value >= 7.1 && quality == "good"
    window: {type: sliding, size: 2m}
    threshold: count >= 3
    outputs: {alerts: vibration.alerts%[1]s}
  - id: sensor-peak
    version: 1
    description: sensor peaks
    source: vibration.events
    key: sensor_id
    window: {type: hopping, size: 2m, advance: 1m}
    aggregate: {fn: max}
    threshold: agg >= 7.5
    allowed_lateness: 2m
    outputs: {alerts: vibration.peak.alerts%[1]s}
`
	o := sim.Demo()
	o.Machines, o.Seed, o.EpisodeRate = 8, 4, 0.05
	cfg := processedWith(t, fmt.Sprintf(text, ""), o, 4000)
	letters := mixedLetters(t, cfg, "vibration.events.dlq", "mixed.dlq", "sensor-peak@2,vibration-high@2")
	for _, r := range letters {
		if v, _ := lastHeader(r, pipeline.HeaderDeadLetterRules); v != "sensor-peak@1,vibration-high@1" {
			t.Fatalf("the processor's letter %d@%d names %q", r.Partition, r.Offset, v)
		}
	}
	mixed := cfg
	mixed.RulesFile = kafkatest.WriteFile(t, "mixed.yaml", fmt.Sprintf(text, ", dlq: mixed.dlq"))
	rep := runOK(t, Options{Config: mixed, Recompute: true, Timeout: 30 * time.Second})
	for _, rr := range rep.Rules {
		if rr.DeadLetters != len(letters) {
			t.Errorf("rule %s: %d dead letters checked, want %d", rr.ID, rr.DeadLetters, len(letters))
		}
	}
	wantNote(t, rep, fmt.Sprintf("topic mixed.dlq: dead letters of rule versions not in the file (not checked), by dlq.rules: sensor-peak@2,vibration-high@2: %d", len(letters)))
	runOK(t, Options{Config: mixed, Timeout: 30 * time.Second})

	_, at, _ := copySource(letters[len(letters)-1], false)
	if at.p == 0 {
		t.Fatal("the last letter is of source partition 0: the fixture proves nothing")
	}
	produce(t, mixed, relettered(letters[len(letters)-1], "mixed.dlq", func(kgo.RecordHeader) (kgo.RecordHeader, bool) {
		return kgo.RecordHeader{Key: pipeline.HeaderDeadLetterRules, Value: []byte("vibration-high@1")}, true
	}))
	rep, err := Run(context.Background(), Options{Config: mixed, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wantViolation(t, rep, "vibration-high", "appears more than once for vibration-high v1")
	for _, v := range rep.Violations {
		if strings.HasPrefix(v, "rule sensor-peak") {
			t.Errorf("a violation blamed on sensor-peak, whose letters are intact: %s", v)
		}
	}
}
