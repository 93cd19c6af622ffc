package rules

import (
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/expr-lang/expr/ast"
)

// The typed fast path: an expression in the rule language whose types are
// known statically is turned into nested Go closures over the environment
// struct, which evaluate without allocating. The semantics are expr's:
// integers are int64 and wrap, an integer meets a float as float64, `/` and
// `**` are float operations, strings compare bytewise, and/or short-circuit.
// compileFast returns nil for anything it does not cover, and the VM runs
// it instead; TestFastPathMatchesVM checks both agree.

type kind uint8

const (
	kBool kind = iota + 1
	kInt
	kFloat
	kString
)

// field is one environment field with its accessor.
type field[E any] struct {
	k kind
	i func(*E) int64
	f func(*E) float64
	s func(*E) string
}

// fieldTable is an environment's fields by expression name.
type fieldTable[E any] map[string]field[E]

func (t fieldTable[E]) names() []string {
	out := make([]string, 0, len(t))
	for n := range t {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// suggest returns the field name closest to name within edit distance 2,
// or "".
func (t fieldTable[E]) suggest(name string) string {
	best, bestD := "", 3
	for _, n := range t.names() {
		if d := editDistance(strings.ToLower(name), n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var eventFields = fieldTable[Event]{
	"event_id":       {k: kString, s: func(e *Event) string { return e.EventID }},
	"machine_id":     {k: kString, s: func(e *Event) string { return e.MachineID }},
	"sensor_id":      {k: kString, s: func(e *Event) string { return e.SensorID }},
	"ts":             {k: kInt, i: func(e *Event) int64 { return e.TS }},
	"seq":            {k: kInt, i: func(e *Event) int64 { return e.Seq }},
	"value":          {k: kFloat, f: func(e *Event) float64 { return e.Value }},
	"unit":           {k: kString, s: func(e *Event) string { return e.Unit }},
	"quality":        {k: kString, s: func(e *Event) string { return e.Quality }},
	"clock":          {k: kString, s: func(e *Event) string { return e.Clock }},
	"schema_version": {k: kInt, i: func(e *Event) int64 { return e.SchemaVersion }},
}

var aggFields = fieldTable[Agg]{
	"agg":   {k: kFloat, f: func(a *Agg) float64 { return a.Agg }},
	"count": {k: kInt, i: func(a *Agg) int64 { return a.Count }},
}

// fx is a typed compiled subexpression: exactly one func is set, by k.
type fx[E any] struct {
	k kind
	b func(*E) bool
	i func(*E) int64
	f func(*E) float64
	s func(*E) string
}

func (x fx[E]) numeric() bool { return x.k == kInt || x.k == kFloat }

// float returns x as a float64 function (x numeric).
func (x fx[E]) float() func(*E) float64 {
	if x.k == kFloat {
		return x.f
	}
	i := x.i
	return func(e *E) float64 { return float64(i(e)) }
}

func compileFast[E any](n ast.Node, t fieldTable[E]) func(*E) bool {
	x, ok := fastNode(n, t)
	if !ok || x.k != kBool {
		return nil
	}
	return x.b
}

func fastNode[E any](n ast.Node, t fieldTable[E]) (fx[E], bool) {
	switch x := n.(type) {
	case *ast.IdentifierNode:
		f, ok := t[x.Value]
		if !ok {
			return fx[E]{}, false
		}
		return fx[E]{k: f.k, i: f.i, f: f.f, s: f.s}, true
	case *ast.IntegerNode:
		v := int64(x.Value)
		return fx[E]{k: kInt, i: func(*E) int64 { return v }}, true
	case *ast.FloatNode:
		v := x.Value
		return fx[E]{k: kFloat, f: func(*E) float64 { return v }}, true
	case *ast.StringNode:
		v := x.Value
		return fx[E]{k: kString, s: func(*E) string { return v }}, true
	case *ast.BoolNode:
		v := x.Value
		return fx[E]{k: kBool, b: func(*E) bool { return v }}, true
	case *ast.UnaryNode:
		a, ok := fastNode(x.Node, t)
		if !ok {
			return a, false
		}
		switch {
		case (x.Operator == "!" || x.Operator == "not") && a.k == kBool:
			f := a.b
			return fx[E]{k: kBool, b: func(e *E) bool { return !f(e) }}, true
		case x.Operator == "-" && a.k == kInt:
			f := a.i
			return fx[E]{k: kInt, i: func(e *E) int64 { return -f(e) }}, true
		case x.Operator == "-" && a.k == kFloat:
			f := a.f
			return fx[E]{k: kFloat, f: func(e *E) float64 { return -f(e) }}, true
		case x.Operator == "+" && a.numeric():
			return a, true
		}
	case *ast.BinaryNode:
		return fastBinary(x, t)
	case *ast.ConditionalNode:
		c, ok1 := fastNode(x.Cond, t)
		a, ok2 := fastNode(x.Exp1, t)
		b, ok3 := fastNode(x.Exp2, t)
		if !ok1 || !ok2 || !ok3 || c.k != kBool || a.k != b.k {
			return fx[E]{}, false
		}
		cf := c.b
		switch a.k {
		case kBool:
			fa, fb := a.b, b.b
			return fx[E]{k: kBool, b: func(e *E) bool {
				if cf(e) {
					return fa(e)
				}
				return fb(e)
			}}, true
		case kInt:
			fa, fb := a.i, b.i
			return fx[E]{k: kInt, i: func(e *E) int64 {
				if cf(e) {
					return fa(e)
				}
				return fb(e)
			}}, true
		case kFloat:
			fa, fb := a.f, b.f
			return fx[E]{k: kFloat, f: func(e *E) float64 {
				if cf(e) {
					return fa(e)
				}
				return fb(e)
			}}, true
		case kString:
			fa, fb := a.s, b.s
			return fx[E]{k: kString, s: func(e *E) string {
				if cf(e) {
					return fa(e)
				}
				return fb(e)
			}}, true
		}
	}
	return fx[E]{}, false
}

func fastBinary[E any](x *ast.BinaryNode, t fieldTable[E]) (fx[E], bool) {
	l, ok := fastNode(x.Left, t)
	if !ok {
		return l, false
	}
	if x.Operator == "in" {
		return fastIn(l, x.Right)
	}
	if x.Operator == "matches" {
		p, ok := x.Right.(*ast.StringNode)
		if !ok || l.k != kString {
			return fx[E]{}, false
		}
		re, err := regexp.Compile(p.Value)
		if err != nil {
			return fx[E]{}, false
		}
		s := l.s
		return fx[E]{k: kBool, b: func(e *E) bool { return re.MatchString(s(e)) }}, true
	}
	r, ok := fastNode(x.Right, t)
	if !ok {
		return r, false
	}
	op := x.Operator
	switch op {
	case "&&", "and", "||", "or":
		if l.k != kBool || r.k != kBool {
			return fx[E]{}, false
		}
		a, b := l.b, r.b
		if op == "&&" || op == "and" {
			return fx[E]{k: kBool, b: func(e *E) bool { return a(e) && b(e) }}, true
		}
		return fx[E]{k: kBool, b: func(e *E) bool { return a(e) || b(e) }}, true
	case "==", "!=", "<", "<=", ">", ">=":
		return fastCompare(op, l, r)
	case "+", "-", "*":
		if l.k == kInt && r.k == kInt {
			a, b := l.i, r.i
			switch op {
			case "+":
				return fx[E]{k: kInt, i: func(e *E) int64 { return a(e) + b(e) }}, true
			case "-":
				return fx[E]{k: kInt, i: func(e *E) int64 { return a(e) - b(e) }}, true
			default:
				return fx[E]{k: kInt, i: func(e *E) int64 { return a(e) * b(e) }}, true
			}
		}
		if op == "+" && l.k == kString && r.k == kString {
			a, b := l.s, r.s
			return fx[E]{k: kString, s: func(e *E) string { return a(e) + b(e) }}, true
		}
		if !l.numeric() || !r.numeric() {
			return fx[E]{}, false
		}
		a, b := l.float(), r.float()
		switch op {
		case "+":
			return fx[E]{k: kFloat, f: func(e *E) float64 { return a(e) + b(e) }}, true
		case "-":
			return fx[E]{k: kFloat, f: func(e *E) float64 { return a(e) - b(e) }}, true
		default:
			return fx[E]{k: kFloat, f: func(e *E) float64 { return a(e) * b(e) }}, true
		}
	case "/", "**":
		if !l.numeric() || !r.numeric() {
			return fx[E]{}, false
		}
		a, b := l.float(), r.float()
		if op == "/" {
			return fx[E]{k: kFloat, f: func(e *E) float64 { return a(e) / b(e) }}, true
		}
		return fx[E]{k: kFloat, f: func(e *E) float64 { return math.Pow(a(e), b(e)) }}, true
	case "contains", "startsWith", "endsWith":
		if l.k != kString || r.k != kString {
			return fx[E]{}, false
		}
		a, b := l.s, r.s
		switch op {
		case "contains":
			return fx[E]{k: kBool, b: func(e *E) bool { return strings.Contains(a(e), b(e)) }}, true
		case "startsWith":
			return fx[E]{k: kBool, b: func(e *E) bool { return strings.HasPrefix(a(e), b(e)) }}, true
		default:
			return fx[E]{k: kBool, b: func(e *E) bool { return strings.HasSuffix(a(e), b(e)) }}, true
		}
	}
	return fx[E]{}, false
}

func fastCompare[E any](op string, l, r fx[E]) (fx[E], bool) {
	switch {
	case l.k == kInt && r.k == kInt:
		a, b := l.i, r.i
		return cmpFx(op, func(e *E) int {
			x, y := a(e), b(e)
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		}, nil), true
	case l.numeric() && r.numeric():
		a, b := l.float(), r.float()
		// NaN compares false with everything and unequal to itself.
		return cmpFx(op, nil, func(e *E) (float64, float64) { return a(e), b(e) }), true
	case l.k == kString && r.k == kString:
		a, b := l.s, r.s
		return cmpFx(op, func(e *E) int { return strings.Compare(a(e), b(e)) }, nil), true
	case l.k == kBool && r.k == kBool && (op == "==" || op == "!="):
		a, b := l.b, r.b
		if op == "==" {
			return fx[E]{k: kBool, b: func(e *E) bool { return a(e) == b(e) }}, true
		}
		return fx[E]{k: kBool, b: func(e *E) bool { return a(e) != b(e) }}, true
	}
	return fx[E]{}, false
}

// cmpFx builds a comparison from a three-way compare c, or for floats from
// the operand pair fp (IEEE comparisons, exact for NaN).
func cmpFx[E any](op string, c func(*E) int, fp func(*E) (float64, float64)) fx[E] {
	if fp != nil {
		var b func(*E) bool
		switch op {
		case "==":
			b = func(e *E) bool { x, y := fp(e); return x == y }
		case "!=":
			b = func(e *E) bool { x, y := fp(e); return x != y }
		case "<":
			b = func(e *E) bool { x, y := fp(e); return x < y }
		case "<=":
			b = func(e *E) bool { x, y := fp(e); return x <= y }
		case ">":
			b = func(e *E) bool { x, y := fp(e); return x > y }
		default:
			b = func(e *E) bool { x, y := fp(e); return x >= y }
		}
		return fx[E]{k: kBool, b: b}
	}
	var b func(*E) bool
	switch op {
	case "==":
		b = func(e *E) bool { return c(e) == 0 }
	case "!=":
		b = func(e *E) bool { return c(e) != 0 }
	case "<":
		b = func(e *E) bool { return c(e) < 0 }
	case "<=":
		b = func(e *E) bool { return c(e) <= 0 }
	case ">":
		b = func(e *E) bool { return c(e) > 0 }
	default:
		b = func(e *E) bool { return c(e) >= 0 }
	}
	return fx[E]{k: kBool, b: b}
}

// fastIn covers `x in [literals]` for a string x with string literals and a
// numeric x with numeric literals.
func fastIn[E any](l fx[E], right ast.Node) (fx[E], bool) {
	arr, ok := right.(*ast.ArrayNode)
	if !ok {
		return fx[E]{}, false
	}
	switch {
	case l.k == kString:
		set := make([]string, 0, len(arr.Nodes))
		for _, n := range arr.Nodes {
			s, ok := n.(*ast.StringNode)
			if !ok {
				return fx[E]{}, false
			}
			set = append(set, s.Value)
		}
		a := l.s
		return fx[E]{k: kBool, b: func(e *E) bool { return slices.Contains(set, a(e)) }}, true
	case l.numeric():
		// As expr compares: an integer x with an integer literal exactly,
		// with a float literal as float64(x); a float x as a float.
		var ints []int64
		var floats []float64
		for _, n := range arr.Nodes {
			lit, isInt, ok := numericLiteral(n)
			if !ok {
				return fx[E]{}, false
			}
			switch {
			case isInt && l.k == kInt:
				ints = append(ints, lit.i)
			case isInt:
				floats = append(floats, float64(lit.i))
			default:
				floats = append(floats, lit.f)
			}
		}
		if l.k == kInt {
			a := l.i
			return fx[E]{k: kBool, b: func(e *E) bool {
				x := a(e)
				return slices.Contains(ints, x) || (len(floats) > 0 && slices.Contains(floats, float64(x)))
			}}, true
		}
		a := l.float()
		return fx[E]{k: kBool, b: func(e *E) bool { return slices.Contains(floats, a(e)) }}, true
	}
	return fx[E]{}, false
}

// numLit is a numeric literal: i when it is an integer, else f.
type numLit struct {
	i int64
	f float64
}

// numericLiteral reads an integer or float literal, possibly negated
// (`-3.25` is a unary minus over a literal in expr's tree).
func numericLiteral(n ast.Node) (lit numLit, isInt, ok bool) {
	neg := false
	if u, isU := n.(*ast.UnaryNode); isU && u.Operator == "-" {
		neg, n = true, u.Node
	}
	switch v := n.(type) {
	case *ast.IntegerNode:
		if neg {
			return numLit{i: -int64(v.Value)}, true, true
		}
		return numLit{i: int64(v.Value)}, true, true
	case *ast.FloatNode:
		if neg {
			return numLit{f: -v.Value}, false, true
		}
		return numLit{f: v.Value}, false, true
	}
	return numLit{}, false, false
}
