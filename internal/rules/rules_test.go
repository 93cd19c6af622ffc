package rules

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

func mustLoad(t *testing.T, path string) []*Compiled {
	t.Helper()
	cs, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestVibrationRule: the SPEC's vibration rule as configuration compiles to
// exactly today's parameters (internal/config's defaults), and its filter
// agrees with the pipeline's hard-coded one.
func TestVibrationRule(t *testing.T) {
	cs := mustLoad(t, "testdata/vibration.yaml")
	if len(cs) != 1 {
		t.Fatalf("%d rules", len(cs))
	}
	// The legacy rule block's defaults (internal/config); config's
	// TestLegacyRuleIsVibrationYAML checks that they hash equal to this file.
	c := cs[0]
	want := struct {
		ID, Description, Quality                              string
		MinValue                                              float64
		Version, Threshold                                    int
		Window, WatermarkDelay, AllowedLateness, DedupHorizon time.Duration
	}{"vibration-high", "high-vibration events", "good", 7.1, 1, 3, 2 * time.Minute, 30 * time.Second, 10 * time.Minute, time.Hour}
	def := struct {
		Topics struct{ Input, Alerts, DLQ, Late string }
	}{}
	def.Topics.Input, def.Topics.Alerts, def.Topics.DLQ, def.Topics.Late = "vibration.events", "vibration.alerts", "vibration.events.dlq", "vibration.events.late"
	checks := []struct {
		name      string
		got, want any
	}{
		{"id", c.Rule.ID, want.ID},
		{"version", c.Rule.Version, want.Version},
		{"description", c.Rule.Description, want.Description},
		{"window type", c.Rule.Window.Type, Sliding},
		{"threshold N", c.N, want.Threshold},
		{"window S", c.SizeMs, want.Window.Milliseconds()},
		{"delay D", c.DelayMs, want.WatermarkDelay.Milliseconds()},
		{"lateness L", c.LatenessMs, want.AllowedLateness.Milliseconds()},
		{"dedup horizon H", c.DedupHorizonMs, want.DedupHorizon.Milliseconds()},
		{"source", c.Rule.Source, def.Topics.Input},
		{"alerts", c.Rule.Outputs.Alerts, def.Topics.Alerts},
		{"dlq", c.Rule.Outputs.DLQ, def.Topics.DLQ},
		{"late", c.Rule.Outputs.Late, def.Topics.Late},
		{"key", c.Rule.Key, "machine_id"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	// The literal SPEC numbers, in case the config defaults ever move.
	if c.N != 3 || c.SizeMs != 120_000 || c.DelayMs != 30_000 || c.LatenessMs != 600_000 || c.DedupHorizonMs != 3_600_000 {
		t.Errorf("compiled %+v, want N 3, S 2m, D 30s, L 10m, H 1h", c)
	}
	f := c.NewFilter()
	if f.ev.p.fast == nil {
		t.Error("the vibration filter is not on the fast path")
	}
	for _, v := range []float64{-1, 0, 7, 7.09999999, 7.1, 7.100000001, 7.62, 25.4, 1e9} {
		for _, q := range []string{"good", "uncertain", "bad", ""} {
			got, err := f.Match(&Event{Value: v, Quality: q})
			if err != nil {
				t.Fatal(err)
			}
			if hard := v >= want.MinValue && (want.Quality == "" || q == want.Quality); got != hard {
				t.Errorf("filter(value %v, quality %q) = %v, the pipeline's filter says %v", v, q, got, hard)
			}
		}
	}
	th := c.NewThreshold()
	for n := range 6 {
		if got, _ := th.Fires(float64(n), n); got != (n >= 3) {
			t.Errorf("threshold(count %d) = %v", n, got)
		}
	}
}

// TestDefaults: a minimal rule gets every documented default.
func TestDefaults(t *testing.T) {
	rs, err := Parse("min.yaml", []byte(`
rules:
  - id: r
    version: 1
    source: in
    window: {type: tumbling, size: 1m}
    threshold: count >= 2
    outputs: {alerts: out}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if r.Key != DefaultKey || r.Filter != DefaultFilter || r.Aggregate != (Aggregate{Fn: FnCount, Field: "value"}) ||
		r.Watermark != (Watermark{Strategy: WatermarkFixed, Delay: Duration(DefaultDelay)}) ||
		r.AllowedLateness.D() != DefaultAllowedLateness || r.DedupHorizon.D() != DefaultDedupHorizon || r.Cooldown != 0 ||
		r.Outputs.DLQ != "in.dlq" || r.Outputs.Late != "in.late" || r.Description != "events of rule r" {
		t.Fatalf("defaults not applied: %+v", r)
	}
	rs, err = Parse("adaptive.yaml", []byte(`
rules:
  - id: r
    version: 1
    source: in
    window: {type: tumbling, size: 1m}
    threshold: count >= 2
    watermark: {strategy: adaptive}
    outputs: {alerts: out}
`))
	if err != nil {
		t.Fatal(err)
	}
	if w := rs[0].Watermark; w.Percentile != DefaultPercentile || w.Max.D() != DefaultMaxDelay || w.Sample != DefaultSample || w.Min != 0 || w.Delay.D() != DefaultDelay {
		t.Fatalf("adaptive defaults not applied: %+v", w)
	}
	if err := Validate(rs); err != nil {
		t.Fatal(err)
	}
}

// valid is a valid rules file; the table tests change one line of it.
const valid = `rules:
  - id: vibration-high
    version: 1
    source: vibration.events
    filter: value >= 7.1 && quality == "good"
    window:
      type: sliding
      size: 2m
    threshold: count >= 3
    outputs:
      alerts: vibration.alerts
`

// edit returns valid with the line starting with old (after indentation)
// replaced by repl (indented alike); repl may hold several lines.
func edit(t *testing.T, old, repl string) string {
	t.Helper()
	lines := strings.Split(valid, "\n")
	for i, l := range lines {
		if trimmed := strings.TrimLeft(l, " "); strings.HasPrefix(trimmed, old) {
			indent := l[:len(l)-len(trimmed)]
			var out []string
			for _, r := range strings.Split(repl, "\n") {
				out = append(out, indent+r)
			}
			lines[i] = strings.Join(out, "\n")
			return strings.Join(lines, "\n")
		}
	}
	t.Fatalf("no line %q", old)
	return ""
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown top-level key", valid + "extra: 1\n", []string{`line 12: top level: unknown key "extra" (valid: rules)`}},
		{"unknown rule key", edit(t, "source:", "source: x\nsorce: y"), []string{`line 5: rules[0]: unknown key "sorce" (valid: aggregate, allowed_lateness, cooldown, dedup_horizon, description, filter, id, key, outputs, repartition, source, threshold, version, watermark, window)`}},
		{"unknown window key", edit(t, "size:", "size: 2m\nadvnce: 1m"), []string{`line 9: rules[0].window: unknown key "advnce" (valid: advance, gap, size, type)`}},
		{"repeated key", edit(t, "version:", "version: 1\nversion: 2"), []string{`line 4: rules[0]: key "version" given twice (first at line 3)`}},
		{"wrong type", edit(t, "version:", "version: one"), []string{"rule #1 (line 2)", "cannot unmarshal !!str `one` into int"}},
		{"duration without unit", edit(t, "size:", "size: 120000"), []string{`line 8: "120000" is not a duration: want a number with a unit, such as 2m, 30s, 1h or 250ms`}},
		{"sub-millisecond duration", edit(t, "size:", "size: 1.5ms"), []string{"line 8: duration 1.5ms is not a whole number of milliseconds"}},
		{"negative duration", edit(t, "size:", "size: -2m"), []string{"line 8: duration -2m is negative"}},
		{"syntax", edit(t, "size:", "size: [2m"), []string{"yaml: line 7: did not find expected ',' or ']'"}},
		{"two documents", valid + "---\nrules: []\n", []string{"more than one YAML document"}},
		{"empty", "", []string{"empty file"}},
		{"comment only", "# nothing\n", []string{"empty file"}},
		{"no rules", "rules: []\n", []string{"line 1: rules must be a non-empty list of rules"}},
		{"not a list", "rules: {id: x}\n", []string{"rules must be a non-empty list"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // one per expected error, in order
	}{
		{"bad id", edit(t, "- id:", "- id: vibration high"), []string{
			`rules: rule #1: id = "vibration high" (line 2) is invalid: 1-200 characters of [a-zA-Z0-9._-]`}},
		{"version 0", edit(t, "version:", "version: 0"), []string{
			`rules: rule vibration-high: version = 0 (line 3) is invalid: an integer >= 1`}},
		{"bad key", edit(t, "source:", "source: vibration.events\nkey: line_id"), []string{
			`key = "line_id" (line 5) is invalid: the event field to group by: "machine_id" or "sensor_id"`}},
		{"bad window type", edit(t, "type:", "type: rolling"), []string{
			`window.type = "rolling" (line 7) is invalid: one of "sliding", "tumbling", "hopping", "session"`}},
		{"hopping advance > size", edit(t, "type:", "type: hopping\nadvance: 5m"), []string{
			`window.advance = 5m (line 8) is invalid: hopping windows need 1ms <= advance <= size (2m)`,
			"threshold", // `count >= 3` is fine for hopping: no error; see below
		}[:1]},
		{"hopping too many windows per event", edit(t, "type:", "type: hopping\nadvance: 100ms"), []string{
			`window.advance = 100ms (line 8) is invalid: at least size/1000 (120ms): every event updates ceil(size/advance) windows`}},
		// 2m / 59.999s: 2.000016 windows per event, but 1ms panes.
		{"hopping panes too small", edit(t, "type:", "type: hopping\nadvance: 59999ms"), []string{
			`window.advance = 59s999ms (line 8) is invalid: such that size/gcd(size, advance) is at most 1000: a window is kept in panes of gcd(size, advance) = 1ms, 120000 of them per window`}},
		{"session with size and no gap", edit(t, "type:", "type: session"), []string{
			`window.gap = 0s (line 6) is invalid: a duration from 1ms to 720h`,
			`window.size = 2m (line 8) is invalid: not used by session windows (a session ends gap after its last event); remove it and set gap`}},
		{"sliding with gap", edit(t, "size:", "size: 2m\ngap: 1m"), []string{
			`window.gap = 1m (line 9) is invalid: not used by sliding windows (only session windows have a gap); remove it`}},
		{"sliding with sum", edit(t, "threshold:", "threshold: count >= 3\naggregate: {fn: sum}"), []string{
			`aggregate.fn = "sum" (line 10) is invalid: "count": sliding windows support only the count aggregation (the SPEC incident semantics: N events within size); use a tumbling, hopping or session window for sum, avg, min or max`}},
		{"sliding with a general threshold", edit(t, "threshold:", "threshold: count >= 3 && agg > 1"), []string{
			"threshold = \"count >= 3 && agg > 1\" (line 9) is invalid: `count >= N` with an integer N from 1 to 1000: a sliding window fires on N events within size (the SPEC incident semantics)"}},
		{"sliding N too large", edit(t, "threshold:", "threshold: count > 1000"), []string{"`count >= N` with an integer N from 1 to 1000"}},
		{"unknown aggregate", edit(t, "threshold:", "threshold: count >= 3\naggregate: {fn: median, field: seq}"), []string{
			`aggregate.fn = "median" (line 10) is invalid: one of "count", "sum", "avg", "min", "max"`,
			`aggregate.field = "seq" (line 10) is invalid: "value" (mm/s), the only numeric field of an event`}},
		{"dedup horizon too short", edit(t, "threshold:", "threshold: count >= 3\nallowed_lateness: 1h\ndedup_horizon: 1h"), []string{
			`dedup_horizon = 1h (line 11) is invalid: a duration greater than window.size + allowed_lateness (1h2m) and at most 2160h`}},
		{"dedup horizon of a session", edit(t, "type:", "type: session\ngap: 1h") + "    dedup_horizon: 1h10m\n", []string{
			`window.size = 2m (line 9) is invalid`,
			`dedup_horizon = 1h10m (line 13) is invalid: a duration greater than window.gap + allowed_lateness (1h10m)`}},
		{"fixed watermark with adaptive keys", edit(t, "threshold:", "threshold: count >= 3\nwatermark: {delay: 1m, sample: 10}"), []string{
			`watermark.sample = 10 (line 10) is invalid: only used with strategy adaptive; remove it`}},
		{"adaptive watermark out of range", edit(t, "threshold:", "threshold: count >= 3\nwatermark: {strategy: adaptive, percentile: 101, min: 1m, max: 30s}"), []string{
			`watermark.percentile = 101 (line 10) is invalid: a percentile in (0, 100]`,
			`watermark.max = 30s (line 10) is invalid: a duration from min (1m) to 720h`,
			`watermark.delay = 30s (line 10) is invalid: the delay used until sample events were seen, within [min, max] = [1m, 30s]`}},
		{"unknown strategy", edit(t, "threshold:", "threshold: count >= 3\nwatermark: {strategy: punctuated}"), []string{
			`watermark.strategy = "punctuated" (line 10) is invalid: "fixed" or "adaptive"`}},
		{"cooldown too long", edit(t, "threshold:", "threshold: count >= 3\ncooldown: 1000h"), []string{
			`cooldown = 1000h (line 10) is invalid: a duration from 0s to 720h`}},
		{"output collides with the source", edit(t, "alerts:", "alerts: vibration.events"), []string{
			`outputs.alerts = "vibration.events" (line 11) is invalid: a topic distinct from source`}},
		{"missing alerts topic", edit(t, "alerts:", "dlq: d"), []string{
			`outputs.alerts = "" (line 10) is invalid: a Kafka topic name`}},
		{"many at once", strings.Replace(edit(t, "version:", "version: 0"), "source: vibration.events", "source: ''", 1) + "    allowed_lateness: 800h\n", []string{
			"version = 0", `source = ""`, "allowed_lateness = 800h", "dedup_horizon = 1h (line 2)", `outputs.dlq = "" (line 10)`, `outputs.late = "" (line 10)`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Parse("f.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			err = Validate(rs)
			if err == nil {
				t.Fatal("no error")
			}
			errs := unjoin(err)
			if len(errs) != len(tc.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(errs), len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d %q\ndoes not contain %q", i, errs[i], w)
				}
				var fe *FieldError
				var ee *ExprError
				if !errors.As(errs[i], &fe) && !errors.As(errs[i], &ee) {
					t.Errorf("error %d is %T", i, errs[i])
				}
			}
		})
	}
}

func TestDuplicateIDs(t *testing.T) {
	rs, err := Parse("f.yaml", []byte(valid+strings.TrimPrefix(valid, "rules:\n")))
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(rs)
	if err == nil || !strings.Contains(err.Error(), `rules: rule vibration-high: id = "vibration-high" (line 12) is invalid: ids must be unique, rule #1 (line 2) has the same`) {
		t.Fatalf("got %v", err)
	}
}

func TestExprErrors(t *testing.T) {
	tests := []struct {
		name, key, expr, want string
	}{
		{"unknown name", "filter", "valu >= 7.1", "rules: rule vibration-high: filter: unknown name `valu` (did you mean `value`?) at line 1, column 1 (file line 5)"},
		{"unknown name far from any field", "filter", `value >= 7.1 and vibration > 2`, "filter: unknown name `vibration` (known: clock, event_id, machine_id, quality, schema_version, sensor_id, seq, ts, unit, value) at line 1, column 18"},
		{"type mismatch on line 2", "filter", "value >= 7.1 &&\n  quality == 1", "filter: invalid operation: == (mismatched types string and int) at line 2, column 11"},
		{"syntax", "filter", "value >= ", "filter: unexpected token EOF at line 1, column 9"},
		{"not boolean", "filter", "quality", "filter: must be true or false, but is of type string (file line 5)"},
		{"function call", "filter", `len(quality) > 3`, "filter: function calls are not available: use fields, literals, comparisons, and, or, not, arithmetic, in [...], contains, startsWith, endsWith, matches at line 1, column 1"},
		{"range", "filter", `seq in 1..1000000000`, "filter: `in` needs a literal list on its right"},
		{"range elsewhere", "filter", `value > 1 || (1..100000000) == nil`, "filter: ranges (a..b) are not available: expressions have no arrays or loops at line 1, column 16"},
		{"env", "filter", `$env.value > 1`, "filter: member access is not available"},
		{"modulo", "filter", `seq % 2 == 0`, "filter: operator % is not available at line 1, column 5"},
		{"let", "filter", `let x = value; x > 1`, "filter: variables and sequences (let, ;) are not available"},
		{"dynamic regexp", "filter", `quality matches sensor_id`, "filter: `matches` needs a literal pattern"},
		{"bad regexp", "filter", `quality matches "("`, "filter: error parsing regexp: missing closing ): `(` at line 1, column 9"},
		{"list of fields", "filter", `quality in [unit]`, "filter: a list after `in` may hold only literals at line 1, column 13"},
		{"threshold unknown name", "threshold", "cnt >= 3", "rules: rule vibration-high: threshold: unknown name `cnt` (did you mean `count`?) at line 1, column 1 (file line 9)"},
		{"threshold over event fields", "threshold", "value > 3", "threshold: unknown name `value`"},
		{"empty", "threshold", `""`, "threshold: empty expression"},
		{"too large", "filter", strings.Repeat("value > 1 && ", 200) + "true", "filter: compilation failed: expression exceeds maximum allowed nodes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			line := tc.key + ": " + yamlQuote(tc.expr)
			rs, err := Parse("f.yaml", []byte(edit(t, tc.key+":", line)))
			if err != nil {
				t.Fatal(err)
			}
			err = Validate(rs)
			var ee *ExprError
			if !errors.As(err, &ee) {
				t.Fatalf("got %v, want an ExprError", err)
			}
			if !strings.Contains(ee.Error(), tc.want) {
				t.Errorf("got  %q\nwant %q", ee.Error(), tc.want)
			}
		})
	}
}

func yamlQuote(s string) string {
	if s == `""` {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

// TestDescribeGolden: Check's report over testdata/rules.yaml (one rule of
// each kind) matches testdata/rules.check.golden; -update rewrites it.
func TestDescribeGolden(t *testing.T) {
	report, err := Check("testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "testdata/rules.check.golden", report)

	rs, err := ReadFile("testdata/vibration.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const want = `alert when at least 3 events with value >= 7.1 and quality == "good" fall within 2m (sliding, record-aligned), per machine_id; watermark = max event time - 30s; late up to 10m; duplicates remembered 1h`
	if got := Describe(rs[0]); got != want {
		t.Errorf("Describe(vibration)\n got %s\nwant %s", got, want)
	}
}

func TestCheckInvalid(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/bad.yaml"
	bad := strings.NewReplacer("value >= 7.1", "valu > 1", "type: sliding", "type: hopping\n      advance: 3m").Replace(valid)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	report, err := Check(path)
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{path + ": 1 rule, 2 problems:", "  - rules: rule vibration-high: filter: unknown name `valu`", "window.advance = 3m", "vibration-high v1 (line 2), hash "} {
		if !strings.Contains(report, w) {
			t.Errorf("report does not contain %q:\n%s", w, report)
		}
	}
	if report, err := Check(dir + "/missing.yaml"); err == nil || !strings.Contains(report, "cannot be used") {
		t.Errorf("missing file: %q, %v", report, err)
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

// TestHash: semantically equal YAML hashes alike; any change of meaning
// changes the hash.
func TestHash(t *testing.T) {
	base := hashOf(t, valid)
	same := map[string]string{
		"reordered keys, flow style, comments": `# the same rule
rules:
- outputs: {alerts: vibration.alerts}
  threshold: "count>=3"        # no spaces
  window: {size: 120s, type: sliding}
  filter: (value >= 7.1) and quality == 'good'
  source: "vibration.events"
  version: 1
  id: vibration-high
`,
		"defaults written out": edit(t, "threshold:", `threshold: count >= 3
key: machine_id
aggregate: {fn: count, field: value}
watermark: {strategy: fixed, delay: 30s}
allowed_lateness: 600s
dedup_horizon: 60m
cooldown: 0s
description: events of rule vibration-high`) + "      dlq: vibration.events.dlq\n      late: vibration.events.late\n",
		"merge keys and anchors": `rules:
  - id: vibration-high
    <<: {version: 1, source: vibration.events}
    filter: value >= 7.1 && quality == "good"
    window: &w {type: sliding, size: 2m}
    threshold: count >= 3
    outputs: {alerts: vibration.alerts}
`,
	}
	for name, y := range same {
		if h := hashOf(t, y); h != base {
			t.Errorf("%s: hash %s, want %s", name, h, base)
		}
	}
	different := map[string]string{
		"threshold":   edit(t, "threshold:", "threshold: count >= 4"),
		"filter":      edit(t, "filter:", `filter: value > 7.1 && quality == "good"`),
		"version":     edit(t, "version:", "version: 2"),
		"window size": edit(t, "size:", "size: 3m"),
		"lateness":    edit(t, "threshold:", "threshold: count >= 3\nallowed_lateness: 9m"),
		"delay":       edit(t, "threshold:", "threshold: count >= 3\nwatermark: {delay: 31s}"),
		"topic":       edit(t, "alerts:", "alerts: vibration.alerts.v2"),
	}
	seen := map[string]string{base: "base"}
	for name, y := range different {
		h := hashOf(t, y)
		if other, dup := seen[h]; dup {
			t.Errorf("%s: same hash as %s", name, other)
		}
		seen[h] = name
	}
	if len(base) != 64 {
		t.Errorf("hash %q is not 64 hex digits", base)
	}
}

func hashOf(t *testing.T, y string) string {
	t.Helper()
	rs, err := Parse("h.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(rs); err != nil {
		t.Fatal(err)
	}
	return Hash(rs[0])
}

func TestMergeKeys(t *testing.T) {
	y := `rules:
  - &common
    id: a
    version: 1
    source: in
    window: {type: tumbling, size: 1m}
    threshold: count >= 2
    outputs: {alerts: out}
  - <<: *common
    id: b
    window: {type: session, gap: 10s}
`
	rs, err := Parse("m.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(rs); err != nil {
		t.Fatal(err)
	}
	if rs[1].ID != "b" || rs[1].Source != "in" || rs[1].Window.Type != Session || rs[1].Window.Gap.D() != 10*time.Second || rs[1].Window.Size != 0 {
		t.Fatalf("merged rule: %+v", rs[1])
	}
	if rs[1].lineOf("window.gap") != 11 || rs[1].lineOf("source") != 5 {
		t.Errorf("positions: window.gap %d, source %d", rs[1].lineOf("window.gap"), rs[1].lineOf("source"))
	}
	if _, err := Parse("m.yaml", []byte(strings.Replace(y, "    source: in\n", "    source: in\n    sauce: x\n", 1))); err == nil || !strings.Contains(err.Error(), `line 6: rules[0]: unknown key "sauce"`) {
		t.Errorf("unknown key in an anchored mapping: %v", err)
	}
}

func TestDurationFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 2 * time.Minute: "2m", 90 * time.Second: "1m30s", time.Hour + 1500*time.Millisecond: "1h1s500ms", 250 * time.Millisecond: "250ms",
	} {
		if got := Duration(d).String(); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(want); err != nil || back != d {
			t.Errorf("%q does not parse back: %v %v", want, back, err)
		}
	}
}

// TestMergeBomb: aliases and merge keys cannot make parsing exponential.
func TestMergeBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n  - &a0 {id: x}\n")
	for i := 1; i < 12; i++ {
		fmt.Fprintf(&b, "  - &a%d {<<: [", i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]}\n")
	}
	if _, err := Parse("bomb.yaml", []byte(b.String())); err == nil || !strings.Contains(err.Error(), "document too complex") {
		t.Fatalf("got %v", err)
	}
}
