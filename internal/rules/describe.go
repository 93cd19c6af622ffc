package rules

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
)

// Describe returns the rule in words, for example:
//
//	alert when at least 3 events with value >= 7.1 and quality == "good"
//	fall within 2m (sliding, record-aligned), per machine_id; watermark =
//	max event time - 30s; late up to 10m; duplicates remembered 1h
//
// (on one line). It describes any rule, valid or not, as far as it can.
func Describe(r Rule) string {
	r.EnsureDefaults()
	var b strings.Builder
	filter := ""
	if f := strings.TrimSpace(string(r.Filter)); f != "true" {
		filter = exprWords(f, "")
	}
	w := r.Window
	if n, ok := parseCountAtLeast(string(r.Threshold)); ok && w.Type == Sliding {
		fmt.Fprintf(&b, "alert when at least %d %s", n, plural(n, "event"))
		if filter != "" {
			fmt.Fprintf(&b, " with %s", filter)
		}
		fmt.Fprintf(&b, " fall within %s (sliding, record-aligned)", w.Size)
	} else {
		b.WriteString("alert when ")
		if n, ok := parseCountAtLeast(string(r.Threshold)); ok {
			fmt.Fprintf(&b, "at least %d %s", n, plural(n, "event"))
		} else {
			agg := r.Aggregate.Fn + "(" + r.Aggregate.Field + ")"
			if r.Aggregate.Fn == FnCount {
				agg = "count"
			}
			b.WriteString(exprWords(string(r.Threshold), agg))
		}
		switch w.Type {
		case Sliding:
			fmt.Fprintf(&b, " within %s (sliding, record-aligned)", w.Size)
		case Tumbling:
			fmt.Fprintf(&b, " in a tumbling %s window (aligned to the epoch)", w.Size)
		case Hopping:
			fmt.Fprintf(&b, " in a hopping %s window advancing every %s (aligned to the epoch)", w.Size, w.Advance)
		case Session:
			fmt.Fprintf(&b, " in a session (events less than %s apart; it ends %s after its last event)", w.Gap, w.Gap)
		default:
			fmt.Fprintf(&b, " in a %q window", w.Type)
		}
		if filter != "" {
			fmt.Fprintf(&b, " over events with %s", filter)
		}
	}
	fmt.Fprintf(&b, ", per %s", r.Key)
	b.WriteString("; ")
	b.WriteString(describeWatermark(r.Watermark))
	if r.AllowedLateness > 0 {
		fmt.Fprintf(&b, "; late up to %s", r.AllowedLateness)
	} else {
		b.WriteString("; no lateness allowed")
	}
	fmt.Fprintf(&b, "; duplicates remembered %s", r.DedupHorizon)
	if r.Cooldown > 0 {
		fmt.Fprintf(&b, "; after an alert, no new alert for its %s until the watermark is %s past its end", r.Key, r.Cooldown)
	}
	return b.String()
}

func describeWatermark(w Watermark) string {
	switch w.Strategy {
	case WatermarkFixed:
		if w.Delay == 0 {
			return "watermark = max event time"
		}
		return "watermark = max event time - " + w.Delay.String()
	case WatermarkAdaptive:
		return fmt.Sprintf("watermark = max event time - the %s percentile of event delays over the last %d events, within [%s, %s] (%s until then)",
			ordinal(w.Percentile), w.Sample, w.Min, w.Max, w.Delay)
	}
	return fmt.Sprintf("watermark strategy %q", w.Strategy)
}

func ordinal(p float64) string {
	s := strconv.FormatFloat(p, 'f', -1, 64)
	if p != float64(int64(p)) {
		return s + "th"
	}
	switch n := int64(p); {
	case n%100 >= 11 && n%100 <= 13:
		return s + "th"
	case n%10 == 1:
		return s + "st"
	case n%10 == 2:
		return s + "nd"
	case n%10 == 3:
		return s + "rd"
	}
	return s + "th"
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func parseCountAtLeast(src string) (int, bool) {
	tree, err := parser.Parse(src)
	if err != nil {
		return 0, false
	}
	return countAtLeast(tree.Node)
}

// exprWords renders an expression for people: and, or, not as words, the
// rest as expr prints it; agg, when not empty, replaces the name agg.
func exprWords(src, agg string) string {
	tree, err := parser.Parse(src)
	if err != nil {
		return strconv.Quote(src)
	}
	if agg != "" {
		ast.Walk(&tree.Node, renameIdent{from: "agg", to: agg})
	}
	return words(tree.Node)
}

type renameIdent struct{ from, to string }

func (v renameIdent) Visit(n *ast.Node) {
	if id, ok := (*n).(*ast.IdentifierNode); ok && id.Value == v.from {
		id.Value = v.to
	}
}

func logicOp(n ast.Node) string {
	if b, ok := n.(*ast.BinaryNode); ok {
		switch b.Operator {
		case "&&", "and":
			return "and"
		case "||", "or":
			return "or"
		}
	}
	return ""
}

func words(n ast.Node) string {
	switch x := n.(type) {
	case *ast.BinaryNode:
		if op := logicOp(x); op != "" {
			side := func(c ast.Node) string {
				if o := logicOp(c); o != "" && o != op {
					return "(" + words(c) + ")"
				}
				return words(c)
			}
			return side(x.Left) + " " + op + " " + side(x.Right)
		}
	case *ast.UnaryNode:
		if x.Operator == "!" || x.Operator == "not" {
			switch x.Node.(type) {
			case *ast.BinaryNode, *ast.ConditionalNode:
				return "not (" + words(x.Node) + ")"
			}
			return "not " + words(x.Node)
		}
	}
	return n.String()
}

// Check loads, validates and describes every rule of the rules file at
// path, for `processor rules check`. The report names the file, each rule
// with its version and hash, its topics and its description, and every
// problem; err is non-nil when the file has a problem (the caller maps that
// to a non-zero exit).
func Check(path string) (report string, err error) {
	var b strings.Builder
	rules, err := ReadFile(path)
	if err != nil {
		fmt.Fprintf(&b, "%s: cannot be used:\n", path)
		writeErrors(&b, err)
		return b.String(), err
	}
	verr := Validate(rules)
	problems := 0
	if verr != nil {
		problems = len(unjoin(verr))
	}
	fmt.Fprintf(&b, "%s: %d %s", path, len(rules), plural(len(rules), "rule"))
	if problems > 0 {
		fmt.Fprintf(&b, ", %d %s:\n", problems, plural(problems, "problem"))
		writeErrors(&b, verr)
	} else {
		b.WriteString(", all valid\n")
	}
	for _, r := range rules {
		fmt.Fprintf(&b, "\n%s v%d (line %d), hash %s\n", r.name(), r.Version, r.line, Hash(r)[:16])
		fmt.Fprintf(&b, "  reads %s by %s; alerts to %s, dead letters to %s, too-late records to %s\n",
			r.Source, r.Key, r.Outputs.Alerts, r.Outputs.DLQ, r.Outputs.Late)
		fmt.Fprintf(&b, "  %s\n", Describe(r))
	}
	return b.String(), verr
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

func writeErrors(b *strings.Builder, err error) {
	for _, e := range unjoin(err) {
		msg := e.Error()
		var fe *FieldError
		var ee *ExprError
		if !errors.As(e, &fe) && !errors.As(e, &ee) {
			msg = strings.ReplaceAll(msg, "\n", "\n    ")
		}
		fmt.Fprintf(b, "  - %s\n", msg)
	}
}
