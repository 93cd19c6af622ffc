package event

import "testing"

func BenchmarkCheckJSON(b *testing.B) {
	v := NewValidator(nil, Options{})
	key := []byte("M-7")
	value := []byte(`{"event_id":"0b8e2f52-5b7e-4c36-9d4e-6f1c2a7d9e10","machine_id":"M-7","sensor_id":"S-7-3",` +
		`"ts":"2026-01-02T03:04:05.678+01:00","seq":123456,"value":7.42,"unit":"mm/s","schema_version":1,` +
		`"quality":"good","clock":"synced","gateway":"gw-12","fw":"1.4.2"}`)
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Check(key, value, recordTS); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckJSONEpochInches(b *testing.B) {
	v := NewValidator(nil, Options{})
	value := []byte(`{"event_id":"e-98765","machine_id":"M-7","sensor_id":"S-7-3","ts":1767323045678,"seq":9,` +
		`"value":0.29,"unit":"in/s","schema_version":1,"quality":"good"}`)
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Check(nil, value, recordTS); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckJSONReject(b *testing.B) {
	v := NewValidator(nil, Options{})
	value := []byte(`{"event_id":"e-98765","machine_id":"M-7","sensor_id":"S-7-3","ts":"2026-01-02T03:04:05",` +
		`"seq":9,"value":7.5,"unit":"mm/s","schema_version":1,"quality":"good"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Check(nil, value, recordTS); err == nil {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkDecode compares JSONDecoder.Decode with refDecode, the decoder
// built on json.Valid that it replaced, on the record of BenchmarkCheckJSON.
func BenchmarkDecode(b *testing.B) {
	value := []byte(`{"event_id":"0b8e2f52-5b7e-4c36-9d4e-6f1c2a7d9e10","machine_id":"M-7","sensor_id":"S-7-3",` +
		`"ts":"2026-01-02T03:04:05.678+01:00","seq":123456,"value":7.42,"unit":"mm/s","schema_version":1,` +
		`"quality":"good","clock":"synced","gateway":"gw-12","fw":"1.4.2"}`)
	for _, d := range []struct {
		name   string
		decode func([]byte) (Fields, error)
	}{{"scanner", JSONDecoder{}.Decode}, {"reference", refDecode}} {
		b.Run(d.name, func(b *testing.B) {
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.decode(value); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
