package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/vibeline/processor/internal/kafkasec"
)

// Delivery modes.
const (
	// ExactlyOnce commits input offsets, outputs and changelog writes in one
	// Kafka transaction (the default).
	ExactlyOnce = "exactly_once"
	// AtLeastOnce produces without transactions and commits offsets after
	// the outputs were acknowledged: a crash may repeat outputs.
	AtLeastOnce = "at_least_once"
)

// Config is the whole configuration of one processor instance.
type Config struct {
	// Brokers are the Kafka seed brokers (host:port). Default
	// ["127.0.0.1:9092"]. Key: brokers; env PROCESSOR_BROKERS (comma-separated).
	Brokers []string `mapstructure:"brokers"`
	// GroupID is the consumer group shared by all replicas. Default
	// "vibration-processor".
	GroupID string `mapstructure:"group_id"`
	// InstanceID names this replica. It must be stable across restarts of
	// the same replica (a pod ordinal, a host name): the transactional ID is
	// derived from it so that a restarted instance fences its previous
	// incarnation. Default: the host name.
	InstanceID string `mapstructure:"instance_id"`
	// StateDir is the directory of the local Pebble store. Default
	// "./data/state". Deleting it is safe: state is restored from the
	// changelog.
	StateDir string `mapstructure:"state_dir"`
	// Mode is exactly_once (default) or at_least_once.
	Mode string `mapstructure:"mode"`
	// CommitInterval is how long one transaction collects records before it
	// commits. Default 100ms. Range 1ms..1m.
	CommitInterval time.Duration `mapstructure:"commit_interval"`
	// MaxPollRecords bounds one poll. Default 5000.
	MaxPollRecords int `mapstructure:"max_poll_records"`
	// TransactionTimeout is the broker-side timeout of one transaction; it
	// bounds how long readers wait for a dead instance's open transaction.
	// Default 10s. Range 1s..15m (must not exceed the broker's
	// transaction.max.timeout.ms).
	TransactionTimeout time.Duration `mapstructure:"transaction_timeout"`
	// SessionTimeout is the consumer group session timeout. Default 10s.
	SessionTimeout time.Duration `mapstructure:"session_timeout"`
	// StartupTimeout bounds how long start-up waits for Kafka before it
	// fails with an error. Default 30s.
	StartupTimeout time.Duration `mapstructure:"startup_timeout"`
	// MetricsAddr is the listen address of /metrics, /healthz and /readyz;
	// empty disables the server. Default "" (off).
	MetricsAddr string `mapstructure:"metrics_addr"`
	// MetricsPprof also serves Go's profiler (net/http/pprof) under
	// /debug/pprof/ on metrics_addr, for profiling a running processor
	// (docs/BENCHMARKS.md). Default false: the endpoints expose heap
	// contents and cost CPU while a profile runs.
	MetricsPprof bool `mapstructure:"metrics_pprof"`
	// LeaveGroupOnShutdown: a clean shutdown (SIGTERM) removes this
	// instance's static membership, so its partitions move at once instead
	// of after session_timeout. Set it to false for rolling restarts that
	// should not rebalance. A crash never leaves. Default true.
	LeaveGroupOnShutdown bool `mapstructure:"leave_group_on_shutdown"`
	// CreateTopics creates missing output and changelog topics at start-up
	// (with the input topic's partition count). Default true.
	CreateTopics bool `mapstructure:"create_topics"`
	// ReplicationFactor of the topics the processor creates; -1 uses the
	// broker default. Default -1.
	ReplicationFactor int `mapstructure:"replication_factor"`
	// Topics are the input and output topics.
	Topics Topics `mapstructure:"topics"`
	// Delivery is the section of `processor deliver` (docs/DELIVERY.md); run
	// ignores it, so one file can configure both. Validated by deliver.
	Delivery map[string]any `mapstructure:"delivery"`
	// RulesFile is a YAML rules file (internal/rules, README "Rules"): when
	// set, its rules run and the rule block and topics.input/alerts/dlq/late
	// are not used (rule.max_future_skew still guards every source). Default
	// "" (the single vibration rule of the rule block).
	RulesFile string `mapstructure:"rules_file"`
	// Rule is the alert rule.
	Rule Rule `mapstructure:"rule"`
	// Kafka is how every Kafka client connects: TLS and SASL (keys
	// kafka.tls.*, kafka.sasl.*; see internal/kafkasec). Default: plaintext,
	// no authentication.
	Kafka kafkasec.Config `mapstructure:"kafka"`
	// Sources sets the value format of source topics (docs/AVRO.md); a
	// source topic not listed is JSON. Default none. Key sources: a list of
	// {topic, format, avro: {schema_file, schema_id, framing}}.
	Sources []Source `mapstructure:"sources"`
	// Registry is the Confluent-compatible schema registry of Avro sources
	// and Avro alerts (keys registry.*). Default: none (url "").
	Registry Registry `mapstructure:"registry"`
	// AlertsFormat is the format of alert revisions: json (default) or avro
	// (schemas/alert.avsc, registered under "<alerts topic>-value"; needs
	// registry.url). Key alerts_format.
	AlertsFormat string `mapstructure:"alerts_format"`
}

