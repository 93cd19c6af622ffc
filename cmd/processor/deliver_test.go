package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/config"
)

// deliverYAML is a processor file with one webhook sink and the given
// top-level lines.
func deliverYAML(t *testing.T, top string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "processor.yaml")
	yaml := "brokers: [127.0.0.1:1]\n" + top +
		"delivery:\n  sinks:\n    - {type: webhook, name: hook, url: \"http://127.0.0.1:1/hook\"}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// deliverCheck runs `processor deliver --config path --check` and returns
// its standard output.
func deliverCheck(t *testing.T, path string) (string, error) {
	t.Helper()
	cmd := deliverCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--config", path, "--check"})
	err := cmd.Execute()
	return out.String(), err
}

// alerts_format avro is accepted with registry.url: the registry keys are
// read with the processor's defaults, --check says alerts are Avro and from
// which registry, and never prints the password.
func TestDeliverReadsAvroAlertsWithARegistry(t *testing.T) {
	const password = "registry-pass-do-not-print"
	path := deliverYAML(t, "alerts_format: avro\nregistry:\n  url: http://registry:8081\n  username: deliver\n  password: "+password+"\n  timeout: 2s\n")
	if _, err := loadDeliveryConfig(path); err != nil {
		t.Fatalf("loadDeliveryConfig: %v", err)
	}
	f, err := loadDeliveryFormat(path)
	if err != nil {
		t.Fatalf("loadDeliveryFormat: %v", err)
	}
	r := f.Registry
	if f.AlertsFormat != config.FormatAvro || r.URL != "http://registry:8081" || r.Username != "deliver" || r.Password.Reveal() != password ||
		r.Timeout != 2*time.Second || r.NotFoundTTL != config.Default().Registry.NotFoundTTL {
		t.Errorf("format %+v", f)
	}
	out, err := deliverCheck(t, path)
	if err != nil {
		t.Fatalf("--check: %v\n%s", err, out)
	}
	if !strings.Contains(out, "alerts: avro") || !strings.Contains(out, "schema registry http://registry:8081") {
		t.Errorf("--check does not say alerts are Avro from http://registry:8081:\n%s", out)
	}
	if strings.Contains(out, password) {
		t.Errorf("--check printed the registry password:\n%s", out)
	}

	// The password from the environment, as the processor takes it.
	t.Setenv("PROCESSOR_REGISTRY_PASSWORD", "from-env-do-not-print")
	f, err = loadDeliveryFormat(path)
	if err != nil || f.Registry.Password.Reveal() != "from-env-do-not-print" {
		t.Errorf("PROCESSOR_REGISTRY_PASSWORD: %v, password overridden: %v", err, f.Registry.Password.Reveal() == "from-env-do-not-print")
	}
	if out, _ := deliverCheck(t, path); strings.Contains(out, "from-env-do-not-print") {
		t.Errorf("--check printed the registry password from the environment:\n%s", out)
	}
}

// JSON stays the default, and --check says so.
func TestDeliverJSONAlertsByDefault(t *testing.T) {
	path := deliverYAML(t, "")
	f, err := loadDeliveryFormat(path)
	if err != nil || f.AlertsFormat != config.FormatJSON {
		t.Fatalf("format %+v, err %v", f, err)
	}
	if out, err := deliverCheck(t, path); err != nil || !strings.Contains(out, "alerts: json") {
		t.Errorf("--check: %v\n%s", err, out)
	}
}

// alerts_format avro without registry.url, and bad registry values, are
// configuration errors (exit code 2) naming the key and what is valid;
// PROCESSOR_REGISTRY_URL supplies the URL as the processor's override does.
func TestDeliverRefusesAvroWithoutRegistry(t *testing.T) {
	noURL := deliverYAML(t, "alerts_format: avro\n")
	_, err := loadDeliveryFormat(noURL)
	if err == nil || !strings.Contains(err.Error(), "alerts_format") || !strings.Contains(err.Error(), "registry.url") ||
		!strings.Contains(err.Error(), "http(s)://host[:port]") {
		t.Errorf("avro without registry.url: %v, want an error naming alerts_format and registry.url with what is valid", err)
	}
	if code := execute([]string{"deliver", "--config", noURL, "--check"}); code != exitUsage {
		t.Errorf("deliver --check with avro and no registry.url: exit code %d, want %d", code, exitUsage)
	}

	for _, c := range []struct{ top, want string }{
		{"alerts_format: avro\nregistry:\n  url: ftp://registry\n", "registry.url"},
		{"alerts_format: avro\nregistry:\n  url: http://registry:8081\n  timeout: 10ms\n", "registry.timeout"},
		{"alerts_format: avro\nregistry:\n  url: http://registry:8081\n  not_found_ttl: 48h\n", "registry.not_found_ttl"},
		{"alerts_format: avro\nregistry:\n  url: http://registry:8081\n  urll: x\n", "urll"},
		{"alerts_format: protobuf\n", "alerts_format"},
	} {
		if _, err := loadDeliveryFormat(deliverYAML(t, c.top)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error naming %s", c.top, err, c.want)
		}
	}

	t.Setenv("PROCESSOR_REGISTRY_URL", "http://registry-from-env:8081")
	f, err := loadDeliveryFormat(noURL)
	if err != nil || f.Registry.URL != "http://registry-from-env:8081" {
		t.Errorf("PROCESSOR_REGISTRY_URL: %+v, %v", f, err)
	}
}
