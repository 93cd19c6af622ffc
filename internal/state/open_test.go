package state

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A state_dir that points at an existing regular file: Open must fail, not
// delete the user's file.
func TestOpenDoesNotDeleteARegularFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "important.yaml")
	if err := os.WriteFile(p, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(p, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		s.Close()
	}
	if b, rerr := os.ReadFile(p); rerr != nil || string(b) != "precious" {
		t.Fatalf("Open(%s) err=%v removed/replaced the regular file: read err=%v content=%q", p, err, rerr, b)
	}
}

// A second Open of a store that is in use (lock held) must fail, not wipe
// the live store.
func TestOpenLockedStoreIsNotWiped(t *testing.T) {
	dir := t.TempDir()
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := Open(dir, lg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := a.NewBatch()
	b.Put(0, []byte("k1"), []byte("v"))
	b.SetCheckpoint(0, 1)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, lg)
	if err == nil {
		defer s2.Close()
		t.Logf("second Open succeeded, Wiped=%v", s2.Wiped)
		if s2.Wiped {
			t.Fatalf("second Open of a locked store wiped it")
		}
	} else {
		t.Logf("second open err: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) == 0 || !hasManifest(ents) {
		names := []string{}
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("second Open (err=%v) deleted the live store's files; dir now holds %v", err, names)
	}
	if _, ok, _ := a.Checkpoint(0); !ok {
		t.Fatalf("live store lost its checkpoint")
	}
}

func hasManifest(ents []os.DirEntry) bool {
	for _, e := range ents {
		if len(e.Name()) > 8 && e.Name()[:8] == "MANIFEST" {
			return true
		}
	}
	return false
}

// Cross-process: a second process opening a store in use by another.
func TestOpenLockedByAnotherProcessIsNotWiped(t *testing.T) {
	if d := os.Getenv("STATE_TEST_CHILD_DIR"); d != "" {
		s, err := Open(d, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		if err == nil {
			s.Close()
		}
		return
	}
	dir := t.TempDir()
	a, err := Open(dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	b := a.NewBatch()
	b.Put(0, []byte("k1"), []byte("v"))
	b.SetCheckpoint(0, 42)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=TestOpenLockedByAnotherProcessIsNotWiped$", "-test.v")
	cmd.Env = append(os.Environ(), "STATE_TEST_CHILD_DIR="+dir)
	out, _ := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	a.Close()
	c, err := Open(dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if cp, ok, _ := c.Checkpoint(0); !ok || cp != 42 {
		t.Fatalf("a second process's Open wiped the live store: checkpoint after reopen = %d, %v (want 42, true)", cp, ok)
	}
}
