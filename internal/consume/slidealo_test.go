package consume

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/state"
)

// clLog is a changelog partition as a restore reads it: every record
// produced, in order, committed or flushed by an aborted at_least_once
// batch; pos is the committed position (the end of the last committed
// batch).
type clLog struct {
	recs []clEntry
	pos  int
}

// commitTo commits the batch as unitPart.commit does and appends its
// records to the changelog.
func (u *unitPart) commitTo(l *clLog) []clEntry {
	u.t.Helper()
	es := u.commit()
	l.recs = append(l.recs, es...)
	l.pos = len(l.recs)
	return es
}

// abortFlushed aborts the batch at_least_once: its changelog records were
// flushed (alo.End flushes before the offset commit fails), the local
// store is not written and the in-memory state is reloaded from it.
func (u *unitPart) abortFlushed(l *clLog) {
	u.t.Helper()
	es, err := u.pt.changelogEntries()
	if err != nil {
		u.t.Fatal(err)
	}
	l.recs = append(l.recs, es...)
	rewriteFlushed(es) // as endBatch does
	old := u.rp()
	u.load()
	u.rp().tombstones, u.rp().rewrite = old.tombstones, old.rewrite // as reloadAll does
}

// Read reads the changelog as changelogReader does, offsets being indexes.
func (l *clLog) Read(_ context.Context, _ int32, from, to int64, fn func(state.ChangelogRecord) error) error {
	for i := from; i < to; i++ {
		if err := fn(state.ChangelogRecord{Offset: i, Key: l.recs[i].name, Value: l.recs[i].value}); err != nil {
			return err
		}
	}
	return nil
}

// restoreFrom returns a unit part restored from the changelog's committed
// prefix into an empty store (a new replica), or the load's error.
func restoreFrom(t *testing.T, u *unitPart, l *clLog) (*unitPart, error) {
	t.Helper()
	st, err := state.Open(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := st.NewBatch()
	for _, e := range l.recs[:l.pos] {
		if err := b.Put(0, e.name, e.value); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	r := &unitPart{t: t, stage: u.stage, tk: &task{stage: u.stage, store: st, ns: "r.v1", hash: "h"}}
	rp, err := loadRulePart(r.tk, 0, pipeline.DedupShare{})
	if err != nil {
		return nil, err
	}
	r.pt = &part{rs: []*rulePart{rp}}
	// As onFetched does at_least_once: the keys past the committed position.
	if rp.rewrite, err = keysPast(context.Background(), l, 0, int64(l.pos), int64(len(l.recs))); err != nil {
		t.Fatal(err)
	}
	return r, nil
}

// TestAtLeastOnceAbortedBucketsAreRewritten: at_least_once, a batch that
// applied events to two buckets of a key aborted after its changelog
// records were flushed; the retry's committed batch is shorter (batches
// end by time and polls) and rewrites the key entry and one bucket only.
// A replica restoring from the changelog at the committed position must
// load the committed state, not the aborted batch's bucket beside the
// committed key entry.
func TestAtLeastOnceAbortedBucketsAreRewritten(t *testing.T) {
	cfg := testConfig(nil, t.TempDir(), "unit")
	u := newUnitPart(t, cfg.Rule)
	var l clLog
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC).UnixMilli()
	const m = "M-1"
	u.process(eventInput(m, "e0", base, 0))
	u.commitTo(&l)

	a := []pipeline.Input{eventInput(m, "e1", base+1000, 1), eventInput(m, "e2", base+60_000, 2)}
	u.process(a...)
	u.abortFlushed(&l)

	u.process(a[0]) // the retry commits the first record only
	u.commitTo(&l)

	sameRestore(t, u, &l)
}

// sameRestore restores a replica from the changelog's committed prefix and
// requires the committed state of u, entry for entry.
func sameRestore(t *testing.T, u *unitPart, l *clLog) *unitPart {
	t.Helper()
	r, err := restoreFrom(t, u, l)
	if err != nil {
		t.Fatalf("restore from the changelog at the committed position: %v", err)
	}
	got, want := r.storeEntries(), u.storeEntries()
	for name, v := range want {
		if g, ok := got[name]; !ok || !bytes.Equal(g, v) {
			t.Fatalf("restored %.20q: %d bytes (present %v), committed %d bytes", name, len(g), ok, len(v))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Fatalf("restored %.20q, which the committed state does not hold", name)
		}
	}
	if gs, ws := r.rp().win.Stats(), u.rp().win.Stats(); gs != ws {
		t.Fatalf("restored %+v, committed %+v", gs, ws)
	}
	return r
}

// TestAtLeastOnceAbortedBucketsRewrittenByTheNextOwner: as above, but the
// partition moves to a replica without local state after the abort (an
// offset commit that failed in a rebalance): it restores to the committed
// position, before the aborted records, and its first commit, which covers
// them, must rewrite what they wrote.
func TestAtLeastOnceAbortedBucketsRewrittenByTheNextOwner(t *testing.T) {
	cfg := testConfig(nil, t.TempDir(), "unit")
	u := newUnitPart(t, cfg.Rule)
	var l clLog
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC).UnixMilli()
	u.process(eventInput("M-1", "e0", base, 0), eventInput("M-2", "f0", base, 1))
	u.commitTo(&l)
	a := []pipeline.Input{
		eventInput("M-1", "e1", base+1000, 2),
		eventInput("M-3", "g0", base+2000, 3), // a key only the aborted batch has
		eventInput("M-1", "e2", base+60_000, 4),
	}
	u.process(a...)
	u.abortFlushed(&l)

	n := sameRestore(t, u, &l) // the next owner
	n.process(a[0])
	n.commitTo(&l)
	sameRestore(t, n, &l)
}

