package deliver

import (
	"strings"
	"testing"
	"time"
)

func validConfig() Config {
	c := Default()
	c.Sinks = []SinkConfig{
		{Type: TypeWebhook, Name: "hook", URL: "https://hooks.example.com/alerts", SecretEnv: "HOOK_SECRET"},
		{Type: TypeAlertmanager, Name: "am", URL: "http://alertmanager:9093", Labels: map[string]string{"team": "maintenance"}},
	}
	c.EnsureDefaults()
	return c
}

func TestDefaultsAreValid(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Sinks[0].Timeout != DefaultSinkTimeout {
		t.Errorf("sink timeout default %s", c.Sinks[0].Timeout)
	}
	if c.GroupID != "vibration-delivery" || c.Topics.DLQ != "vibration.alerts.delivery-dlq" || c.Topics.Alerts != "vibration.alerts" {
		t.Errorf("defaults: %+v", c)
	}
	if err := Default().Validate(); err == nil || !strings.Contains(err.Error(), "delivery.sinks") {
		t.Errorf("no sinks: %v, want an error naming delivery.sinks", err)
	}
}

// Every invalid value is reported with its key, its value and what is valid.
func TestValidateNamesKeyValueAndValid(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Config)
		want   []string
	}{
		{func(c *Config) { c.Brokers = []string{"kafka"} }, []string{`delivery.brokers = "kafka"`, "host:port"}},
		{func(c *Config) { c.GroupID = "bad group" }, []string{`delivery.group_id = "bad group"`, "[a-zA-Z0-9._-]"}},
		{func(c *Config) { c.Topics.DLQ = c.Topics.Alerts }, []string{`delivery.topics.dlq = "vibration.alerts"`, "distinct"}},
		{func(c *Config) { c.Topics.Alerts = "a/b" }, []string{`delivery.topics.alerts = "a/b"`, "topic name"}},
		{func(c *Config) { c.StartFrom = "now" }, []string{`delivery.start_from = "now"`, `"earliest", "latest"`}},
		{func(c *Config) { c.Sinks[0].Type = "smtp" }, []string{`delivery.sinks[0].type = "smtp"`, `"webhook", "alertmanager"`}},
		{func(c *Config) { c.Sinks[1].Name = "hook" }, []string{`delivery.sinks[1].name = "hook"`, "distinct from delivery.sinks[0].name"}},
		{func(c *Config) { c.Sinks[0].URL = "ftp://x/y" }, []string{`delivery.sinks[0].url = "ftp://x/y"`, "http:// or https://"}},
		{func(c *Config) { c.Sinks[0].URL = "/relative" }, []string{`delivery.sinks[0].url = "/relative"`}},
		{func(c *Config) { c.Sinks[0].Timeout = 10 * time.Minute }, []string{"delivery.sinks[0].timeout = 10m0s", "1ms to 5m"}},
		{func(c *Config) { c.Sinks[0].SecretFile = "/run/secret" }, []string{`delivery.sinks[0].secret_file = "/run/secret"`, "one secret source"}},
		{func(c *Config) { c.Sinks[1].SecretEnv = "X" }, []string{`delivery.sinks[1].secret_env = "X"`, "only webhook"}},
		{func(c *Config) { c.Sinks[0].Labels = map[string]string{"a": "b"} }, []string{"delivery.sinks[0].labels", "alertmanager sinks only"}},
		{func(c *Config) { c.Sinks[1].Labels = map[string]string{"alertname": "x"} }, []string{`delivery.sinks[1].labels = "alertname"`, "built-in"}},
		{func(c *Config) { c.Sinks[1].Labels = map[string]string{"1bad": "x"} }, []string{`delivery.sinks[1].labels = "1bad"`, "label name"}},
		{func(c *Config) { c.Sinks[1].ResolveTimeout = time.Second }, []string{"delivery.sinks[1].resolve_timeout = 1s", "1m to 720h"}},
		{func(c *Config) { c.Sinks[0].ResolveTimeout = time.Hour }, []string{"delivery.sinks[0].resolve_timeout = 1h0m0s", "alertmanager sinks only"}},
		{func(c *Config) { c.Retry.Initial = 0 }, []string{"delivery.retry.initial = 0s", "1ms to 1h"}},
		{func(c *Config) { c.Retry.Max = 100 * time.Millisecond }, []string{"delivery.retry.max = 100ms", "from retry.initial (500ms)"}},
		{func(c *Config) { c.Retry.MaxAttempts = 0 }, []string{"delivery.retry.max_attempts = 0", "1 to 1000000"}},
		{func(c *Config) { c.Retry.MaxElapsed = -time.Second }, []string{"delivery.retry.max_elapsed = -1s"}},
		{func(c *Config) { c.Breaker.Failures = 11 }, []string{"delivery.breaker.failures = 11", "retry.max_attempts (10)", "before an alert can exhaust"}},
		{func(c *Config) { c.Breaker.Cooldown = 0 }, []string{"delivery.breaker.cooldown = 0s"}},
		{func(c *Config) { c.CommitInterval = time.Millisecond }, []string{"delivery.commit_interval = 1ms", "10ms to 1m"}},
		{func(c *Config) { c.MaxBuffered = 0 }, []string{"delivery.max_buffered = 0"}},
		{func(c *Config) { c.SessionTimeout = 0 }, []string{"delivery.session_timeout = 0s"}},
		{func(c *Config) { c.StartupTimeout = time.Hour }, []string{"delivery.startup_timeout = 1h0m0s"}},
		{func(c *Config) { c.ReplicationFactor = 0 }, []string{"delivery.replication_factor = 0"}},
		{func(c *Config) { c.MetricsAddr = "9465" }, []string{`delivery.metrics_addr = "9465"`, "host:port"}},
		{func(c *Config) { c.InstanceID = "a b" }, []string{`delivery.instance_id = "a b"`}},
	} {
		c := validConfig()
		tc.mutate(&c)
		err := c.Validate()
		if err == nil {
			t.Errorf("%v: no error", tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not contain %q", err, w)
			}
		}
	}
}

// An outage must open the breaker before any alert exhausts its retries:
// max_elapsed must cover breaker.failures-1 slow attempts and their backoff.
func TestValidateMaxElapsedCoversTheBreaker(t *testing.T) {
	c := validConfig()
	c.Sinks[0].Timeout = 30 * time.Second
	c.Retry = RetryConfig{Initial: time.Second, Max: 10 * time.Second, MaxAttempts: 10, MaxElapsed: time.Minute}
	c.Breaker.Failures = 5
	// 4 x 30s + (1+2+4+8)s = 2m15s
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "delivery.retry.max_elapsed = 1m0s") || !strings.Contains(err.Error(), "at least 2m15s") {
		t.Fatalf("err = %v, want max_elapsed at least 2m15s", err)
	}
	c.Retry.MaxElapsed = 2*time.Minute + 15*time.Second
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Retry.MaxElapsed = 0 // no time bound
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
