package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// reconcile and deliver read JSON only: with Avro configured they refuse
// to start (exit code 2 for reconcile), naming what is Avro, instead of
// reporting every record or alert as a violation.
func TestJSONOnlyCommandsRefuseAvro(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "processor.yaml")
	yaml := "brokers: [127.0.0.1:1]\nregistry:\n  url: http://127.0.0.1:1\nsources:\n  - topic: vibration.events\n    format: avro\nalerts_format: avro\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := execute([]string{"reconcile", "--quiet", "--config", path}); code != exitUsage {
		t.Errorf("processor reconcile with Avro: exit code %d, want %d", code, exitUsage)
	}
	_, err := loadDeliveryConfig(path)
	if err == nil || !strings.Contains(err.Error(), "alerts_format") || !strings.Contains(err.Error(), "JSON") {
		t.Errorf("deliver with Avro alerts: %v", err)
	}
	if code := execute([]string{"config", "--config", path}); code != exitOK {
		t.Errorf("processor config with Avro: exit code %d, want 0", code)
	}
}
