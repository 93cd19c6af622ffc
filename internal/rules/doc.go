// Package rules owns the rule schema: the YAML file format of rules (one
// rule = one keyed, windowed alert over one source topic, SPEC.md section
// 6), its defaults, its validation, the compiled filter and threshold
// expressions, a rule's description in words, and a rule's hash.
//
// # Flow
//
//	Parse (YAML, strict)  ->  []Rule  (defaults filled in)
//	Validate              ->  every problem at once, each naming the rule,
//	                          the key, the value and what is valid
//	Compile               ->  *Compiled: durations in ms, the sliding
//	                          threshold N, the filter and threshold programs
//	Load  = Parse + Validate + Compile
//	Check = Parse + Validate + Describe + Hash, as a report (`processor rules check`)
//
// # Expressions
//
// Filters and thresholds are expr-lang/expr expressions, compiled once at
// load against a typed environment (Event for filters, Agg for thresholds)
// and required to be boolean. They are restricted to a small, loop-free
// language: the environment's fields, literals, comparisons, and/or/not,
// arithmetic (+ - * / **; + also joins strings), the ternary operator,
// `in` over a literal list, and the string operators contains, startsWith,
// endsWith and matches (with a literal pattern). No function is exposed
// (expr's builtins are disabled), there are no arrays in the environment,
// and ranges (1..n), indexing, member access, closures, pipes, variables,
// maps and % are refused at load, so evaluation time is bounded by the
// expression's size, which MaxExprNodes bounds (expr.MaxNodes). A refused
// or ill-typed expression fails at load with its line and column.
//
// Expressions that the typed fast path covers (fields, literals,
// comparisons, logic, arithmetic, `in`, ternaries whose branches have one
// type, and the string operators) are turned into Go closures over the
// environment struct at load and evaluate without allocating (string
// concatenation aside). Anything else runs on expr's VM, one vm.VM per
// evaluator, with the environment passed by pointer (two small allocations
// per evaluation). Both give the same results (TestFastPathMatchesVM).
//
// # Invariants
//
//   - A Rule returned by Parse has every default filled in (defaults.go is
//     the one place that states them).
//   - Hash depends only on the rule's meaning: the parsed, defaulted rule
//     with durations in milliseconds and expressions in expr's canonical
//     printing, never the YAML text (key order, quoting, spacing, comments).
//   - A Compiled rule is immutable and safe for concurrent use; the
//     evaluators it hands out (NewFilter, NewThreshold) are not: one per
//     goroutine.
//
// # What it must never do
//
// It never touches Kafka, Pebble or Prometheus, never reads the clock, never
// depends on viper (configuration loading stays in internal/config; this
// package receives bytes or a path) and imports no other package of the
// module: the integration maps a Compiled rule onto window.Config or
// aggwindow.Config. TestDependencies enforces this.
package rules