// Value formats of sources and alerts.
const (
	FormatJSON = "json"
	FormatAvro = "avro"
)

// Framings of Avro source values.
const (
	// FramingWire is the Confluent wire format: magic byte 0, the 4-byte
	// schema id, the Avro body.
	FramingWire = "wire"
	// FramingBare is an Avro body alone, written with the local schema.
	FramingBare = "bare"
)

// Source is the value format of one source topic.
type Source struct {
	// Topic is a source topic of a rule (topics.input, or a rule's source
	// in rules_file).
	Topic string `mapstructure:"topic"`
	// Format is json (default) or avro.
	Format string `mapstructure:"format"`
	// Avro configures format avro.
	Avro AvroSource `mapstructure:"avro"`
}

// AvroSource is where the writer schemas of an Avro source come from.
type AvroSource struct {
	// SchemaFile is a local writer schema (.avsc) used instead of the
	// registry. Default "" (the registry, registry.url).
	SchemaFile string `mapstructure:"schema_file"`
	// SchemaID, with SchemaFile and framing wire, is the only schema id
	// accepted in headers (others are schema_unknown); 0 accepts any id.
	SchemaID int64 `mapstructure:"schema_id"`
	// Framing is wire (default: the Confluent wire format) or bare (Avro
	// bodies without a header; needs SchemaFile).
	Framing string `mapstructure:"framing"`
}

// Registry is the schema registry client's configuration.
type Registry struct {
	// URL is the base URL of the Confluent-compatible API
	// (http://host:8081; Apicurio 3: http://host:8080/apis/ccompat/v7).
	// Default "" (no registry).
	URL string `mapstructure:"url"`
	// Username enables HTTP basic authentication. Default "".
	Username string `mapstructure:"username"`
	// Password of Username: prefer PROCESSOR_REGISTRY_PASSWORD to the
	// file. Never printed or logged. Default "".
	Password kafkasec.Secret `mapstructure:"password"`
	// Timeout bounds one registry request. Default 5s. Range 100ms..1m.
	Timeout time.Duration `mapstructure:"timeout"`
	// NotFoundTTL is how long "schema id not found" is trusted before the
	// registry is asked again. Default 1m. Range 1s..24h.
	NotFoundTTL time.Duration `mapstructure:"not_found_ttl"`
	// RetryBackoff is the first pause before asking an unavailable registry
	// again; it doubles up to RetryBackoffMax. Default 500ms.
	RetryBackoff time.Duration `mapstructure:"retry_backoff"`
	// RetryBackoffMax caps the pause between retries. Default 30s.
	RetryBackoffMax time.Duration `mapstructure:"retry_backoff_max"`
}

// SourceFormat returns the configuration of topic's format: its Source
// entry, or a JSON source.
func (c Config) SourceFormat(topic string) Source {
	for _, s := range c.Sources {
		if s.Topic == topic {
			return s.normalized()
		}
	}
	return Source{Topic: topic, Format: FormatJSON}
}

// normalized fills the defaults of an entry: format json, framing wire.
func (s Source) normalized() Source {
	if s.Format == "" {
		s.Format = FormatJSON
	}
	if s.Format == FormatAvro && s.Avro.Framing == "" {
		s.Avro.Framing = FramingWire
	}
	return s
}

// UsesAvro reports whether any source or the alerts are Avro.
func (c Config) UsesAvro() bool {
	if c.AlertsFormat == FormatAvro {
		return true
	}
	for _, s := range c.Sources {
		if s.normalized().Format == FormatAvro {
			return true
		}
	}
	return false
}

