package state

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// memLog is a changelog held in memory: one slice of records per partition,
// offsets are indexes.
type memLog map[int32][]ChangelogRecord

func (m memLog) append(p int32, key string, value []byte) int64 {
	off := int64(len(m[p]))
	m[p] = append(m[p], ChangelogRecord{Offset: off, Key: []byte(key), Value: value})
	return off
}

func (m memLog) Read(_ context.Context, p int32, from, to int64, fn func(ChangelogRecord) error) error {
	for _, r := range m[p] {
		if r.Offset < from || r.Offset >= to {
			continue
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func dump(t *testing.T, s *Store, p int32) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := s.Scan(p, func(k, v []byte) error { out[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBatchDiscardLeavesNoTrace(t *testing.T) {
	s, err := Open(t.TempDir(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := s.NewBatch()
	must(t, b.Put(0, []byte("kA"), []byte("1")))
	must(t, b.SetCheckpoint(0, 1))
	must(t, b.Commit())

	// An aborted transaction's staged writes are discarded.
	b = s.NewBatch()
	must(t, b.Put(0, []byte("kA"), []byte("2")))
	must(t, b.Put(0, []byte("kB"), []byte("x")))
	must(t, b.SetCheckpoint(0, 5))
	b.Discard()

	if got := dump(t, s, 0); len(got) != 1 || got["kA"] != "1" {
		t.Fatalf("state after discard = %v, want only kA=1", got)
	}
	if c, ok, _ := s.Checkpoint(0); !ok || c != 1 {
		t.Fatalf("checkpoint after discard = %d,%v, want 1", c, ok)
	}
}

func TestRestoreReachesExactlyTarget(t *testing.T) {
	log := memLog{}
	log.append(3, "kA", []byte("a1"))
	log.append(3, "kB", []byte("b1"))
	log.append(3, "kA", []byte("a2"))
	target := log.append(3, "kB", nil) + 1 // committed position: tombstone of kB included
	log.append(3, "kC", []byte("uncommitted-by-metadata"))

	s, err := Open(t.TempDir(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Restore(context.Background(), 3, target, log)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Full || st.Records != 4 {
		t.Fatalf("stats = %+v, want full restore of 4 records", st)
	}
	got := dump(t, s, 3)
	if len(got) != 1 || got["kA"] != "a2" {
		t.Fatalf("restored = %v, want exactly kA=a2", got)
	}
	if c, _, _ := s.Checkpoint(3); c != target {
		t.Fatalf("checkpoint = %d, want %d", c, target)
	}

	// Incremental: only the records past the checkpoint are read.
	target2 := log.append(3, "kD", []byte("d1")) + 1
	st, err = s.Restore(context.Background(), 3, target2, log)
	if err != nil {
		t.Fatal(err)
	}
	if st.Full || st.From != target || st.Records != 2 {
		t.Fatalf("incremental stats = %+v, want 2 records from %d", st, target)
	}
	if got := dump(t, s, 3); got["kC"] != "uncommitted-by-metadata" || got["kD"] != "d1" {
		t.Fatalf("incremental restore = %v", got)
	}
	// Other partitions untouched.
	if got := dump(t, s, 2); len(got) != 0 {
		t.Fatalf("partition 2 = %v, want empty", got)
	}
}

func TestRestoreFromCheckpointAheadIsFull(t *testing.T) {
	log := memLog{}
	target := log.append(0, "kA", []byte("a")) + 1
	s, err := Open(t.TempDir(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := s.NewBatch()
	must(t, b.Put(0, []byte("kZ"), []byte("foreign")))
	must(t, b.SetCheckpoint(0, 99))
	must(t, b.Commit())
	st, err := s.Restore(context.Background(), 0, target, log)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Full {
		t.Fatalf("want a full restore when the checkpoint is ahead of the target")
	}
	if got := dump(t, s, 0); len(got) != 1 || got["kA"] != "a" {
		t.Fatalf("restored = %v", got)
	}
}

func TestDeletedOrCorruptStoreRestoresFully(t *testing.T) {
	log := memLog{}
	var target int64
	for i := 0; i < 25_000; i++ { // crosses the restore batch size
		target = log.append(1, fmt.Sprintf("k%05d", i%1000), []byte(fmt.Sprint(i))) + 1
	}
	dir := filepath.Join(t.TempDir(), "state")
	s, err := Open(dir, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Restore(context.Background(), 1, target, log); err != nil {
		t.Fatal(err)
	}
	want := dump(t, s, 1)
	must(t, s.Close())
	must(t, s.Close()) // idempotent

	// Deleted store.
	must(t, os.RemoveAll(dir))
	s, err = Open(dir, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Checkpoint(1); ok {
		t.Fatal("fresh store has a checkpoint")
	}
	st, err := s.Restore(context.Background(), 1, target, log)
	if err != nil || !st.Full {
		t.Fatalf("restore after delete: %+v %v", st, err)
	}
	if got := dump(t, s, 1); len(got) != len(want) || got["k00999"] != want["k00999"] {
		t.Fatalf("restore after delete differs: %d keys vs %d", len(got), len(want))
	}
	must(t, s.Close())

	// Corrupt store: garbage in every file.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		must(t, os.WriteFile(filepath.Join(dir, e.Name()), []byte("garbage"), 0o644))
	}
	s, err = Open(dir, testLogger())
	if err != nil {
		t.Fatalf("open corrupt store: %v", err)
	}
	defer s.Close()
	if !s.Wiped {
		t.Fatal("corrupt store not reported as wiped")
	}
	if _, err := s.Restore(context.Background(), 1, target, log); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, s, 1); len(got) != len(want) {
		t.Fatalf("restore after corruption: %d keys, want %d", len(got), len(want))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
