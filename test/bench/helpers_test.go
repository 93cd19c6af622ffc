package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ---- knobs -------------------------------------------------------------------

// envInt returns the integer in environment variable name, or def.
func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	s := strings.TrimSpace(os.Getenv(name))
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("bench: %s=%q is not a positive integer", name, s)
	}
	return n
}

// workDir is where a sub-benchmark's processors keep their logs and state:
// a new directory under BENCH_LOG_DIR when set (kept), else a temporary one.
func workDir(b *testing.B) string {
	b.Helper()
	root := os.Getenv("BENCH_LOG_DIR")
	if root == "" {
		return b.TempDir()
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		b.Fatalf("bench: BENCH_LOG_DIR: %v", err)
	}
	dir, err := os.MkdirTemp(root, strings.NewReplacer("/", "_").Replace(b.Name())+"-")
	if err != nil {
		b.Fatalf("bench: BENCH_LOG_DIR: %v", err)
	}
	b.Logf("bench: processor logs and state in %s", dir)
	return dir
}

// ---- topics and groups -------------------------------------------------------

// createTopic creates a topic with partitions partitions and registers its
// deletion on owner (which may be a parent benchmark, so that sub-benchmarks
// share it). It fails b, the running benchmark, on error.
func createTopic(b *testing.B, owner testing.TB, seeds []string, name string, partitions int32) string {
	b.Helper()
	return createTopicWith(b, owner, seeds, name, partitions, nil)
}

// createTopicWith is createTopic with topic configs (nil: the broker's
// defaults).
func createTopicWith(b *testing.B, owner testing.TB, seeds []string, name string, partitions int32, configs map[string]*string) string {
	b.Helper()
	cl := newClient(b, seeds)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, -1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		b.Fatalf("bench: create topic %s: %v", name, err)
	}
	owner.Cleanup(func() { deleteTopicsAndGroup(owner, seeds, "", name) })
	// CreateTopics answers before every partition's leader serves it; a
	// processor started in that window exits ("input topic does not
	// exist"). Wait until the end offsets of every partition can be listed.
	adm := kadm.NewClient(cl)
	for {
		listed, err := adm.ListEndOffsets(ctx, name)
		if err == nil {
			err = listed.Error()
		}
		n := 0
		listed.Each(func(kadm.ListedOffset) { n++ })
		if err == nil && n == int(partitions) {
			return name
		}
		if ctx.Err() != nil {
			b.Fatalf("bench: topic %s not served 30 s after its creation: %v", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deleteTopicsAndGroup deletes topics (missing ones are fine) and, if not
// empty, group. Errors are logged: the figures are already measured.
// BENCH_KEEP_TOPICS=1 keeps them, to look at what a run wrote.
func deleteTopicsAndGroup(tb testing.TB, seeds []string, group string, topics ...string) {
	if os.Getenv("BENCH_KEEP_TOPICS") == "1" {
		tb.Logf("clean-up: BENCH_KEEP_TOPICS=1: keeping group %q and topics %s", group, strings.Join(topics, ", "))
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		tb.Logf("clean-up: %v", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(topics) > 0 {
		resps, err := adm.DeleteTopics(ctx, topics...)
		if err != nil {
			tb.Logf("clean-up: delete topics: %v", err)
		}
		for _, r := range resps {
			if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
				tb.Logf("clean-up: delete topic %s: %v", r.Topic, r.Err)
			}
		}
	}
	if group != "" {
		if _, err := adm.DeleteGroups(ctx, group); err != nil {
			tb.Logf("clean-up: delete group %s: %v", group, err)
		}
	}
}

func newClient(b *testing.B, seeds []string, opts ...kgo.Opt) *kgo.Client {
	b.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		b.Fatalf("bench: new client: %v", err)
	}
	b.Cleanup(cl.Close)
	return cl
}

// endOffsets returns the high watermark of every partition of topic.
func endOffsets(b *testing.B, adm *kadm.Client, topic string) map[int32]int64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listed, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		b.Fatalf("bench: list end offsets of %s: %v", topic, err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		if o.Topic == topic {
			ends[o.Partition] = o.Offset
		}
	})
	return ends
}

func sum(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// committed returns the group's committed offsets of topic's partitions in
// ends (-1 where none), their sum (of the non-negative ones) and whether
// every partition reached its end offset.
func committed(adm *kadm.Client, group, topic string, ends map[int32]int64) (at map[int32]int64, total int64, done bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return nil, 0, false, err
	}
	at = map[int32]int64{}
	done = len(ends) > 0
	for p, end := range ends {
		o := int64(-1)
		if r, ok := offs.Lookup(topic, p); ok {
			o = r.At
		}
		at[p] = o
		if o > 0 {
			total += o
		}
		if o < end {
			done = false
		}
	}
	return at, total, done, nil
}

func progress(at, ends map[int32]int64) string {
	var b strings.Builder
	for _, p := range slices.Sorted(func(yield func(int32) bool) {
		for p := range ends {
			if !yield(p) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "p%d %d/%d ", p, at[p], ends[p])
	}
	return strings.TrimSpace(b.String())
}

// ---- processes ---------------------------------------------------------------

// proc is one processor OS process.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	metrics string // host:port of /metrics
	exited  chan struct{}
	waitErr error
	mu      sync.Mutex
	asked   bool
}

// startProc starts bin run with env (on top of the benchmark's environment
// without PROCESSOR_* variables) and kills it when b ends.
func startProc(b *testing.B, name, bin, dir string, env []string) *proc {
	b.Helper()
	addr := freeAddr(b)
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		b.Fatalf("bench: %v", err)
	}
	cmd := exec.Command(bin, "run")
	cmd.Env = append(cleanEnv(), env...)
	cmd.Env = append(cmd.Env, "PROCESSOR_METRICS_ADDR="+addr)
	profDir := os.Getenv("BENCH_PROFILE_DIR")
	if profDir != "" {
		cmd.Env = append(cmd.Env, "PROCESSOR_METRICS_PPROF=true")
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		b.Fatalf("bench: start %s: %v", bin, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, metrics: addr, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	b.Cleanup(func() { p.signal(syscall.SIGKILL); <-p.exited })
	if profDir != "" {
		go p.profile(filepath.Join(profDir, name+".cpu"))
	}
	return p
}

// profile writes a 7 s CPU profile of the processor, taken from 2 s after
// its start, to path, then its allocation profile (since start) beside it
// as .allocs (knob BENCH_PROFILE_DIR; the processor serves /debug/pprof/
// with metrics_pprof). With BENCH_TRACE set, a 3 s execution trace
// (runtime/trace, .trace) comes first, from 2 s after the start, and the
// CPU profile follows it. A failure is logged to stderr only: a profile
// is an aid, not a result.
func (p *proc) profile(path string) {
	select {
	case <-p.exited:
		return
	case <-time.After(2 * time.Second):
	}
	base := strings.TrimSuffix(path, ".cpu")
	type query struct{ url, path string }
	var qs []query
	if os.Getenv("BENCH_TRACE") != "" {
		qs = append(qs, query{"/debug/pprof/trace?seconds=3", base + ".trace"})
	}
	qs = append(qs,
		query{"/debug/pprof/profile?seconds=7", path},
		query{"/debug/pprof/allocs", base + ".allocs"}, // since start
	)
	for _, q := range qs {
		if err := fetchTo("http://"+p.metrics+q.url, q.path); err != nil {
			fmt.Fprintf(os.Stderr, "bench: profile of %s: %v\n", p.name, err)
			return
		}
	}
}

// fetchTo writes the body of a GET of url to path.
func fetchTo(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PROCESSOR_") {
			env = append(env, kv)
		}
	}
	return env
}

