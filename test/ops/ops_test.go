package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMissingMetricsCheck proves the name check below is not vacuous: it
// reports names that are not there and histogram misuse.
func TestMissingMetricsCheck(t *testing.T) {
	e, err := parseExposition(`# HELP processor_records_total x
# TYPE processor_records_total counter
processor_records_total{outcome="processed",partition="0"} 3
# TYPE processor_alert_latency_seconds histogram
processor_alert_latency_seconds_bucket{le="+Inf"} 1
processor_alert_latency_seconds_sum 0.5
processor_alert_latency_seconds_count 1
`)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range e.samples {
		names[s.name] = true
	}
	ok := []string{"processor_records_total", "processor_alert_latency_seconds_bucket", "processor_alert_latency_seconds_count"}
	if m := missingMetrics(ok, e.types, names); len(m) != 0 {
		t.Errorf("present names reported missing: %v", m)
	}
	bad := []string{"processor_no_such_metric", "processor_records_total_bucket", "processor_alert_latency_seconds"}
	if m := missingMetrics(bad, e.types, names); len(m) != len(bad) {
		t.Errorf("missingMetrics(%v) = %v, want all %d reported", bad, m, len(bad))
	}
	got := promqlNames(alertExprs(`groups:
  - rules:
      - alert: A
        expr: rate(processor_a_total[5m]) > 0
      - alert: B
        expr: |
          sum(processor_b{x="processor_not_a_name_in_a_label_value"})
          / processor_c_bucket
        for: 5m
`))
	want := []string{"processor_a_total", "processor_b", "processor_c_bucket", "processor_not_a_name_in_a_label_value"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("promqlNames(alertExprs(...)) = %v, want %v", got, want)
	}
}

