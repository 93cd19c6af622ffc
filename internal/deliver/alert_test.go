package deliver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vibeline/processor/internal/alerts"
)

func TestDecodeMatchesTheFormat(t *testing.T) {
	for _, name := range []string{"open", "updated_late", "merged", "closed"} {
		b, err := os.ReadFile(filepath.Join("testdata", "alert_"+name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		strict, err := alerts.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		lenient, err := decodeAlert(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got, want := mustEncode(t, lenient), mustEncode(t, strict); got != want {
			t.Errorf("%s: lenient decode differs:\n%s\n%s", name, got, want)
		}
	}
}

func mustEncode(t *testing.T, a alerts.Alert) string {
	t.Helper()
	b, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDecodeIgnoresUnknownMembersAndRequiresTheKey(t *testing.T) {
	ok := `{"alert_id":"a1","revision":4,"status":"updated","rule_id":"r","rule_version":2,"machine_id":"M-1",` +
		`"start":"2026-01-02T10:00:00.000Z","end":"2026-01-02T10:01:00.000Z","severity":"new-in-v2","evidence":[]}`
	d, err := NewDelivery(Record{Value: []byte(ok)})
	if err != nil {
		t.Fatalf("a later format's member must be ignored: %v", err)
	}
	if d.IdempotencyKey != "a1-4" || d.Alert.Revision != 4 || d.Alert.MachineID != "M-1" {
		t.Errorf("delivery %+v", d)
	}
	for _, bad := range []struct{ value, want string }{
		{`not json`, "alerts: decode"},
		{`{"revision":1}`, `"alert_id" missing`},
		{strings.Replace(ok, `"revision":4,`, ``, 1), `"revision" missing`},
		{strings.Replace(ok, `"revision":4`, `"revision":-1`, 1), "revision -1"},
		{strings.Replace(ok, `"alert_id":"a1"`, `"alert_id":""`, 1), "empty alert_id"},
		{strings.Replace(ok, `"start":"2026-01-02T10:00:00.000Z"`, `"start":"yesterday"`, 1), "start"},
	} {
		if _, err := NewDelivery(Record{Value: []byte(bad.value)}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err %v, want %q", bad.value, err, bad.want)
		}
	}
}

func TestIdempotencyKey(t *testing.T) {
	if got := IdempotencyKey("fcbb6ffe4c70e9d58d7550aa08757d6c", 12); got != "fcbb6ffe4c70e9d58d7550aa08757d6c-12" {
		t.Fatal(got)
	}
}

// TestDecodeKeepsTheAggregate: an aggregating rule's revision (alert format
// v2 members key_field, key, aggregate) reaches the sinks whole.
func TestDecodeKeepsTheAggregate(t *testing.T) {
	v := `{"alert_id":"a2","revision":0,"status":"open","rule_id":"sensor-peak","rule_version":1,"machine_id":"M-1",` +
		`"start":"2026-01-02T10:00:00.000Z","end":"2026-01-02T10:10:00.000Z","count":7,"key_field":"sensor_id","key":"S-9",` +
		`"aggregate":{"fn":"max","value":12.9},"evidence":[],"late":false,"watermark":null,"reason":"r"}`
	d, err := NewDelivery(Record{Value: []byte(v)})
	if err != nil {
		t.Fatal(err)
	}
	if a := d.Alert; a.KeyField != "sensor_id" || a.Key != "S-9" || a.Aggregate == nil || a.Aggregate.Fn != "max" || a.Aggregate.Value != 12.9 || a.Count != 7 {
		t.Errorf("decoded %+v", a)
	}
}
