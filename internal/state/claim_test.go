package state

import "testing"

// A store claimed by another changelog (another group_id's processor given
// the same state_dir) loses its partitions' state and checkpoints; the
// owner's own store and an unowned one keep theirs.
func TestClaimDropsAnotherOwnersState(t *testing.T) {
	s, err := Open(t.TempDir(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func() {
		b := s.NewBatch()
		for p := int32(0); p < 3; p++ {
			if err := b.Put(p, []byte("kM-1"), []byte("state")); err != nil {
				t.Fatal(err)
			}
			if err := b.SetCheckpoint(p, 42); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	has := func(p int32) bool {
		_, ok, err := s.Checkpoint(p)
		if err != nil {
			t.Fatal(err)
		}
		v, err := s.Get(p, []byte("kM-1"))
		if err != nil {
			t.Fatal(err)
		}
		if ok != (v != nil) {
			t.Fatalf("partition %d: checkpoint %v but entry %q", p, ok, v)
		}
		return ok
	}
	put()
	// Unowned (a store written before owners were recorded): kept.
	if dropped, err := s.Claim("a.rule.v1.changelog"); err != nil || dropped || !has(0) {
		t.Fatalf("first claim: dropped=%v err=%v has=%v", dropped, err, has(0))
	}
	// The same owner again: kept.
	if dropped, err := s.Claim("a.rule.v1.changelog"); err != nil || dropped || !has(2) {
		t.Fatalf("same owner: dropped=%v err=%v has=%v", dropped, err, has(2))
	}
	// Another owner: every partition dropped, and the store is its now.
	if dropped, err := s.Claim("b.rule.v1.changelog"); err != nil || !dropped {
		t.Fatalf("other owner: dropped=%v err=%v", dropped, err)
	}
	for p := int32(0); p < 3; p++ {
		if has(p) {
			t.Fatalf("partition %d kept another owner's state", p)
		}
	}
	put()
	if dropped, err := s.Claim("b.rule.v1.changelog"); err != nil || dropped || !has(1) {
		t.Fatalf("new owner again: dropped=%v err=%v has=%v", dropped, err, has(1))
	}
}
