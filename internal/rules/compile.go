package rules

import (
	"errors"
	"fmt"
)

// Compiled is a validated rule ready to run: its durations in
// milliseconds, its hash and its compiled expressions. It is immutable and
// safe for concurrent use.
type Compiled struct {
	// Rule is the rule with its defaults filled in.
	Rule Rule
	// Hash is Hash(Rule).
	Hash string
	// N is the threshold of a sliding rule (its `count >= N`); 0 for other
	// window types, which evaluate the threshold expression.
	N int
	// Window durations in ms: SizeMs (sliding, tumbling, hopping),
	// AdvanceMs (hopping), GapMs (session); the others are 0.
	SizeMs, AdvanceMs, GapMs int64
	// DelayMs is the fixed watermark delay D (adaptive: the initial delay).
	DelayMs int64
	// LatenessMs is L, DedupHorizonMs is H, CooldownMs the cooldown.
	LatenessMs, DedupHorizonMs, CooldownMs int64

	filter    *program[Event]
	threshold *program[Agg]
}

// Compile validates r and compiles it. The error joins every problem.
func Compile(r Rule) (*Compiled, error) {
	c, errs := compile(r)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// Load reads, validates and compiles the rules file at path: every problem
// of every rule is reported at once.
func Load(path string) ([]*Compiled, error) {
	rules, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := Validate(rules); err != nil {
		return nil, err
	}
	out := make([]*Compiled, len(rules))
	for i, r := range rules {
		if out[i], err = Compile(r); err != nil {
			return nil, err // unreachable: Validate passed
		}
	}
	return out, nil
}

// Repartitioned reports whether the rule reads its events through its
// internal repartition topic: when it asks to, or when its key is not
// machine_id (the key of the source records).
func (r Rule) Repartitioned() bool { return r.Repartition || (r.Key != "" && r.Key != DefaultKey) }

// NewFilter returns an evaluator of the rule's filter, for one goroutine.
func (c *Compiled) NewFilter() *Filter { return &Filter{ev: evaluator[Event]{p: c.filter}} }

// ThresholdUsesCount reports whether the threshold expression names count
// (false: its verdict depends on the aggregate alone).
func (c *Compiled) ThresholdUsesCount() bool {
	return c.threshold != nil && names(c.threshold.tree, "count")
}

// NewThreshold returns an evaluator of the rule's threshold, for one
// goroutine.
func (c *Compiled) NewThreshold() *Threshold { return &Threshold{ev: evaluator[Agg]{p: c.threshold}} }

// Filter evaluates a rule's filter. Not safe for concurrent use.
type Filter struct {
	ev evaluator[Event]
}

// Match reports whether the event qualifies. It does not allocate when the
// expression is covered by the fast path (see the package doc). The rule
// language has no operation that fails at run time (no division by zero
// error, no index, no call), so the error is for the VM's own failures and
// is not expected.
func (f *Filter) Match(e *Event) (bool, error) { return f.ev.eval(e) }

// Threshold evaluates a rule's threshold. Not safe for concurrent use.
type Threshold struct {
	ev  evaluator[Agg]
	env Agg
	err error
}

// Fires reports whether a window with aggregate agg over count events
// fires.
func (t *Threshold) Fires(agg float64, count int) (bool, error) {
	t.env = Agg{Agg: agg, Count: int64(count)}
	return t.ev.eval(&t.env)
}

// Predicate returns Fires as the func(agg, count) bool that package
// aggwindow takes. An evaluation error (not expected, see Filter.Match)
// counts as false and is kept: Err returns the first.
func (t *Threshold) Predicate() func(agg float64, count int) bool {
	return func(agg float64, count int) bool {
		ok, err := t.Fires(agg, count)
		if err != nil && t.err == nil {
			t.err = fmt.Errorf("rules: threshold: %w", err)
		}
		return ok && err == nil
	}
}

// Err returns the first error Predicate swallowed, or nil.
func (t *Threshold) Err() error { return t.err }
