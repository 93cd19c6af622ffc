package main

import (
	"os"
	"path/filepath"
	"testing"
)

// reconcile reads JSON only: with Avro configured it refuses to start
// (exit code 2), naming what is Avro, instead of reporting every record or
// alert as a violation. deliver reads Avro alerts through the registry.
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
	if _, err := loadDeliveryFormat(path); err != nil {
		t.Errorf("deliver with Avro alerts and registry.url: %v", err)
	}
	if code := execute([]string{"config", "--config", path}); code != exitOK {
		t.Errorf("processor config with Avro: exit code %d, want 0", code)
	}
}
