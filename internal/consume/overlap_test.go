package consume

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vibeline/processor/internal/kafkatest"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
)

// Commits that overlap the next batch (endBatch): with most of the input
// fetched ahead of a processor that commits every few milliseconds and
// aborts every third batch, records are handled while the previous batch's
// End runs, some of those Ends abort (dropping both batches), a restart
// resumes from what was committed, and the committed outputs still equal
// each rule's reference exactly: nothing lost, nothing repeated.
func TestOverlappedCommitsExactlyOnce(t *testing.T) {
	seeds := newCluster(t)
	cfg := testConfig(seeds, t.TempDir(), "o")
	cfg.RulesFile = kafkatest.WriteFile(t, "rules.yaml", "rules:\n"+ruleVibrationHigh+ruleVibrationAvg+ruleEpisode)
	cfg.CommitInterval = 2 * time.Millisecond
	cfg.MaxPollRecords = 100
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	log := pipeline.Log{}
	o := sim.Demo()
	o.Machines, o.Seed, o.EpisodeRate = 12, 7, 0.05
	recs := kafkatest.Records(sim.New(o), 12000)
	produce(t, seeds, cfg.Topics.Input, recs[:8000], log)

	n := 0
	abort := func() bool { n++; return n%3 == 0 }
	var overlapped, overlapAborted int
	onOverlap := func(records int, committed bool) {
		overlapped += records
		if !committed {
			overlapAborted++
		}
	}
	// Handling is slowed down so that the next records are always fetched
	// by the time a batch ends, as under load.
	slow := func(int) { time.Sleep(time.Millisecond) }
	reg := prometheus.NewRegistry()
	in := startWith(t, cfg, Options{AbortBatch: abort, onOverlap: onOverlap, afterJob: slow}, reg)
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	in = startWith(t, cfg, Options{AbortBatch: abort, onOverlap: onOverlap, afterJob: slow}, prometheus.NewRegistry())
	produce(t, seeds, cfg.Topics.Input, recs[8000:], log)
	waitConsumed(t, seeds, cfg, log)
	in.stop(t)
	if overlapped == 0 || overlapAborted == 0 {
		t.Fatalf("%d records handled during an End, %d overlapped Ends aborted: the test proves nothing", overlapped, overlapAborted)
	}
	if m := metricValue(t, reg, "processor_txn_overlap_records_total"); m == 0 {
		t.Errorf("processor_txn_overlap_records_total is 0 after %d overlapped records", overlapped)
	}

	named := pipeline.DeadLetterRules(rs, "vibration.events", "vibration.events.dlq")
	want, _ := refFingerprints(t, rs, log, named)
	topics := []string{"vibration.alerts", "vibration.avg.alerts", "vibration.episodes", "vibration.events.dlq", "vibration.events.late"}
	checkOutputs(t, seeds, want, topics...)
	t.Logf("%d records handled during an End, %d overlapped Ends aborted", overlapped, overlapAborted)
}

// TestOverlapTake checks the size of an overlapped commit's take: all
// OverlapPolls polls' worth until a commit measured End and the handling
// rate, then about what is handled while End runs (plus a quarter), in
// whole polls' worth, at least one.
func TestOverlapTake(t *testing.T) {
	for _, c := range []struct {
		fits float64 // records handled in the time of an End
		want int
	}{
		{0, OverlapPolls * 5000},         // nothing measured yet
		{25_000, 7 * 5000},               // 31,250 with the margin: 6.25 polls' worth
		{14_000, 4 * 5000},               // 17,500: 3.5
		{100, 5000},                      // 125: one poll's worth at least
		{1_000_000, OverlapPolls * 5000}, // capped
		{16_000, 4 * 5000},               // exactly 20,000: 4
	} {
		p := &Processor{ovFits: c.fits}
		p.cfg.MaxPollRecords = 5000
		if got := p.overlapTake(); got != c.want {
			t.Errorf("%.0f records handled in an End: take %d, want %d", c.fits, got, c.want)
		}
	}
}
