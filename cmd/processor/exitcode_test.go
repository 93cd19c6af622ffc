package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Cobra's own refusals exit 2 (usage), like configuration errors: an
// unknown command or flag, a bad flag value, too many arguments.
func TestCommandLineRefusalsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"run", "--bogus"}, {"rules", "check", "a", "b"}, {"config", "--commit_interval=abc"}, {"dlq", "--bogus"}} {
		if rc := execute(args); rc != exitUsage {
			t.Errorf("processor %v: exit %d, want %d (usage)", args, rc, exitUsage)
		}
	}
}

// A configuration whose rules cannot be loaded is a usage error too, for
// every command that reads it (it used to surface in run as exit 1).
func TestBadRulesFileIsAUsageError(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	p := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(p, []byte("rules_file: "+missing+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"run", "--config", p}, {"config", "--config", p}, {"replay", "--config", p}, {"reconcile", "--config", p}} {
		if rc := execute(args); rc != exitUsage {
			t.Errorf("processor %v: exit %d, want %d (usage)", args, rc, exitUsage)
		}
	}
}

// `rules check --config` with an invalid rules_file reports every problem
// of every rule (the configuration's own Load would stop at the first
// error message), and exits 2.
func TestRulesCheckConfigReportsTheRules(t *testing.T) {
	dir := t.TempDir()
	rf := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rf, []byte("rules:\n  - id: r1\n    version: 1\n    source: in\n    filter: 'value >= '\n    window: {type: tumbling, size: 1m}\n    aggregate: {fn: max, field: value}\n    threshold: agg >= 3\n    outputs: {alerts: out}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := rulesCheckConfig(t, "rules_file: "+rf+"\n")
	if _, usage := err.(usageError); !usage {
		t.Fatalf("rules check: %v, want a usage error", err)
	}
	for _, w := range []string{"1 rule, 1 problem", "column 9", "r1 v1 (line 2), hash"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("rules check printed no %q:\n%s", w, out.String())
		}
	}
}

// `rules check --config` names the dedup keepers' changelog topics, which
// the processor creates besides the rules' (create_topics: false needs
// them created by hand), with the rules each keeps.
func TestRulesCheckConfigNamesTheKeepers(t *testing.T) {
	dir := t.TempDir()
	rule := "  - id: %s\n    version: 1\n    source: in\n    window: {type: tumbling, size: 1m}\n    aggregate: {fn: max, field: value}\n    threshold: agg >= 3\n    outputs: {alerts: out}\n"
	rf := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rf, []byte("rules:\n"+fmt.Sprintf(rule, "r1")+fmt.Sprintf(rule, "r2")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := rulesCheckConfig(t, "group_id: g\nrules_file: "+rf+"\n")
	if err != nil {
		t.Fatalf("rules check: %v\n%s", err, out.String())
	}
	if !regexp.MustCompile(`(?m)^  g\.dedup-[0-9a-f]{16}\.changelog: r1\.v1, r2\.v1 \(input in\)$`).MatchString(out.String()) {
		t.Errorf("rules check named no keeper of r1 and r2:\n%s", out.String())
	}
}

// A password in a sink URL is never printed: not by `deliver --check`,
// not by `config` (which prints the delivery section as read).
func TestSinkURLPasswordNotPrinted(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("delivery:\n  sinks:\n    - type: webhook\n      name: hook\n      url: https://user:s3cretpw@hooks.example/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"deliver", "--config", p, "--check"}, {"config", "--config", p}} {
		var out bytes.Buffer
		cmd := deliverCmd()
		if args[0] == "config" {
			cmd = configCmd()
		}
		cmd.SetOut(&out)
		cmd.SetArgs(args[1:])
		if err := cmd.Execute(); err != nil {
			t.Fatalf("processor %v: %v", args, err)
		}
		if strings.Contains(out.String(), "s3cretpw") || !strings.Contains(out.String(), "hooks.example") {
			t.Errorf("processor %v printed:\n%s", args, out.String())
		}
	}
}

// `rules check` refuses what the processor would refuse at start-up: rules
// whose changelog positions do not fit in Kafka's default commit metadata
// (consume.CheckCommitMetadata), so the mistake shows before a deployment.
func TestRulesCheckRefusesTooMuchCommitMetadata(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 30 {
		fmt.Fprintf(&b, "  - id: %s-%02d\n    version: 1\n    source: in\n    filter: value >= 7.1\n    window: {type: sliding, size: 2m}\n    threshold: count >= 3\n    outputs: {alerts: out-%02d}\n", strings.Repeat("r", 150), i, i)
	}
	err := rulesCheckFile(t, b.String())
	if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), "offset.metadata.max.bytes") || !strings.Contains(err.Error(), "reading in (") {
		t.Fatalf("rules check: %v, want a usage error naming the commit metadata bound and the topic", err)
	}
}

// `rules check` refuses, as start-up does, rules whose dead letters would
// need a dlq.rules header over pipeline.MaxDeadLetterRulesBytes
// (consume.CheckDeadLetterRules): repartitioned rules of one source with
// one dead-letter topic, which their commit metadata does not bound.
func TestRulesCheckRefusesTooLargeDeadLetterRules(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 100 {
		fmt.Fprintf(&b, "  - id: %s-%03d\n    version: 1\n    description: events\n    source: in\n    key: sensor_id\n    window: {type: tumbling, size: 1m}\n    threshold: count >= 3\n    outputs: {alerts: out-%02d, dlq: shared.dlq}\n",
			strings.Repeat("r", 196), i, i)
	}
	err := rulesCheckFile(t, b.String())
	if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), "dlq.rules") || !strings.Contains(err.Error(), "shared.dlq") {
		t.Fatalf("rules check: %v, want a usage error naming the dlq.rules bound and the dead-letter topic", err)
	}
}

// rulesCheckFile runs `rules check` on a rules file of content y and
// returns its error.
// rulesCheckConfig runs `rules check --config` on a configuration file of
// content y and returns what it printed.
func rulesCheckConfig(t *testing.T, y string) (*bytes.Buffer, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := rulesCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"check", "--config", p})
	return &out, cmd.Execute()
}

func rulesCheckFile(t *testing.T, y string) error {
	t.Helper()
	rf := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rf, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := rulesCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"check", rf})
	return cmd.Execute()
}
