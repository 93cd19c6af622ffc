package aggwindow

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// hold in a delay list is SetHold(true): no watermark move at all.
const hold = -1

// setDelay applies a delay of genDelays before a record: SetHold for hold,
// else SetHold(false) and SetDelayMs.
func setDelay(p *Partition, d int64) error {
	p.SetHold(d == hold)
	if d == hold {
		return nil
	}
	return p.SetDelayMs(d)
}

// genDelays returns a delay per record for SetDelayMs: around cfg.DelayMs,
// sometimes 0, sometimes far larger (W then waits), sometimes hold (no
// watermark to give, as a repartitioned rule before it heard of every
// source partition), changing at random points as an adaptive watermark
// strategy's delay does.
func genDelays(rng *rand.Rand, cfg Config, n int) []int64 {
	ds := make([]int64, n)
	d := cfg.DelayMs
	for i := range ds {
		if rng.IntN(5) == 0 {
			switch rng.IntN(5) {
			case 4:
				d = hold
			case 0:
				d = 0
			case 1:
				d = rng.Int64N(3*cfg.DelayMs + 1)
			case 2:
				d = rng.Int64N(200)
			default:
				d = cfg.DelayMs
			}
		}
		ds[i] = d
	}
	return ds
}

// TestSetDelayMsAgainstReference: with the delay changed by SetDelayMs
// before records, W = max over records of (ts_i - d_i) after every record,
// every record's lateness is judged against W before it, windows close only
// when W - L >= end, and after a final advance the closed windows are
// exactly the brute-force windows of the applied events.
func TestSetDelayMsAgainstReference(t *testing.T) {
	forEachConfig(t, 40, func(t *testing.T, rng *rand.Rand, cfg Config) {
		p := mustPartition(t, cfg)
		evs := arrive(rng, genEvents(rng, 1+rng.IntN(3), 10+rng.IntN(60), int64(rng.IntN(3)-1)*50, 200), int64(rng.IntN(120)))
		delays := genDelays(rng, cfg, len(evs))
		w := NoWatermark
		var revs []Revision
		var applied []Event
		for i, e := range evs {
			q := rng.IntN(5) > 0
			if err := setDelay(p, delays[i]); err != nil {
				t.Fatal(err)
			}
			res := p.Process(e, q)
			if res.Watermark != w {
				t.Fatalf("record %d: Result.Watermark %d, want W before = %d", i, res.Watermark, w)
			}
			want := Processed
			switch {
			case !q:
				want = Filtered
			case w != NoWatermark && e.TS < w-cfg.LatenessMs:
				want = TooLate
			}
			if res.Outcome != want {
				t.Fatalf("record %d (ts %d, W %d, L %d): outcome %s, want %s", i, e.TS, w, cfg.LatenessMs, res.Outcome, want)
			}
			if want == Processed {
				applied = append(applied, e)
			}
			if delays[i] != hold {
				w = max(w, e.TS-delays[i])
			}
			if p.Watermark() != w {
				t.Fatalf("record %d: W = %d, want max(ts_i - d_i) over the records not held = %d", i, p.Watermark(), w)
			}
			for _, r := range res.Revisions {
				if r.Status == Closed && (r.Watermark != w || w-cfg.LatenessMs < r.End) {
					t.Fatalf("record %d: closed %+v at W = %d", i, r, w)
				}
			}
			revs = append(revs, res.Revisions...)
		}
		revs = append(revs, p.Advance(math.MaxInt64)...)
		checkRevisions(t, revs)
		var want []refWin
		for _, rw := range reference(cfg, applied) {
			if cfg.Fires(rw.agg, rw.count) {
				want = append(want, rw)
			}
		}
		if got := closedWins(revs); !slices.EqualFunc(got, want, sameWin) {
			t.Fatalf("config %+v\nclosed windows:\n%v\nreference:\n%v", cfg, got, want)
		}
	})
}

