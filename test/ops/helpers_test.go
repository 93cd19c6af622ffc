package ops

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ---- the processor binary ----------------------------------------------------------

var (
	tmpRoot   string // removed when the tests end
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	var err error
	tmpRoot, err = os.MkdirTemp("", "processor-ops-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "ops: temp dir:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

// repoRoot is the module root (the directory of go.mod above this package).
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// processorBinary builds ./cmd/processor once per test run.
func processorBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("go not on PATH: %w", err)
			return
		}
		binPath = filepath.Join(tmpRoot, "processor")
		cmd := exec.Command(goBin, "build", "-o", binPath, "./cmd/processor")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/processor: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// ---- the demo ------------------------------------------------------------------------

// syncBuffer is a bytes.Buffer safe for a writing process and a reading test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// demo is a running `processor demo --http ADDR`.
type demo struct {
	addr           string // host:port of the status page and /metrics
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{} // closed when the process exited
	waitErr        error         // valid after done
}

// The demo's size: about 216k input records, a few seconds of processing.
var demoArgs = []string{"demo", "--minutes", "60", "--machines", "30"}

// startDemo starts the demo on a free local port and waits until it serves
// /healthz. It is killed when the test ends if it is still running.
func startDemo(t *testing.T) *demo {
	t.Helper()
	bin := processorBinary(t)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a port taken in between: try another
		d, err := tryStartDemo(t, bin)
		if err == nil {
			return d
		}
		lastErr = err
	}
	t.Fatal(lastErr)
	return nil
}

func tryStartDemo(t *testing.T, bin string) (*demo, error) {
	addr := freeAddr(t)
	dir, err := os.MkdirTemp(tmpRoot, "demo-")
	if err != nil {
		t.Fatal(err)
	}
	d := &demo{addr: addr, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(bin, append(append([]string{}, demoArgs...), "--http", addr)...)
	d.cmd.Dir = dir
	// The demo's state directory goes below TMPDIR: keep it inside tmpRoot.
	d.cmd.Env = append(os.Environ(), "TMPDIR="+dir)
	d.cmd.Stdout, d.cmd.Stderr = d.stdout, d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			d.cmd.Process.Kill()
			<-d.done
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			return nil, fmt.Errorf("demo exited before serving http://%s/healthz (%v); stderr:\n%s", addr, d.waitErr, tail(d.stderr.String(), 20))
		default:
		}
		if code, _, err := httpGet(d.url("/healthz")); err == nil && code == http.StatusOK {
			return d, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("demo did not serve http://%s/healthz within 30s; stderr:\n%s", addr, tail(d.stderr.String(), 20))
	return nil, nil
}

func (d *demo) url(path string) string { return "http://" + d.addr + path }

func (d *demo) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// wait waits for the demo to exit by itself and fails the test unless it
// exited with 0.
func (d *demo) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-d.done:
	case <-time.After(timeout):
		t.Fatalf("demo still running after %s", timeout)
	}
	if d.waitErr != nil {
		t.Fatalf("demo failed: %v; stderr:\n%s\nstdout (end):\n%s", d.waitErr, tail(d.stderr.String(), 20), tail(d.stdout.String(), 5))
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func httpGet(url string) (int, string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// demoSummary is what the demo's read_committed reader reported on stdout.
type demoSummary struct {
	sent        int
	alerts      int
	alertsBy    map[string]int
	deadLetters int
	dlqBy       map[string]int
	tooLate     int
}

var (
	sentRe    = regexp.MustCompile(`simulated line sent (\d+) records`)
	summaryRe = regexp.MustCompile(`summary: (\d+) alert revisions \(([^)]*)\), (\d+) dead letters \(([^)]*)\), (\d+) too-late records`)
)

func parseSummary(stdout string) (demoSummary, error) {
	var s demoSummary
	m := sentRe.FindStringSubmatch(stdout)
	if m == nil {
		return s, errors.New(`no "simulated line sent N records" line`)
	}
	s.sent, _ = strconv.Atoi(m[1])
	m = summaryRe.FindStringSubmatch(stdout)
	if m == nil {
		return s, errors.New(`no "summary: ..." line`)
	}
	s.alerts, _ = strconv.Atoi(m[1])
	s.deadLetters, _ = strconv.Atoi(m[3])
	s.tooLate, _ = strconv.Atoi(m[5])
	var err error
	if s.alertsBy, err = parseCounts(m[2]); err != nil {
		return s, err
	}
	if s.dlqBy, err = parseCounts(m[4]); err != nil {
		return s, err
	}
	return s, nil
}

// parseCounts parses "a=1, b=2".
func parseCounts(s string) (map[string]int, error) {
	out := map[string]int{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ", ") {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			return nil, fmt.Errorf("bad count %q in %q", kv, s)
		}
		out[k] = n
	}
	return out, nil
}

// ---- Prometheus text exposition ---------------------------------------------------

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// exposition is one scrape of /metrics.
type exposition struct {
	types   map[string]string // family name -> counter, gauge, histogram, ...
	samples []sample
}

func scrapeMetrics(url string) (*exposition, error) {
	code, body, err := httpGet(url)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d", url, code)
	}
	return parseExposition(body)
}

