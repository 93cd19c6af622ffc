package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// LocalBroker is where scripts/kafka.sh up puts a single-node broker.
const LocalBroker = "127.0.0.1:9092"

// scriptTimeout bounds scripts/kafka.sh up: a cold start downloads ~45 MB of
// jars from Maven Central, then formats storage and starts the JVM.
const scriptTimeout = 5 * time.Minute

var boot struct {
	once  sync.Once
	seeds []string
	from  string // where the seeds came from, for the test log
	err   error
}

// Bootstrap returns the seed broker addresses of a real Kafka cluster,
// finding or starting one on the first call of the test binary (see the
// package documentation for the order). It fails the test, never skips it,
// when no broker can be had.
func Bootstrap(t testing.TB) []string {
	t.Helper()
	boot.once.Do(func() {
		boot.seeds, boot.from, boot.err = findBroker()
	})
	if boot.err != nil {
		t.Fatalf("harness: no Kafka broker: %v\n\n%s", boot.err, howToGetBroker)
	}
	t.Logf("harness: Kafka at %s (%s)", strings.Join(boot.seeds, ","), boot.from)
	return slices.Clone(boot.seeds)
}

const howToGetBroker = `The end-to-end tests need a real Apache Kafka broker. Any one of:
  - scripts/kafka.sh up            (Java 17+ and Maven; fetches Kafka from Maven Central)
  - KAFKA_BOOTSTRAP=host:port      (any running cluster, comma-separated seeds)
  - a reachable Docker engine      (testcontainers-go starts one)
or run scripts/test.sh, which starts and stops the local broker itself.`

func findBroker() (seeds []string, from string, err error) {
	if env := strings.TrimSpace(os.Getenv("KAFKA_BOOTSTRAP")); env != "" {
		seeds := splitSeeds(env)
		if err := anyReachable(seeds, 5*time.Second); err != nil {
			return nil, "", fmt.Errorf("KAFKA_BOOTSTRAP=%s: %w", env, err)
		}
		return seeds, "KAFKA_BOOTSTRAP", nil
	}

	if os.Getenv("E2E_REQUIRE_BROKER") == "1" {
		// scripts/test.sh under CI=true: the broker it started, named in
		// KAFKA_BOOTSTRAP, and nothing else (no listener that happens to
		// be on 9092, no container).
		return nil, "", errors.New("E2E_REQUIRE_BROKER=1 (CI) but KAFKA_BOOTSTRAP is not set: run the tests through scripts/test.sh")
	}
	if reachable(LocalBroker, time.Second) == nil {
		return []string{LocalBroker}, "local broker already running", nil
	}

	var errs []error
	seeds, err = startLocalBroker()
	if err == nil {
		return seeds, "started by scripts/kafka.sh up; stop it with scripts/kafka.sh down", nil
	}
	errs = append(errs, fmt.Errorf("scripts/kafka.sh up: %w", err))

	seeds, err = startContainer()
	if err == nil {
		return seeds, "testcontainers-go Kafka container", nil
	}
	errs = append(errs, fmt.Errorf("testcontainers: %w", err))
	return nil, "", errors.Join(errs...)
}

func splitSeeds(s string) []string {
	var seeds []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			seeds = append(seeds, f)
		}
	}
	return seeds
}

func reachable(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	return conn.Close()
}

func anyReachable(seeds []string, timeout time.Duration) error {
	var errs []error
	for _, s := range seeds {
		err := reachable(s, timeout)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("no seed broker reachable: %w", errors.Join(errs...))
}

// startLocalBroker runs scripts/kafka.sh up, which prints the bootstrap
// address as its last line of standard output. The script locks its run
// directory, so test binaries calling it at once start one broker.
func startLocalBroker() ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "scripts", "kafka.sh")
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("find script: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script, "up")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, lastLines(stderr.String(), 40))
	}
	lines := strings.Fields(strings.TrimSpace(stdout.String()))
	if len(lines) == 0 {
		return nil, fmt.Errorf("printed no bootstrap address\n%s", lastLines(stderr.String(), 40))
	}
	seeds := splitSeeds(lines[len(lines)-1])
	if err := anyReachable(seeds, 5*time.Second); err != nil {
		return nil, err
	}
	return seeds, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RepoRoot returns the directory of the repository's go.mod, found by
// walking up from the working directory (a test runs in its package's
// directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("harness: working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("harness: no go.mod above the working directory")
		}
		dir = parent
	}
}
