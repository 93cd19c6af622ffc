package watermark_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/vibeline/processor/internal/aggwindow"
	"github.com/vibeline/processor/internal/watermark"
	"github.com/vibeline/processor/internal/window"
)

// TestProtocolWithWindow runs the package doc's per-record protocol with a
// window.Partition and checks it end to end: W = max(ts_i - d_i) with d_i
// the tracker's delay before record i, and AtRiskTotal = the events that a
// partition run with the fixed delay D found too late while the adaptive
// one applied them (event ids are unique, so both dedup alike).
func TestProtocolWithWindow(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 31))
		const l = 20_000
		wcfg := window.Config{Threshold: 3, SizeMs: 60_000, DelayMs: 1000, LatenessMs: l, DedupHorizonMs: 200_000,
			AlertID: func(k, id string) string { return k + "/" + id }}
		adaptive, err := window.NewPartition(wcfg)
		if err != nil {
			t.Fatal(err)
		}
		fixed, err := window.NewPartition(wcfg)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := watermark.NewTracker(watermark.Config{Strategy: watermark.Adaptive, DelayMs: 1000,
			Percentile: 95, MinMs: 0, MaxMs: 120_000, Sample: 1 + rng.IntN(50)})
		if err != nil {
			t.Fatal(err)
		}
		w, atRisk := window.NoWatermark, uint64(0)
		var now int64 = 1_700_000_000_000
		for i := range 2000 {
			now += rng.Int64N(500)
			ts := now
			if rng.IntN(10) == 0 { // a gateway replaying: up to a minute late
				ts -= rng.Int64N(60_000)
			}
			ev := window.Event{Key: fmt.Sprintf("m%d", rng.IntN(3)), EventID: fmt.Sprint(i), SensorID: "s", TS: ts, Value: 9}
			qualifies := rng.IntN(3) > 0

			d := tr.DelayMs()
			if err := adaptive.SetDelayMs(d); err != nil { // 1
				t.Fatal(err)
			}
			res := adaptive.Process(ev, qualifies)                                // 2
			if res.Outcome == window.Processed || res.Outcome == window.TooLate { // 3
				tr.ObserveEvent(now, ts, l, res.Watermark)
			} else {
				tr.Observe(now, ts)
			}

			w = max(w, ts-d)
			if adaptive.Watermark() != w {
				t.Fatalf("seed %d record %d: W = %d, want %d", seed, i, adaptive.Watermark(), w)
			}
			fres := fixed.Process(ev, qualifies)
			if fixed.Watermark() != tr.FixedWatermark() {
				t.Fatalf("seed %d record %d: F = %d, the fixed partition's W = %d", seed, i, tr.FixedWatermark(), fixed.Watermark())
			}
			if fres.Outcome == window.TooLate && res.Outcome == window.Processed {
				atRisk++
			}
		}
		if tr.AtRiskTotal() != atRisk {
			t.Fatalf("seed %d: AtRiskTotal = %d, want %d", seed, tr.AtRiskTotal(), atRisk)
		}
		if seed == 0 {
			t.Logf("seed 0: delay %d ms, %d events at risk", tr.DelayMs(), atRisk)
		}
	}
}

// TestProtocolWithAggwindow: the same protocol with an aggwindow.Partition
// (which leaves deduplication to the caller; an OutOfRange record moves
// nothing and is not observed).
func TestProtocolWithAggwindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 32))
	const l = 5000
	cfg := aggwindow.Config{Kind: aggwindow.Tumbling, SizeMs: 10_000, Fn: aggwindow.Count, DelayMs: 500, LatenessMs: l,
		Fires: func(_ float64, n int) bool { return n >= 3 }, AlertID: func(k string, s int64) string { return fmt.Sprint(k, s) }}
	adaptive, err := aggwindow.NewPartition(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := aggwindow.NewPartition(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := watermark.NewTracker(watermark.Config{Strategy: watermark.Adaptive, DelayMs: 500,
		Percentile: 99, MinMs: 100, MaxMs: 60_000, Sample: 100})
	if err != nil {
		t.Fatal(err)
	}
	w, atRisk := aggwindow.NoWatermark, uint64(0)
	var now int64 = 1_700_000_000_000
	for i := range 5000 {
		now += rng.Int64N(100)
		ts := now - rng.Int64N(200)
		if rng.IntN(20) == 0 {
			ts -= rng.Int64N(20_000)
		}
		ev := aggwindow.Event{Key: "k", EventID: fmt.Sprint(i), TS: ts, Value: 1}
		d := tr.DelayMs()
		if err := adaptive.SetDelayMs(d); err != nil {
			t.Fatal(err)
		}
		res := adaptive.Process(ev, true)
		switch res.Outcome {
		case aggwindow.Processed, aggwindow.TooLate:
			tr.ObserveEvent(now, ts, l, res.Watermark)
		case aggwindow.Filtered:
			tr.Observe(now, ts)
		}
		w = max(w, ts-d)
		if adaptive.Watermark() != w {
			t.Fatalf("record %d: W = %d, want %d", i, adaptive.Watermark(), w)
		}
		if fixed.Process(ev, true).Outcome == aggwindow.TooLate && res.Outcome == aggwindow.Processed {
			atRisk++
		}
	}
	if tr.AtRiskTotal() != atRisk || atRisk == 0 {
		t.Fatalf("AtRiskTotal = %d, want %d (> 0)", tr.AtRiskTotal(), atRisk)
	}
	t.Logf("delay %d ms, %d events at risk", tr.DelayMs(), atRisk)
}
