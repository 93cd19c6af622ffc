package deliver

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Sink types.
const (
	// TypeWebhook POSTs the alert JSON as is to a URL.
	TypeWebhook = "webhook"
	// TypeAlertmanager POSTs to Prometheus Alertmanager's /api/v2/alerts.
	TypeAlertmanager = "alertmanager"
)

// Where a new consumer group starts (Config.StartFrom).
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// Config is the `delivery:` section of the configuration file. Every
// field's default is in Default; EnsureDefaults fills per-sink defaults and
// Validate names the key, the value and what is valid for every problem.
type Config struct {
	// Brokers are the Kafka seed brokers (host:port). Default: the
	// processor's top-level `brokers` when the file sets it, else
	// ["127.0.0.1:9092"]. Key: delivery.brokers.
	Brokers []string `mapstructure:"brokers"`
	// GroupID is the delivery consumer group (distinct from the
	// processor's). Default "vibration-delivery".
	GroupID string `mapstructure:"group_id"`
	// InstanceID, when set, makes the member static (KIP-345): a restarted
	// delivery process with the same id takes its partitions back without
	// waiting for SessionTimeout. It must then be stable and unique per
	// process. Default "" (dynamic membership).
	InstanceID string `mapstructure:"instance_id"`
	// Topics are the topics read and written.
	Topics Topics `mapstructure:"topics"`
	// StartFrom is where a group without committed offsets starts:
	// "earliest" (every retained alert is delivered; the default) or
	// "latest" (only alerts written after the group first joined).
	StartFrom string `mapstructure:"start_from"`
	// Sinks are the receivers; every alert revision goes to each of them.
	// At least one is required.
	Sinks []SinkConfig `mapstructure:"sinks"`
	// Retry bounds the retries of one revision to one sink.
	Retry RetryConfig `mapstructure:"retry"`
	// Breaker configures the circuit breaker of each sink.
	Breaker BreakerConfig `mapstructure:"breaker"`
	// CommitInterval is how often finished offsets are committed (and how
	// long one poll waits). Default 1s. Range 10ms..1m.
	CommitInterval time.Duration `mapstructure:"commit_interval"`
	// MaxBuffered is how many records of one partition are held in memory
	// ahead of its slowest sink before fetching that partition pauses.
	// Default 1000. Range 1..1000000.
	MaxBuffered int `mapstructure:"max_buffered"`
	// SessionTimeout is the consumer group session timeout. Default 10s.
	// Range 1s..5m.
	SessionTimeout time.Duration `mapstructure:"session_timeout"`
	// StartupTimeout bounds how long start-up waits for Kafka and the
	// alerts topic. Default 30s. Range 1s..10m.
	StartupTimeout time.Duration `mapstructure:"startup_timeout"`
	// CreateTopics creates the delivery DLQ topic when missing (with the
	// alerts topic's partition count). Default true.
	CreateTopics bool `mapstructure:"create_topics"`
	// ReplicationFactor of a created DLQ topic; -1 is the broker default.
	// Default -1. Range -1 or 1..32.
	ReplicationFactor int `mapstructure:"replication_factor"`
	// MetricsAddr is the listen address of /metrics, /healthz and /readyz;
	// empty disables the server. Default "" (off).
	MetricsAddr string `mapstructure:"metrics_addr"`
}

// Topics names the topics of the delivery stage.
type Topics struct {
	// Alerts is the topic of alert revisions (read). Default: the
	// processor's top-level `topics.alerts` when the file sets it, else
	// "vibration.alerts".
	Alerts string `mapstructure:"alerts"`
	// DLQ receives revisions a sink rejected permanently or that exhausted
	// their retries. Default "vibration.alerts.delivery-dlq".
	DLQ string `mapstructure:"dlq"`
}

// SinkConfig is one receiver.
// Redacted returns c with any password in the sinks' URLs replaced by
// "xxxxx" (url.URL.Redacted), for printing.
func (c Config) Redacted() Config {
	c.Sinks = slices.Clone(c.Sinks)
	for i := range c.Sinks {
		c.Sinks[i].URL = RedactURL(c.Sinks[i].URL)
	}
	return c
}

// RedactURL returns u with its password, if any, replaced by "xxxxx"; u
// itself when it does not parse.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return u
	}
	return p.Redacted()
}

