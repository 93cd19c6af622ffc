package rules

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"
)

// Event is the environment of a filter expression: the fields of one
// validated, normalised input event, by their contract names.
type Event struct {
	EventID       string  `expr:"event_id"`
	MachineID     string  `expr:"machine_id"`
	SensorID      string  `expr:"sensor_id"`
	TS            int64   `expr:"ts"`    // event time, ms since the Unix epoch
	Seq           int64   `expr:"seq"`   //
	Value         float64 `expr:"value"` // mm/s, after normalisation
	Unit          string  `expr:"unit"`  // as sent: "mm/s" or "in/s"
	Quality       string  `expr:"quality"`
	Clock         string  `expr:"clock"`
	SchemaVersion int64   `expr:"schema_version"`
}

// Agg is the environment of a threshold expression.
type Agg struct {
	Agg   float64 `expr:"agg"`   // the window's aggregate (count as a number for count)
	Count int64   `expr:"count"` // the window's number of events
}

// Limits of expressions.
const (
	// MaxExprNodes bounds an expression's syntax tree (expr.MaxNodes), and
	// with it the work of one evaluation: there are no loops.
	MaxExprNodes = 256
	// MaxExprBytes bounds an expression's source text.
	MaxExprBytes = 4096
)

// ExprError is a load-time error of an expression, with its position in the
// expression (1-based; 0 when the error is about the whole expression).
type ExprError struct {
	Rule     string // the rule id, or "#n" when it has none
	Key      string // filter or threshold
	Line     int
	Column   int
	Msg      string
	FileLine int // line of the key in the rules file, 0 if unknown
}

func (e *ExprError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rules: rule %s: %s: %s", e.Rule, e.Key, e.Msg)
	if e.Line > 0 {
		fmt.Fprintf(&b, " at line %d, column %d", e.Line, e.Column)
	}
	if e.FileLine > 0 {
		fmt.Fprintf(&b, " (file line %d)", e.FileLine)
	}
	return b.String()
}

// program is one compiled boolean expression over environment E.
type program[E any] struct {
	src  string
	tree ast.Node // as parsed, before type checking (for Describe and Hash)
	vm   *vm.Program
	fast func(*E) bool // nil: run on the VM
}

// evaluator evaluates a program; one per goroutine (the VM is reused).
type evaluator[E any] struct {
	p  *program[E]
	vm vm.VM
}

func (e *evaluator[E]) eval(env *E) (bool, error) {
	if e.p.fast != nil {
		return e.p.fast(env), nil
	}
	out, err := e.vm.Run(e.p.vm, env)
	if err != nil {
		return false, fmt.Errorf("rules: evaluate %q: %w", e.p.src, err)
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("rules: evaluate %q: result %T, want bool", e.p.src, out)
	}
	return b, nil
}

// exprOptions are the compile options of every rule expression.
func exprOptions(env any) []expr.Option {
	return []expr.Option{
		expr.Env(env),
		expr.AsBool(),
		expr.DisableAllBuiltins(),
		expr.MaxNodes(MaxExprNodes),
	}
}

// compileExpr parses, restricts, type-checks and compiles src over env E.
func compileExpr[E any](src string, fields fieldTable[E]) (*program[E], *ExprError) {
	if len(src) > MaxExprBytes {
		return nil, &ExprError{Msg: fmt.Sprintf("%d bytes, at most %d", len(src), MaxExprBytes)}
	}
	if strings.TrimSpace(src) == "" {
		return nil, &ExprError{Msg: "empty expression"}
	}
	var zero E
	opts := exprOptions(zero)
	cfg := conf.CreateNew()
	for _, o := range opts {
		o(cfg)
	}
	for name := range cfg.Disabled {
		delete(cfg.Builtins, name)
	}
	tree, err := parser.ParseWithConfig(src, cfg)
	if err != nil {
		return nil, fromExprErr(err, fields)
	}
	if n, msg := restrict(tree.Node); n != nil {
		line, col := position(src, n.Location().From)
		return nil, &ExprError{Line: line, Column: col, Msg: msg}
	}
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		return nil, fromExprErr(err, fields)
	}
	// Parse again for a pristine tree (Compile's checker annotates and
	// patches its own copy; ours stays as written).
	tree, _ = parser.ParseWithConfig(src, cfg)
	return &program[E]{src: src, tree: tree.Node, vm: prog, fast: compileFast(tree.Node, fields)}, nil
}

