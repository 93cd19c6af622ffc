package dedup

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDependencies enforces doc.go's rules: the package imports only the
// standard library, and never package time (no clock), a logger, I/O,
// goroutine synchronisation or randomness.
func TestDependencies(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := map[string]bool{"time": true, "log": true, "log/slog": true, "os": true, "net": true, "sync": true, "sync/atomic": true, "unsafe": true, "math/rand": true, "math/rand/v2": true}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") {
				t.Errorf("%s imports %s: stdlib only", file, path)
			}
			if forbidden[path] {
				t.Errorf("%s imports %s: the dedup package is pure (no clock, I/O, logging, goroutine sync or randomness)", file, path)
			}
		}
	}
}
