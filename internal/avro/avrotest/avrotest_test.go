package avrotest_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/avro/avrotest"
	"github.com/vibeline/processor/schemas"
)

func TestRegistry(t *testing.T) {
	f := avrotest.NewRegistry(t)
	v1 := f.Register("s-value", avrotest.EventWriter())
	v2 := f.Register("s-value", avrotest.EventWriter(avrotest.ClockField))
	if again := f.Register("other-value", avrotest.EventWriter()); v1 != 1 || v2 != 2 || again != v1 {
		t.Fatalf("ids %d %d %d, want 1 2 1", v1, v2, again)
	}
	f.Add(7, avrotest.EventWriter(avrotest.StringField("gateway", "gw")))
	if id := f.Register("s-value", avrotest.EventWriter(avrotest.StringField("site", "x"))); id != 8 {
		t.Fatalf("next id %d, want 8", id)
	}
	c, err := avro.NewClient(avro.ClientOptions{URL: f.URL(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if s, _, err := c.SchemaByID(ctx, 7); err != nil || s != avrotest.EventWriter(avrotest.StringField("gateway", "gw")) {
		t.Fatalf("schema 7: %q, %v", s, err)
	}
	if _, _, err := c.SchemaByID(ctx, 99); !errors.Is(err, avro.ErrSchemaNotFound) {
		t.Fatalf("schema 99: %v, want not found", err)
	}
	id, err := c.Register(ctx, "alerts-value", "\"string\"")
	if err != nil || id != 9 || len(f.SubjectIDs("alerts-value")) != 1 {
		t.Fatalf("register: %d, %v; subject ids %v", id, err, f.SubjectIDs("alerts-value"))
	}
	f.Refuse(http.StatusConflict)
	if _, err := c.Register(ctx, "alerts-value", "\"long\""); err == nil || avro.IsTransient(err) {
		t.Fatalf("refused register: %v, want a permanent refusal", err)
	}
	f.Refuse(0)
	for _, m := range []avrotest.Mode{avrotest.Unavailable, avrotest.HangUp} {
		f.SetDown(m)
		if _, _, err := c.SchemaByID(ctx, 1); !avro.IsTransient(err) {
			t.Fatalf("%s: %v, want unavailable", m, err)
		}
	}
	f.SetDown(avrotest.Up)
	down := true
	f.DownWhile(func() bool { return down })
	if _, _, err := c.SchemaByID(ctx, 1); !avro.IsTransient(err) {
		t.Fatalf("down while: %v, want unavailable", err)
	}
	down = false
	if _, _, err := c.SchemaByID(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := f.Fetches(); got[7] != 1 || got[99] != 1 || got[1] != 1 {
		t.Errorf("fetches %v", got)
	}
	if n := f.Refused(); n != 2 {
		t.Errorf("refused %d, want 2", n)
	}
}

// EventBody writes what the JSON says, for writers with and without the
// extra fields; values Avro cannot carry are refused.
func TestEventBody(t *testing.T) {
	const value = `{"event_id":"e-1","machine_id":"M-1","sensor_id":"S-1","ts":1767323040000,"seq":3,"value":7.25,"unit":"mm/s","schema_version":1,"quality":"good","clock":"unsynced"}`
	for _, text := range []string{
		avrotest.EventWriter(),
		avrotest.EventWriter(avrotest.ClockField, avrotest.StringField("gateway", "gw-0"), avrotest.StringField("site", "plant-1")),
	} {
		w := avrotest.ParseSchema(t, text)
		body, ok := avrotest.EventBody(t, w, []byte(value))
		if !ok {
			t.Fatal("not converted")
		}
		dec, err := avro.NewDecoder(avro.NewLocalSource(w, 4), avro.DecoderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f, err := dec.Decode(avrotest.Wire(4, body))
		if err != nil {
			t.Fatal(err)
		}
		if f.Seq.Int != 3 || f.Value.Num != 7.25 || string(f.EventID.Text) != "e-1" || f.TS.Int != 1767323040000 {
			t.Errorf("decoded %+v", f)
		}
		if clock := string(f.Clock.Text); (clock == "unsynced") != (text != avrotest.EventWriter()) {
			t.Errorf("writer %s: clock %q", text, clock)
		}
	}
	for _, bad := range []string{`not json`, `{"event_id":"p","machine_id":"M","sensor_id":"S","ts":1.5,"seq":1,"value":9,"unit":"mm/s","schema_version":1,"quality":"good"}`,
		`{"event_id":"p","machine_id":"M","sensor_id":"S","ts":1,"seq":1,"value":9,"unit":"mm/s","schema_version":1,"quality":"good","clock":5}`} {
		if _, ok := avrotest.EventBody(t, avrotest.ParseSchema(t, avrotest.EventWriter()), []byte(bad)); ok {
			t.Errorf("%s converted", bad)
		}
	}
}

func TestAlertValue(t *testing.T) {
	f := avrotest.NewRegistry(t)
	a := alerts.Alert{AlertID: "a1", Status: alerts.StatusOpen, RuleID: "r", RuleVersion: 1, MachineID: "M-1", Start: 1, End: 2, Count: 1,
		Evidence: []alerts.Evidence{{EventID: "e", SensorID: "S", TS: 1, Value: 1}}}
	id := f.Register("alerts-value", schemas.Alert())
	got, err := avrotest.DecodeAlert(t, f.Cache(t), avrotest.AlertValue(t, id, a))
	if err != nil || got.AlertID != "a1" || got.MachineID != "M-1" {
		t.Fatalf("%+v, %v", got, err)
	}
}
