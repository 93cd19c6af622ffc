package state

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// copyDir copies the regular files of src into a new directory: what a
// process killed at this moment leaves on disk (the page cache survives a
// SIGKILL, so every completed write is in the copy).
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	must(t, err)
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		must(t, err)
		out, err := os.Create(filepath.Join(dst, e.Name()))
		must(t, err)
		_, err = io.Copy(out, in)
		in.Close()
		must(t, err)
		must(t, out.Close())
	}
	return dst
}

// Without a WAL, a crash leaves the state of the last memtable flush: an
// older checkpoint with exactly its entries, which Restore brings forward
// from the changelog to the state a clean stop would have kept.
func TestCrashWithoutWALLeavesAnOlderConsistentState(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, testLogger())
	must(t, err)
	log := memLog{}
	commit := func(kvs ...string) {
		t.Helper()
		b := s.NewBatch()
		for i := 0; i < len(kvs); i += 2 {
			var v []byte
			if kvs[i+1] != "" {
				v = []byte(kvs[i+1])
			}
			log.append(0, kvs[i], v)
			must(t, b.Put(0, []byte(kvs[i]), v))
		}
		must(t, b.SetCheckpoint(0, int64(len(log[0]))))
		must(t, b.Commit())
	}
	commit("kA", "1", "kB", "1")
	must(t, s.db.Flush()) // as when a memtable fills
	commit("kA", "2", "kC", "1")
	commit("kB", "") // a tombstone

	crashed := copyDir(t, dir)
	must(t, s.Close()) // a clean stop flushes

	s, err = Open(dir, testLogger())
	must(t, err)
	if c, ok, _ := s.Checkpoint(0); !ok || c != 5 {
		t.Fatalf("checkpoint after a clean stop = %d,%v, want 5", c, ok)
	}
	want := map[string]string{"kA": "2", "kC": "1"}
	if got := dump(t, s, 0); len(got) != 2 || got["kA"] != "2" || got["kC"] != "1" {
		t.Fatalf("state after a clean stop = %v, want %v", got, want)
	}
	must(t, s.Close())

	c, err := Open(crashed, testLogger())
	must(t, err)
	defer c.Close()
	if cp, ok, _ := c.Checkpoint(0); !ok || cp != 2 {
		t.Fatalf("checkpoint after a crash = %d,%v, want 2 (the flushed batch)", cp, ok)
	}
	if got := dump(t, c, 0); len(got) != 2 || got["kA"] != "1" || got["kB"] != "1" {
		t.Fatalf("state after a crash = %v, want the flushed batch's kA=1 kB=1", got)
	}
	st, err := c.Restore(context.Background(), 0, 5, log)
	must(t, err)
	if st.Full || st.From != 2 || st.Records != 3 {
		t.Fatalf("restore after a crash = %+v, want records [2, 5), not full", st)
	}
	if got := dump(t, c, 0); len(got) != 2 || got["kA"] != "2" || got["kC"] != "1" {
		t.Fatalf("state restored after a crash = %v, want %v", got, want)
	}
}

// The writes that must outlive a crash (owner, drops) are flushed at once.
func TestClaimAndDropSurviveACrash(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, testLogger())
	must(t, err)
	defer s.Close()
	b := s.NewBatch()
	must(t, b.Put(1, []byte("kA"), []byte("1")))
	must(t, b.SetCheckpoint(1, 1))
	must(t, b.Commit())
	must(t, s.db.Flush())
	if _, err := s.Claim("owner-1"); err != nil {
		t.Fatal(err)
	}
	must(t, s.Drop(1))

	c, err := Open(copyDir(t, dir), testLogger())
	must(t, err)
	defer c.Close()
	if _, ok, _ := c.Checkpoint(1); ok {
		t.Fatal("a dropped partition's checkpoint came back after a crash")
	}
	if dropped, err := c.Claim("owner-2"); err != nil || !dropped {
		t.Fatalf("claim by another owner after a crash = %v, %v; want the owner kept (dropped true)", dropped, err)
	}
}