// Topics names the topics the processor reads and writes.
type Topics struct {
	// Input is the source topic. Default "vibration.events".
	Input string `mapstructure:"input"`
	// Alerts receives alert revisions. Default "vibration.alerts".
	Alerts string `mapstructure:"alerts"`
	// DLQ receives dead letters. Default "vibration.events.dlq".
	DLQ string `mapstructure:"dlq"`
	// Late receives too-late records. Default "vibration.events.late".
	Late string `mapstructure:"late"`
	// Changelog is the compacted state changelog. Default
	// "<group_id>.<rule id>.v<rule version>.changelog".
	Changelog string `mapstructure:"changelog"`
}

// Rule is one keyed, windowed alert rule (the vibration rule by default).
type Rule struct {
	// ID names the rule in alerts and alert ids. Default "vibration-high".
	ID string `mapstructure:"id"`
	// Version is bumped whenever the rule changes. Default 1. Range >= 1.
	Version int `mapstructure:"version"`
	// Threshold is N, the number of events that fire. Default 3. Range 1..1000.
	Threshold int `mapstructure:"threshold"`
	// Window is S, the event-time window size. Default 2m.
	Window time.Duration `mapstructure:"window"`
	// MinValue is the filter's lower bound in mm/s (value >= MinValue). Default 7.1.
	MinValue float64 `mapstructure:"min_value"`
	// Quality is the quality an event must have to qualify; empty accepts
	// every quality. Default "good".
	Quality string `mapstructure:"quality"`
	// WatermarkDelay is D. Default 30s.
	WatermarkDelay time.Duration `mapstructure:"watermark_delay"`
	// AllowedLateness is L. Default 10m.
	AllowedLateness time.Duration `mapstructure:"allowed_lateness"`
	// DedupHorizon is H; must exceed Window + AllowedLateness. Default 1h.
	DedupHorizon time.Duration `mapstructure:"dedup_horizon"`
	// MaxFutureSkew: an event more than this ahead of its record timestamp
	// is dead-lettered as clock_ahead. Default 5m.
	MaxFutureSkew time.Duration `mapstructure:"max_future_skew"`
	// Description is the phrase used in alert reasons. Default
	// "high-vibration events".
	Description string `mapstructure:"description"`
}

// DefaultMaxFutureSkew is rule.max_future_skew's default, SPEC's 5 minutes.
const DefaultMaxFutureSkew = 5 * time.Minute

// Default returns the configuration with every default filled in.
func Default() Config {
	host, _ := os.Hostname()
	if host == "" {
		host = "processor-0"
	}
	return Config{
		Brokers:              []string{"127.0.0.1:9092"},
		GroupID:              "vibration-processor",
		InstanceID:           host,
		StateDir:             "./data/state",
		Mode:                 ExactlyOnce,
		CommitInterval:       100 * time.Millisecond,
		MaxPollRecords:       5000,
		TransactionTimeout:   10 * time.Second,
		SessionTimeout:       10 * time.Second,
		StartupTimeout:       30 * time.Second,
		CreateTopics:         true,
		LeaveGroupOnShutdown: true,
		ReplicationFactor:    -1,
		Topics: Topics{
			Input:  "vibration.events",
			Alerts: "vibration.alerts",
			DLQ:    "vibration.events.dlq",
			Late:   "vibration.events.late",
		},
		Rule: Rule{
			ID:              "vibration-high",
			Version:         1,
			Threshold:       3,
			Window:          2 * time.Minute,
			MinValue:        7.1,
			Quality:         "good",
			WatermarkDelay:  30 * time.Second,
			AllowedLateness: 10 * time.Minute,
			DedupHorizon:    time.Hour,
			MaxFutureSkew:   DefaultMaxFutureSkew,
			Description:     "high-vibration events",
		},
		Kafka: kafkasec.Default(),
		Registry: Registry{
			Timeout:         5 * time.Second,
			NotFoundTTL:     time.Minute,
			RetryBackoff:    500 * time.Millisecond,
			RetryBackoffMax: 30 * time.Second,
		},
		AlertsFormat: FormatJSON,
	}
}

// ChangelogTopic returns the changelog topic name, derived from the group
// and the rule's id and version when not set.
func (c Config) ChangelogTopic() string {
	if c.Topics.Changelog != "" {
		return c.Topics.Changelog
	}
	return fmt.Sprintf("%s.%s.v%d.changelog", c.GroupID, c.Rule.ID, c.Rule.Version)
}

// TransactionalID is the stable transactional ID of this instance.
func (c Config) TransactionalID() string {
	return c.GroupID + "." + c.InstanceID
}

