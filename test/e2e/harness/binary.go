package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// buildTimeout bounds go build ./cmd/processor on a 2-core machine with a
// cold build cache.
const buildTimeout = 10 * time.Minute

var build struct {
	once sync.Once
	path string
	err  error
}

// BuildBinary builds ./cmd/processor once per test binary and returns the
// executable's path. The binary goes to a per-repository directory in the
// user cache (not a t.TempDir, which the first test's end would remove), and
// is renamed into place, so test binaries building at once never run a
// half-written file.
func BuildBinary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		build.path, build.err = buildProcessor()
	})
	if build.err != nil {
		t.Fatalf("harness: %v", build.err)
	}
	return build.path
}

func buildProcessor() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(cache, "processor-e2e", hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build processor: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "processor-*.tmp")
	if err != nil {
		return "", fmt.Errorf("build processor: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // no-op after the rename

	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp.Name(), "./cmd/processor")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/processor: %w\n%s", err, out)
	}
	path := filepath.Join(dir, "processor")
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("build processor: %w", err)
	}
	return path, nil
}
