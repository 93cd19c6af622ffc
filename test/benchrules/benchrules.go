// Package benchrules is the rule mix of the rules benchmarks
// (test/bench's BenchmarkRules over a real broker, internal/pipeline's
// BenchmarkRuleStages, BenchmarkRuleApply and BenchmarkRuleChangelog in
// process), written once so that the two measure the same rules.
package benchrules

import (
	"fmt"
	"strings"
)

// Rule is one rule of the mix: its id and its YAML keys other than id,
// version, source and outputs, which YAML adds.
type Rule struct {
	ID   string
	Body string
}

// Ten is the 10-rule mix: the vibration rule first (the 1-rule runs use
// Ten[:1]), then sliding rules with other thresholds and filters, tumbling
// avg/max/min/sum/count, a hopping max and a session count, all keyed by
// machine_id, so no record is repartitioned. The thresholds make each rule
// alert at a rate like the vibration rule's (docs/BENCHMARKS.md).
var Ten = []Rule{
	{"vibration-high", `description: high-vibration events
filter: value >= 7.1 && quality == "good"
window: {type: sliding, size: 2m}
threshold: count >= 3`},
	{"vibration-critical", `description: critical-vibration events
filter: value >= 11
window: {type: sliding, size: 1m}
threshold: count >= 2`},
	{"vibration-elevated", `description: elevated-vibration events
filter: value >= 5 && quality != "uncertain"
window: {type: sliding, size: 10m}
threshold: count >= 10`},
	{"machine-avg", `description: readings of good quality
filter: quality == "good"
window: {type: tumbling, size: 5m}
aggregate: {fn: avg}
threshold: agg > 4.5 && count >= 100`},
	{"machine-max", `description: readings
window: {type: tumbling, size: 1m}
aggregate: {fn: max}
threshold: agg >= 12.5`},
	{"machine-min", `description: readings (raised floor)
window: {type: tumbling, size: 10m}
aggregate: {fn: min}
threshold: agg >= 2.5 && count >= 100`},
	{"machine-sum", `description: elevated readings
filter: value >= 4.5
window: {type: tumbling, size: 1m}
aggregate: {fn: sum}
threshold: agg >= 150`},
	{"machine-count", `description: high-vibration events
filter: value >= 7.1
window: {type: tumbling, size: 1m}
threshold: count >= 8`},
	{"machine-peak", `description: readings
window: {type: hopping, size: 10m, advance: 1m}
aggregate: {fn: max}
threshold: agg >= 12.8`},
	{"machine-episode", `description: elevated readings
filter: value >= 4.5
window: {type: session, gap: 90s}
threshold: count > 4`},
}

// Repartitioned replaces machine-peak in test/bench's third run: the same
// hopping maximum per sensor, so every record also goes through the rule's
// repartition topic.
var Repartitioned = Rule{"sensor-peak", `description: readings
key: sensor_id
window: {type: hopping, size: 10m, advance: 1m}
aggregate: {fn: max}
threshold: agg >= 12.8`}

// YAML renders rs over source as a rules file, every rule at version 1
// with the outputs outputs(id) returns (the YAML flow mapping's content,
// for example "alerts: x.alerts, dlq: x.dlq, late: x.late").
func YAML(source string, rs []Rule, outputs func(id string) string) string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "  - id: %s\n    version: 1\n    source: %s\n    outputs: {%s}\n", r.ID, source, outputs(r.ID))
		for _, line := range strings.Split(r.Body, "\n") {
			b.WriteString("    " + line + "\n")
		}
	}
	return b.String()
}
