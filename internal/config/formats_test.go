package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func loadYAML(t *testing.T, yaml string) (Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return Load(path, nil)
}

// Sources are a list, so that topic names keep their dots and case (viper
// would split a map key at its dots and lower-case it), and UnmarshalExact
// still refuses unknown keys inside an entry.
func TestSourcesAndRegistryLoad(t *testing.T) {
	avsc := filepath.Join(t.TempDir(), "event.avsc")
	if err := os.WriteFile(avsc, []byte(`{"type":"string"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PROCESSOR_REGISTRY_PASSWORD", "s3cret-pw")
	c, err := loadYAML(t, fmt.Sprintf(`
sources:
  - topic: Plant.A.vibration
    format: avro
  - topic: plant.b
    format: avro
    avro: {schema_file: %q, schema_id: 7}
  - topic: plant.c
    format: json
alerts_format: avro
registry:
  url: http://127.0.0.1:8081/apis/ccompat/v7
  username: proc
  timeout: 2s
  retry_backoff: 100ms
`, avsc))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.SourceFormat("Plant.A.vibration"); got.Format != FormatAvro || got.Avro.Framing != FramingWire || got.Avro.SchemaFile != "" {
		t.Errorf("Plant.A.vibration = %+v", got)
	}
	if got := c.SourceFormat("plant.b"); got.Avro.SchemaFile != avsc || got.Avro.SchemaID != 7 {
		t.Errorf("plant.b = %+v", got)
	}
	if got := c.SourceFormat("plant.c"); got.Format != FormatJSON {
		t.Errorf("plant.c = %+v", got)
	}
	if got := c.SourceFormat("not.listed"); got.Format != FormatJSON {
		t.Errorf("an unlisted topic = %+v, want json", got)
	}
	if !c.UsesAvro() || c.AlertsFormat != FormatAvro {
		t.Errorf("UsesAvro = %v, alerts_format %q", c.UsesAvro(), c.AlertsFormat)
	}
	r := c.Registry
	if r.Password.Reveal() != "s3cret-pw" || r.Username != "proc" || r.Timeout != 2*time.Second ||
		r.RetryBackoff != 100*time.Millisecond || r.RetryBackoffMax != 30*time.Second || r.NotFoundTTL != time.Minute {
		t.Errorf("registry = %+v", r)
	}
	for _, s := range []string{fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprint(c.Registry)} {
		if strings.Contains(s, "s3cret-pw") {
			t.Fatalf("the registry password is printed: %s", s)
		}
	}
	if d := Default(); d.UsesAvro() || d.AlertsFormat != FormatJSON || d.Registry.URL != "" {
		t.Errorf("the default is not all JSON without a registry: %+v", d)
	}
}

func TestFormatsInvalid(t *testing.T) {
	avsc := filepath.Join(t.TempDir(), "event.avsc")
	if err := os.WriteFile(avsc, []byte(`{"type":"string"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := "registry:\n  url: http://127.0.0.1:8081\n"
	cases := []struct {
		yaml string
		want []string
	}{
		{"alerts_format: xml\n", []string{"alerts_format", `"xml"`, `"json"`, `"avro"`}},
		{"alerts_format: avro\n", []string{"alerts_format", `"avro"`, "registry.url"}},
		{"sources:\n  - topic: a\n    format: protobuf\n", []string{"sources[0].format", `"protobuf"`, `"json"`, `"avro"`}},
		{"sources:\n  - topic: a\n    format: avro\n", []string{"sources[0].avro.schema_file", "registry.url"}},
		{"sources:\n  - topic: a\n    formt: avro\n", []string{"formt"}}, // unknown keys inside an entry
		{"sources:\n  - topic: a\n    format: avro\n  - topic: a\n    format: json\n" + reg, []string{"sources[1].topic", `"a"`, "sources[0]"}},
		{"sources:\n  - topic: a/b\n", []string{"sources[0].topic", `"a/b"`}},
		{"sources:\n  - topic: a\n    format: avro\n    avro: {framing: bare}\n" + reg, []string{"sources[0].avro.framing", `"bare"`, "schema_file"}},
		{"sources:\n  - topic: a\n    format: avro\n    avro: {framing: framed}\n" + reg, []string{"sources[0].avro.framing", `"framed"`, `"wire"`}},
		{"sources:\n  - topic: a\n    format: avro\n    avro: {schema_id: 3}\n" + reg, []string{"sources[0].avro.schema_id", "3", "schema_file"}},
		{fmt.Sprintf("sources:\n  - topic: a\n    format: avro\n    avro: {schema_file: %q, schema_id: -1}\n", avsc), []string{"sources[0].avro.schema_id", "-1"}},
		{"sources:\n  - topic: a\n    format: avro\n    avro: {schema_file: /nonexistent/e.avsc}\n", []string{"sources[0].avro.schema_file", "/nonexistent/e.avsc", "no such file"}},
		{"sources:\n  - topic: a\n    format: json\n    avro: {framing: bare}\n", []string{"sources[0].format", `"json"`, "avro settings"}},
		{"registry:\n  url: ftp://x\n", []string{"registry.url", `"ftp://x"`, "http"}},
		{"registry:\n  url: http://u:pw@x:8081\n", []string{"registry.url", "registry.username"}},
		{"registry:\n  timeout: 0s\n", []string{"registry.timeout", "0s", "100ms to 1m"}},
		{"registry:\n  retry_backoff: 2s\n  retry_backoff_max: 1s\n", []string{"registry.retry_backoff_max", "1s", "2s"}},
		{"registry:\n  not_found_ttl: 0s\n", []string{"registry.not_found_ttl"}},
		{"registry:\n  password: pw\n", []string{"registry.username"}},
	}
	for _, c := range cases {
		_, err := loadYAML(t, c.yaml)
		if err == nil {
			t.Errorf("%q: no error", c.yaml)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not mention %q", c.yaml, err, w)
			}
		}
		if strings.Contains(err.Error(), ":pw@") {
			t.Errorf("%q: the error shows the URL's password: %v", c.yaml, err)
		}
	}
}
