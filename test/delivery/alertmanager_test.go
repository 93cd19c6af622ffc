package delivery

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/deliver"
)

// alertmanagerBin is the Debian package prometheus-alertmanager's binary.
const alertmanagerBin = "/usr/bin/prometheus-alertmanager"

// startAlertmanager runs a real Alertmanager on a free 127.0.0.1 port with
// a minimal configuration, temporary storage and clustering disabled, and
// returns its base URL once it is ready.
// notifyURL, when not empty, receives Alertmanager's webhook notifications
// (firing and resolved).
func startAlertmanager(t *testing.T, notifyURL string) string {
	t.Helper()
	if _, err := os.Stat(alertmanagerBin); err != nil {
		t.Fatalf("%s not found (%v): this test needs a real Alertmanager; install it with\n"+
			"  apt-get update && apt-get install -y prometheus-alertmanager", alertmanagerBin, err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "alertmanager.yml")
	conf := fmt.Sprintf(`route:
  receiver: notify
  group_by: [alert_id]
  group_wait: 100ms
  group_interval: 500ms
  repeat_interval: 1h
receivers:
  - name: notify
    webhook_configs:
      - url: %q
        send_resolved: true
`, notifyURL)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(alertmanagerBin,
		"--config.file="+cfg,
		"--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--cluster.listen-address=", // no clustering: no gossip port, no peers
		"--log.level=warn",
	)
	logs := &proc{exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", alertmanagerBin, err)
	}
	go func() { cmd.Wait(); close(logs.exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill() // the Alertmanager this test started, by pid
		<-logs.exited
		if t.Failed() {
			t.Logf("alertmanager output:\n%s", logs.log())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-logs.exited:
			t.Fatalf("alertmanager exited at start-up: %v\n%s", cmd.ProcessState, logs.log())
		default:
		}
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("alertmanager at %s not ready within 20s: %v\n%s", base, err, logs.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gettableAlert is the part of Alertmanager's GET /api/v2/alerts answer
// the test checks.
type gettableAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
	Status      struct {
		State string `json:"state"`
	} `json:"status"`
}

func getAlerts(t *testing.T, base, alertID string) []gettableAlert {
	t.Helper()
	q := url.Values{"filter": {fmt.Sprintf("alert_id=%q", alertID)}}
	resp, err := http.Get(base + "/api/v2/alerts?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v2/alerts: %s: %s", resp.Status, b)
	}
	var out []gettableAlert
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("GET /api/v2/alerts: %v: %s", err, b)
	}
	return out
}

// receivedAlerts reads alertmanager_alerts_received_total{status} from
// Alertmanager's own /metrics.
func receivedAlerts(t *testing.T, base, status string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "alertmanager_alerts_received_total{") && strings.Contains(line, `status="`+status+`"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// amNotification is Alertmanager's webhook notification (version 4).
type amNotification struct {
	Status string `json:"status"`
	Alerts []struct {
		Status   string            `json:"status"`
		Labels   map[string]string `json:"labels"`
		StartsAt time.Time         `json:"startsAt"`
		EndsAt   time.Time         `json:"endsAt"`
	} `json:"alerts"`
}

// waitNotification waits for Alertmanager's notification with status.
func waitNotification(t *testing.T, notes <-chan amNotification, status string) amNotification {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case n := <-notes:
			if n.Status == status && len(n.Alerts) == 1 {
				return n
			}
		case <-timeout:
			t.Fatalf("no %q notification from Alertmanager within 20s", status)
		}
	}
}

// TestRealAlertmanager delivers an open then a closed revision of one
// alert through the alerts topic to a real Alertmanager: the alert appears
// (GET /api/v2/alerts) with the rule, machine and alert labels and the
// reason and evidence annotations, active, and Alertmanager notifies it as
// firing; after the closed revision it resolves: gone from the active
// alerts, counted as a resolved alert received, and notified as resolved
// with endsAt = the incident end (in the past).
func TestRealAlertmanager(t *testing.T) {
	notes := make(chan amNotification, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n amNotification
		if err := json.NewDecoder(r.Body).Decode(&n); err == nil {
			notes <- n
		}
	}))
	defer hook.Close()
	base := startAlertmanager(t, hook.URL)
	seeds := newCluster(t, alertsTopic)
	cfg := testConfig(seeds, deliver.SinkConfig{
		Type: deliver.TypeAlertmanager, Name: "am", URL: base, Timeout: 5 * time.Second,
		Labels: map[string]string{"team": "maintenance"},
	})
	cfg.GroupID = "delivery-am"
	st := startStage(t, cfg)

	now := time.Now().UTC().Truncate(time.Millisecond)
	machine := "M-042"
	open := alerts.Alert{
		AlertID: alerts.ID("vibration-high", 1, machine, "am-e1"), Revision: 0, Status: alerts.StatusOpen,
		RuleID: "vibration-high", RuleVersion: 1, MachineID: machine,
		Start: now.Add(-2 * time.Minute).UnixMilli(), End: now.Add(-90 * time.Second).UnixMilli(), Count: 3,
		Evidence: []alerts.Evidence{
			{EventID: "am-e1", SensorID: "S-1", TS: now.Add(-2 * time.Minute).UnixMilli(), Value: 7.5},
			{EventID: "am-e2", SensorID: "S-2", TS: now.Add(-100 * time.Second).UnixMilli(), Value: 9.25},
			{EventID: "am-e3", SensorID: "S-1", TS: now.Add(-90 * time.Second).UnixMilli(), Value: 12},
		},
		Watermark: now.Add(-2 * time.Minute).UnixMilli(),
	}
	open.Reason = alerts.ReasonSentence(open.Status, open.Count, "high-vibration events (>= 7.1 mm/s)", machine, open.Start, open.End, "")
	closed := open
	closed.Revision, closed.Status, closed.Count = 1, alerts.StatusClosed, 4
	closed.End = now.Add(-30 * time.Second).UnixMilli()
	closed.Reason = alerts.ReasonSentence(closed.Status, closed.Count, "high-vibration events (>= 7.1 mm/s)", machine, closed.Start, closed.End, "")
	rev := func(a alerts.Alert) []revision {
		v, err := a.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return []revision{{machine: machine, key: deliver.IdempotencyKey(a.AlertID, a.Revision), value: v}}
	}

	produce(t, seeds, rev(open))
	var got []gettableAlert
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got = getAlerts(t, base, open.AlertID); len(got) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the open alert did not appear in Alertmanager within 20s")
		}
	}
	a := got[0]
	wantLabels := map[string]string{"alertname": "vibration-high", "rule_version": "1", "machine_id": machine, "alert_id": open.AlertID, "team": "maintenance"}
	if fmt.Sprint(a.Labels) != fmt.Sprint(wantLabels) {
		t.Errorf("labels %v, want %v", a.Labels, wantLabels)
	}
	if a.Annotations["summary"] != open.Reason || a.Annotations["idempotency_key"] != open.AlertID+"-0" ||
		!strings.Contains(a.Annotations["evidence"], "am-e2 S-2") || !strings.Contains(a.Annotations["evidence"], "9.25 mm/s") {
		t.Errorf("annotations %v", a.Annotations)
	}
	if a.Status.State != "active" || !a.StartsAt.Equal(time.UnixMilli(open.Start)) || !a.EndsAt.After(time.Now()) {
		t.Errorf("open alert: state %q startsAt %s endsAt %s, want active from the incident start, ending in the future",
			a.Status.State, a.StartsAt, a.EndsAt)
	}
	if n := receivedAlerts(t, base, "firing"); n < 1 {
		t.Errorf("alertmanager_alerts_received_total{status=firing} = %v", n)
	}
	if n := waitNotification(t, notes, "firing"); n.Alerts[0].Labels["machine_id"] != machine || !n.Alerts[0].StartsAt.Equal(time.UnixMilli(open.Start)) {
		t.Errorf("firing notification: %+v", n.Alerts[0])
	}

	produce(t, seeds, rev(closed))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if receivedAlerts(t, base, "resolved") >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Alertmanager received no resolved alert within 20s")
		}
	}
	// Resolved alerts (endsAt in the past) are not listed as active.
	if got := getAlerts(t, base, open.AlertID); len(got) != 0 {
		t.Errorf("after the closed revision the alert is still listed: state %q endsAt %s", got[0].Status.State, got[0].EndsAt)
	}
	n := waitNotification(t, notes, "resolved")
	if r := n.Alerts[0]; r.Status != "resolved" || r.Labels["alert_id"] != open.AlertID || !r.EndsAt.Equal(time.UnixMilli(closed.End)) || !r.EndsAt.Before(time.Now()) {
		t.Errorf("resolved notification: %+v, want alert %s resolved with endsAt %s", r, open.AlertID, time.UnixMilli(closed.End).UTC())
	}
	if got := metric(t, st.reg, "processor_delivery_total", map[string]string{"sink": "am", "outcome": "delivered"}); got != 2 {
		t.Errorf("processor_delivery_total{sink=am,outcome=delivered} = %v, want 2", got)
	}
	if dl := readTopic(t, seeds, dlqTopic); len(dl) != 0 {
		t.Errorf("%d dead letters", len(dl))
	}
}
