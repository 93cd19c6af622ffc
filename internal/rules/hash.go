package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
)

// hashFormat versions the canonical encoding: changing the encoding
// changes every hash, so it is bumped deliberately, never by accident.
const hashFormat = "rules.hash/v1"

// canonical is the encoding Hash digests: every field of the defaulted
// rule, durations in milliseconds, expressions in expr's canonical printing
// of their syntax tree (so spacing, redundant parentheses, `and` vs `&&`
// and quoting do not matter). JSON of a struct has a fixed member order.
type canonical struct {
	Format         string  `json:"format"`
	ID             string  `json:"id"`
	Version        int     `json:"version"`
	Description    string  `json:"description"`
	Source         string  `json:"source"`
	Key            string  `json:"key"`
	Repartition    bool    `json:"repartition,omitempty"`
	Filter         string  `json:"filter"`
	WindowType     string  `json:"window_type"`
	SizeMs         int64   `json:"size_ms"`
	AdvanceMs      int64   `json:"advance_ms"`
	GapMs          int64   `json:"gap_ms"`
	Fn             string  `json:"fn"`
	Field          string  `json:"field"`
	Threshold      string  `json:"threshold"`
	Strategy       string  `json:"strategy"`
	DelayMs        int64   `json:"delay_ms"`
	Percentile     float64 `json:"percentile"`
	MinMs          int64   `json:"min_ms"`
	MaxMs          int64   `json:"max_ms"`
	Sample         int     `json:"sample"`
	LatenessMs     int64   `json:"lateness_ms"`
	DedupHorizonMs int64   `json:"dedup_horizon_ms"`
	CooldownMs     int64   `json:"cooldown_ms"`
	AlertsTopic    string  `json:"alerts"`
	DLQTopic       string  `json:"dlq"`
	LateTopic      string  `json:"late"`
}

// Hash returns a digest of the rule's meaning (hex SHA-256 of its canonical
// encoding, after EnsureDefaults): equal for rules that differ only in how
// their YAML was written (key order, quoting, spacing, comments, a default
// written out or left out), different when anything that shapes alerts,
// state or outputs differs. Store it with a rule's state so that a rule
// changed without a version bump can be refused.
func Hash(r Rule) string {
	r.EnsureDefaults()
	c := canonical{
		Format: hashFormat, ID: r.ID, Version: r.Version, Description: r.Description,
		Source: r.Source, Key: r.Key, Repartition: r.Repartitioned(), Filter: canonicalExpr(string(r.Filter)),
		WindowType: r.Window.Type, SizeMs: r.Window.Size.Ms(), AdvanceMs: r.Window.Advance.Ms(), GapMs: r.Window.Gap.Ms(),
		Fn: r.Aggregate.Fn, Field: r.Aggregate.Field, Threshold: canonicalExpr(string(r.Threshold)),
		Strategy: r.Watermark.Strategy, DelayMs: r.Watermark.Delay.Ms(), Percentile: r.Watermark.Percentile,
		MinMs: r.Watermark.Min.Ms(), MaxMs: r.Watermark.Max.Ms(), Sample: r.Watermark.Sample,
		LatenessMs: r.AllowedLateness.Ms(), DedupHorizonMs: r.DedupHorizon.Ms(), CooldownMs: r.Cooldown.Ms(),
		AlertsTopic: r.Outputs.Alerts, DLQTopic: r.Outputs.DLQ, LateTopic: r.Outputs.Late,
	}
	b, err := json.Marshal(c)
	if err != nil {
		// Only a non-finite percentile gets here (Validate refuses it);
		// hash its text instead.
		c.Percentile = 0
		b, _ = json.Marshal(c)
		b = fmt.Appendf(b, "%v", r.Watermark.Percentile)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// canonicalExpr prints an expression's syntax tree with the word
// operators spelled as symbols (and: &&, or: ||, not: !); text that does not
// parse is kept as written (such a rule is invalid anyway).
func canonicalExpr(src string) string {
	tree, err := parser.Parse(src)
	if err != nil {
		return "!" + src
	}
	ast.Walk(&tree.Node, symbolOps{})
	return tree.Node.String()
}

// symbolOps rewrites word operators to their symbols.
type symbolOps struct{}

func (symbolOps) Visit(n *ast.Node) {
	switch x := (*n).(type) {
	case *ast.BinaryNode:
		switch x.Operator {
		case "and":
			x.Operator = "&&"
		case "or":
			x.Operator = "||"
		}
	case *ast.UnaryNode:
		if x.Operator == "not" {
			x.Operator = "!"
		}
	}
}