var (
	topicRe = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)
	idRe    = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,200}$`)
)

// Validate checks every field and returns all problems at once, each naming
// the key, the value and what would be valid.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, val any, valid string) {
		errs = append(errs, fmt.Errorf("config: %s = %v is invalid: %s", key, quote(val), valid))
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
	if !idRe.MatchString(c.InstanceID) {
		bad("instance_id", c.InstanceID, "1-200 characters of [a-zA-Z0-9._-], stable across restarts")
	}
	if c.StateDir == "" {
		bad("state_dir", c.StateDir, "a directory path")
	}
	if c.Mode != ExactlyOnce && c.Mode != AtLeastOnce {
		bad("mode", c.Mode, `one of "exactly_once", "at_least_once"`)
	}
	if c.CommitInterval < time.Millisecond || c.CommitInterval > time.Minute {
		bad("commit_interval", c.CommitInterval, "a duration from 1ms to 1m")
	}
	if c.MaxPollRecords < 1 || c.MaxPollRecords > 1_000_000 {
		bad("max_poll_records", c.MaxPollRecords, "an integer from 1 to 1000000")
	}
	if c.TransactionTimeout < time.Second || c.TransactionTimeout > 15*time.Minute {
		bad("transaction_timeout", c.TransactionTimeout, "a duration from 1s to 15m")
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
	topics := map[string]string{
		"topics.input": c.Topics.Input, "topics.alerts": c.Topics.Alerts,
		"topics.dlq": c.Topics.DLQ, "topics.late": c.Topics.Late,
		"topics.changelog": c.ChangelogTopic(),
	}
	seen := map[string]string{}
	for _, k := range []string{"topics.input", "topics.alerts", "topics.dlq", "topics.late", "topics.changelog"} {
		v := topics[k]
		if !topicRe.MatchString(v) || v == "." || v == ".." {
			bad(k, v, "a Kafka topic name: 1-249 characters of [a-zA-Z0-9._-]")
			continue
		}
		if other, dup := seen[v]; dup {
			bad(k, v, "a topic distinct from "+other)
		}
		seen[v] = k
	}
	r := c.Rule
	if !idRe.MatchString(r.ID) {
		bad("rule.id", r.ID, "1-200 characters of [a-zA-Z0-9._-]")
	}
	if r.Version < 1 {
		bad("rule.version", r.Version, "an integer >= 1")
	}
	if r.Threshold < 1 || r.Threshold > 1000 {
		bad("rule.threshold", r.Threshold, "an integer from 1 to 1000")
	}
	if math.IsNaN(r.MinValue) || math.IsInf(r.MinValue, 0) {
		bad("rule.min_value", r.MinValue, "a finite number (mm/s), such as 7.1")
	}
	if r.Window < time.Millisecond || r.Window > 30*24*time.Hour {
		bad("rule.window", r.Window, "a duration from 1ms to 720h")
	}
	if r.Quality != "" && r.Quality != "good" && r.Quality != "uncertain" && r.Quality != "bad" {
		bad("rule.quality", r.Quality, `one of "good", "uncertain", "bad", or "" for any`)
	}
	if r.WatermarkDelay < 0 || r.WatermarkDelay > 30*24*time.Hour {
		bad("rule.watermark_delay", r.WatermarkDelay, "a duration from 0s to 720h")
	}
	if r.AllowedLateness < 0 || r.AllowedLateness > 30*24*time.Hour {
		bad("rule.allowed_lateness", r.AllowedLateness, "a duration from 0s to 720h")
	}
	if r.DedupHorizon <= r.Window+r.AllowedLateness || r.DedupHorizon > 90*24*time.Hour {
		bad("rule.dedup_horizon", r.DedupHorizon, fmt.Sprintf("a duration greater than rule.window + rule.allowed_lateness (%s) and at most 2160h", r.Window+r.AllowedLateness))
	}
	if r.MaxFutureSkew < time.Millisecond || r.MaxFutureSkew > 30*24*time.Hour {
		bad("rule.max_future_skew", r.MaxFutureSkew, "a duration from 1ms to 720h")
	}
	if r.Description == "" {
		bad("rule.description", r.Description, "a non-empty phrase such as \"high-vibration events\"")
	}
	errs = append(errs, c.validateFormats()...)
	if err := c.Kafka.Validate(); err != nil {
		list := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok { // one per problem
			list = j.Unwrap()
		}
		for _, e := range list {
			errs = append(errs, fmt.Errorf("config: %w", e))
		}
	}
	return errors.Join(errs...)
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