// fromExprErr turns an expr error into an ExprError with a 1-based
// position and a readable message.
func fromExprErr[E any](err error, fields fieldTable[E]) *ExprError {
	e := &ExprError{Msg: err.Error()}
	var fe *file.Error
	if errors.As(err, &fe) {
		e.Msg = fe.Message
		if fe.Snippet != "" {
			e.Line, e.Column = fe.Line, fe.Column+1 // expr's columns are 0-based
		}
	}
	switch {
	case strings.HasPrefix(e.Msg, "unknown name "):
		name := strings.TrimPrefix(e.Msg, "unknown name ")
		e.Msg = "unknown name `" + name + "`"
		if s := fields.suggest(name); s != "" {
			e.Msg += " (did you mean `" + s + "`?)"
		} else {
			e.Msg += " (known: " + strings.Join(fields.names(), ", ") + ")"
		}
	case strings.HasPrefix(e.Msg, "expected bool, but got "):
		e.Msg = "must be true or false, but is of type " + strings.TrimPrefix(e.Msg, "expected bool, but got ")
		e.Line, e.Column = 0, 0
	}
	return e
}

// position returns the 1-based line and column of rune offset from in src.
func position(src string, from int) (line, col int) {
	line, col = 1, 1
	i := 0
	for _, r := range src {
		if i == from {
			break
		}
		if r == '\n' {
			line++
			col = 1
		} else {
			col++
		}
		i++
	}
	return line, col
}

// restrict returns the first node outside the rule language and why, or
// nil. The language has no loops and calls nothing; see the package doc.
func restrict(root ast.Node) (ast.Node, string) {
	var bad ast.Node
	var msg string
	var walk func(n ast.Node)
	walk = func(n ast.Node) {
		if bad != nil || n == nil {
			return
		}
		fail := func(m string) { bad, msg = n, m }
		switch x := n.(type) {
		case *ast.IdentifierNode:
			if strings.HasPrefix(x.Value, "$") {
				fail("`" + x.Value + "` is not available: name the fields directly")
			}
		case *ast.IntegerNode, *ast.FloatNode, *ast.StringNode, *ast.BoolNode:
		case *ast.UnaryNode:
			switch x.Operator {
			case "!", "not", "-", "+":
				walk(x.Node)
			default:
				fail("operator " + x.Operator + " is not available")
			}
		case *ast.BinaryNode:
			switch x.Operator {
			case "==", "!=", "<", "<=", ">", ">=", "&&", "||", "and", "or",
				"+", "-", "*", "/", "**", "contains", "startsWith", "endsWith":
				walk(x.Left)
				walk(x.Right)
			case "in":
				arr, ok := x.Right.(*ast.ArrayNode)
				if !ok {
					fail("`in` needs a literal list on its right, such as [\"good\", \"uncertain\"]")
					return
				}
				walk(x.Left)
				for _, e := range arr.Nodes {
					switch e.(type) {
					case *ast.IntegerNode, *ast.FloatNode, *ast.StringNode, *ast.BoolNode:
					default:
						if _, _, ok := numericLiteral(e); !ok { // a negative number is a literal too
							bad, msg = e, "a list after `in` may hold only literals"
							return
						}
					}
				}
			case "matches":
				if _, ok := x.Right.(*ast.StringNode); !ok {
					fail("`matches` needs a literal pattern (a string) on its right")
					return
				}
				walk(x.Left)
			case "..":
				fail("ranges (a..b) are not available: expressions have no arrays or loops")
			case "%":
				fail("operator % is not available")
			case "??":
				fail("operator ?? is not available: fields are never nil")
			default:
				fail("operator " + x.Operator + " is not available")
			}
		case *ast.ConditionalNode:
			walk(x.Cond)
			walk(x.Exp1)
			walk(x.Exp2)
		case *ast.CallNode, *ast.BuiltinNode:
			fail("function calls are not available: use fields, literals, comparisons, and, or, not, arithmetic, in [...], contains, startsWith, endsWith, matches")
		case *ast.MemberNode, *ast.ChainNode:
			fail("member access is not available: the fields are plain values")
		case *ast.SliceNode:
			fail("slicing is not available")
		case *ast.ArrayNode:
			fail("lists are only available after `in`")
		case *ast.MapNode, *ast.PairNode:
			fail("maps are not available")
		case *ast.VariableDeclaratorNode, *ast.SequenceNode:
			fail("variables and sequences (let, ;) are not available")
		case *ast.PredicateNode, *ast.PointerNode:
			fail("predicates are not available")
		case *ast.NilNode:
			fail("nil is not available: fields are never nil")
		default:
			fail(fmt.Sprintf("%s is not available", strings.TrimPrefix(reflect.TypeOf(n).String(), "*ast.")))
		}
	}
	walk(root)
	return bad, msg
}

// names reports whether the expression tree refers to the identifier name.
func names(tree ast.Node, name string) bool {
	v := &identFinder{name: name}
	ast.Walk(&tree, v)
	return v.found
}

type identFinder struct {
	name  string
	found bool
}

func (v *identFinder) Visit(n *ast.Node) {
	if id, ok := (*n).(*ast.IdentifierNode); ok && id.Value == v.name {
		v.found = true
	}
}
