package avro

import (
	"testing"

	"github.com/vibeline/processor/internal/event"
)

// BenchmarkCheckAvro is event's BenchmarkCheckJSON for an Avro record of
// writer v2 (resolution skips its extra fields), through the validator.
func BenchmarkCheckAvro(b *testing.B) {
	src := mapSource{2: mustParse(b, writerV2)}
	d, err := NewDecoder(src, DecoderOptions{})
	if err != nil {
		b.Fatal(err)
	}
	v := event.NewValidator(d, event.Options{})
	value := encode(b, writerV2, 2, event1(map[string]any{"event_id": "0b8e2f52-5b7e-4c36-9d4e-6f1c2a7d9e10", "clock": "synced",
		"gateway": "gw-12", "tags": []any{"a"}, "extra": map[string]any{"fw": 1.5}}))
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Check([]byte("M-7"), value, recordTS); err != nil {
			b.Fatal(err)
		}
	}
}