// parseExposition parses the Prometheus text format (version 0.0.4), as
// much of it as client_golang writes.
func parseExposition(text string) (*exposition, error) {
	e := &exposition{types: map[string]string{}}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			f := strings.Fields(line)
			if len(f) >= 4 && f[1] == "TYPE" {
				e.types[f[2]] = f[3]
			}
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", i+1, line, err)
		}
		e.samples = append(e.samples, s)
	}
	return e, nil
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	end := strings.IndexAny(line, "{ ")
	if end <= 0 {
		return s, errors.New("no metric name")
	}
	s.name, line = line[:end], line[end:]
	if strings.HasPrefix(line, "{") {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ,")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.Index(line, `="`)
			if eq <= 0 {
				return s, errors.New("bad label")
			}
			key := line[:eq]
			line = line[eq+2:]
			var val strings.Builder
			closed := false
			for i := 0; i < len(line); i++ {
				c := line[i]
				if c == '\\' && i+1 < len(line) {
					i++
					switch line[i] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(line[i])
					}
					continue
				}
				if c == '"' {
					line, closed = line[i+1:], true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return s, errors.New("unterminated label value")
			}
			s.labels[key] = val.String()
		}
	}
	f := strings.Fields(line)
	if len(f) < 1 {
		return s, errors.New("no value")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, err
	}
	s.value = v
	return s, nil
}

// sum adds the values of the samples of name whose labels include match.
func (e *exposition) sum(name string, match map[string]string) (float64, int) {
	var total float64
	n := 0
	for _, s := range e.samples {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range match {
			if s.labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			total += s.value
			n++
		}
	}
	return total, n
}

// by returns the values of name keyed by one label.
func (e *exposition) by(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range e.samples {
		if s.name == name {
			out[s.labels[label]] += s.value
		}
	}
	return out
}

// ---- metric names referenced by the monitoring files ---------------------------------

var metricNameRe = regexp.MustCompile(`\bprocessor_[a-z0-9_]+`)

// promqlNames returns the processor_* identifiers in PromQL expressions.
func promqlNames(exprs []string) []string {
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, n := range metricNameRe.FindAllString(e, -1) {
			seen[n] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// alertExprs extracts the expr: values of a Prometheus rule file, crudely
// (line-based YAML): `expr: inline` and block scalars `expr: |` / `expr: >-`.
func alertExprs(yml string) []string {
	var out []string
	lines := strings.Split(yml, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimLeft(line, " ")
		if !strings.HasPrefix(trimmed, "expr:") && !strings.HasPrefix(trimmed, "- expr:") {
			continue
		}
		indent := len(line) - len(trimmed)
		_, val, _ := strings.Cut(trimmed, "expr:")
		val = strings.TrimSpace(val)
		if val == "" || strings.HasPrefix(val, "|") || strings.HasPrefix(val, ">") {
			var block []string
			for i+1 < len(lines) {
				next := lines[i+1]
				nt := strings.TrimLeft(next, " ")
				if nt != "" && len(next)-len(nt) <= indent {
					break
				}
				block = append(block, nt)
				i++
			}
			val = strings.Join(block, "\n")
		}
		out = append(out, strings.Trim(val, `"'`))
	}
	return out
}

// dashboardExprs returns every query of a Grafana dashboard JSON value:
// targets' expr and template variables' query/definition strings.
func dashboardExprs(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if s, ok := val.(string); ok && (k == "expr" || k == "query" || k == "definition") {
				out = append(out, s)
				continue
			}
			out = append(out, dashboardExprs(val)...)
		}
	case []any:
		for _, val := range x {
			out = append(out, dashboardExprs(val)...)
		}
	}
	return out
}