type SinkConfig struct {
	// Type is "webhook" or "alertmanager". Required.
	Type string `mapstructure:"type"`
	// Name identifies the sink in metrics, logs and the DLQ header
	// delivery.sink; unique. Required. 1-64 characters of [a-zA-Z0-9._-].
	Name string `mapstructure:"name"`
	// URL is the webhook's URL, or Alertmanager's base URL (the sink POSTs
	// to <url>/api/v2/alerts). http or https. Required.
	URL string `mapstructure:"url"`
	// Timeout bounds one HTTP request (connect to response headers and
	// body). Default 10s. Range 1ms..5m.
	Timeout time.Duration `mapstructure:"timeout"`
	// SecretEnv names an environment variable holding the HMAC secret of a
	// webhook; SecretFile a file holding it (a trailing newline is
	// stripped). At most one; none sends no signature. Webhooks only.
	SecretEnv  string `mapstructure:"secret_env"`
	SecretFile string `mapstructure:"secret_file"`
	// Labels are extra static labels added to every Alertmanager alert
	// (for routing, e.g. team: maintenance). They cannot replace the
	// built-in labels. Alertmanager only. Default none.
	Labels map[string]string `mapstructure:"labels"`
	// ResolveTimeout, for Alertmanager, sets endsAt = delivery time +
	// ResolveTimeout on open and updated revisions; 0 (the default) sends
	// no endsAt, so Alertmanager's own resolve_timeout (5m by default)
	// applies. Range 0 or 1m..720h.
	ResolveTimeout time.Duration `mapstructure:"resolve_timeout"`
}

// RetryConfig bounds retries of one revision to one sink: exponential
// backoff with full jitter (retry n waits a uniformly random duration in
// [0, min(Max, Initial*2^(n-1))]), at most MaxAttempts attempts and
// MaxElapsed of attempting and waiting, then the revision is dead-lettered
// for that sink. Failures while the sink's breaker is open or half-open, and
// the failure that opens it, do not count (see the package documentation).
type RetryConfig struct {
	// Initial is the backoff ceiling of the first retry. Default 500ms.
	// Range 1ms..1h.
	Initial time.Duration `mapstructure:"initial"`
	// Max caps the backoff ceiling. Default 30s. Range Initial..24h.
	Max time.Duration `mapstructure:"max"`
	// MaxAttempts is the number of counted attempts after which a
	// transiently failing revision is dead-lettered. Default 10.
	// Range breaker.failures..1000000.
	MaxAttempts int `mapstructure:"max_attempts"`
	// MaxElapsed bounds the counted time (attempts and backoff) spent on
	// one revision; 0 means no time bound. Default 10m. Range 0 or >= Initial.
	MaxElapsed time.Duration `mapstructure:"max_elapsed"`
}

// BreakerConfig configures each sink's circuit breaker: closed, open after
// Failures consecutive transient failures (across all partitions), one
// half-open probe after Cooldown, closed again on success.
type BreakerConfig struct {
	// Failures is K, the consecutive transient failures that open the
	// breaker. Default 5. Range 1..retry.max_attempts.
	Failures int `mapstructure:"failures"`
	// Cooldown is how long the breaker stays open before a probe. Default
	// 30s. Range 1ms..1h.
	Cooldown time.Duration `mapstructure:"cooldown"`
}

// DefaultSinkTimeout is SinkConfig.Timeout when not set.
const DefaultSinkTimeout = 10 * time.Second

// Default returns the configuration with every default filled in (and no
// sinks: they have no defaults).
func Default() Config {
	return Config{
		Brokers:   []string{"127.0.0.1:9092"},
		GroupID:   "vibration-delivery",
		Topics:    Topics{Alerts: "vibration.alerts", DLQ: "vibration.alerts.delivery-dlq"},
		StartFrom: StartEarliest,
		Retry: RetryConfig{
			Initial:     500 * time.Millisecond,
			Max:         30 * time.Second,
			MaxAttempts: 10,
			MaxElapsed:  10 * time.Minute,
		},
		Breaker:           BreakerConfig{Failures: 5, Cooldown: 30 * time.Second},
		CommitInterval:    time.Second,
		MaxBuffered:       1000,
		SessionTimeout:    10 * time.Second,
		StartupTimeout:    30 * time.Second,
		CreateTopics:      true,
		ReplicationFactor: -1,
	}
}