func freeAddr(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatalf("bench: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	p.asked = true
	p.mu.Unlock()
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// failed reports whether the process exited without being asked to.
func (p *proc) failed() bool {
	p.mu.Lock()
	asked := p.asked
	p.mu.Unlock()
	select {
	case <-p.exited:
		return !asked
	default:
		return false
	}
}

// stop sends SIGTERM (the open batch commits) and waits up to 30 s, then
// SIGKILL. It returns the process's CPU time (user + system).
func (p *proc) stop(b *testing.B) time.Duration {
	b.Helper()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		b.Logf("bench: %s did not stop within 30 s of SIGTERM; killing it", p.name)
		p.signal(syscall.SIGKILL)
		<-p.exited
	}
	if p.waitErr != nil {
		b.Logf("bench: %s exited with %v after SIGTERM (want exit 0); last lines of its log:\n%s", p.name, p.waitErr, p.tail(8))
	}
	if st := p.cmd.ProcessState; st != nil {
		return st.UserTime() + st.SystemTime()
	}
	return 0
}

func (p *proc) tail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitReady polls /readyz until it answers 200.
func (p *proc) waitReady(b *testing.B, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if p.failed() {
			b.Fatalf("bench: %s exited (%v):\n%s", p.name, p.waitErr, p.tail(30))
		}
		resp, err := http.Get("http://" + p.metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("bench: %s not ready after %v:\n%s", p.name, timeout, p.tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---- the processor's own metrics ----------------------------------------------

// procMetrics is what the benchmark reads from the processors' /metrics.
type procMetrics struct {
	txnCommitted, txnAborted float64
	commitCount, commitSum   float64
	buckets                  map[float64]float64 // le -> cumulative count
	alertRevisions           float64
}

func (m *procMetrics) add(o procMetrics) {
	m.txnCommitted += o.txnCommitted
	m.txnAborted += o.txnAborted
	m.commitCount += o.commitCount
	m.commitSum += o.commitSum
	m.alertRevisions += o.alertRevisions
	if m.buckets == nil {
		m.buckets = map[float64]float64{}
	}
	for le, n := range o.buckets {
		m.buckets[le] += n
	}
}

// commitQuantile estimates the q-quantile of the transaction commit duration
// (flush + end) from the histogram, by linear interpolation in its bucket.
func (m *procMetrics) commitQuantile(q float64) time.Duration {
	if m.commitCount == 0 {
		return 0
	}
	les := make([]float64, 0, len(m.buckets))
	for le := range m.buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	rank := q * m.commitCount
	prevLE, prevN := 0.0, 0.0
	for _, le := range les {
		n := m.buckets[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				return time.Duration(prevLE * float64(time.Second))
			}
			frac := 0.0
			if n > prevN {
				frac = (rank - prevN) / (n - prevN)
			}
			return time.Duration((prevLE + frac*(le-prevLE)) * float64(time.Second))
		}
		prevLE, prevN = le, n
	}
	return time.Duration(prevLE * float64(time.Second))
}

// slowCommits counts the commits that took more than about a second (the
// histogram bucket boundary at or above 1 s).
func (m *procMetrics) slowCommits() float64 {
	le := math.Inf(1)
	for b := range m.buckets {
		if b >= 1 && b < le {
			le = b
		}
	}
	if math.IsInf(le, 1) {
		return 0
	}
	return m.commitCount - m.buckets[le]
}

func (m *procMetrics) commitMean() time.Duration {
	if m.commitCount == 0 {
		return 0
	}
	return time.Duration(m.commitSum / m.commitCount * float64(time.Second))
}

// scrape reads the processor's /metrics (Prometheus text format).
func (p *proc) scrape() (procMetrics, error) {
	m := procMetrics{buckets: map[float64]float64{}}
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name, v := line[:i], line[i+1:]
		val, err := strconv.ParseFloat(v, 64)
		if err != nil {
			continue
		}
		switch {
		case name == `processor_txn_total{result="committed"}`:
			m.txnCommitted = val
		case name == `processor_txn_total{result="aborted"}`:
			m.txnAborted = val
		case name == "processor_txn_commit_duration_seconds_count":
			m.commitCount = val
		case name == "processor_txn_commit_duration_seconds_sum":
			m.commitSum = val
		case strings.HasPrefix(name, "processor_txn_commit_duration_seconds_bucket{le="):
			le := strings.TrimSuffix(strings.TrimPrefix(name, `processor_txn_commit_duration_seconds_bucket{le="`), `"}`)
			f, err := strconv.ParseFloat(le, 64)
			if err == nil {
				m.buckets[f] = val
			}
		case strings.HasPrefix(name, "processor_alerts_revisions_total{"):
			m.alertRevisions += val
		}
	}
	return m, nil
}

// ---- the machine -------------------------------------------------------------

// cpuSample is the machine's and the broker's CPU counters at one instant.
type cpuSample struct {
	at          time.Time
	busy, total float64 // /proc/stat jiffies of all CPUs
	broker      float64 // broker process utime+stime, seconds (-1: unknown)
	load        string
}

// clkTck is USER_HZ, 100 on every Linux architecture Go supports.
const clkTck = 100

func sampleCPU(brokerPID int) cpuSample {
	s := cpuSample{at: time.Now(), broker: -1, load: loadavg()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i, v := range f[1:] {
			n, _ := strconv.ParseFloat(v, 64)
			if i >= 8 { // guest time is already in user
				break
			}
			s.total += n
			if i != 3 && i != 4 { // idle, iowait
				s.busy += n
			}
		}
	}
	if brokerPID > 0 {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", brokerPID)); err == nil {
			// Fields after the command name, which is in parentheses.
			rest := string(b)
			if i := strings.LastIndexByte(rest, ')'); i >= 0 {
				f := strings.Fields(rest[i+1:])
				if len(f) > 12 {
					u, _ := strconv.ParseFloat(f[11], 64)
					st, _ := strconv.ParseFloat(f[12], 64)
					s.broker = (u + st) / clkTck
				}
			}
		}
	}
	return s
}

// cpuDelta is what happened between two samples.
type cpuDelta struct {
	wall       time.Duration
	busy       float64 // fraction of all CPUs busy, 0..1
	brokerCPU  time.Duration
	haveBroker bool
	load       string // load averages at the end
}

func (a cpuSample) to(b cpuSample) cpuDelta {
	d := cpuDelta{wall: b.at.Sub(a.at), load: b.load}
	if b.total > a.total {
		d.busy = (b.busy - a.busy) / (b.total - a.total)
	}
	if a.broker >= 0 && b.broker >= 0 {
		d.haveBroker = true
		d.brokerCPU = time.Duration((b.broker - a.broker) * float64(time.Second))
	}
	return d
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// findBrokerPID returns the pid of a scripts/kafka.sh broker (kafka.Kafka)
// whose server.properties listens on port, or 0. Best effort: it only feeds
// the broker CPU column.
func findBrokerPID(port string) int {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), "kafka.Kafka") {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		props, err := os.ReadFile(args[len(args)-1])
		if err != nil {
			continue
		}
		if strings.Contains(string(props), "PLAINTEXT://127.0.0.1:"+port+"\n") {
			return pid
		}
	}
	return 0
}

// ---- statistics ----------------------------------------------------------------

// quantile returns the q-quantile (nearest rank) of sorted.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