// TestSetDelayMsRoundTrip: with changing delays, a partition persisted
// after every record and reloaded at random points (its delay set again
// before the next record, as the caller does) yields the results of one
// that never stopped.
func TestSetDelayMsRoundTrip(t *testing.T) {
	forEachConfig(t, 20, func(t *testing.T, rng *rand.Rand, cfg Config) {
		evs := arrive(rng, genEvents(rng, 3, 60+rng.IntN(60), 0, 400), int64(rng.IntN(80)))
		delays := genDelays(rng, cfg, len(evs))
		ref := mustPartition(t, cfg)
		p := mustPartition(t, cfg)
		store := newMemStore()
		for i, e := range evs {
			q := i%4 != 3
			for _, x := range []*Partition{ref, p} {
				if err := setDelay(x, delays[i]); err != nil {
					t.Fatal(err)
				}
			}
			want := ref.Process(e, q)
			if got := p.Process(e, q); !reflect.DeepEqual(got, want) {
				t.Fatalf("record %d: after reloads\n got %+v\nwant %+v", i, got, want)
			}
			store.persist(p)
			if rng.IntN(8) == 0 {
				p = store.restore(t, cfg, rng)
			}
		}
		if !reflect.DeepEqual(p.Advance(math.MaxInt64), ref.Advance(math.MaxInt64)) {
			t.Fatal("final closes differ")
		}
	})
}

// TestSetDelayMsConstant: setting the configured delay before every record
// changes nothing, and setting another constant delay d equals a partition
// configured with DelayMs = d.
func TestSetDelayMsConstant(t *testing.T) {
	forEachConfig(t, 10, func(t *testing.T, rng *rand.Rand, cfg Config) {
		evs := arrive(rng, genEvents(rng, 3, 80, 0, 300), 80)
		other := cfg
		other.DelayMs = rng.Int64N(3*cfg.DelayMs + 1)
		plain, _ := run(t, mustPartition(t, cfg), evs)
		plainOther, _ := run(t, mustPartition(t, other), evs)
		same, set := mustPartition(t, cfg), mustPartition(t, cfg)
		if err := same.SetDelayMs(cfg.DelayMs); err != nil {
			t.Fatal(err)
		}
		if err := set.SetDelayMs(other.DelayMs); err != nil {
			t.Fatal(err)
		}
		a, _ := run(t, same, evs)
		b, _ := run(t, set, evs)
		if !reflect.DeepEqual(plain, a) {
			t.Fatal("SetDelayMs(Config.DelayMs) changed the output")
		}
		if !reflect.DeepEqual(plainOther, b) {
			t.Fatalf("SetDelayMs(%d) differs from Config.DelayMs = %d", other.DelayMs, other.DelayMs)
		}
	})
}

func TestSetDelayMsInvalid(t *testing.T) {
	cfg := Config{Kind: Tumbling, SizeMs: 10, Fn: Count, DelayMs: 5, LatenessMs: 0,
		Fires: func(float64, int) bool { return true }, AlertID: testAlertID}
	p := mustPartition(t, cfg)
	for _, d := range []int64{-1, MaxDurationMs + 1, math.MinInt64, math.MaxInt64} {
		if err := p.SetDelayMs(d); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("SetDelayMs(%d) = %v, want ErrInvalidConfig", d, err)
		}
	}
	p.Process(Event{Key: "k", EventID: "a", TS: 100}, false)
	if p.Watermark() != 95 {
		t.Fatalf("W = %d, want 95: a refused delay must not change the delay", p.Watermark())
	}
	if err := p.SetDelayMs(MaxDurationMs); err != nil {
		t.Fatal(err)
	}
	p.Process(Event{Key: "k", EventID: "b", TS: MinTS}, false)
	if p.Watermark() != 95 {
		t.Fatalf("W = %d, want 95", p.Watermark())
	}
	if err := p.SetDelayMs(0); err != nil {
		t.Fatal(err)
	}
	p.Process(Event{Key: "k", EventID: "c", TS: 200}, false)
	if p.Watermark() != 200 {
		t.Fatalf("W = %d, want 200", p.Watermark())
	}
}
