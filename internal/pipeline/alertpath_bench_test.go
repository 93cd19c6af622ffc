package pipeline

import (
	"fmt"
	"testing"

	"github.com/vibeline/processor/internal/aggwindow"
	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/window"
	"github.com/vibeline/processor/test/benchrules"
)

// benchRuleStage is the stage of the 10-rule mix's rule id.
func benchRuleStage(b *testing.B, id string) *Stage {
	b.Helper()
	for _, s := range benchStages(b, benchrules.Ten) {
		if s.Rule().Rule.ID == id {
			return s
		}
	}
	b.Fatalf("no rule %s in benchrules.Ten", id)
	return nil
}

// benchEvidence is n evidence events like the load generator's: uuid event
// ids, one machine's sensors, values with two decimals, one partition.
func benchEvidence(n int, start int64) []window.Evidence {
	ev := make([]window.Evidence, n)
	for i := range ev {
		ev[i] = window.Evidence{
			EventID:   fmt.Sprintf("0b8e2f52-5b7e-4c36-9d4e-6f1c2a7d9e%02d", i),
			SensorID:  fmt.Sprintf("M-017-S%d", i%4),
			TS:        start + int64(i)*1_250,
			Value:     float64(710+i*37) / 100,
			Partition: 3,
			Offset:    1_000_000 + int64(i)*7,
		}
	}
	return ev
}

// BenchmarkAlertPath is the cost of turning one window revision into its
// alert output (Stage.aggAlert, Stage.slideAlert: evidence, reason, JSON),
// the part of emitRevisions after the cooldown. One op is one alert.
//
//	go test -run x -bench BenchmarkAlertPath ./internal/pipeline/
func BenchmarkAlertPath(b *testing.B) {
	const start = 1_767_348_000_000 // 2026-01-02T10:00:00Z
	b.Run("agg-10", func(b *testing.B) {
		s := benchRuleStage(b, "machine-peak")
		ev := benchEvidence(EvidenceLimit, start)
		rev := aggwindow.Revision{
			AlertID: alerts.ID("machine-peak", 1, "M-017", "1767348000000"), Revision: 2,
			Status: aggwindow.Updated, Key: "M-017", Start: start, End: start + 600_000,
			Agg: 13.37, Count: 412, Late: true, Watermark: start + 590_000,
		}
		for _, e := range ev {
			rev.Evidence = append(rev.Evidence, aggwindow.Evidence(e))
		}
		b.ReportAllocs()
		for b.Loop() {
			if out := s.aggAlert(rev); len(out.Value) == 0 {
				b.Fatal("empty alert")
			}
		}
	})
	b.Run("slide-3", func(b *testing.B) {
		s := benchRuleStage(b, "vibration-high")
		rev := window.Revision{
			AlertID: alerts.ID("vibration-high", 1, "M-017", "0b8e2f52-5b7e-4c36-9d4e-6f1c2a7d9e00"),
			Status:  window.Open, Key: "M-017", Start: start, End: start + 2_500,
			Count: 3, Evidence: benchEvidence(3, start), Watermark: start - 1_000,
		}
		b.ReportAllocs()
		for b.Loop() {
			if out := s.slideAlert(rev); len(out.Value) == 0 {
				b.Fatal("empty alert")
			}
		}
	})
}
