package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vibeline/processor/internal/kafkasec"
)

// The kafka: section loads from the file and the environment, the password
// from PROCESSOR_KAFKA_SASL_PASSWORD, and the loaded config never prints it.
func TestKafkaSecurityKeys(t *testing.T) {
	const password = "env-Pa55word-that-must-not-print"
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte("kafka:\n  sasl:\n    mechanism: SCRAM-SHA-512\n    username: processor\n  tls:\n    enabled: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PROCESSOR_KAFKA_SASL_PASSWORD", password)
	t.Setenv("PROCESSOR_KAFKA_TLS_SERVER_NAME", "kafka.internal")
	c, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := kafkasec.Config{
		TLS:  kafkasec.TLS{Enabled: true, ServerName: "kafka.internal"},
		SASL: kafkasec.SASL{Mechanism: kafkasec.ScramSHA512, Username: "processor", Password: password},
	}
	if c.Kafka != want {
		t.Fatalf("kafka = %+v, want %+v", c.Kafka, want)
	}
	if c.Kafka.SASL.Password.Reveal() != password {
		t.Fatal("password not loaded from PROCESSOR_KAFKA_SASL_PASSWORD")
	}
	if s := fmt.Sprintf("%+v %v %#v", c, c, c); strings.Contains(s, password) {
		t.Fatalf("the password prints: %s", s)
	}
	for _, k := range []string{"kafka.tls.enabled", "kafka.tls.ca_file", "kafka.tls.cert_file", "kafka.tls.key_file",
		"kafka.tls.server_name", "kafka.tls.insecure_skip_verify", "kafka.sasl.mechanism", "kafka.sasl.username",
		"kafka.sasl.password", "kafka.sasl.password_file"} {
		if _, ok := Keys()[k]; !ok {
			t.Errorf("key %s missing from Keys()", k)
		}
	}
}

func TestKafkaSecurityInvalid(t *testing.T) {
	const password = "file-Pa55word-that-must-not-print"
	cases := []struct {
		yaml string
		want []string
	}{
		{"kafka:\n  sasl:\n    mechanism: SCRAM-SHA-1\n    username: u\n    password: " + password + "\n",
			[]string{`config: kafka.sasl.mechanism = "SCRAM-SHA-1" is invalid`, `"SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"`}},
		{"kafka:\n  sasl:\n    mechanism: PLAIN\n    password: " + password + "\n",
			[]string{`config: kafka.sasl.username = ""`}},
		{"kafka:\n  tls:\n    enabled: true\n    ca_file: /nonexistent/ca.pem\n",
			[]string{`config: kafka.tls.ca_file = "/nonexistent/ca.pem" is invalid`}},
		{"kafka:\n  tls:\n    enable: true\n", []string{"enable"}},
		{"mode: fast\nkafka:\n  sasl:\n    username: u\n", []string{`config: mode = "fast"`, `config: kafka.sasl.mechanism = ""`}},
	}
	for _, c := range cases {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path, nil)
		if err == nil {
			t.Errorf("%q: no error", c.yaml)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not mention %q", c.yaml, err, w)
			}
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("%q: the error holds the password: %v", c.yaml, err)
		}
	}
}

// Every kafka.* key is in the README's configuration table and in
// configs/processor.yaml.
func TestKafkaKeysDocumented(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join("..", "..", "configs", "processor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for k := range Keys() {
		if !strings.HasPrefix(k, "kafka.") {
			continue
		}
		if !strings.Contains(string(readme), "| `"+k+"` |") {
			t.Errorf("README.md: no row for %s in the configuration table", k)
		}
		leaf := k[strings.LastIndexByte(k, '.')+1:]
		if !strings.Contains(string(shipped), leaf+":") {
			t.Errorf("configs/processor.yaml: no %s", k)
		}
	}
}
