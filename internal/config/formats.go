package config

import (
	"fmt"
	"math"
	"net/url"
	"os"
	"time"
)

// validateFormats checks sources, registry.* and alerts_format
// (docs/AVRO.md): each problem names the key, the value and what is valid.
func (c Config) validateFormats() []error {
	var errs []error
	bad := func(key string, val any, valid string) {
		errs = append(errs, fmt.Errorf("config: %s = %v is invalid: %s", key, quote(val), valid))
	}
	switch c.AlertsFormat {
	case FormatJSON:
	case FormatAvro:
		if c.Registry.URL == "" {
			bad("alerts_format", c.AlertsFormat, `"avro" needs registry.url (the alert schema is registered under "<alerts topic>-value"); or "json"`)
		}
	default:
		bad("alerts_format", c.AlertsFormat, `one of "json", "avro"`)
	}

	r := c.Registry
	if r.URL != "" {
		u, err := url.Parse(r.URL)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			bad("registry.url", r.URL, "the base URL of a Confluent-compatible schema registry API: http(s)://host[:port][/path], e.g. http://registry:8081 or http://registry:8080/apis/ccompat/v7 (Apicurio 3)")
		case u.User != nil:
			bad("registry.url", u.Redacted(), "a URL without credentials: set registry.username and registry.password (PROCESSOR_REGISTRY_PASSWORD)")
		case u.RawQuery != "" || u.Fragment != "":
			bad("registry.url", r.URL, "a base URL without query or fragment")
		}
	}
	if r.Password != "" && r.Username == "" {
		bad("registry.username", r.Username, "a user name: registry.password is set (HTTP basic authentication needs both)")
	}
	if r.Timeout < 100*time.Millisecond || r.Timeout > time.Minute {
		bad("registry.timeout", r.Timeout, "a duration from 100ms to 1m")
	}
	if r.NotFoundTTL < time.Second || r.NotFoundTTL > 24*time.Hour {
		bad("registry.not_found_ttl", r.NotFoundTTL, "a duration from 1s to 24h")
	}
	if r.RetryBackoff < 10*time.Millisecond || r.RetryBackoff > time.Minute {
		bad("registry.retry_backoff", r.RetryBackoff, "a duration from 10ms to 1m")
	}
	if r.RetryBackoffMax < r.RetryBackoff || r.RetryBackoffMax > time.Hour {
		bad("registry.retry_backoff_max", r.RetryBackoffMax, fmt.Sprintf("a duration from registry.retry_backoff (%s) to 1h", r.RetryBackoff))
	}

	seen := map[string]int{}
	for i, s := range c.Sources {
		key := func(k string) string { return fmt.Sprintf("sources[%d].%s", i, k) }
		if !topicRe.MatchString(s.Topic) || s.Topic == "." || s.Topic == ".." {
			bad(key("topic"), s.Topic, "the Kafka topic name of a rule's source: 1-249 characters of [a-zA-Z0-9._-]")
		} else if j, dup := seen[s.Topic]; dup {
			bad(key("topic"), s.Topic, fmt.Sprintf("a topic not listed before (sources[%d] has it)", j))
		} else {
			seen[s.Topic] = i
		}
		a := s.Avro
		switch s.Format {
		case "", FormatJSON:
			if a != (AvroSource{}) {
				bad(key("format"), s.Format, `"avro": the avro settings of the entry are set (remove them for a JSON source)`)
			}
			continue
		case FormatAvro:
		default:
			bad(key("format"), s.Format, `one of "json", "avro"`)
			continue
		}
		switch a.Framing {
		case "", FramingWire:
		case FramingBare:
			if a.SchemaFile == "" {
				bad(key("avro.framing"), a.Framing, `"wire", or "bare" together with sources[i].avro.schema_file (bare values carry no schema id)`)
			}
			if a.SchemaID != 0 {
				bad(key("avro.schema_id"), a.SchemaID, `0: bare values carry no schema id (framing "bare")`)
			}
		default:
			bad(key("avro.framing"), a.Framing, `one of "wire" (Confluent wire format), "bare" (no header)`)
		}
		if a.SchemaID < 0 || a.SchemaID > math.MaxInt32 {
			bad(key("avro.schema_id"), a.SchemaID, "0 (any id) or a schema id from 1 to 2147483647")
		}
		if a.SchemaFile == "" {
			if a.SchemaID != 0 {
				bad(key("avro.schema_id"), a.SchemaID, "0: schema_id applies only with sources[i].avro.schema_file")
			}
			if c.Registry.URL == "" {
				bad(key("avro.schema_file"), a.SchemaFile, "a local writer schema (.avsc), or set registry.url to read writer schemas from a schema registry")
			}
			continue
		}
		if st, err := os.Stat(a.SchemaFile); err != nil {
			bad(key("avro.schema_file"), a.SchemaFile, fmt.Sprintf("a readable Avro schema file (.avsc): %v", err))
		} else if !st.Mode().IsRegular() {
			bad(key("avro.schema_file"), a.SchemaFile, "a regular file holding an Avro schema (.avsc)")
		}
	}
	return errs
}