// TestDashboardAndAlertMetricsExist: every processor_* metric the Grafana
// dashboard and the alerting rules query exists in the live /metrics of the
// processor (the demo, while it runs).
func TestDashboardAndAlertMetricsExist(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "deploy/grafana/dashboards/processor.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("processor.json: %v", err)
	}
	dashNames := promqlNames(dashboardExprs(dash))
	rules, err := os.ReadFile(filepath.Join(root, "deploy/prometheus/alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	exprs := alertExprs(string(rules))
	alertNames := promqlNames(exprs)
	// Guard against a parser that finds nothing and passes vacuously.
	if len(dashNames) < 20 || len(exprs) < 10 || len(alertNames) < 12 {
		t.Fatalf("found only %d metric names in the dashboard, %d expressions with %d names in alerts.yml", len(dashNames), len(exprs), len(alertNames))
	}
	t.Logf("dashboard queries %d processor metrics, alerts.yml %d expressions with %d", len(dashNames), len(exprs), len(alertNames))

	// Scrape while the demo runs: some series appear only once their first
	// event happened (a dead letter, a commit), so take the union.
	d := startDemo(t)
	types := map[string]string{}
	names := map[string]bool{}
	scrapes := 0
	refs := promqlNames(append(dashboardExprs(dash), exprs...))
	for !d.exited() {
		e, err := scrapeMetrics(d.url("/metrics"))
		if err != nil {
			if d.exited() {
				break
			}
			time.Sleep(50 * time.Millisecond) // the demo shuts its server down before it exits
			continue
		}
		scrapes++
		for k, v := range e.types {
			types[k] = v
		}
		for _, s := range e.samples {
			names[s.name] = true
		}
		if len(missingMetrics(refs, types, names)) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if scrapes == 0 {
		t.Fatalf("no successful scrape of %s; demo stderr:\n%s", d.url("/metrics"), tail(d.stderr.String(), 20))
	}
	check := func(file string, refs []string) {
		if m := missingMetrics(refs, types, names); len(m) > 0 {
			t.Errorf("%s queries metrics the processor does not expose (%d scrapes of the demo):\n  %s", file, scrapes, strings.Join(m, "\n  "))
		}
	}
	check("deploy/grafana/dashboards/processor.json", dashNames)
	check("deploy/prometheus/alerts.yml", alertNames)
	if !t.Failed() {
		t.Logf("all %d referenced metrics present after %d scrapes: %s", len(refs), scrapes, strings.Join(refs, " "))
	}
	d.wait(t, 60*time.Second)
}

// TestMetricsMove: the counters move while the demo processes, and when it
// is done they agree with what the demo's read_committed reader saw, and the
// lag is 0.
func TestMetricsMove(t *testing.T) {
	d := startDemo(t)
	type point struct {
		at      time.Duration
		records float64
	}
	var (
		points []point
		last   *exposition
		start  = time.Now()
	)
	for !d.exited() {
		e, err := scrapeMetrics(d.url("/metrics"))
		if err != nil {
			if d.exited() {
				break
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		last = e
		n, _ := e.sum("processor_records_total", nil)
		points = append(points, point{time.Since(start), n})
		time.Sleep(50 * time.Millisecond)
	}
	d.wait(t, 60*time.Second)
	if last == nil {
		t.Fatal("no successful scrape")
	}
	sum, err := parseSummary(d.stdout.String())
	if err != nil {
		t.Fatalf("demo output: %v\n%s", err, tail(d.stdout.String(), 5))
	}

	// Moving: two scrapes during processing, the second with more records.
	var moves []string
	for i := 1; i < len(points); i++ {
		if a, b := points[i-1], points[i]; a.records > 0 && b.records > a.records {
			moves = append(moves, fmt.Sprintf("%.0f@%s->%.0f@%s", a.records, a.at.Round(time.Millisecond), b.records, b.at.Round(time.Millisecond)))
		}
	}
	if len(moves) == 0 {
		t.Errorf("processor_records_total never grew between two scrapes while the demo ran (%d scrapes: %v)", len(points), points)
	} else {
		t.Logf("%d scrapes; processor_records_total grew %d times, first %s", len(points), len(moves), moves[0])
	}

	// Done: the last scrape has every input record, counted once.
	total, _ := last.sum("processor_records_total", nil)
	if int(total) != sum.sent {
		t.Errorf("sum(processor_records_total) = %.0f at the end, the demo sent %d records", total, sum.sent)
	}
	byOutcome := last.by("processor_records_total", "outcome")
	dead := byOutcome["dead_lettered"]
	dlqBy := last.by("processor_dlq_records_total", "reason")
	var dlq float64
	for reason, n := range dlqBy {
		dlq += n
		if int(n) != sum.dlqBy[reason] {
			t.Errorf("processor_dlq_records_total{reason=%q} = %.0f, the demo read %d such dead letters", reason, n, sum.dlqBy[reason])
		}
	}
	if int(dlq) != sum.deadLetters || int(dead) != sum.deadLetters {
		t.Errorf("dead letters: sum(processor_dlq_records_total) = %.0f, processor_records_total{outcome=\"dead_lettered\"} = %.0f, the demo read %d", dlq, dead, sum.deadLetters)
	}
	if int(byOutcome["too_late"]) != sum.tooLate {
		t.Errorf("processor_records_total{outcome=\"too_late\"} = %.0f, the demo read %d too-late records", byOutcome["too_late"], sum.tooLate)
	}
	alertsBy := last.by("processor_alerts_revisions_total", "status")
	var alerts float64
	for status, n := range alertsBy {
		alerts += n
		if int(n) != sum.alertsBy[status] {
			t.Errorf("processor_alerts_revisions_total{status=%q} = %.0f, the demo read %d", status, n, sum.alertsBy[status])
		}
	}
	if int(alerts) != sum.alerts || sum.alerts == 0 {
		t.Errorf("sum(processor_alerts_revisions_total) = %.0f, the demo read %d alert revisions", alerts, sum.alerts)
	}
	if n, _ := last.sum("processor_alert_latency_seconds_count", nil); n != alerts {
		t.Errorf("processor_alert_latency_seconds_count = %.0f, want one observation per alert revision (%.0f)", n, alerts)
	}

	// Per partition: three partitions, lag 0, a watermark, no open incident.
	for _, name := range []string{"processor_consumer_lag_records", "processor_watermark_seconds", "processor_open_incidents", "processor_state_keys"} {
		if got := last.by(name, "partition"); len(got) != 3 {
			t.Errorf("%s has series for partitions %v, want 0, 1 and 2", name, keys(got))
		}
	}
	for p, lag := range last.by("processor_consumer_lag_records", "partition") {
		if lag != 0 {
			t.Errorf("processor_consumer_lag_records{partition=%q} = %.0f at the end, want 0", p, lag)
		}
	}
	for p, w := range last.by("processor_watermark_seconds", "partition") {
		if w < float64(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Unix()) {
			t.Errorf("processor_watermark_seconds{partition=%q} = %v, want an event time (seconds since the epoch)", p, w)
		}
	}
	if n, _ := last.sum("processor_open_incidents", nil); n != 0 {
		t.Errorf("sum(processor_open_incidents) = %.0f at the end; the demo's quiet tail closes every incident", n)
	}
	if n, _ := last.sum("processor_txn_total", map[string]string{"result": "committed"}); n < 1 {
		t.Errorf(`processor_txn_total{result="committed"} = %.0f, want > 0`, n)
	}
	if n, _ := last.sum("processor_restore_total", nil); n != 3 {
		t.Errorf("processor_restore_total = %.0f, want 3 (one per assigned partition at start)", n)
	}
	if n, _ := last.sum("processor_restore_in_progress", nil); n != 0 {
		t.Errorf("processor_restore_in_progress = %.0f at the end, want 0", n)
	}
	t.Logf("end: %.0f records %v, %.0f dead letters, %.0f alert revisions %v; demo read %d records, %d dead letters, %d alert revisions",
		total, byOutcome, dlq, alerts, alertsBy, sum.sent, sum.deadLetters, sum.alerts)
}

// TestStatusPageInChromium loads the status page of the running demo in
// headless Chromium and checks what it shows.
//
// Chromium needs a few seconds to start, about as long as the demo runs, so
// it is started first, on a local gate URL that holds its request; the demo
// starts once Chromium is waiting there, and the gate redirects it to the
// status page as soon as the demo has committed records on all three
// partitions and an alert. The page Chromium renders is the processor's
// own, loaded live.
func TestStatusPageInChromium(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("headless Chromium is required at %s (%v): install it with `apt-get install -y --no-install-recommends chromium` (Debian)", chromiumPath, err)
	}
	processorBinary(t) // built before the clock below starts
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	open := make(chan struct{})    // closed when the page has something to show
	arrived := make(chan struct{}) // closed when Chromium asks the gate
	var arrivedOnce sync.Once
	var target string
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/status" {
			arrivedOnce.Do(func() { close(arrived) })
		}
		select {
		case <-open:
			http.Redirect(w, r, target, http.StatusFound)
		case <-r.Context().Done():
		case <-ctx.Done():
			http.Error(w, "the demo never showed partitions and alerts", http.StatusGatewayTimeout)
		}
	}))
	defer func() {
		cancel() // first: the gate handler and Chromium must not hold Close up
		gate.Close()
	}()

	type result struct {
		dom string
		err error
	}
	chromium := make(chan result, 1)
	go func() {
		dom, err := dumpDOM(ctx, gate.URL+"/status")
		chromium <- result{dom, err}
	}()

	select {
	case <-arrived:
	case res := <-chromium:
		t.Fatalf("headless Chromium ended before it loaded the page: %v\n%s", res.err, res.dom)
	case <-ctx.Done():
		t.Fatal("headless Chromium did not request the page within 60s")
	}

	d := startDemo(t)
	target = d.url("/")
	var lastPage string
	for {
		_, body, err := httpGet(d.url("/"))
		if err == nil {
			lastPage = body
			if doc, err := parseHTML(body); err == nil && pageHasContent(doc) {
				break
			}
		}
		if d.exited() || ctx.Err() != nil {
			t.Fatalf("the status page never showed 3 partitions with committed offsets and an alert (demo exited: %v); last page:\n%s\ndemo stderr:\n%s",
				d.exited(), lastPage, tail(d.stderr.String(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(open)

	var res result
	select {
	case res = <-chromium:
	case <-ctx.Done():
		t.Fatal("headless Chromium did not finish within 60s")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	doc, err := parseHTML(res.dom)
	if err != nil {
		t.Fatalf("parse the DOM Chromium dumped: %v\n%s", err, res.dom)
	}
	checkStatusPage(t, doc, res.dom)
	d.wait(t, 60*time.Second)
}

// pageHasContent: 3 partition rows with committed offsets and an alert.
func pageHasContent(doc *node) bool {
	rows := 0
	for _, tr := range doc.all("tr.partition") {
		if c := tr.first(".committed"); c != nil {
			if n, err := strconv.ParseInt(c.textContent(), 10, 64); err == nil && n > 0 {
				rows++
			}
		}
	}
	return rows == 3 && len(doc.all("div.alert")) > 0
}

func checkStatusPage(t *testing.T, doc *node, dom string) {
	t.Helper()
	failed := false
	errorf := func(format string, args ...any) {
		t.Helper()
		failed = true
		t.Errorf(format, args...)
	}
	text := func(sel string) string {
		if n := doc.first(sel); n != nil {
			return n.textContent()
		}
		errorf("no %s element", sel)
		return ""
	}
	if got := text("title"); got != "processor demo-0" {
		errorf("title = %q, want %q", got, "processor demo-0")
	}
	if got := text("#instance"); got != "demo-0" {
		errorf("#instance = %q, want demo-0", got)
	}
	if got := text("#ready"); got != "ready" {
		errorf("#ready = %q, want ready", got)
	}
	if got := text("#rule"); !strings.HasPrefix(got, "vibration-high v") {
		errorf("#rule = %q, want vibration-high v<N>", got)
	}

	table := doc.first("table#partitions")
	if table == nil {
		errorf("no table#partitions")
	} else {
		rows := table.all("tr.partition")
		if len(rows) != 3 {
			errorf("table#partitions has %d partition rows, want 3", len(rows))
		}
		var seen []string
		for _, tr := range rows {
			p := tr.attrs["data-partition"]
			seen = append(seen, p)
			cell := func(class string) string {
				if c := tr.first("." + class); c != nil {
					return c.textContent()
				}
				errorf("partition %s: no .%s cell", p, class)
				return ""
			}
			if n, err := strconv.ParseInt(cell("committed"), 10, 64); err != nil || n <= 0 {
				errorf("partition %s: committed offset %q, want > 0", p, cell("committed"))
			}
			if n, err := strconv.ParseInt(cell("lag"), 10, 64); err != nil || n < 0 {
				errorf("partition %s: lag %q, want a number >= 0", p, cell("lag"))
			}
			if _, err := time.Parse(time.RFC3339, cell("watermark")); err != nil {
				errorf("partition %s: watermark %q, want a time (%v)", p, cell("watermark"), err)
			}
		}
		sort.Strings(seen)
		if strings.Join(seen, ",") != "0,1,2" {
			errorf("partition rows %v, want 0, 1, 2", seen)
		}
	}

	alerts := doc.all("div.alert")
	if len(alerts) == 0 {
		errorf("no div.alert")
	}
	if doc.first("#no-alerts") != nil {
		errorf("#no-alerts shown although there are alerts")
	}
	withThree := 0
	for _, a := range alerts {
		id := a.attrs["data-alert"]
		if id == "" {
			errorf("div.alert without data-alert")
		}
		if rev, err := strconv.Atoi(a.attrs["data-revision"]); err != nil || rev < 0 {
			errorf("alert %s: data-revision %q, want a revision number (0, 1, ...)", id, a.attrs["data-revision"])
		}
		status := ""
		if s := a.first(".status"); s != nil {
			status = s.textContent()
		}
		switch status {
		case "open", "updated", "merged", "closed":
		default:
			errorf("alert %s: status %q", id, status)
		}
		if m := a.first(".machine"); m == nil || m.textContent() == "" {
			errorf("alert %s: no machine", id)
		}
		ev := a.first("table.evidence")
		if ev == nil {
			errorf("alert %s: no evidence table", id)
			continue
		}
		rows := 0
		for _, tr := range ev.all("tr") {
			if len(tr.all("td")) > 0 {
				rows++
			}
		}
		if rows < 3 {
			errorf("alert %s (%s): %d evidence rows, want at least 3 (the rule's threshold)", id, status, rows)
		}
		if rows == 3 {
			withThree++
		}
	}
	if withThree == 0 {
		errorf("no alert with exactly 3 evidence rows")
	}
	if failed {
		t.Logf("DOM from Chromium:\n%s", dom)
		return
	}
	var parts []string
	for _, tr := range doc.all("tr.partition") {
		parts = append(parts, fmt.Sprintf("p%s committed=%s lag=%s watermark=%s", tr.attrs["data-partition"],
			tr.first(".committed").textContent(), tr.first(".lag").textContent(), tr.first(".watermark").textContent()))
	}
	t.Logf("Chromium shows %s, %s, rule %s; %s; %d alerts (%d with 3 evidence rows)",
		text("#instance"), text("#ready"), text("#rule"), strings.Join(parts, "; "), len(alerts), withThree)
}

func keys(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
