package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vibeline/processor/test/e2e/harness"
)

// runBinary runs the processor binary with args and env (on top of the
// test's environment without PROCESSOR_*), and returns its exit code,
// stderr and how long it ran. It fails the test if the process runs longer
// than timeout.
func runBinary(t *testing.T, timeout time.Duration, env []string, args ...string) (code int, stderr string, took time.Duration) {
	t.Helper()
	bin := harness.BuildBinary(t) // before the clock starts: a cold build takes a while
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Dir = t.TempDir() // the default state_dir is relative
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	start := time.Now()
	err := cmd.Run()
	took = time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("processor %v did not exit within %v; stderr:\n%s", args, timeout, errBuf.String())
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		code = 0
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("run processor %v: %v", args, err)
	}
	return code, errBuf.String(), took
}

// runBinaryOut is runBinary with stdout and stderr together in the output.
func runBinaryOut(t *testing.T, timeout time.Duration, env []string, args ...string) (code int, out string, took time.Duration) {
	t.Helper()
	bin := harness.BuildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Dir = t.TempDir()
	start := time.Now()
	b, err := cmd.CombinedOutput()
	took = time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("processor %v did not exit within %v:\n%s", args, timeout, b)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("run processor %v: %v", args, err)
	}
	return code, string(b), took
}

// TestBadConfigExitsNonZero: an invalid configuration value, from the
// environment, a flag or the file, stops `processor run` before it touches
// Kafka, with exit code 2 and a message naming the key, the value and what
// would be valid.
func TestBadConfigExitsNonZero(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte("brokers: [127.0.0.1:9092]\ncomit_interval: 100ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"PROCESSOR_BROKERS=127.0.0.1:1", "PROCESSOR_STARTUP_TIMEOUT=3s"}
	cases := []struct {
		name string
		env  []string
		args []string
		want []string // stderr must contain each
	}{
		{"env mode", []string{"PROCESSOR_MODE=sometimes"}, nil,
			[]string{"mode", `"sometimes"`, `"exactly_once"`, `"at_least_once"`}},
		{"env rule.quality", []string{"PROCESSOR_RULE_QUALITY=excellent"}, nil,
			[]string{"rule.quality", `"excellent"`, `"good"`, `"uncertain"`, `"bad"`}},
		{"env rule.dedup_horizon", []string{"PROCESSOR_RULE_DEDUP_HORIZON=5m"}, nil,
			[]string{"rule.dedup_horizon", "5m0s", "greater than rule.window + rule.allowed_lateness"}},
		{"env rule.threshold not a number", []string{"PROCESSOR_RULE_THRESHOLD=three"}, nil,
			[]string{"rule.threshold", "int"}},
		{"flag commit_interval", nil, []string{"--commit_interval=2m"},
			[]string{"commit_interval", "2m0s", "a duration from 1ms to 1m"}},
		{"file with a misspelt key", nil, []string{"--config", typo},
			[]string{"comit_interval"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stderr, _ := runBinary(t, 20*time.Second, append(append([]string(nil), base...), c.env...), append([]string{"run"}, c.args...)...)
			if code != 2 {
				t.Errorf("exit code %d, want 2 (invalid configuration); stderr:\n%s", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not mention %s:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "waiting for kafka") {
				t.Errorf("an invalid configuration got as far as contacting Kafka:\n%s", stderr)
			}
		})
	}
}

// TestKafkaUnreachableFailsFast: with no broker at the address,
// `processor run` gives up after startup_timeout with exit code 1 (a
// runtime failure, not a usage error) and says which brokers it could not
// use and for how long it tried.
func TestKafkaUnreachableFailsFast(t *testing.T) {
	t.Parallel()
	env := []string{
		"PROCESSOR_BROKERS=127.0.0.1:1",
		"PROCESSOR_STARTUP_TIMEOUT=3s",
		"PROCESSOR_INSTANCE_ID=unreachable",
	}
	code, stderr, took := runBinary(t, 20*time.Second, env, "run")
	t.Logf("exit code %d after %v", code, took.Round(time.Millisecond))
	if code != 1 {
		t.Errorf("exit code %d, want 1; stderr:\n%s", code, tail2(stderr))
	}
	if took > 10*time.Second {
		t.Errorf("took %v to give up with startup_timeout=3s, want under 10s", took)
	}
	if took < 2*time.Second {
		t.Errorf("gave up after %v, before the 3s startup_timeout", took)
	}
	last := lastLine(stderr)
	for _, w := range []string{"127.0.0.1:1", "3s"} {
		if !strings.Contains(last, w) {
			t.Errorf("the final message does not mention %s: %q", w, last)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func tail2(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}

// TestRulesCheck: `processor rules check` describes a valid rule file in
// words (exit 0) and names each problem of an invalid one (exit 2).
func TestRulesCheck(t *testing.T) {
	t.Parallel()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ := runBinaryOut(t, 30*time.Second, nil, "rules", "check", filepath.Join(root, "internal/rules/testdata/vibration.yaml"))
	if code != 0 || !strings.Contains(out, "all valid") || !strings.Contains(out, "alert when at least 3 events with value >= 7.1") {
		t.Fatalf("valid file: exit %d\n%s", code, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n  - id: x\n    version: 1\n    filter: \"valu > 3\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runBinaryOut(t, 30*time.Second, nil, "rules", "check", bad)
	if code != 2 || !strings.Contains(out, "unknown name `valu` (did you mean `value`?)") {
		t.Fatalf("invalid file: exit %d, want 2 naming the bad name\n%s", code, out)
	}
}
