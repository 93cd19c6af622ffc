package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestShippedConfigIsTheDefault(t *testing.T) {
	got, err := Load(filepath.Join("..", "..", "configs", "processor.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	got.InstanceID = want.InstanceID
	if !equal(got, want) {
		t.Fatalf("configs/processor.yaml differs from Default():\n got  %+v\n want %+v", got, want)
	}
}

func equal(a, b Config) bool { return reflect.DeepEqual(a, b) }

func TestPrecedenceFileEnvFlag(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte("group_id: from-file\nrule:\n  threshold: 5\n  window: 90s\ncommit_interval: 50ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PROCESSOR_RULE_THRESHOLD", "6")
	t.Setenv("PROCESSOR_BROKERS", "a:1,b:2")
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("commit_interval", "100ms", "")
	fs.String("group_id", "g", "")
	if err := fs.Parse([]string{"--commit_interval=7ms"}); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, fs)
	if err != nil {
		t.Fatal(err)
	}
	if c.GroupID != "from-file" { // flag not set: the file wins over the flag default
		t.Errorf("group_id = %q, want from-file", c.GroupID)
	}
	if c.Rule.Threshold != 6 {
		t.Errorf("threshold = %d, want 6 (env over file)", c.Rule.Threshold)
	}
	if c.Rule.Window != 90*time.Second {
		t.Errorf("window = %s, want 90s", c.Rule.Window)
	}
	if c.CommitInterval != 7*time.Millisecond {
		t.Errorf("commit_interval = %s, want 7ms (flag over file)", c.CommitInterval)
	}
	if strings.Join(c.Brokers, ",") != "a:1,b:2" {
		t.Errorf("brokers = %v", c.Brokers)
	}
}

func TestInvalidConfigNamesKeyValueAndValid(t *testing.T) {
	cases := []struct {
		yaml string
		want []string
	}{
		{"mode: fast\n", []string{"mode", `"fast"`, "exactly_once", "at_least_once"}},
		{"rule:\n  threshold: 0\n", []string{"rule.threshold", "0", "1 to 1000"}},
		{"rule:\n  dedup_horizon: 5m\n", []string{"rule.dedup_horizon", "5m0s", "greater than"}},
		{"topics:\n  alerts: vibration.events\n", []string{"topics.alerts", "distinct"}},
		{"brokers: [nohost]\n", []string{"brokers", "host:port"}},
		{"rule:\n  treshold: 3\n", []string{"treshold"}},
		{"commit_interval: soon\n", []string{"commit_interval"}},
		{"rule:\n  quality: great\n", []string{"rule.quality", `"great"`, "good"}},
		{"rule:\n  min_value: .nan\n", []string{"rule.min_value", "NaN", "finite"}},
		{"rule:\n  min_value: .inf\n", []string{"rule.min_value", "finite"}},
		{"rule:\n  max_future_skew: 0s\n", []string{"rule.max_future_skew", "1ms to 720h"}},
		{"commit_interval: soon\n", []string{"commit_interval", `"soon"`, "such as 100ms"}},
		{"rule:\n  window: 120\n", []string{"rule.window", "120", "with a unit"}},
		{"rules_file: /nonexistent/rules.yaml\n", []string{"rules_file", "/nonexistent/rules.yaml"}},
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
	}
}

func TestDerivedNames(t *testing.T) {
	c := Default()
	c.InstanceID = "p-1"
	if got := c.ChangelogTopic(); got != "vibration-processor.vibration-high.v1.changelog" {
		t.Errorf("changelog = %q", got)
	}
	c.Rule.Version = 2
	if got := c.ChangelogTopic(); !strings.Contains(got, ".v2.") {
		t.Errorf("a new rule version must get a new changelog, got %q", got)
	}
	if got := c.TransactionalID(); got != "vibration-processor.p-1" {
		t.Errorf("transactional id = %q", got)
	}
}
