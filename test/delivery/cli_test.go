package delivery

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs the built binary with args and env, and returns its exit
// code, stdout and stderr.
func runCLI(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(processorBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "processor.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDeliverConfig: `processor deliver` reads the delivery: section of
// --config over its defaults, inherits the processor's brokers and
// topics.alerts, applies PROCESSOR_DELIVERY_* overrides, and exits 2 with
// a message naming key, value and what is valid on bad configuration.
func TestDeliverConfig(t *testing.T) {
	good := writeFile(t, `brokers: [10.0.0.1:9092, 10.0.0.2:9092]
topics:
  input: vibration.events
  alerts: plant.alerts
rule:
  threshold: 3
delivery:
  retry: {max_attempts: 7}
  sinks:
    - {type: webhook, name: hook, url: "https://hooks.example.com/a", secret_env: CLI_TEST_SECRET}
    - type: alertmanager
      name: am
      url: http://alertmanager:9093
      labels: {team: maintenance}
`)
	code, out, errs := runCLI(t, []string{"CLI_TEST_SECRET=do-not-print", "PROCESSOR_DELIVERY_GROUP_ID=from-env"}, "deliver", "--config", good, "--check")
	if code != 0 {
		t.Fatalf("--check: exit %d: %s", code, errs)
	}
	for _, want := range []string{"Brokers:[10.0.0.1:9092 10.0.0.2:9092]", "Alerts:plant.alerts", "DLQ:vibration.alerts.delivery-dlq",
		"GroupID:from-env", "MaxAttempts:7", "Failures:5", "Timeout:10s", "Labels:map[team:maintenance]"} {
		if !strings.Contains(out, want) {
			t.Errorf("--check output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+errs, "do-not-print") {
		t.Error("the webhook secret was printed")
	}

	for _, tc := range []struct {
		name, file string
		env        []string
		want       []string
	}{
		{"no sinks", "brokers: [127.0.0.1:9092]\n", nil, []string{"delivery.sinks = [] is invalid: at least one sink"}},
		{"unknown keys", "delivery:\n  retyr: {}\n  sinks:\n    - {type: webhook, name: a, url: http://x/, bogus: 1}\n", nil,
			[]string{"delivery has invalid keys: retyr", "delivery.sinks[0] has invalid keys: bogus"}},
		{"bad values", "delivery:\n  start_from: now\n  breaker: {failures: 50}\n  sinks:\n    - {type: smtp, name: a, url: ftp://x}\n", nil, []string{
			`delivery.start_from = "now" is invalid: one of "earliest", "latest"`,
			`delivery.sinks[0].type = "smtp" is invalid`,
			`delivery.sinks[0].url = "ftp://x" is invalid: an absolute http:// or https:// URL`,
			"delivery.breaker.failures = 50 is invalid: an integer from 1 to retry.max_attempts (10)",
		}},
		{"bad env", "delivery:\n  sinks:\n    - {type: webhook, name: a, url: http://x/}\n", []string{"PROCESSOR_DELIVERY_RETRY_MAX_ATTEMPTS=0"},
			[]string{"delivery.retry.max_attempts = 0 is invalid"}},
		{"missing secret", "delivery:\n  sinks:\n    - {type: webhook, name: a, url: http://x/, secret_env: CLI_TEST_UNSET}\n", nil,
			[]string{"delivery.sinks[0] (a): secret_env: environment variable CLI_TEST_UNSET is unset or empty"}},
	} {
		code, _, errs := runCLI(t, tc.env, "deliver", "--config", writeFile(t, tc.file))
		if code != 2 {
			t.Errorf("%s: exit %d, want 2 (%s)", tc.name, code, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(errs, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", tc.name, w, errs)
			}
		}
	}
}
