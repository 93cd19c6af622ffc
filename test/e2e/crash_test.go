package e2e

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
	"github.com/vibeline/processor/test/e2e/harness"
)

const (
	inputPartitions = 3
	// produceRate paces the input of the crash tests, so that the input is
	// still being written (and processed) when the kills land.
	produceRate = 2500
	// consumeTimeout bounds how long a deployment may take to commit the
	// whole input once it was written.
	consumeTimeout = 3 * time.Minute
	// killGapMin and killGapMax bound the life of one incarnation of a
	// crashing instance (start-up and restore included): kills land at
	// every stage, from restore to the middle of a transaction.
	killGapMin = 700 * time.Millisecond
	killGapMax = 2500 * time.Millisecond
)

// crasher SIGKILLs one instance of a deployment at random moments and
// restarts it with the same instance id (so the same transactional id and
// static group membership) until the producer is done.
type crasher struct {
	d         *deployment
	instance  string
	stateDir  string
	wipeState bool // delete the state directory before each restart
	rng       *rand.Rand
	kills     atomic.Int64
	behind    int // kills while the group had uncommitted input in hand
}

func newCrasher(t *testing.T, d *deployment, instance string, wipe bool) *crasher {
	seed := uint64(time.Now().UnixNano())
	t.Logf("%s: kill schedule seed %d", d.name, seed)
	return &crasher{d: d, instance: instance, stateDir: d.stateDir(instance), wipeState: wipe, rng: rand.New(rand.NewPCG(seed, 1))}
}

