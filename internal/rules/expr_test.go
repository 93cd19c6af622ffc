package rules

import (
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// exprGen generates random well-typed expressions of the rule language.
type exprGen struct {
	rng  *rand.Rand
	nums []string // numeric fields
	strs []string // string fields
}

func (g *exprGen) pick(xs ...string) string { return xs[g.rng.IntN(len(xs))] }

func (g *exprGen) num(d int) string {
	if d <= 0 || g.rng.IntN(3) == 0 {
		switch g.rng.IntN(4) {
		case 0:
			return g.pick("0", "1", "3", "7", "-2", "9223372036854775807", "1000000000000")
		case 1:
			return g.pick("7.1", "0.5", "-3.25", "1e300", "2.0", "0.0")
		default:
			return g.pick(g.nums...)
		}
	}
	switch g.rng.IntN(6) {
	case 0:
		return "-(" + g.num(d-1) + ")"
	case 1:
		return "(" + g.boolean(d-1) + " ? " + g.num(d-1) + " : " + g.num(d-1) + ")"
	default:
		return "(" + g.num(d-1) + " " + g.pick("+", "-", "*", "/", "**") + " " + g.num(d-1) + ")"
	}
}

func (g *exprGen) str(d int) string {
	if d <= 0 || g.rng.IntN(3) > 0 {
		if g.rng.IntN(2) == 0 {
			return g.pick(`"good"`, `"bad"`, `""`, `"mm/s"`, `"m1"`, `"go"`)
		}
		return g.pick(g.strs...)
	}
	return "(" + g.str(d-1) + " + " + g.str(d-1) + ")"
}

func (g *exprGen) boolean(d int) string {
	if d <= 0 {
		return g.pick("true", "false", g.num(0)+" > "+g.num(0))
	}
	switch g.rng.IntN(10) {
	case 0:
		return g.num(d-1) + " " + g.pick("==", "!=", "<", "<=", ">", ">=") + " " + g.num(d-1)
	case 1:
		return g.str(d-1) + " " + g.pick("==", "!=", "<", "<=", ">", ">=") + " " + g.str(d-1)
	case 2:
		return "(" + g.boolean(d-1) + " " + g.pick("&&", "||", "and", "or") + " " + g.boolean(d-1) + ")"
	case 3:
		return g.pick("!", "not ") + "(" + g.boolean(d-1) + ")"
	case 4:
		return g.str(d-1) + " " + g.pick("contains", "startsWith", "endsWith") + " " + g.str(d-1)
	case 5:
		return g.str(d-1) + " matches " + g.pick(`"^go"`, `"o+d$"`, `"^m[0-9]$"`, `"."`)
	case 6:
		if g.rng.IntN(2) == 0 {
			return g.str(d-1) + " " + g.pick("in", "not in") + ` ["good", "m1", ""]`
		}
		return g.num(d-1) + " " + g.pick("in", "not in") + " " + g.pick("[1, 3, 7]", "[7.1, 2, -3.25]", "[0.5]")
	case 7:
		return "(" + g.boolean(d-1) + " ? " + g.boolean(d-1) + " : " + g.boolean(d-1) + ")"
	case 8:
		return g.boolean(d-1) + " " + g.pick("==", "!=") + " " + g.boolean(d-1)
	default:
		return g.num(d-1) + " " + g.pick("<", ">=") + " " + g.num(d-1)
	}
}

func randomEvent(rng *rand.Rand) Event {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	nums := []float64{0, 7.1, 7, -3.25, 1e300, 0.5, 2, math.Copysign(0, -1), math.NaN(), math.Inf(1)}
	ints := []int64{0, 1, 3, 7, -2, math.MaxInt64, math.MinInt64, 1_000_000_000_000}
	return Event{
		EventID: pick("e1", "good", ""), MachineID: pick("m1", "m2", "go"), SensorID: pick("s1", "m1"),
		TS: ints[rng.IntN(len(ints))], Seq: ints[rng.IntN(len(ints))], Value: nums[rng.IntN(len(nums))],
		Unit: pick("mm/s", "in/s"), Quality: pick("good", "bad", "uncertain", ""), Clock: pick("synced", "unsynced"),
		SchemaVersion: ints[rng.IntN(len(ints))],
	}
}

// TestFastPathMatchesVM: for random well-typed expressions and random
// environments (including NaN, infinities, -0 and integer overflow), the
// fast path and expr's VM agree, and the fast path covers the language.
func TestFastPathMatchesVM(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	gen := &exprGen{rng: rng, nums: []string{"value", "ts", "seq", "schema_version"}, strs: []string{"quality", "unit", "machine_id", "sensor_id", "event_id", "clock"}}
	compiled, fast := 0, 0
	for range 4000 {
		src := gen.boolean(1 + rng.IntN(4))
		p, err := compileExpr(src, eventFields)
		if err != nil {
			continue // ill-typed (for example a string compared with a number)
		}
		compiled++
		if p.fast == nil {
			continue
		}
		fast++
		slow := &evaluator[Event]{p: &program[Event]{src: src, vm: p.vm}}
		quick := &evaluator[Event]{p: p}
		for range 20 {
			ev := randomEvent(rng)
			want, err := slow.eval(&ev)
			if err != nil {
				t.Fatalf("%s: VM: %v", src, err)
			}
			if got, _ := quick.eval(&ev); got != want {
				t.Fatalf("%s on %+v: fast path %v, VM %v", src, ev, got, want)
			}
		}
	}
	if compiled < 2000 || fast < compiled*9/10 {
		t.Fatalf("%d expressions compiled, %d on the fast path", compiled, fast)
	}
	t.Logf("%d expressions compiled, %d on the fast path", compiled, fast)

	// Thresholds, likewise.
	agen := &exprGen{rng: rng, nums: []string{"agg", "count"}, strs: []string{`"x"`}}
	for range 1000 {
		src := agen.boolean(1 + rng.IntN(3))
		p, err := compileExpr(src, aggFields)
		if err != nil || p.fast == nil {
			continue
		}
		slow := &evaluator[Agg]{p: &program[Agg]{src: src, vm: p.vm}}
		for range 10 {
			env := Agg{Agg: []float64{0, 9.5, -1, 1e300, math.NaN()}[rng.IntN(5)], Count: []int64{0, 1, 3, math.MaxInt64}[rng.IntN(4)]}
			want, err := slow.eval(&env)
			if err != nil {
				t.Fatalf("%s: VM: %v", src, err)
			}
			if got, _ := (&evaluator[Agg]{p: p}).eval(&env); got != want {
				t.Fatalf("%s on %+v: fast path %v, VM %v", src, env, got, want)
			}
		}
	}
}

// TestFilterDoesNotAllocate: the vibration filter on the fast path.
func TestFilterDoesNotAllocate(t *testing.T) {
	c := mustLoad(t, "testdata/vibration.yaml")[0]
	f := c.NewFilter()
	ev := &Event{Value: 8, Quality: "good"}
	if n := testing.AllocsPerRun(100, func() {
		if ok, _ := f.Match(ev); !ok {
			t.Fatal("no match")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per Match", n)
	}
	th := c.NewThreshold()
	if n := testing.AllocsPerRun(100, func() { th.Fires(3, 3) }); n != 0 {
		t.Fatalf("%v allocations per Fires", n)
	}
}

func TestVMFallback(t *testing.T) {
	// A ternary mixing int and float branches is not on the fast path; it
	// still evaluates, on the VM.
	p, err := compileExpr("(quality == \"good\" ? 1 : 2.5) > seq", eventFields)
	if err != nil {
		t.Fatal(err)
	}
	if p.fast != nil {
		t.Fatal("unexpectedly on the fast path")
	}
	ev := &evaluator[Event]{p: p}
	if ok, err := ev.eval(&Event{Quality: "good", Seq: 0}); !ok || err != nil {
		t.Fatalf("%v %v", ok, err)
	}
	if ok, err := ev.eval(&Event{Quality: "bad", Seq: 3}); ok || err != nil {
		t.Fatalf("%v %v", ok, err)
	}
}

func BenchmarkFilter(b *testing.B) {
	c, err := Load("testdata/vibration.yaml")
	if err != nil {
		b.Fatal(err)
	}
	p := c[0].filter
	ev := &Event{Value: 8, Quality: "good", MachineID: "m1"}
	for _, bc := range []struct {
		name string
		p    *program[Event]
	}{
		{"fast", p},
		{"vm", &program[Event]{src: p.src, vm: p.vm}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := &evaluator[Event]{p: bc.p}
			b.ReportAllocs()
			for b.Loop() {
				if ok, _ := e.eval(ev); !ok {
					b.Fatal("no match")
				}
			}
		})
	}
}

// FuzzParse: Parse, Validate, Compile, Describe, Hash and a compiled
// filter never panic, whatever the bytes. Seeds: testdata/fuzz/FuzzParse
// and the testdata rule files.
func FuzzParse(f *testing.F) {
	for _, path := range []string{"testdata/vibration.yaml", "testdata/rules.yaml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(valid))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := Parse("fuzz.yaml", data)
		if err != nil {
			if rs != nil {
				t.Fatal("rules and an error")
			}
			return
		}
		_ = Validate(rs)
		for _, r := range rs {
			_ = Describe(r)
			if h := Hash(r); len(h) != 64 {
				t.Fatalf("hash %q", h)
			}
			c, err := Compile(r)
			if err != nil {
				if !strings.Contains(err.Error(), "rules: ") {
					t.Fatalf("unprefixed error %q", err)
				}
				continue
			}
			if c.Hash != Hash(r) {
				t.Fatal("compiled hash differs")
			}
			ev := Event{Value: 7.5, Quality: "good"}
			if _, err := c.NewFilter().Match(&ev); err != nil {
				t.Fatalf("filter %q: %v", r.Filter, err)
			}
			if _, err := c.NewThreshold().Fires(1, 1); err != nil {
				t.Fatalf("threshold %q: %v", r.Threshold, err)
			}
		}
	})
}

// TestThresholdUsesCount: a threshold that names count anywhere uses it;
// one on the aggregate alone does not (package aggwindow then skips
// re-judging windows whose aggregate did not change).
func TestThresholdUsesCount(t *testing.T) {
	for _, tt := range []struct {
		threshold string
		want      bool
	}{
		{"agg >= 12.5", false},
		{"agg > 4.5 && agg < 9", false},
		{"agg > 4.5 && count >= 100", true},
		{"count >= 8", true},
		{"!(count < 2) || agg > 3", true},
	} {
		y := "rules:\n  - id: r\n    version: 1\n    source: in\n    window: {type: tumbling, size: 1m}\n    aggregate: {fn: max}\n    threshold: '" + tt.threshold + "'\n    outputs: {alerts: out}\n"
		rs, err := Parse("t.yaml", []byte(y))
		if err == nil {
			err = Validate(rs)
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.threshold, err)
		}
		c, err := Compile(rs[0])
		if err != nil {
			t.Fatalf("%s: %v", tt.threshold, err)
		}
		if got := c.ThresholdUsesCount(); got != tt.want {
			t.Errorf("ThresholdUsesCount(%q) = %v, want %v", tt.threshold, got, tt.want)
		}
	}
}

