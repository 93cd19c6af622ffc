package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/kafkatest"
)

// reconcileTopicsCluster writes the configuration yaml (without brokers)
// to dir, starts an in-process cluster holding every topic reconcile reads
// for it (empty), and returns the path of the configuration with the
// cluster's brokers.
func reconcileTopicsCluster(t *testing.T, dir, yaml string) string {
	t.Helper()
	path := filepath.Join(dir, "processor.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	var topics []string
	for _, c := range rs {
		r := c.Rule
		topics = append(topics, r.Source, r.Outputs.Alerts, r.Outputs.DLQ, r.Outputs.Late, cfg.ChangelogFor(c))
		if r.Repartitioned() {
			topics = append(topics, cfg.RepartitionFor(c))
		}
	}
	cluster := kafkatest.Cluster(t, 1, topics...)
	brokers := "brokers: [" + cluster.ListenAddrs()[0] + "]\n"
	if err := os.WriteFile(path, []byte(brokers+yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// reconcile reads Avro sources and Avro alerts: with Avro configured it
// runs (here over empty topics, so the registry, which is down, is never
// asked) and finds no violation, where it used to refuse with exit code 2.
// deliver reads Avro alerts through the registry too.
func TestAvroConfigsAreRead(t *testing.T) {
	dir := t.TempDir()
	yaml := "registry:\n  url: http://127.0.0.1:1\nsources:\n  - topic: vibration.events\n    format: avro\nalerts_format: avro\n"
	path := reconcileTopicsCluster(t, dir, yaml)
	if code := execute([]string{"reconcile", "--quiet", "--recompute", "--config", path}); code != exitOK {
		t.Errorf("processor reconcile with Avro over empty topics: exit code %d, want %d", code, exitOK)
	}
	if _, err := loadDeliveryFormat(path); err != nil {
		t.Errorf("deliver with Avro alerts and registry.url: %v", err)
	}
	if code := execute([]string{"config", "--config", path}); code != exitOK {
		t.Errorf("processor config with Avro: exit code %d, want 0", code)
	}
}