// aloLog is a log of a few machines, some of them silent for hours (their
// keys are deleted, then come back), with late events and redelivered
// ids, as inputs of partition 0.
func aloLog(rng *rand.Rand, n int) []pipeline.Input {
	base := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC).UnixMilli()
	type mach struct {
		name string
		ids  []string
	}
	ms := make([]*mach, 5)
	for i := range ms {
		ms[i] = &mach{name: fmt.Sprintf("M-%d", i)}
	}
	now := base
	var ins []pipeline.Input
	for off := int64(0); off < int64(n); off++ {
		now += int64(rng.IntN(3000))
		if rng.IntN(150) == 0 {
			now += 2 * time.Hour.Milliseconds() // everyone silent: keys expire
		}
		m := ms[rng.IntN(len(ms))]
		if rng.IntN(3) == 0 {
			m = ms[0] // a busy machine
		}
		ts := now - int64(rng.IntN(90_000)) // up to 90 s late
		if rng.IntN(50) == 0 {
			ts = now - 20*time.Minute.Milliseconds() // too late
		}
		id := fmt.Sprintf("%s-%d", m.name, off)
		if len(m.ids) > 0 && rng.IntN(10) == 0 {
			id = m.ids[rng.IntN(len(m.ids))] // redelivered
		} else {
			m.ids = append(m.ids, id)
		}
		ins = append(ins, eventInput(m.name, id, ts, off))
	}
	return ins
}

// TestAtLeastOnceAbortsRestoreTheCommittedState: random batches, some
// aborted at_least_once after their changelog records were flushed, the
// retry shorter or longer, and the partition moving to a new replica
// (restored from the changelog) after commits and after aborts; after
// every commit a restore from the changelog at the committed position
// must give exactly the committed state.
func TestAtLeastOnceAbortsRestoreTheCommittedState(t *testing.T) {
	cfg := testConfig(nil, t.TempDir(), "unit")
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 7))
		log := aloLog(rng, 2500)
		u := newUnitPart(t, cfg.Rule)
		var l clLog
		aborts, moves, deleted := 0, 0, 0
		for i := 0; i < len(log); {
			n := min(1+rng.IntN(60), len(log)-i)
			if rng.IntN(3) == 0 { // aborted, then retried with another length
				u.process(log[i : i+n]...)
				u.abortFlushed(&l)
				aborts++
				if rng.IntN(2) == 0 {
					u = sameRestore(t, u, &l) // moved before the retry
					moves++
				}
				n = min(1+rng.IntN(60), len(log)-i)
			}
			u.process(log[i : i+n]...)
			for _, e := range u.commitTo(&l) {
				if e.name[0] == changelogKeyPrefix && e.value == nil {
					deleted++
				}
			}
			i += n
			r := sameRestore(t, u, &l)
			if rng.IntN(4) == 0 {
				u = r
				moves++
			}
		}
		t.Logf("seed %d: %d changelog records, %d aborts, %d moves, %d keys deleted, %d outputs", seed, len(l.recs), aborts, moves, deleted, len(u.out))
		if aborts < 10 || deleted < 3 {
			t.Fatalf("seed %d: %d aborts, %d keys deleted: the fixture proves nothing", seed, aborts, deleted)
		}
	}
}
