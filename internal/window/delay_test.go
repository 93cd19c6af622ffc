package window

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

// genDelays returns a delay per record for SetDelayMs: around cfg.DelayMs,
// sometimes 0, sometimes far larger (W then waits), changing at random
// points as an adaptive watermark strategy's delay does.
func genDelays(rng *rand.Rand, cfg Config, n int) []int64 {
	ds := make([]int64, n)
	d := cfg.DelayMs
	for i := range ds {
		if rng.IntN(5) == 0 {
			switch rng.IntN(4) {
			case 0:
				d = 0
			case 1:
				d = rng.Int64N(3*cfg.DelayMs + 1)
			case 2:
				d = rng.Int64N(3 * (cfg.DelayMs + cfg.LatenessMs + cfg.SizeMs + 1))
			default:
				d = cfg.DelayMs
			}
		}
		ds[i] = d
	}
	return ds
}

// TestSetDelayMsAgainstReference: with the delay changed by SetDelayMs
// before records, the watermark is W = max over records of (ts_i - d_i) and
// the whole state matches the brute-force SPEC (with D = d_i at record i)
// after every record, while sweeping, persisting and restoring at random
// points (a restored partition gets its delay set again before its next
// record, as the caller does).
func TestSetDelayMsAgainstReference(t *testing.T) {
	// A third of TestPropertyAgainstReference's seeds, bursts and dense:
	// the checker is quadratic.
	for seed := range uint64(propIterations + denseIterations) {
		if seed%3 != 0 {
			continue
		}
		rng := rand.New(rand.NewPCG(seed, 21))
		cfg, recs := genScenario(rng, seed, 3, 20, 60)
		recs = arrive(rng, recs, rng.Int64N(3*(cfg.DelayMs+cfg.LatenessMs+cfg.SizeMs)+1))
		recs = append(recs, closer(cfg, recs))
		delays := genDelays(rng, cfg, len(recs))
		delays[len(delays)-1] = cfg.DelayMs // the closer closes everything

		d := newDriver(t, cfg)
		d.rnd, d.flush, d.restore = rng.Float64, 0.3, 0.1
		ck := newChecker(t, cfg)
		want := NoWatermark
		for i, r := range recs {
			if rng.IntN(4) == 0 {
				d.p.Sweep()
				ck.checkSwept(d.p)
			}
			if err := d.p.SetDelayMs(delays[i]); err != nil {
				t.Fatal(err)
			}
			ck.cfg.DelayMs = delays[i]
			p := d.p
			res := d.step(r)
			ck.observe(p, r, res)
			ck.checkState(d.p)
			if res.Watermark != want {
				t.Fatalf("seed %d record %d: Result.Watermark %d, want W before = %d", seed, i, res.Watermark, want)
			}
			want = max(want, subSat(r.ev.TS, delays[i]))
			if p.Watermark() != want {
				t.Fatalf("seed %d record %d: W = %d, want max(ts_i - d_i) = %d", seed, i, p.Watermark(), want)
			}
		}
		if st := d.p.Stats(); st.OpenIncidents != 0 {
			t.Fatalf("seed %d: %d incidents open after the closer", seed, st.OpenIncidents)
		}
	}
}

// TestSetDelayMsRoundTrip: with changing delays, persisting and restoring
// at random points gives the revisions and outcomes of an uninterrupted run.
func TestSetDelayMsRoundTrip(t *testing.T) {
	for seed := range uint64(propIterations) {
		rng := rand.New(rand.NewPCG(seed, 22))
		cfg, recs := genScenario(rng, seed, 4, 20, 80)
		recs = arrive(rng, recs, rng.Int64N(3*(cfg.DelayMs+cfg.LatenessMs+cfg.SizeMs)+1))
		delays := genDelays(rng, cfg, len(recs))
		plain := newDriver(t, cfg)
		restored := newDriver(t, cfg)
		restored.rnd, restored.flush, restored.restore = rng.Float64, 0.5, 0.2
		for i, r := range recs {
			for _, d := range []*driver{plain, restored} {
				if err := d.p.SetDelayMs(delays[i]); err != nil {
					t.Fatal(err)
				}
				d.step(r)
			}
		}
		if !reflect.DeepEqual(plain.revs, restored.revs) || !reflect.DeepEqual(plain.outs, restored.outs) {
			t.Fatalf("seed %d: restoring changed the output:\n%s\n%s", seed, fmtRevisions(plain.revs), fmtRevisions(restored.revs))
		}
	}
}

