package e2e

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/config"
	evt "github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/test/e2e/harness"
)

// scrape returns the samples of a Prometheus text exposition: name{labels} -> value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	m, err := tryScrape(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return m
}

// tryScrape is scrape without failing the test (an instance about to be
// killed may not serve yet).
func tryScrape(url string) (map[string]float64, error) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// sum adds the samples of metric whose labels contain every filter.
func sum(samples map[string]float64, metric string, filters ...string) float64 {
	var s float64
	for k, v := range samples {
		if !strings.HasPrefix(k, metric+"{") && k != metric {
			continue
		}
		ok := true
		for _, f := range filters {
			if !strings.Contains(k, f) {
				ok = false
			}
		}
		if ok {
			s += v
		}
	}
	return s
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The operator's view on a real broker: the processor runs, the load
// generator drives it, and /metrics moves as it should: lag falls to zero,
// the outcome counters add up to the records sent, the too-late and
// dead-letter counters equal the records in those topics, and each
// partition's watermark follows the data (max event time - delay).
func TestMetricsMoveOnRealBroker(t *testing.T) {
	t.Parallel()
	seeds := harness.Bootstrap(t)
	input := newInput(t, seeds, "e2e-metrics-in", 3)
	rule := config.Default().Rule
	rule.AllowedLateness = time.Minute // the load generator's 2-minute gateway outages become too late
	addr := freeAddr(t)
	d := newDeployment(t, seeds, input, "metrics", rule, "PROCESSOR_METRICS_ADDR="+addr)
	p := d.start("m-0", d.stateDir("m-0"))
	url := "http://" + addr + "/metrics"
	waitFor(t, d, 60*time.Second, "the metrics endpoint", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	const n = 30_000
	gen := exec.Command(d.bin, "loadgen", "--brokers", strings.Join(seeds, ","), "--topic", input,
		"--count", strconv.Itoa(n), "--machines", "60", "--rate", "10000", "--seed", "11", "--episode-rate", "0.05")
	gen.Env = cleanEnv()
	genOut, genErr := make(chan []byte, 1), make(chan error, 1)
	go func() { out, err := gen.CombinedOutput(); genOut <- out; genErr <- err }()
	var maxLag float64
	for running := true; running; {
		select {
		case err := <-genErr:
			if out := <-genOut; err != nil {
				t.Fatalf("loadgen: %v\n%s", err, out)
			}
			running = false
		case <-time.After(300 * time.Millisecond):
			maxLag = max(maxLag, sum(scrape(t, url), "processor_consumer_lag_records"))
		}
	}
	log, ends := readLog(t, seeds, input)
	waitConsumed(t, d, ends, 90*time.Second)
	// The committed batch that brought lag to zero is scraped after its commit.
	var m map[string]float64
	waitFor(t, d, 10*time.Second, "lag 0 in /metrics", func() bool {
		m = scrape(t, url)
		return sum(m, "processor_records_total") == n && sum(m, "processor_consumer_lag_records") == 0
	})
	t.Logf("max lag seen while loading: %.0f records", maxLag)

	got := readOutputs(t, d)
	wantLate, wantDLQ := len(got.late), len(got.dlq)
	if v := sum(m, "processor_records_total", `outcome="too_late"`); int(v) != wantLate || wantLate == 0 {
		t.Errorf("too_late counter %v, late topic holds %d records (want equal and > 0)", v, wantLate)
	}
	if v := sum(m, "processor_records_total", `outcome="dead_lettered"`); int(v) != wantDLQ || wantDLQ == 0 {
		t.Errorf("dead_lettered counter %v, DLQ holds %d records (want equal and > 0)", v, wantDLQ)
	}
	if v := sum(m, "processor_dlq_records_total"); int(v) != wantDLQ {
		t.Errorf("processor_dlq_records_total %v, DLQ holds %d", v, wantDLQ)
	}
	if v := sum(m, "processor_alerts_revisions_total"); int(v) != len(got.alerts) || v == 0 {
		t.Errorf("alert revision counter %v, alerts topic holds %d", v, len(got.alerts))
	}
	if v := sum(m, "processor_txn_total", `result="committed"`); v < 1 {
		t.Errorf("no committed transaction counted: %v", v)
	}

	// Watermark per partition = max event time of the decodable records - D.
	valid := evt.NewValidator(evt.JSONDecoder{}, evt.Options{MaxFutureSkewMs: rule.MaxFutureSkew.Milliseconds()})
	for part, recs := range log {
		maxTS := int64(math.MinInt64)
		for _, in := range recs {
			if ev, err := valid.Check(in.Key, in.Value, in.TimestampMs); err == nil {
				maxTS = max(maxTS, ev.TS)
			}
		}
		want := float64(maxTS-rule.WatermarkDelay.Milliseconds()) / 1000
		gotW := m[fmt.Sprintf(`processor_watermark_seconds{partition="%d"}`, part)]
		if math.Abs(gotW-want) > 0.002 {
			t.Errorf("partition %d watermark %.3f, want %.3f (max event time - %s)", part, gotW, want, rule.WatermarkDelay)
		}
		if age := m[fmt.Sprintf(`processor_watermark_lag_seconds{partition="%d"}`, part)]; age <= 0 {
			t.Errorf("partition %d watermark lag %v, want > 0 (the simulated events lie in the past)", part, age)
		}
	}
	if v := sum(m, "processor_alert_latency_seconds_count"); int(v) != len(got.alerts) {
		t.Errorf("alert latency observations %v, alert revisions %d", v, len(got.alerts))
	}
	p.stop(t, d)
}
