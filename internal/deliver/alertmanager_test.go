package deliver

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// The alert values in testdata/alert_*.json are copies of
// internal/alerts/testdata (the format's golden files); the expected
// Alertmanager bodies are testdata/alertmanager_*.json.
func TestAlertmanagerPayloadGolden(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC) // after every incident's end
	for _, tc := range []struct {
		name, alert    string
		labels         map[string]string
		resolveTimeout time.Duration
		now            time.Time
	}{
		{name: "open", alert: "alert_open.json"},
		{name: "updated_late", alert: "alert_updated_late.json", labels: map[string]string{"team": "maintenance", "severity": "page"}},
		{name: "open_resolve_timeout", alert: "alert_open.json", resolveTimeout: time.Hour},
		{name: "merged", alert: "alert_merged.json"},
		{name: "closed", alert: "alert_closed.json"},
		// Evidence cut to fit the producer's record limit: the count of
		// the events left out is an annotation.
		{name: "evidence_omitted", alert: "alert_evidence_omitted.json"},
		// Event time ahead of the clock: endsAt is clamped to now so
		// the alert resolves at once.
		{name: "closed_clock_behind", alert: "alert_closed.json", now: time.Date(2026, 1, 2, 10, 2, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value, err := os.ReadFile(filepath.Join("testdata", tc.alert))
			if err != nil {
				t.Fatal(err)
			}
			d, err := NewDelivery(Record{Key: []byte("M-7"), Value: value})
			if err != nil {
				t.Fatal(err)
			}
			at := now
			if !tc.now.IsZero() {
				at = tc.now
			}
			got, err := AlertmanagerPayload(d, tc.labels, tc.resolveTimeout, at)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "alertmanager_"+tc.name+".json")
			if *update {
				if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run Golden -update to create it)", err)
			}
			if string(got)+"\n" != string(want) {
				t.Errorf("payload differs from %s:\n got %s\nwant %s", golden, got, want)
			}
			// Same input, same bytes.
			again, _ := AlertmanagerPayload(d, tc.labels, tc.resolveTimeout, at)
			if string(again) != string(got) {
				t.Error("payload is not deterministic")
			}
			var arr []amAlert
			if err := json.Unmarshal(got, &arr); err != nil || len(arr) != 1 {
				t.Fatalf("not a JSON array of one alert: %v", err)
			}
		})
	}
}

func TestAlertmanagerSendPostsToAPIv2(t *testing.T) {
	type req struct {
		path, ctype, key string
		body             []byte
	}
	got := make(chan req, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- req{r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Idempotency-Key"), b}
	}))
	defer srv.Close()
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	sinks, err := NewSinks([]SinkConfig{{Type: TypeAlertmanager, Name: "am", URL: srv.URL + "/"}}, SinkOptions{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	d := testDelivery(t, "abc", 2)
	if err := sinks[0].Send(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	r := <-got
	want, _ := AlertmanagerPayload(d, nil, 0, now)
	if r.path != "/api/v2/alerts" || r.ctype != "application/json" || r.key != "abc-2" || string(r.body) != string(want) {
		t.Errorf("got %s %q %q %s", r.path, r.ctype, r.key, r.body)
	}
}

// A closed alert resolves at once even when its whole incident lies ahead
// of the clock (a device clock ahead, within max_future_skew): endsAt at
// most now, and startsAt moved back to now too, since Alertmanager refuses
// endsAt before startsAt. (endsAt was once clamped up to startsAt, in the
// future, so the alert kept firing until then.)
func TestClosedAlertAheadOfTheClockResolvesNow(t *testing.T) {
	value, err := os.ReadFile(filepath.Join("testdata", "alert_closed.json"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDelivery(Record{Key: []byte("M-7"), Value: value})
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(d.Alert.Start).Add(-time.Minute).UTC()
	body, err := AlertmanagerPayload(d, nil, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	var out []struct {
		StartsAt string `json:"startsAt"`
		EndsAt   string `json:"endsAt"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	starts, err1 := time.Parse(time.RFC3339Nano, out[0].StartsAt)
	ends, err2 := time.Parse(time.RFC3339Nano, out[0].EndsAt)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if !ends.Equal(now) || !starts.Equal(now) {
		t.Fatalf("closed alert with its incident a minute ahead of the clock: startsAt %s endsAt %s, want both now (%s)", starts, ends, now)
	}
}
