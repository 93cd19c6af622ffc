package secure

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/kafkasec/kafkasectest"
	"github.com/vibeline/processor/test/e2e/harness"
)

// scriptTimeout bounds scripts/kafka.sh up: a cold start fetches ~45 MB of
// jars from Maven Central before formatting and starting the JVM.
const scriptTimeout = 5 * time.Minute

// broker is the test's own single-node broker with secure listeners.
type broker struct {
	plain   string // PLAINTEXT host:port (the broker's own listener)
	sasl    string // SASL_PLAINTEXT, SCRAM-SHA-512
	ssl     string // SSL, client certificate required
	saslSSL string // SASL_SSL: TLS without client certificate + SCRAM-SHA-512
	user    string // SCRAM user
	pass    string // its password
	pki     *kafkasectest.PKI
	runDir  string
}

// startBroker generates the certificates, starts a broker with
// scripts/kafka.sh up in a run directory of its own under a temporary
// directory, and stops it (scripts/kafka.sh down) when the test ends. It
// fails the test when the broker does not start.
func startBroker(t *testing.T) *broker {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b := &broker{
		user:   "processor",
		pass:   randomHex(t, 16),
		pki:    kafkasectest.NewPKI(t, filepath.Join(dir, "pki")),
		runDir: filepath.Join(dir, "kafka-run"),
	}
	script := filepath.Join(root, "scripts", "kafka.sh")
	run := func(ctx context.Context, env []string, args ...string) (string, error) {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = root, append(os.Environ(), env...), &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	base := []string{"KAFKA_RUN_DIR=" + b.runDir}
	// Registered before up: a half-started broker is stopped too. Runs
	// before t.TempDir's removal (clean-ups run last registered first).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := run(ctx, base, "down"); err != nil {
			t.Errorf("scripts/kafka.sh down: %v\n%s", err, out)
		}
	})
	watchdog(t, script, b.runDir)
	// Two attempts, each on new ports: a port free when chosen may be taken
	// before the broker binds it.
	for attempt := 1; ; attempt++ {
		ports := freePorts(t, 5)
		b.plain = "127.0.0.1:" + strconv.Itoa(ports[0])
		b.sasl = "127.0.0.1:" + strconv.Itoa(ports[2])
		b.ssl = "127.0.0.1:" + strconv.Itoa(ports[3])
		b.saslSSL = "127.0.0.1:" + strconv.Itoa(ports[4])
		env := append(slices.Clone(base),
			"KAFKA_NODES=1",
			"KAFKA_PORT="+strconv.Itoa(ports[0]),
			"KAFKA_CONTROLLER_PORT="+strconv.Itoa(ports[1]),
			"KAFKA_SASL_PORT="+strconv.Itoa(ports[2]),
			"KAFKA_SSL_PORT="+strconv.Itoa(ports[3]),
			"KAFKA_SASL_SSL_PORT="+strconv.Itoa(ports[4]),
			"KAFKA_SECURE_DIR="+b.pki.Dir,
			"KAFKA_SCRAM_USER="+b.user,
			"KAFKA_SCRAM_PASSWORD="+b.pass,
			// C1 only: a faster JVM start (scripts/kafka.sh measured
			// ~25%); the test's load is a few records.
			"KAFKA_JVM_OPTS=-XX:TieredStopAtLevel=1",
		)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
		out, err := run(ctx, env, "up")
		cancel()
		if err == nil {
			t.Logf("broker up in %s: PLAINTEXT %s, SASL_PLAINTEXT %s, SSL %s, SASL_SSL %s",
				time.Since(start).Round(100*time.Millisecond), b.plain, b.sasl, b.ssl, b.saslSSL)
			return b
		}
		msg := fmt.Sprintf("scripts/kafka.sh up with secure listeners (needs java 17+ and mvn), attempt %d: %v\n%s\n%s", attempt, err, out, b.logTail())
		if attempt == 2 {
			t.Fatal(msg)
		}
		t.Log(msg + "\n(trying again on other ports)")
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		if out, err := run(ctx, base, "down"); err != nil {
			t.Logf("scripts/kafka.sh down: %v\n%s", err, out)
		}
		cancel()
	}
}

// watchdog starts a detached process that stops the broker of runDir once
// this test process is gone without having stopped it: killed, or ended by
// go test's -timeout, which run no clean-ups. After a normal end the run
// directory is removed and it does nothing.
func watchdog(t *testing.T, script, runDir string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", `while kill -0 "$1" 2>/dev/null; do sleep 1; done
		if [ -f "$KAFKA_RUN_DIR/cluster.env" ]; then exec "$2" down; fi`,
		"secure-test-watchdog", strconv.Itoa(os.Getpid()), script)
	cmd.Env = append(os.Environ(), "KAFKA_RUN_DIR="+runDir)
	// Its own session: it outlives the test's process group. Its standard
	// streams are /dev/null, so go test does not wait for it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the broker watchdog: %v", err)
	}
	_ = cmd.Process.Release()
}

// logTail is the end of the broker's log, for failure messages.
func (b *broker) logTail() string {
	data, err := os.ReadFile(filepath.Join(b.runDir, "node-1", "logs", "server.log"))
	if err != nil {
		return "(no broker log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return "last lines of the broker log:\n" + strings.Join(lines, "\n")
}

// freePorts returns n distinct TCP ports of 127.0.0.1 that are free when it
// returns, chosen at random below the kernel's ephemeral range (where no
// outgoing connection takes them meanwhile) and above 20000.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	low := 32768 // Linux's default start of the ephemeral range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 21000 {
				low = v
			}
		}
	}
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no %d free ports in 20000..%d", n, low-1)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(20000+mrand.IntN(low-20000)))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// buildBinary builds ./cmd/processor into dir and returns its path.
func buildBinary(dir string) (string, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "processor")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/processor")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/processor: %w\n%s", err, out)
	}
	return path, nil
}
