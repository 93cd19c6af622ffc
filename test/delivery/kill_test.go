package delivery

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is one `processor deliver` OS process.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	exited chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *proc) log() string { p.mu.Lock(); defer p.mu.Unlock(); return p.stderr.String() }

func startDeliver(t *testing.T, bin, cfgPath string) *proc {
	t.Helper()
	p := &proc{exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "deliver", "--config", cfgPath)
	p.cmd.Stderr = p
	p.cmd.Env = append(os.Environ(), "DELIVER_TEST_SECRET=kill-secret")
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill() // this test's own child, by pid
			<-p.exited
		}
		if t.Failed() {
			t.Logf("processor deliver (pid %d) stderr:\n%s", p.cmd.Process.Pid, p.log())
		}
	})
	return p
}

// TestKillDuringOutage: the built `processor deliver` binary delivers, the
// receiver goes down (503; meanwhile no commit may cover an undelivered
// revision), comes back for a moment and goes down again, the process is
// killed with SIGKILL while it retries, a new process starts while the
// receiver is still down, then the receiver recovers. Every revision is delivered at least once; a
// revision delivered twice is a repeat of its Idempotency-Key (which the
// receiver honours); first deliveries keep the per-machine order; nothing
// is dead-lettered; the restarted process commits everything and stops
// cleanly on SIGTERM.
func TestKillDuringOutage(t *testing.T) {
	bin := processorBinary(t)
	seeds := newCluster(t, alertsTopic)
	rcv := newReceiver(t)
	rcv.secret = []byte("kill-secret")
	metricsAddr := freeAddr(t)
	cfgPath := filepath.Join(t.TempDir(), "processor.yaml")
	// The processor's own keys sit beside the delivery section; brokers
	// and topics.alerts are inherited from them.
	cfg := fmt.Sprintf(`brokers: [%s]
topics:
  alerts: %s
delivery:
  group_id: delivery-kill
  instance_id: deliver-0
  # A long commit interval leaves accepted but uncommitted revisions
  # behind at the kill: they must come again as repeats, not be lost.
  commit_interval: 2s
  session_timeout: 2s
  startup_timeout: 20s
  metrics_addr: %s
  sinks:
    - type: webhook
      name: hook
      url: %s
      timeout: 1s
      secret_env: DELIVER_TEST_SECRET
  retry: {initial: 20ms, max: 200ms, max_attempts: 10, max_elapsed: 0s}
  breaker: {failures: 3, cooldown: 300ms}
`, strings.Join(seeds, ","), alertsTopic, metricsAddr, rcv.url())
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	first := startDeliver(t, bin, cfgPath)
	batch1 := makeRevisions(t, "kill1", 6, 2, 3)
	produce(t, seeds, batch1)
	rcv.waitAccepted(t, 30*time.Second, batch1)
	waitReady(t, metricsAddr)

	batch2 := makeRevisions(t, "kill2", 6, 2, 3)
	produce(t, seeds, batch2)
	// Let part of batch 2 through, then the outage starts.
	waitAnyAccepted(t, rcv, batch2, 20*time.Second)
	rcv.setStatus(http.StatusServiceUnavailable)
	batch3 := makeRevisions(t, "kill3", 6, 1, 2)
	produce(t, seeds, batch3)
	rcv.waitAnswered(t, http.StatusServiceUnavailable, 5, 20*time.Second)
	// At least one commit interval into the outage: nothing undelivered may
	// have been committed.
	time.Sleep(2500 * time.Millisecond)
	checkCommitNotAhead(t, seeds, "delivery-kill", rcv, batch1, batch2, batch3)
	// The receiver is back for a moment: a few revisions are accepted (most
	// likely not yet committed), then it fails again and the process is
	// killed while it retries.
	_, _, ans, _ := rcv.snapshot()
	rcv.setStatus(0)
	waitAcceptedN(t, rcv, len(batch1)+countAccepted(rcv, batch2, batch3)+1, 10*time.Second)
	rcv.setStatus(http.StatusServiceUnavailable)
	// Revisions to retry whatever the brief recovery delivered (it may
	// have delivered every pending one before the receiver failed again).
	batch4 := makeRevisions(t, "kill4", 6, 1, 2)
	produce(t, seeds, batch4)
	rcv.waitAnswered(t, http.StatusServiceUnavailable, ans[http.StatusServiceUnavailable]+3, 20*time.Second)

	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	if ws := first.cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("first process: %v, want killed by SIGKILL", first.cmd.ProcessState)
	}
	_, _, ans, _ = rcv.snapshot()
	refusedAtKill := ans[http.StatusServiceUnavailable]

	second := startDeliver(t, bin, cfgPath)
	// The new process retries against the still-down receiver.
	rcv.waitAnswered(t, http.StatusServiceUnavailable, refusedAtKill+3, 30*time.Second)
	checkCommitNotAhead(t, seeds, "delivery-kill", rcv, batch1, batch2, batch3, batch4)
	rcv.setStatus(0)
	rcv.waitAccepted(t, 30*time.Second, batch1, batch2, batch3, batch4)
	waitCommitted(t, seeds, "delivery-kill", alertsTopic, 15*time.Second)

	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("second process did not stop within 30s of SIGTERM")
	}
	if code := second.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("second process exit code %d after SIGTERM, want 0", code)
	}

	acc, order, _, repeats := rcv.snapshot()
	all := len(batch1) + len(batch2) + len(batch3) + len(batch4)
	t.Logf("kill -9: %d keys delivered, %d repeats of an idempotency key (redelivered after the kill)", len(acc), repeats)
	if len(acc) != all {
		t.Errorf("%d distinct keys delivered, want %d", len(acc), all)
	}
	known := map[string]bool{}
	for _, b := range [][]revision{batch1, batch2, batch3, batch4} {
		for _, r := range b {
			known[r.key] = true
			if acc[r.key] == 0 {
				t.Errorf("revision %s lost", r.key)
			}
		}
	}
	for k := range acc {
		if !known[k] {
			t.Errorf("unknown key %s delivered", k)
		}
	}
	checkOrder(t, order, expectedOrder(batch1, batch2, batch3, batch4))
	if rcv.badSig != 0 {
		t.Errorf("%d requests with a wrong signature", rcv.badSig)
	}
	if dl := readTopic(t, seeds, dlqTopic); len(dl) != 0 {
		t.Errorf("%d dead letters, want none", len(dl))
	}
}

// countAccepted counts the revisions of batches the receiver accepted.
func countAccepted(rcv *receiver, batches ...[]revision) int {
	acc, _, _, _ := rcv.snapshot()
	n := 0
	for _, b := range batches {
		for _, r := range b {
			if acc[r.key] > 0 {
				n++
			}
		}
	}
	return n
}

// waitAnyAccepted waits until at least one revision of revs was accepted.
func waitAnyAccepted(t *testing.T, rcv *receiver, revs []revision, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		acc, _, _, _ := rcv.snapshot()
		for _, r := range revs {
			if acc[r.key] > 0 {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no revision accepted within %s", timeout)
}

// waitReady polls /readyz of a delivery process.
func waitReady(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s/readyz not ready within 20s", addr)
}
