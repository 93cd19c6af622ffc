package rules

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/expr-lang/expr/ast"
)

// Ranges of the validated values.
const (
	MaxSpan         = 720 * time.Hour  // size, gap, delays, lateness, cooldown
	MaxDedupHorizon = 2160 * time.Hour //
	MaxThresholdN   = 1000             // sliding N
	MaxHopsPerEvent = 1000             // hopping ceil(size/advance): windows per event
	MaxPanes        = 1000             // hopping size/gcd(size, advance): panes per window
	MaxSample       = 1_000_000        // adaptive watermark sample
)

var (
	idRe    = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,200}$`)
	topicRe = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)
)

// FieldError is one invalid value of a rule: the rule, the key, the value
// as configured and what would be valid.
type FieldError struct {
	Rule  string // the rule id, or "#n" (its position) when it has no valid id
	Key   string // the YAML key path, for example window.advance
	Value string // the value, rendered as in YAML
	Valid string // what would be valid
	Line  int    // the line of the key (or its closest parent) in the file; 0 if unknown
}

func (e *FieldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rules: rule %s: %s = %s", e.Rule, e.Key, e.Value)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	b.WriteString(" is invalid: ")
	b.WriteString(e.Valid)
	return b.String()
}

// name is how messages name the rule.
func (r *Rule) name() string {
	if idRe.MatchString(r.ID) {
		return r.ID
	}
	return fmt.Sprintf("#%d", r.index+1)
}

// lineOf returns the line of key or of its closest parent, else the rule's.
func (r *Rule) lineOf(key string) int {
	for k := key; k != ""; {
		if l, ok := r.pos[k]; ok {
			return l
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return r.line
}

// Validate checks the rule and returns every problem at once (joined),
// each a *FieldError or an *ExprError.
func (r Rule) Validate() error {
	_, errs := compile(r)
	return errors.Join(errs...)
}

// Validate checks every rule, and that ids are unique, returning every
// problem at once.
func Validate(rules []Rule) error {
	var errs []error
	first := map[string]int{}
	for i, r := range rules {
		_, es := compile(r)
		errs = append(errs, es...)
		if j, dup := first[r.ID]; dup && r.ID != "" {
			errs = append(errs, &FieldError{Rule: r.name(), Key: "id", Value: fmt.Sprintf("%q", r.ID), Line: r.lineOf("id"),
				Valid: fmt.Sprintf("ids must be unique, rule #%d (line %d) has the same", j+1, rules[j].line)})
		} else if !dup {
			first[r.ID] = i
		}
	}
	return errors.Join(errs...)
}

// compile validates r (with defaults ensured) and, if it is valid, compiles
// it.
func compile(r Rule) (*Compiled, []error) {
	r.EnsureDefaults()
	var errs []error
	bad := func(key string, value any, valid string) {
		v := ""
		switch x := value.(type) {
		case string:
			v = fmt.Sprintf("%q", x)
		case Expr:
			v = fmt.Sprintf("%q", string(x))
		default:
			v = fmt.Sprint(x)
		}
		errs = append(errs, &FieldError{Rule: r.name(), Key: key, Value: v, Valid: valid, Line: r.lineOf(key)})
	}
	span := func(key string, d Duration, lo time.Duration) {
		if d.D() < lo || d.D() > MaxSpan {
			bad(key, d, fmt.Sprintf("a duration from %s to %s", formatDuration(lo), formatDuration(MaxSpan)))
		}
	}
	unused := func(key string, d Duration, why string) {
		if d != 0 {
			bad(key, d, why)
		}
	}

	if !idRe.MatchString(r.ID) {
		bad("id", r.ID, "1-200 characters of [a-zA-Z0-9._-]")
	}
	if r.Version < 1 {
		bad("version", r.Version, "an integer >= 1, bumped on every change of the rule")
	}
	if strings.TrimSpace(r.Description) == "" || len(r.Description) > 200 {
		bad("description", r.Description, "a phrase of 1-200 characters, such as \"high-vibration events\"")
	}
	if !validTopic(r.Source) {
		bad("source", r.Source, "a Kafka topic name: 1-249 characters of [a-zA-Z0-9._-]")
	}
	if r.Key != "machine_id" && r.Key != "sensor_id" {
		bad("key", r.Key, `the event field to group by: "machine_id" or "sensor_id"`)
	}

	filter, ferr := compileExpr(string(r.Filter), eventFields)
	if ferr != nil {
		ferr.Rule, ferr.Key, ferr.FileLine = r.name(), "filter", r.lineOf("filter")
		errs = append(errs, ferr)
	}

	w := r.Window
	extent := w.Size
	switch w.Type {
	case Sliding, Tumbling:
		span("window.size", w.Size, time.Millisecond)
		unused("window.advance", w.Advance, "not used by "+w.Type+" windows (only hopping windows advance); remove it")
		unused("window.gap", w.Gap, "not used by "+w.Type+" windows (only session windows have a gap); remove it")
	case Hopping:
		span("window.size", w.Size, time.Millisecond)
		switch {
		case w.Advance < Duration(time.Millisecond) || w.Advance > w.Size:
			bad("window.advance", w.Advance, fmt.Sprintf("hopping windows need 1ms <= advance <= size (%s)", w.Size))
		case (w.Size+w.Advance-1)/w.Advance > MaxHopsPerEvent:
			least := time.Duration((w.Size.Ms()+MaxHopsPerEvent-1)/MaxHopsPerEvent) * time.Millisecond // whole ms, rounded up
			bad("window.advance", w.Advance, fmt.Sprintf("at least size/%d (%s): every event updates ceil(size/advance) windows", MaxHopsPerEvent,
				formatDuration(least)))
		case w.Size.Ms()/gcd(w.Size.Ms(), w.Advance.Ms()) > MaxPanes:
			pane := gcd(w.Size.Ms(), w.Advance.Ms())
			bad("window.advance", w.Advance, fmt.Sprintf("such that size/gcd(size, advance) is at most %d: a window is kept in panes of gcd(size, advance) = %s, %d of them per window; choose an advance that divides size more evenly",
				MaxPanes, formatDuration(time.Duration(pane)*time.Millisecond), w.Size.Ms()/pane))
		}
		unused("window.gap", w.Gap, "not used by hopping windows (only session windows have a gap); remove it")
	case Session:
		span("window.gap", w.Gap, time.Millisecond)
		unused("window.size", w.Size, "not used by session windows (a session ends gap after its last event); remove it and set gap")
		unused("window.advance", w.Advance, "not used by session windows (only hopping windows advance); remove it")
		extent = w.Gap
	default:
		bad("window.type", w.Type, `one of "sliding", "tumbling", "hopping", "session"`)
	}

	a := r.Aggregate
	if !slices.Contains([]string{FnCount, FnSum, FnAvg, FnMin, FnMax}, a.Fn) {
		bad("aggregate.fn", a.Fn, `one of "count", "sum", "avg", "min", "max"`)
	} else if w.Type == Sliding && a.Fn != FnCount {
		bad("aggregate.fn", a.Fn, `"count": sliding windows support only the count aggregation (the SPEC incident semantics: N events within size); use a tumbling, hopping or session window for sum, avg, min or max`)
	}
	if a.Field != "value" {
		bad("aggregate.field", a.Field, `"value" (mm/s), the only numeric field of an event`)
	}

	threshold, terr := compileExpr(string(r.Threshold), aggFields)
	if terr != nil {
		terr.Rule, terr.Key, terr.FileLine = r.name(), "threshold", r.lineOf("threshold")
		errs = append(errs, terr)
	}
	n := 0
	if w.Type == Sliding && threshold != nil {
		var ok bool
		if n, ok = countAtLeast(threshold.tree); !ok {
			bad("threshold", r.Threshold, fmt.Sprintf("`count >= N` with an integer N from 1 to %d: a sliding window fires on N events within size (the SPEC incident semantics)", MaxThresholdN))
		}
	}

	wm := r.Watermark
	switch wm.Strategy {
	case WatermarkFixed:
		span("watermark.delay", wm.Delay, 0)
		if wm.Percentile != 0 {
			bad("watermark.percentile", wm.Percentile, "only used with strategy adaptive; remove it")
		}
		unused("watermark.min", wm.Min, "only used with strategy adaptive; remove it")
		unused("watermark.max", wm.Max, "only used with strategy adaptive; remove it")
		if wm.Sample != 0 {
			bad("watermark.sample", wm.Sample, "only used with strategy adaptive; remove it")
		}
	case WatermarkAdaptive:
		if !(wm.Percentile > 0 && wm.Percentile <= 100) {
			bad("watermark.percentile", wm.Percentile, "a percentile in (0, 100], such as 99")
		}
		span("watermark.min", wm.Min, 0)
		if wm.Max < wm.Min || wm.Max.D() > MaxSpan {
			bad("watermark.max", wm.Max, fmt.Sprintf("a duration from min (%s) to %s", wm.Min, formatDuration(MaxSpan)))
		}
		if wm.Delay < wm.Min || wm.Delay > wm.Max {
			bad("watermark.delay", wm.Delay, fmt.Sprintf("the delay used until sample events were seen, within [min, max] = [%s, %s]", wm.Min, wm.Max))
		}
		if wm.Sample < 1 || wm.Sample > MaxSample {
			bad("watermark.sample", wm.Sample, fmt.Sprintf("an integer from 1 to %d", MaxSample))
		}
	default:
		bad("watermark.strategy", wm.Strategy, `"fixed" or "adaptive"`)
	}

	span("allowed_lateness", r.AllowedLateness, 0)
	if min := extent + r.AllowedLateness; r.DedupHorizon <= min || r.DedupHorizon.D() > MaxDedupHorizon {
		what := "window.size"
		if w.Type == Session {
			what = "window.gap"
		}
		bad("dedup_horizon", r.DedupHorizon, fmt.Sprintf("a duration greater than %s + allowed_lateness (%s) and at most %s", what, min, formatDuration(MaxDedupHorizon)))
	}
	span("cooldown", r.Cooldown, 0)

	topics := []struct{ key, v string }{{"outputs.alerts", r.Outputs.Alerts}, {"outputs.dlq", r.Outputs.DLQ}, {"outputs.late", r.Outputs.Late}}
	seen := map[string]string{r.Source: "source"}
	for _, t := range topics {
		if !validTopic(t.v) {
			bad(t.key, t.v, "a Kafka topic name: 1-249 characters of [a-zA-Z0-9._-]")
			continue
		}
		if other, dup := seen[t.v]; dup {
			bad(t.key, t.v, "a topic distinct from "+other)
		}
		seen[t.v] = t.key
	}

	if len(errs) > 0 {
		return nil, errs
	}
	return &Compiled{
		Rule:           r,
		Hash:           Hash(r),
		N:              n,
		SizeMs:         w.Size.Ms(),
		AdvanceMs:      w.Advance.Ms(),
		GapMs:          w.Gap.Ms(),
		DelayMs:        wm.Delay.Ms(),
		LatenessMs:     r.AllowedLateness.Ms(),
		DedupHorizonMs: r.DedupHorizon.Ms(),
		CooldownMs:     r.Cooldown.Ms(),
		filter:         filter,
		threshold:      threshold,
	}, nil
}

func validTopic(t string) bool { return topicRe.MatchString(t) && t != "." && t != ".." }

// countAtLeast recognises `count >= N`, `count > N-1`, `N <= count` and
// `N-1 < count` and returns N (1..MaxThresholdN).
func countAtLeast(n ast.Node) (int, bool) {
	b, ok := n.(*ast.BinaryNode)
	if !ok {
		return 0, false
	}
	isCount := func(x ast.Node) bool { id, ok := x.(*ast.IdentifierNode); return ok && id.Value == "count" }
	intOf := func(x ast.Node) (int, bool) {
		if i, ok := x.(*ast.IntegerNode); ok {
			return i.Value, true
		}
		return 0, false
	}
	var v int
	switch {
	case isCount(b.Left) && (b.Operator == ">=" || b.Operator == ">"):
		if v, ok = intOf(b.Right); ok && b.Operator == ">" {
			v++
		}
	case isCount(b.Right) && (b.Operator == "<=" || b.Operator == "<"):
		if v, ok = intOf(b.Left); ok && b.Operator == "<" {
			v++
		}
	default:
		return 0, false
	}
	return v, ok && v >= 1 && v <= MaxThresholdN
}

// gcd is the greatest common divisor of a and b (> 0).
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
