package registry

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The registry under test.
var (
	// registryURL is the base URL of the Confluent API.
	registryURL string
	// managed is true when TestMain started the registry, which the tests
	// may then stop and start with scripts/registry.sh.
	managed bool
	// scriptEnv is the environment of scripts/registry.sh for it.
	scriptEnv []string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if u := os.Getenv("REGISTRY_URL"); u != "" {
		registryURL = strings.TrimRight(u, "/")
		fmt.Fprintf(os.Stderr, "test/registry: using the registry at REGISTRY_URL=%s\n", registryURL)
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "processor-registry-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	port, mgmt, err := freePorts()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	scriptEnv = append(os.Environ(),
		"REGISTRY_PORT="+strconv.Itoa(port),
		"REGISTRY_MGMT_PORT="+strconv.Itoa(mgmt),
		"REGISTRY_RUN_DIR="+filepath.Join(dir, "run"))
	start := time.Now()
	out, err := registryScript("up")
	if err != nil {
		fmt.Fprintf(os.Stderr, "test/registry: scripts/registry.sh up failed: %v\n%s\n", err, out)
		return 1
	}
	registryURL = lastLine(out)
	managed = true
	fmt.Fprintf(os.Stderr, "test/registry: registry at %s, up in %s\n", registryURL, time.Since(start).Round(100*time.Millisecond))
	defer func() {
		if out, err := registryScript("down"); err != nil {
			fmt.Fprintf(os.Stderr, "test/registry: scripts/registry.sh down: %v\n%s\n", err, out)
		}
	}()
	return m.Run()
}

// registryScript runs scripts/registry.sh with args for the managed
// registry and returns its stdout (the URL is its last line) and stderr.
func registryScript(args ...string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "registry.sh")
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Env = scriptEnv
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String() + stderr.String(), err
}

// lastLine returns the last line of the script's stdout part: the URL.
func lastLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "http://") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// freePorts returns two TCP ports on 127.0.0.1 that are free right now.
func freePorts() (int, int, error) {
	var ports [2]int
	var ls []net.Listener
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		l.Close()
	}
	return ports[0], ports[1], nil
}

// requireManaged reports whether the tests may stop and start the registry
// (they started it). Against REGISTRY_URL they may not: the outage is then
// only simulated with the proxy, and the test log says so.
func requireManaged(t *testing.T) bool {
	t.Helper()
	if !managed {
		t.Logf("registry at REGISTRY_URL: not stopping it; the outage is simulated with the proxy only")
	}
	return managed
}
