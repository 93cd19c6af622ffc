package status

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/window"
)

type fixed consume.Status

func (f fixed) Status() consume.Status { return consume.Status(f) }

func TestPage(t *testing.T) {
	a := alerts.Alert{AlertID: "0123456789abcdef0123456789abcdef", Revision: 1, Status: "updated", RuleID: "vibration-high", RuleVersion: 1,
		MachineID: "M-<7>", Start: 1000, End: 5000, Count: 3, Late: true, Watermark: 900, Reason: "3 events",
		Evidence: []alerts.Evidence{{EventID: "e1", SensorID: "S", TS: 1000, Value: 7.5}, {EventID: "e2", SensorID: "S", TS: 2000, Value: 8},
			{EventID: "e3", SensorID: "S", TS: 5000, Value: 9, Partition: 2, Offset: 77}}}
	val, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// A revision whose evidence was cut to fit the record limit.
	c := a
	c.AlertID, c.Evidence, c.EvidenceOmitted = "fedcba9876543210fedcba9876543210", a.Evidence[:1], 2
	cut, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	src := fixed{Instance: "p-0", Group: "g", Rule: "vibration-high v1", Mode: "exactly_once", Ready: true,
		Partitions: []consume.PartitionStatus{
			{Partition: 0, CommittedOffset: 10, EndOffset: 15, Lag: 5, Watermark: 60_000, Restore: "restored"},
			{Partition: 1, Watermark: window.NoWatermark, Restore: "restoring"},
		},
		RecentAlerts: [][]byte{val, []byte("not json"), cut}}
	rec := httptest.NewRecorder()
	Handler(src, func() time.Time { return time.Unix(0, 0) }).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	body := rec.Body.String()
	for _, want := range []string{`id="instance">p-0<`, `class="ok" id="ready">ready<`, `data-partition="0"`, `class="lag">5<`,
		`1970-01-01T00:01:00.000Z`, "none yet", "restoring", `data-alert="0123456789abcdef0123456789abcdef"`,
		"M-&lt;7&gt;", ">e3<", ">77<", "late", `http-equiv="refresh"`,
		`data-alert="fedcba9876543210fedcba9876543210"`, "and 2 more, left out of the alert"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(body, "M-<7>") {
		t.Error("machine id not escaped")
	}
	rec = httptest.NewRecorder()
	Handler(src, time.Now).ServeHTTP(rec, httptest.NewRequest("GET", "/other", nil))
	if rec.Code != 404 {
		t.Errorf("/other = %d, want 404", rec.Code)
	}
}
