package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/test/e2e/harness"
)

// stopTimeout bounds a graceful stop (SIGTERM: the open batch commits, the
// member leaves the group).
const stopTimeout = 30 * time.Second

// deployment is one processor "cluster": a consumer group with its own
// output, dead-letter, late and changelog topics, reading a shared input
// topic. Two deployments over the same input (a clean run and a crash run)
// must commit the same records.
type deployment struct {
	t     *testing.T
	name  string
	seeds []string
	bin   string
	env   []string // PROCESSOR_* of every instance, but the instance's own

	group, input                 string
	alerts, dlq, late, changelog string
	rule                         config.Rule
	dir                          string // state directories
	logDir                       string // one log file per incarnation

	mu           sync.Mutex
	procs        []*proc // every incarnation, in start order
	incarnations map[string]int
}

// newDeployment names a deployment's group and topics (the processor creates
// the topics at start-up) and deletes them, and the group, when the test
// ends, after every process of the deployment was killed. Every instance
// runs rule (passed in full as PROCESSOR_RULE_*, so that the reference
// applies exactly the rule the processes run); extra are more PROCESSOR_*
// variables, as "KEY=value".
func newDeployment(t *testing.T, seeds []string, input, name string, rule config.Rule, extra ...string) *deployment {
	t.Helper()
	d := &deployment{
		t: t, name: name, seeds: seeds, bin: harness.BuildBinary(t),
		group:        harness.UniqueName("e2e-" + name),
		input:        input,
		alerts:       harness.UniqueName("e2e-" + name + ".alerts"),
		dlq:          harness.UniqueName("e2e-" + name + ".dlq"),
		late:         harness.UniqueName("e2e-" + name + ".late"),
		changelog:    harness.UniqueName("e2e-" + name + ".changelog"),
		rule:         rule,
		dir:          t.TempDir(),
		logDir:       logDir(t, name),
		incarnations: map[string]int{},
	}
	d.env = []string{
		"PROCESSOR_BROKERS=" + strings.Join(seeds, ","),
		"PROCESSOR_GROUP_ID=" + d.group,
		"PROCESSOR_COMMIT_INTERVAL=100ms",
		"PROCESSOR_SESSION_TIMEOUT=6s",
		"PROCESSOR_TRANSACTION_TIMEOUT=10s",
		"PROCESSOR_STARTUP_TIMEOUT=60s",
		"PROCESSOR_TOPICS_INPUT=" + input,
		"PROCESSOR_TOPICS_ALERTS=" + d.alerts,
		"PROCESSOR_TOPICS_DLQ=" + d.dlq,
		"PROCESSOR_TOPICS_LATE=" + d.late,
		"PROCESSOR_TOPICS_CHANGELOG=" + d.changelog,
	}
	d.env = append(d.env, ruleEnv(rule)...)
	d.env = append(d.env, extra...)
	t.Cleanup(func() { deleteTopicsAndGroup(t, seeds, d.group, d.alerts, d.dlq, d.late, d.changelog) })
	return d
}

// logDir is where a deployment's process logs go: a temporary directory,
// or, when E2E_LOG_DIR is set, <E2E_LOG_DIR>/<test>/<deployment>, kept after
// the test for a post-mortem.
func logDir(t *testing.T, deployment string) string {
	t.Helper()
	base := os.Getenv("E2E_LOG_DIR")
	if base == "" {
		return t.TempDir()
	}
	dir := filepath.Join(base, strings.ReplaceAll(t.Name(), "/", "_"), deployment)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("E2E_LOG_DIR: %v", err)
	}
	t.Logf("%s: process logs in %s", deployment, dir)
	return dir
}

// ruleEnv returns every setting of rule as PROCESSOR_RULE_* variables.
func ruleEnv(r config.Rule) []string {
	return []string{
		"PROCESSOR_RULE_ID=" + r.ID,
		"PROCESSOR_RULE_VERSION=" + strconv.Itoa(r.Version),
		"PROCESSOR_RULE_THRESHOLD=" + strconv.Itoa(r.Threshold),
		"PROCESSOR_RULE_WINDOW=" + r.Window.String(),
		"PROCESSOR_RULE_MIN_VALUE=" + strconv.FormatFloat(r.MinValue, 'g', -1, 64),
		"PROCESSOR_RULE_QUALITY=" + r.Quality,
		"PROCESSOR_RULE_WATERMARK_DELAY=" + r.WatermarkDelay.String(),
		"PROCESSOR_RULE_ALLOWED_LATENESS=" + r.AllowedLateness.String(),
		"PROCESSOR_RULE_DEDUP_HORIZON=" + r.DedupHorizon.String(),
		"PROCESSOR_RULE_MAX_FUTURE_SKEW=" + r.MaxFutureSkew.String(),
		"PROCESSOR_RULE_DESCRIPTION=" + r.Description,
	}
}

// stateDir is instance's default state directory.
func (d *deployment) stateDir(instance string) string {
	return filepath.Join(d.dir, "state-"+instance)
}

