package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// reconcile checks rules files whose sources are Avro too: the Avro
// source of a rule of the file is read, not refused.
func TestReconcileRulesFileReadsAvro(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	err := os.WriteFile(rules, []byte(`rules:
  - id: r
    version: 1
    source: line.events
    window: {type: tumbling, size: 1m}
    threshold: count >= 3
    outputs: {alerts: line.alerts}
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	yaml := "rules_file: " + rules + "\nregistry:\n  url: http://127.0.0.1:1\nsources:\n  - topic: line.events\n    format: avro\nalerts_format: avro\n"
	path := reconcileTopicsCluster(t, dir, yaml)
	if code := execute([]string{"reconcile", "--quiet", "--config", path}); code != exitOK {
		t.Errorf("processor reconcile with an Avro source in a rules file, over empty topics: exit code %d, want %d", code, exitOK)
	}
}

// The help says what is checked for a rules file.
func TestReconcileHelpNamesRulesFile(t *testing.T) {
	var out bytes.Buffer
	cmd := reconcileCmd()
	cmd.SetOut(&out)
	if err := cmd.Help(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rules_file", "repartitioned", "late.rule", "--recompute"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help does not mention %q", want)
		}
	}
}