// TestSetDelayMsConstant: setting the configured delay before every record
// changes nothing, and setting another constant delay d equals a partition
// configured with DelayMs = d.
func TestSetDelayMsConstant(t *testing.T) {
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 23))
		cfg, recs := genScenario(rng, seed, 3, 20, 60)
		recs = arrive(rng, recs, rng.Int64N(2*(cfg.DelayMs+cfg.LatenessMs)+1))
		recs = append(recs, closer(cfg, recs))
		other := cfg
		other.DelayMs = rng.Int64N(2*cfg.DelayMs + 1)
		plain, plainOther := newDriver(t, cfg), newDriver(t, other)
		same, set := newDriver(t, cfg), newDriver(t, cfg)
		for _, r := range recs {
			plain.step(r)
			plainOther.step(r)
			if err := same.p.SetDelayMs(cfg.DelayMs); err != nil {
				t.Fatal(err)
			}
			same.step(r)
			if err := set.p.SetDelayMs(other.DelayMs); err != nil {
				t.Fatal(err)
			}
			set.step(r)
		}
		if !reflect.DeepEqual(plain.revs, same.revs) || !reflect.DeepEqual(plain.outs, same.outs) {
			t.Fatalf("seed %d: SetDelayMs(Config.DelayMs) changed the output", seed)
		}
		if !reflect.DeepEqual(plainOther.revs, set.revs) || !reflect.DeepEqual(plainOther.outs, set.outs) {
			t.Fatalf("seed %d: SetDelayMs(%d) differs from Config.DelayMs = %d", seed, other.DelayMs, other.DelayMs)
		}
	}
}

func TestSetDelayMsInvalid(t *testing.T) {
	p := mustPartition(t, vibration())
	if err := p.SetDelayMs(-1); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("SetDelayMs(-1) = %v, want ErrInvalidConfig", err)
	}
	p.Process(fev("m1", "a", 100_000).ev, false)
	if want := 100_000 - DefaultDelayMs; p.Watermark() != want {
		t.Fatalf("W = %d, want %d: a refused delay must not change the delay", p.Watermark(), want)
	}
	// A very large delay saturates instead of wrapping.
	if err := p.SetDelayMs(1<<63 - 1); err != nil {
		t.Fatal(err)
	}
	p.Process(fev("m1", "b", -5).ev, false)
	if want := 100_000 - DefaultDelayMs; p.Watermark() != want {
		t.Fatalf("W = %d, want %d", p.Watermark(), want)
	}
}

// TestSetHold: while held, records move no watermark (from NoWatermark
// too), nothing closes and nothing is too late; released, the next record
// moves it by the delay as usual.
func TestSetHold(t *testing.T) {
	cfg := vibration()
	p := mustPartition(t, cfg)
	p.SetHold(true)
	var revs []Revision
	for i, ts := range []int64{1_000_000, 1_001_000, 1_002_000, 10_000_000, 0} {
		res := p.Process(Event{Key: "m", EventID: string(rune('a' + i)), TS: ts, Value: 9}, true)
		if res.Outcome == TooLate || p.Watermark() != NoWatermark {
			t.Fatalf("held, record %d (ts %d): outcome %s, W %d; want applied and no watermark", i, ts, res.Outcome, p.Watermark())
		}
		revs = append(revs, res.Revisions...)
	}
	for _, r := range revs {
		if r.Status == Closed {
			t.Fatalf("held: closed %+v", r)
		}
	}
	p.SetHold(false)
	p.Process(Event{Key: "m", EventID: "z", TS: 20_000_000, Value: 1}, true)
	if want := 20_000_000 - cfg.DelayMs; p.Watermark() != want {
		t.Fatalf("released: W %d, want %d", p.Watermark(), want)
	}
}