// start starts an incarnation of instance with state directory stateDir.
func (d *deployment) start(instance, stateDir string) *proc {
	d.t.Helper()
	d.mu.Lock()
	d.incarnations[instance]++
	n := d.incarnations[instance]
	d.mu.Unlock()
	logPath := filepath.Join(d.logDir, fmt.Sprintf("%s-%02d.log", instance, n))
	logFile, err := os.Create(logPath)
	if err != nil {
		d.t.Fatalf("create log file: %v", err)
	}
	cmd := exec.Command(d.bin, "run")
	cmd.Env = append(cleanEnv(), d.env...)
	cmd.Env = append(cmd.Env, "PROCESSOR_INSTANCE_ID="+instance, "PROCESSOR_STATE_DIR="+stateDir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		d.t.Fatalf("start %s: %v", d.bin, err)
	}
	p := &proc{
		name: fmt.Sprintf("%s/%s#%d", d.name, instance, n), instance: instance,
		cmd: cmd, logPath: logPath, started: time.Now(), exited: make(chan struct{}),
	}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	d.mu.Lock()
	d.procs = append(d.procs, p)
	d.mu.Unlock()
	d.t.Cleanup(func() { p.killQuietly() })
	return p
}

// cleanEnv is the test's environment without PROCESSOR_* variables, so that
// a developer's shell cannot change what the processes run with.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PROCESSOR_") {
			env = append(env, kv)
		}
	}
	return env
}

// failure is the first incarnation that exited without being told to, or nil.
func (d *deployment) failure() *proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.procs {
		if p.exitedUnasked() {
			return p
		}
	}
	return nil
}

// tails returns the last lines of the logs of the latest incarnations of
// each instance, and of every incarnation that exited unasked.
func (d *deployment) tails() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	latest := map[string]*proc{}
	for _, p := range d.procs {
		latest[p.instance] = p
	}
	var b strings.Builder
	for _, p := range d.procs {
		if latest[p.instance] == p || p.exitedUnasked() {
			fmt.Fprintf(&b, "\n----- %s (%s) log tail:\n%s", p.name, p.status(), tail(p.logPath, 25))
		}
	}
	return b.String()
}

// proc is one incarnation of one processor instance (one OS process).
type proc struct {
	name     string
	instance string
	cmd      *exec.Cmd
	logPath  string
	started  time.Time

	mu       sync.Mutex
	signaled bool // SIGKILL or SIGTERM sent by the test

	exited  chan struct{}
	waitErr error
}

func (p *proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

func (p *proc) exitedUnasked() bool {
	p.mu.Lock()
	asked := p.signaled
	p.mu.Unlock()
	return !asked && p.hasExited()
}

func (p *proc) status() string {
	if !p.hasExited() {
		return "running"
	}
	if p.waitErr == nil {
		return "exit 0"
	}
	return p.waitErr.Error()
}

func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	p.signaled = true
	p.mu.Unlock()
	if p.hasExited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// kill sends SIGKILL and waits for the process to be gone. A process that
// had already exited on its own fails the test.
func (p *proc) kill(t *testing.T, d *deployment) {
	t.Helper()
	if p.exitedUnasked() {
		t.Fatalf("%s exited on its own (%s) before the test killed it%s", p.name, p.status(), d.tails())
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %s: %v", p.name, err)
	}
	<-p.exited
}

func (p *proc) killQuietly() {
	_ = p.signal(syscall.SIGKILL)
	<-p.exited
}

// stop sends SIGTERM and requires a clean exit (code 0) within stopTimeout.
func (p *proc) stop(t *testing.T, d *deployment) {
	t.Helper()
	if p.exitedUnasked() {
		t.Fatalf("%s exited on its own (%s) before the test stopped it%s", p.name, p.status(), d.tails())
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		p.killQuietly()
		t.Fatalf("%s did not stop within %v of SIGTERM%s", p.name, stopTimeout, d.tails())
	}
	if p.waitErr != nil {
		t.Fatalf("%s stopped with %v after SIGTERM, want exit code 0%s", p.name, p.waitErr, d.tails())
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 {
		return "(empty)"
	}
	return strings.Join(lines, "\n")
}

// logLines returns the lines of every incarnation's log for which keep is
// true, each prefixed with the incarnation's name, at most limit of them.
func (d *deployment) logLines(limit int, keep func(line string) bool) []string {
	d.mu.Lock()
	procs := append([]*proc(nil), d.procs...)
	d.mu.Unlock()
	var out []string
	for _, p := range procs {
		b, err := os.ReadFile(p.logPath)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if len(out) < limit && keep(line) {
				out = append(out, p.name+": "+line)
			}
		}
	}
	return out
}

// grep returns at most limit log lines that contain s.
func (d *deployment) grep(s string, limit int) []string {
	return d.logLines(limit, func(line string) bool { return strings.Contains(line, s) })
}

// notable returns at most limit log lines that are warnings or errors, or
// mention an aborted batch.
func (d *deployment) notable(limit int) []string {
	return d.logLines(limit, func(line string) bool {
		return strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, "aborted")
	})
}

// deleteTopicsAndGroup deletes the topics the processor created, and the
// group, at the end of a test (errors are logged, not failed: the test's
// result is already decided).
func deleteTopicsAndGroup(t *testing.T, seeds []string, group string, topics ...string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Logf("clean-up: %v", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resps, err := adm.DeleteTopics(ctx, topics...)
	if err != nil {
		t.Logf("clean-up: delete topics: %v", err)
	}
	for _, r := range resps {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			t.Logf("clean-up: delete topic %s: %v", r.Topic, r.Err)
		}
	}
	if _, err := adm.DeleteGroups(ctx, group); err != nil {
		t.Logf("clean-up: delete group %s: %v", group, err)
	}
}