// missingMetrics returns the referenced names the scrapes do not provide,
// each with the reason. A name ending in _bucket must belong to a histogram
// family, one in _sum or _count to a histogram or summary; a histogram or
// summary family referenced bare selects nothing and is reported too.
func missingMetrics(refs []string, types map[string]string, sampleNames map[string]bool) []string {
	var missing []string
	for _, n := range refs {
		if base, suffix, ok := cutHistogramSuffix(n); ok {
			typ := types[base]
			switch {
			case suffix == "_bucket" && typ == "histogram", (suffix == "_sum" || suffix == "_count") && (typ == "histogram" || typ == "summary"):
				if !sampleNames[n] {
					missing = append(missing, fmt.Sprintf("%s: %s family %s has no %s samples", n, typ, base, suffix))
				}
				continue
			case typ != "":
				missing = append(missing, fmt.Sprintf("%s: %s is a %s, it has no %s series", n, base, typ, suffix))
				continue
			}
			// not a histogram suffix after all (e.g. a counter named *_count)
		}
		switch {
		case types[n] == "histogram" || types[n] == "summary":
			missing = append(missing, fmt.Sprintf("%s: a %s, select %s_bucket, _sum or _count", n, types[n], n))
		case !sampleNames[n] && types[n] == "":
			missing = append(missing, n+": not in /metrics")
		}
	}
	return missing
}

func cutHistogramSuffix(n string) (base, suffix string, ok bool) {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, found := strings.CutSuffix(n, s); found {
			return b, s, true
		}
	}
	return "", "", false
}

// ---- a small DOM ---------------------------------------------------------------------

type node struct {
	tag      string // "" for text nodes
	attrs    map[string]string
	text     string
	children []*node
}

// parseHTML builds a tree from HTML as browsers serialise it (void elements
// unclosed, entities), with encoding/xml in its lenient HTML mode.
func parseHTML(src string) (*node, error) {
	dec := xml.NewDecoder(strings.NewReader(src))
	dec.Strict = false
	dec.AutoClose = xml.HTMLAutoClose
	dec.Entity = xml.HTMLEntity
	root := &node{tag: "#document"}
	stack := []*node{root}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		top := stack[len(stack)-1]
		switch tk := tok.(type) {
		case xml.StartElement:
			n := &node{tag: strings.ToLower(tk.Name.Local), attrs: map[string]string{}}
			for _, a := range tk.Attr {
				n.attrs[strings.ToLower(a.Name.Local)] = a.Value
			}
			top.children = append(top.children, n)
			stack = append(stack, n)
		case xml.EndElement:
			name := strings.ToLower(tk.Name.Local)
			for i := len(stack) - 1; i > 0; i-- {
				if stack[i].tag == name {
					stack = stack[:i]
					break
				}
			}
		case xml.CharData:
			top.children = append(top.children, &node{text: string(tk)})
		}
	}
	return root, nil
}

func (n *node) hasClass(c string) bool {
	for _, f := range strings.Fields(n.attrs["class"]) {
		if f == c {
			return true
		}
	}
	return false
}

// textContent is the node's text with whitespace collapsed.
func (n *node) textContent() string {
	var b strings.Builder
	var walk func(*node)
	walk = func(x *node) {
		if x.tag == "" {
			b.WriteString(x.text)
		}
		for _, c := range x.children {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

// all returns the descendants matching sel, in document order. sel is
// "tag", ".class", "#id", "tag.class" or "tag#id".
func (n *node) all(sel string) []*node {
	tag, rest := sel, ""
	if i := strings.IndexAny(sel, ".#"); i >= 0 {
		tag, rest = sel[:i], sel[i:]
	}
	match := func(x *node) bool {
		if x.tag == "" || (tag != "" && x.tag != tag) {
			return false
		}
		switch {
		case strings.HasPrefix(rest, "."):
			return x.hasClass(rest[1:])
		case strings.HasPrefix(rest, "#"):
			return x.attrs["id"] == rest[1:]
		}
		return true
	}
	var out []*node
	var walk func(*node)
	walk = func(x *node) {
		for _, c := range x.children {
			if match(c) {
				out = append(out, c)
			}
			walk(c)
		}
	}
	walk(n)
	return out
}

func (n *node) first(sel string) *node {
	if all := n.all(sel); len(all) > 0 {
		return all[0]
	}
	return nil
}

// ---- headless Chromium -----------------------------------------------------------------

const chromiumPath = "/usr/bin/chromium"

// dumpDOM loads url in headless Chromium and returns the serialised DOM
// after the load event.
func dumpDOM(ctx context.Context, url string) (string, error) {
	profile, err := os.MkdirTemp(tmpRoot, "chromium-")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, chromiumPath,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", // containers often have a tiny /dev/shm
		"--user-data-dir="+profile, "--dump-dom", url)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HOME="+profile)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s --dump-dom %s: %v; stderr:\n%s", chromiumPath, url, err, tail(stderr.String(), 15))
	}
	if stdout.Len() == 0 {
		return "", fmt.Errorf("%s --dump-dom %s printed nothing; stderr:\n%s", chromiumPath, url, tail(stderr.String(), 15))
	}
	return stdout.String(), nil
}