// run starts the instance and keeps killing and restarting it while the
// producer runs; it returns the incarnation left running.
func (c *crasher) run(t *testing.T, pr *producer) *proc {
	t.Helper()
	adm := harness.NewAdmin(t, c.d.seeds)
	p := c.d.start(c.instance, c.stateDir)
	for pr.running() {
		gap := killGapMin + time.Duration(c.rng.Int64N(int64(killGapMax-killGapMin)))
		deadline := p.started.Add(gap)
		for time.Now().Before(deadline) && pr.running() {
			if p.exitedUnasked() {
				t.Fatalf("%s exited on its own (%s)%s", p.name, p.status(), c.d.tails())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !pr.running() {
			break
		}
		inHand := behind(adm, c.d.group, c.d.input)
		p.kill(t, c.d)
		n := c.kills.Add(1)
		if inHand {
			c.behind++
		}
		t.Logf("kill %d: SIGKILL %s after %v (input written so far: %d records; group behind the input: %v)",
			n, p.name, time.Since(p.started).Round(time.Millisecond), pr.sent.Load(), inHand)
		if c.wipeState {
			if err := os.RemoveAll(c.stateDir); err != nil {
				t.Fatalf("delete state directory: %v", err)
			}
		}
		p = c.d.start(c.instance, c.stateDir)
	}
	return p
}

// TestCrashEquivalence: a clean run (one instance, never killed) and a crash
// run (one instance SIGKILLed at random moments, at least 5 times, while the
// input is being written and processed, and restarted with the same
// instance id and state directory) over the same input of >= 50,000 records
// commit the same records, per output and key, in the same order; both
// equal the reference; their accounting balances per partition.
func TestCrashEquivalence(t *testing.T) {
	t.Parallel()
	const minRecords, minKills = 50_000, 5
	seeds := harness.Bootstrap(t)
	input := harness.NewTopic(t, seeds, harness.UniqueName("e2e-crash.in"), inputPartitions, nil)
	rule := config.Default().Rule
	clean := newDeployment(t, seeds, input, "clean", rule)
	crash := newDeployment(t, seeds, input, "crash", rule)
	c := newCrasher(t, crash, "k0", false)

	start := time.Now()
	cleanProc := clean.start("c0", clean.stateDir("c0"))
	pr := produceStream(t, seeds, input, sim.New(streamOptions(24, 11)), produceRate, minRecords, 3*minRecords,
		func(int) bool { return c.kills.Load() < minKills })
	crashProc := c.run(t, pr)
	sent := pr.wait(t)
	t.Logf("input: %d records written in %v; %d kills", sent, time.Since(start).Round(time.Millisecond), c.kills.Load())

	log, ends := readLog(t, seeds, input)
	want, wantAcct := reference(t, crash, log)
	requireMeaningful(t, want, log, inputPartitions)
	t.Logf("input %s; reference accounting %s", logSizes(log), acctString(wantAcct))

	tc := waitConsumed(t, clean, ends, consumeTimeout)
	tk := waitConsumed(t, crash, ends, consumeTimeout)
	t.Logf("whole input committed %v (clean) and %v (crash) after the last record was written", tc.Round(time.Millisecond), tk.Round(time.Millisecond))
	cleanProc.stop(t, clean)
	crashProc.stop(t, crash)

	gotClean, gotCrash := readCommitted(t, clean), readCommitted(t, crash)
	t.Logf("clean run: %s", gotClean.summary())
	t.Logf("crash run: %s", gotCrash.summary())
	checkCommitted(t, clean, gotClean, want, wantAcct, log, ends)
	checkCommitted(t, crash, gotCrash, want, wantAcct, log, ends)
	if diff := pipeline.Diff(gotClean.outputs, gotCrash.outputs); diff != "" {
		t.Errorf("the crash run committed other records than the clean run:\n%s", diff)
	}
	kills := c.kills.Load()
	t.Logf("crash run: %d SIGKILLs (%d with committed offsets behind the input), %d aborted batches logged",
		kills, c.behind, crash.countLogLines("batch aborted"))
	if kills < minKills {
		t.Errorf("%d kills, want at least %d", kills, minKills)
	}
}

// TestStateDirDeletedOnRestart: like TestCrashEquivalence, smaller, and
// the instance's state directory is deleted before every restart, so each
// incarnation restores its state from the changelog alone.
func TestStateDirDeletedOnRestart(t *testing.T) {
	t.Parallel()
	const minRecords, minKills = 20_000, 3
	seeds := harness.Bootstrap(t)
	input := harness.NewTopic(t, seeds, harness.UniqueName("e2e-wipe.in"), inputPartitions, nil)
	d := newDeployment(t, seeds, input, "wipe", config.Default().Rule)
	c := newCrasher(t, d, "w0", true)

	pr := produceStream(t, seeds, input, sim.New(streamOptions(24, 12)), produceRate, minRecords, 3*minRecords,
		func(int) bool { return c.kills.Load() < minKills })
	p := c.run(t, pr)
	sent := pr.wait(t)

	log, ends := readLog(t, seeds, input)
	want, wantAcct := reference(t, d, log)
	requireMeaningful(t, want, log, inputPartitions)
	t.Logf("input: %d records written, %s", sent, logSizes(log))
	waitConsumed(t, d, ends, consumeTimeout)
	p.stop(t, d)

	got := readCommitted(t, d)
	t.Logf("%s", got.summary())
	checkCommitted(t, d, got, want, wantAcct, log, ends)
	kills := c.kills.Load()
	restores := d.countLogLines(`"full":true`)
	t.Logf("%d SIGKILLs, each followed by deleting %s; %d full restores from the changelog logged", kills, c.stateDir, restores)
	if kills < minKills {
		t.Errorf("%d kills, want at least %d", kills, minKills)
	}
}

// TestTwoInstancesOneKilled: two instances (own instance ids and state
// directories) share the group; once both own partitions and process, one
// is SIGKILLed and never restarted. Its partitions move to the survivor
// after the session timeout, and the survivor's offset fetch waits for the
// dead instance's open transaction to be aborted. The committed records
// equal the reference.
func TestTwoInstancesOneKilled(t *testing.T) {
	t.Parallel()
	const minRecords, afterKill = 20_000, 8_000
	seeds := harness.Bootstrap(t)
	input := harness.NewTopic(t, seeds, harness.UniqueName("e2e-two.in"), inputPartitions, nil)
	d := newDeployment(t, seeds, input, "two", config.Default().Rule)
	adm := harness.NewAdmin(t, seeds)

	var killedAt atomic.Int64 // records written when b was killed; 0 before
	pr := produceStream(t, seeds, input, sim.New(streamOptions(24, 13)), produceRate, minRecords, 5*minRecords,
		func(sent int) bool {
			k := killedAt.Load()
			return k == 0 || int64(sent) < k+afterKill
		})
	a := d.start("a", d.stateDir("a"))
	b := d.start("b", d.stateDir("b"))

	// Both own partitions: the group balanced over the two.
	deadline := time.Now().Add(90 * time.Second)
	var owned map[string][]int32
	for {
		if p := d.failure(); p != nil {
			t.Fatalf("%s exited on its own (%s)%s", p.name, p.status(), d.tails())
		}
		owned = assignments(t, adm, d.group, input)
		if len(owned) == 2 && len(owned["a"]) > 0 && len(owned["b"]) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group did not assign partitions to both instances within 90s: %v%s", owned, d.tails())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("assignment before the kill: %v", owned)
	// Let b process (and commit) for a while, then kill it mid-stream.
	time.Sleep(2 * time.Second)
	if !pr.running() {
		t.Fatalf("the input was written completely before the kill: raise minRecords")
	}
	inHand := behind(adm, d.group, input)
	b.kill(t, d)
	killedAt.Store(max(pr.sent.Load(), 1))
	killed := time.Now()
	t.Logf("SIGKILL %s (owning partitions %v) after %d records were written; group behind the input: %v",
		b.name, owned["b"], killedAt.Load(), inHand)

	sent := pr.wait(t)
	log, ends := readLog(t, seeds, input)
	want, wantAcct := reference(t, d, log)
	requireMeaningful(t, want, log, inputPartitions)
	t.Logf("input: %d records written, %s", sent, logSizes(log))
	waitConsumed(t, d, ends, consumeTimeout)
	t.Logf("the survivor committed the whole input %v after the kill", time.Since(killed).Round(time.Millisecond))

	owned = assignments(t, adm, d.group, input)
	if !slices.Equal(owned["a"], []int32{0, 1, 2}) || len(owned) != 1 {
		t.Errorf("after the kill the group's assignment is %v, want a owning [0 1 2]", owned)
	}
	a.stop(t, d)

	got := readCommitted(t, d)
	t.Logf("%s", got.summary())
	checkCommitted(t, d, got, want, wantAcct, log, ends)
}

// assignments returns the group's members (by instance id) and the input
// partitions each owns.
func assignments(t *testing.T, adm *kadm.Client, group, topic string) map[string][]int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatalf("describe group %s: %v", group, err)
	}
	g, ok := described[group]
	if !ok || g.Err != nil {
		return nil
	}
	out := map[string][]int32{}
	for _, m := range g.Members {
		id := m.ClientID
		if m.InstanceID != nil {
			id = *m.InstanceID
		}
		var parts []int32
		if ca, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range ca.Topics {
				if tp.Topic == topic {
					parts = append(parts, tp.Partitions...)
				}
			}
		}
		slices.Sort(parts)
		out[id] = parts
	}
	return out
}