// EnsureDefaults fills the per-sink defaults (list entries have none of
// their own in the file): Timeout 0 becomes DefaultSinkTimeout.
func (c *Config) EnsureDefaults() {
	for i := range c.Sinks {
		if c.Sinks[i].Timeout == 0 {
			c.Sinks[i].Timeout = DefaultSinkTimeout
		}
	}
}

var (
	topicRe     = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)
	idRe        = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,200}$`)
	sinkNameRe  = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,64}$`)
	labelNameRe = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// builtinLabels are the Alertmanager labels the sink always sets.
var builtinLabels = []string{"alertname", "rule_version", "machine_id", "alert_id"}

// Validate checks every field and returns all problems at once, each naming
// the key (delivery.*), the value and what would be valid.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, val any, valid string) {
		errs = append(errs, fmt.Errorf("deliver: delivery.%s = %s is invalid: %s", key, quote(val), valid))
	}
	if len(c.Brokers) == 0 {
		bad("brokers", c.Brokers, "at least one host:port")
	}
	for _, b := range c.Brokers {
		if i := strings.LastIndexByte(b, ':'); i <= 0 || i == len(b)-1 {
			bad("brokers", b, "host:port, for example 127.0.0.1:9092")
		}
	}
	if !idRe.MatchString(c.GroupID) {
		bad("group_id", c.GroupID, "1-200 characters of [a-zA-Z0-9._-]")
	}
	if c.InstanceID != "" && !idRe.MatchString(c.InstanceID) {
		bad("instance_id", c.InstanceID, `"" (dynamic membership) or 1-200 characters of [a-zA-Z0-9._-]`)
	}
	for _, t := range []struct{ key, val string }{{"topics.alerts", c.Topics.Alerts}, {"topics.dlq", c.Topics.DLQ}} {
		if !topicRe.MatchString(t.val) || t.val == "." || t.val == ".." {
			bad(t.key, t.val, "a Kafka topic name: 1-249 characters of [a-zA-Z0-9._-]")
		}
	}
	if c.Topics.DLQ == c.Topics.Alerts {
		bad("topics.dlq", c.Topics.DLQ, "a topic distinct from delivery.topics.alerts")
	}
	if c.StartFrom != StartEarliest && c.StartFrom != StartLatest {
		bad("start_from", c.StartFrom, `one of "earliest", "latest"`)
	}
	if len(c.Sinks) == 0 {
		bad("sinks", []string{}, "at least one sink: a list of {type: webhook|alertmanager, name, url, ...}")
	}
	names := map[string]int{}
	for i, s := range c.Sinks {
		key := func(k string) string { return fmt.Sprintf("sinks[%d].%s", i, k) }
		switch s.Type {
		case TypeWebhook, TypeAlertmanager:
		default:
			bad(key("type"), s.Type, `one of "webhook", "alertmanager"`)
		}
		if !sinkNameRe.MatchString(s.Name) {
			bad(key("name"), s.Name, "1-64 characters of [a-zA-Z0-9._-]")
		} else if j, dup := names[s.Name]; dup {
			bad(key("name"), s.Name, fmt.Sprintf("a name distinct from delivery.sinks[%d].name", j))
		}
		names[s.Name] = i
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(key("url"), s.URL, "an absolute http:// or https:// URL")
		}
		if s.Timeout < time.Millisecond || s.Timeout > 5*time.Minute {
			bad(key("timeout"), s.Timeout, "a duration from 1ms to 5m")
		}
		if s.SecretEnv != "" && s.SecretFile != "" {
			bad(key("secret_file"), s.SecretFile, "empty when secret_env is set (one secret source)")
		}
		if s.Type != TypeWebhook && (s.SecretEnv != "" || s.SecretFile != "") {
			bad(key("secret_env"), s.SecretEnv+s.SecretFile, "empty: only webhook sinks are signed")
		}
		if s.Type != TypeAlertmanager && len(s.Labels) > 0 {
			bad(key("labels"), fmt.Sprint(s.Labels), "empty: labels apply to alertmanager sinks only")
		}
		for name := range s.Labels {
			if !labelNameRe.MatchString(name) {
				bad(key("labels"), name, "a Prometheus label name: [a-zA-Z_][a-zA-Z0-9_]*")
			}
			for _, b := range builtinLabels {
				if strings.EqualFold(name, b) {
					bad(key("labels"), name, "a label other than the built-in alertname, rule_version, machine_id, alert_id")
				}
			}
		}
		if s.Type != TypeAlertmanager && s.ResolveTimeout != 0 {
			bad(key("resolve_timeout"), s.ResolveTimeout, "0: resolve_timeout applies to alertmanager sinks only")
		}
		if s.ResolveTimeout != 0 && (s.ResolveTimeout < time.Minute || s.ResolveTimeout > 720*time.Hour) {
			bad(key("resolve_timeout"), s.ResolveTimeout, "0 (Alertmanager's own resolve_timeout) or a duration from 1m to 720h")
		}
	}
	r := c.Retry
	if r.Initial < time.Millisecond || r.Initial > time.Hour {
		bad("retry.initial", r.Initial, "a duration from 1ms to 1h")
	}
	if r.Max < r.Initial || r.Max > 24*time.Hour {
		bad("retry.max", r.Max, fmt.Sprintf("a duration from retry.initial (%s) to 24h", r.Initial))
	}
	if r.MaxAttempts < 1 || r.MaxAttempts > 1_000_000 {
		bad("retry.max_attempts", r.MaxAttempts, "an integer from 1 to 1000000")
	}
	if r.MaxElapsed != 0 && (r.MaxElapsed < r.Initial || r.MaxElapsed > 30*24*time.Hour) {
		bad("retry.max_elapsed", r.MaxElapsed, fmt.Sprintf("0 (no time bound) or a duration from retry.initial (%s) to 720h", r.Initial))
	}
	b := c.Breaker
	if b.Failures < 1 || b.Failures > max(1, r.MaxAttempts) {
		bad("breaker.failures", b.Failures, fmt.Sprintf("an integer from 1 to retry.max_attempts (%d), so that an outage opens the breaker before an alert can exhaust its retries", r.MaxAttempts))
	}
	if r.MaxElapsed != 0 && b.Failures >= 1 && r.Initial > 0 {
		var slowest time.Duration
		for _, s := range c.Sinks {
			slowest = max(slowest, s.Timeout)
		}
		if need := outageBudget(r, b.Failures, slowest); r.MaxElapsed < need {
			bad("retry.max_elapsed", r.MaxElapsed, fmt.Sprintf("0 (no time bound) or at least %s (breaker.failures-1 attempts at the slowest sink timeout plus their backoff), so that an outage opens the breaker before an alert can exhaust its retries", need))
		}
	}
	if b.Cooldown < time.Millisecond || b.Cooldown > time.Hour {
		bad("breaker.cooldown", b.Cooldown, "a duration from 1ms to 1h")
	}
	if c.CommitInterval < 10*time.Millisecond || c.CommitInterval > time.Minute {
		bad("commit_interval", c.CommitInterval, "a duration from 10ms to 1m")
	}
	if c.MaxBuffered < 1 || c.MaxBuffered > 1_000_000 {
		bad("max_buffered", c.MaxBuffered, "an integer from 1 to 1000000")
	}
	if c.SessionTimeout < time.Second || c.SessionTimeout > 5*time.Minute {
		bad("session_timeout", c.SessionTimeout, "a duration from 1s to 5m")
	}
	if c.StartupTimeout < time.Second || c.StartupTimeout > 10*time.Minute {
		bad("startup_timeout", c.StartupTimeout, "a duration from 1s to 10m")
	}
	if c.ReplicationFactor == 0 || c.ReplicationFactor < -1 || c.ReplicationFactor > 32 {
		bad("replication_factor", c.ReplicationFactor, "-1 (broker default) or 1..32")
	}
	if c.MetricsAddr != "" {
		if i := strings.LastIndexByte(c.MetricsAddr, ':'); i < 0 || i == len(c.MetricsAddr)-1 {
			bad("metrics_addr", c.MetricsAddr, `"" (off) or host:port, for example :9465`)
		}
	}
	return errors.Join(errs...)
}

// outageBudget is the counted time a revision can spend before its sink's
// breaker opens when every attempt fails slowly: failures-1 counted attempts
// of timeout each, plus the largest backoff after each of them.
func outageBudget(r RetryConfig, failures int, timeout time.Duration) time.Duration {
	var d time.Duration
	for n := 1; n < failures; n++ {
		d += timeout + r.ceiling(n)
	}
	return d
}

func quote(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case []string:
		return fmt.Sprintf("%q", x)
	default:
		return fmt.Sprint(x)
	}
}
