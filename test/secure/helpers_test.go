package secure

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/kafkasec"
	"github.com/vibeline/processor/internal/kafkasec/kgosec"
	"github.com/vibeline/processor/test/e2e/harness"
)

// newClient returns a client of seed authenticated with sec (built by
// kgosec, as the processor builds its own), closed when the test ends.
func newClient(t *testing.T, seed string, sec kafkasec.Config, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	if err := sec.Validate(); err != nil {
		t.Fatalf("test client config: %v", err)
	}
	secOpts, err := kgosec.Opts(sec)
	if err != nil {
		t.Fatalf("test client options: %v", err)
	}
	all := append([]kgo.Opt{kgo.SeedBrokers(seed), kgo.MetadataMinAge(100 * time.Millisecond), kgo.MetadataMaxAge(time.Second)}, secOpts...)
	cl, err := kgo.NewClient(append(all, opts...)...)
	if err != nil {
		t.Fatalf("test client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// event is a well-formed input event of machine at ts with value (mm/s,
// quality good).
func event(id, machine string, ts time.Time, value float64) []byte {
	return fmt.Appendf(nil, `{"event_id":%q,"machine_id":%q,"sensor_id":"S-1","ts":%d,"seq":1,"value":%g,"unit":"mm/s","schema_version":1,"quality":"good"}`,
		id, machine, ts.UnixMilli(), value)
}

// produceIncident creates input (one partition) through cl and commits, in
// a transaction, three events of machine M-1 above the threshold within 20
// seconds, and one low event: the rule (3 events >= 7.1 mm/s, quality good,
// within 2 minutes) opens one alert.
func produceIncident(t *testing.T, cl *kgo.Client, input string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, map[string]*string{"retention.ms": kadm.StringPtr("-1")}, input)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create input topic %s: %v", input, err)
	}
	now := time.Now().Truncate(time.Second)
	t0 := now.Add(-time.Minute)
	recs := []*kgo.Record{
		{Topic: input, Key: []byte("M-1"), Value: event("e1", "M-1", t0, 8.0), Timestamp: now},
		{Topic: input, Key: []byte("M-1"), Value: event("e2", "M-1", t0.Add(10*time.Second), 9.5), Timestamp: now},
		{Topic: input, Key: []byte("M-2"), Value: event("f1", "M-2", t0.Add(12*time.Second), 2.0), Timestamp: now},
		{Topic: input, Key: []byte("M-1"), Value: event("e3", "M-1", t0.Add(20*time.Second), 7.1), Timestamp: now},
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	// A topic created a moment ago may not be in every metadata answer yet:
	// retry a produce that finds no partition.
	for {
		err = cl.ProduceSync(ctx, recs...).FirstErr()
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("produce the events: %v", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit the events: %v", err)
	}
}

// wireAlert is the part of an alert revision the test checks.
type wireAlert struct {
	Status    string `json:"status"`
	MachineID string `json:"machine_id"`
	Count     int    `json:"count"`
	Evidence  []struct {
		EventID string `json:"event_id"`
	} `json:"evidence"`
}

// waitAlert reads topic read_committed through cl's options until an alert
// revision arrives, and returns it; it fails the test after timeout or when
// the processor exits first.
func waitAlert(t *testing.T, seed string, sec kafkasec.Config, topic string, p *proc, timeout time.Duration) wireAlert {
	t.Helper()
	cl := newClient(t, seed, sec,
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	deadline := time.Now().Add(timeout)
	for {
		if p.exited() {
			t.Fatalf("the processor exited before an alert was committed: %s\n%s", p.status(), p.output())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no alert committed to %s within %s; processor output:\n%s", topic, timeout, p.output())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fetches := cl.PollFetches(ctx)
		cancel()
		var got []wireAlert
		fetches.EachRecord(func(r *kgo.Record) {
			var a wireAlert
			if err := json.Unmarshal(r.Value, &a); err != nil {
				t.Errorf("alert record %s: %v", r.Value, err)
				return
			}
			got = append(got, a)
		})
		if len(got) > 0 {
			return got[0]
		}
	}
}

// proc is one processor process.
type proc struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // of Wait, once done is closed
	started time.Time
	ended   time.Time
}

// cleanEnv is the test's environment without PROCESSOR_* variables, so a
// developer's shell cannot change what the processes run with.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PROCESSOR_") {
			env = append(env, kv)
		}
	}
	return env
}

// startProc runs bin with args and the environment env (added to the
// test's, without its PROCESSOR_* variables), its output (stdout and
// stderr) to a file; the process is killed when the test ends.
func startProc(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "processor.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &proc{cmd: cmd, logPath: logPath, done: make(chan struct{}), started: time.Now()}
	go func() {
		p.err = cmd.Wait()
		p.ended = time.Now()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to timeout for the process to exit; false if it still runs.
func (p *proc) wait(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// stop sends SIGTERM (a clean shutdown) and waits for the exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("the processor had exited before being stopped: %s\n%s", p.status(), p.output())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if !p.wait(40 * time.Second) {
		t.Fatalf("the processor did not stop within 40s of SIGTERM\n%s", p.output())
	}
	if p.err != nil {
		t.Fatalf("the processor stopped with %v\n%s", p.err, p.output())
	}
}

// exitCode is the exit code of an exited process (-1 for a signal).
func (p *proc) exitCode() int {
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		return -1
	}
	return 0
}

func (p *proc) status() string {
	if !p.exited() {
		return "running"
	}
	return fmt.Sprintf("exit code %d after %s", p.exitCode(), p.ended.Sub(p.started).Round(100*time.Millisecond))
}

// output is everything the process wrote (stdout and stderr).
func (p *proc) output() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(no output: " + err.Error() + ")"
	}
	return string(b)
}

// deployment is the PROCESSOR_* environment of one processor run against
// seed: its own group, topics and state directory.
func deployment(t *testing.T, name, seed, input string) (env []string, alerts string) {
	t.Helper()
	alerts = harness.UniqueName("secure-" + name + ".alerts")
	return []string{
		"PROCESSOR_BROKERS=" + seed,
		"PROCESSOR_GROUP_ID=" + harness.UniqueName("secure-"+name),
		"PROCESSOR_INSTANCE_ID=" + name,
		"PROCESSOR_STATE_DIR=" + filepath.Join(t.TempDir(), "state"),
		"PROCESSOR_COMMIT_INTERVAL=100ms",
		"PROCESSOR_SESSION_TIMEOUT=6s",
		"PROCESSOR_STARTUP_TIMEOUT=30s",
		"PROCESSOR_TOPICS_INPUT=" + input,
		"PROCESSOR_TOPICS_ALERTS=" + alerts,
		"PROCESSOR_TOPICS_DLQ=" + harness.UniqueName("secure-"+name+".dlq"),
		"PROCESSOR_TOPICS_LATE=" + harness.UniqueName("secure-"+name+".late"),
		"PROCESSOR_TOPICS_CHANGELOG=" + harness.UniqueName("secure-"+name+".changelog"),
	}, alerts
}

// writeConfig writes a processor configuration file with the given YAML.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "processor.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
