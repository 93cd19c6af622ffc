package avro

import (
	"strings"
	"testing"
)

// SourceDecoder picks the writer schemas as the configuration says: the
// registry without a schema file (values must be prepared), else the local
// file, wire-framed or bare; its errors start with the key they are about.
func TestSourceDecoder(t *testing.T) {
	const file = "../../schemas/event.avsc"
	reg, err := NewRegistry(RegistryOptions{Client: &Client{}})
	if err != nil {
		t.Fatal(err)
	}
	if d, fromRegistry, err := SourceDecoder(reg, "", 0, false, nil); err != nil || d == nil || !fromRegistry {
		t.Errorf("registry source: %v, %v, %v; want a decoder from the registry", d, fromRegistry, err)
	}
	if _, _, err := SourceDecoder(nil, "", 0, false, nil); err == nil || !strings.HasPrefix(err.Error(), "avro.schema_file is empty and registry.url is not set") {
		t.Errorf("no registry, no file: %v", err)
	}
	for _, bare := range []bool{false, true} {
		d, fromRegistry, err := SourceDecoder(nil, file, 7, bare, nil)
		if err != nil || d == nil || fromRegistry {
			t.Errorf("local file (bare %v): %v, %v, %v; want a local decoder", bare, d, fromRegistry, err)
		}
	}
	if _, _, err := SourceDecoder(nil, "testdata/missing.avsc", 1, false, nil); err == nil || !strings.HasPrefix(err.Error(), "avro.schema_file") {
		t.Errorf("missing file: %v", err)
	}
	if _, _, err := SourceDecoder(nil, "../../schemas/alert.avsc", 1, false, nil); err == nil || !strings.HasPrefix(err.Error(), `avro.schema_file = "../../schemas/alert.avsc"`) {
		t.Errorf("a schema that is not an event: %v", err)
	}
}