// Edge cases of the fast path against expr's VM: integers beyond 2^53 in
// `in` lists that also hold floats (compared exactly, as the VM does, not
// as floats), negative literals in lists (a unary minus in expr's tree:
// accepted as literals), -0, overflow and division by zero.
func TestFastPathMatchesVMOnEdgeCases(t *testing.T) {
	srcs := []string{
		`value in [-3.25]`, `ts in [-2]`, `value in [1]`, `ts in [1.0]`, `ts in [9007199254740993, 1.5]`,
		`ts in [-2, 2.5]`, `seq / 0 > 1`, `-ts < 0`, `value == -0.0`, `1 / value < 0`, `ts + 1 > ts`,
		`ts * 2 > 0`, `value ** 0.5 > 1`, `seq ** 2 > 3`, `ts > 9007199254740993.0`, `ts == 9007199254740993`,
		`seq == ts`, `quality < "h"`, `not (value in [7.1])`, `value not in [7.1, 2]`,
	}
	evs := []Event{
		{Value: 7.1, TS: 9007199254740992, Seq: 3},
		{Value: math.Copysign(0, -1), TS: -2, Seq: 0},
		{Value: 1, TS: 1, Seq: 1},
		{Value: -3.25, TS: math.MaxInt64, Seq: math.MinInt64},
		{Value: 0, TS: 9007199254740993, Seq: 9007199254740993, Quality: "good"},
	}
	for _, src := range srcs {
		p, err := compileExpr(src, eventFields)
		if err != nil {
			if strings.Contains(src, " in [") {
				t.Errorf("%s: %v", src, err)
			}
			continue
		}
		if p.fast == nil {
			continue
		}
		vm := &evaluator[Event]{p: &program[Event]{src: src, vm: p.vm}}
		for _, ev := range evs {
			want, err := vm.eval(&ev)
			got, _ := (&evaluator[Event]{p: p}).eval(&ev)
			if err != nil || got != want {
				t.Errorf("%s on ts=%d seq=%d value=%v: fast path %v, VM %v (%v)", src, ev.TS, ev.Seq, ev.Value, got, want, err)
			}
		}
	}
}
