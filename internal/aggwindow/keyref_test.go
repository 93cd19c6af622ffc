package aggwindow

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestKeyRef: a partition whose events carry a KeyRef per key, kept across
// the key's state being dropped (its windows closed) and created again,
// and across restores (new KeyRefs for the restored partition, as the
// caller's reload makes), gives the same results and persisted state as
// one without KeyRefs.
func TestKeyRef(t *testing.T) {
	kinds := append(restoreConfigs, struct {
		name          string
		kind          Kind
		size, advance int64
	}{"session 90s", Session, 90_000, 0})
	stale := 0
	for _, rc := range kinds {
		for _, fn := range allFns {
			t.Run(fmt.Sprintf("%s/%s", rc.name, fn), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, uint64(fn)))
				cfg := Config{Kind: rc.kind, SizeMs: rc.size, AdvanceMs: rc.advance, Fn: fn,
					DelayMs: 20_000, LatenessMs: minute, EvidenceLimit: 3,
					Fires: monotoneAt(fn, 5), AlertID: testAlertID}
				if rc.kind == Session {
					cfg.SizeMs, cfg.GapMs = 0, rc.size
				}
				// Keys take turns: each is silent long enough between its
				// turns for its windows to close and its state to go.
				evs := genStream(rng, 4, 4000, minute/2)
				for i := range evs {
					evs[i].Key = fmt.Sprintf("m%d", (i/300+rng.IntN(2))%6)
				}
				ref, p := mustPartition(t, cfg), mustPartition(t, cfg)
				refs := map[string]*KeyRef{}
				store := newMemStore()
				for i, e := range evs {
					q := rng.IntN(10) > 0
					want := ref.Process(e, q)
					r := refs[e.Key]
					if r == nil {
						r = &KeyRef{}
						refs[e.Key] = r
					}
					if r.ks != nil && r.ks.dropped {
						stale++
					}
					e.Ref = r
					got := p.Process(e, q)
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("record %d: with KeyRefs\n got %+v\nwant %+v", i, got, want)
					}
					if rng.IntN(1000) == 0 {
						store.persist(p)
						p = store.restore(t, cfg, rng)
						clear(refs)
					}
				}
				store.persist(p)
				want := ref.Advance(math.MaxInt64)
				if got := p.Advance(math.MaxInt64); !reflect.DeepEqual(got, want) {
					t.Fatal("final closes differ")
				}
				store.persist(p)
				if got, want := store.entries(), entriesOf(ref); !maps.Equal(got, want) {
					t.Fatalf("persisted state differs:\n got %q\nwant %q", got, want)
				}
			})
		}
	}
	if stale == 0 {
		t.Fatal("no KeyRef went stale: the test does not cover a dropped key")
	}
	t.Logf("%d lookups through a stale KeyRef", stale)
}
