package arch

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const mod = "github.com/vibeline/processor/"

// forbidden maps a package to import-path prefixes it must never depend on,
// directly or transitively.
var forbidden = map[string][]string{
	"internal/window":    {"github.com/twmb/franz-go", "github.com/cockroachdb/pebble", "github.com/prometheus", mod + "internal/alerts", mod + "internal/event"},
	"internal/event":     {"github.com/twmb/franz-go", "github.com/cockroachdb/pebble", "github.com/prometheus"},
	"internal/alerts":    {"github.com/twmb/franz-go", "github.com/cockroachdb/pebble", "github.com/prometheus", mod + "internal/consume", mod + "internal/window"},
	"internal/pipeline":  {"github.com/twmb/franz-go", "github.com/cockroachdb/pebble", "github.com/prometheus", mod + "internal/consume"},
	"internal/config":    {"github.com/twmb/franz-go", "github.com/cockroachdb/pebble"},
	"internal/state":     {"github.com/twmb/franz-go", mod + "internal/window", mod + "internal/consume"},
	"internal/txn":       {mod + "internal/window", mod + "internal/pipeline", mod + "internal/state"},
	"internal/metrics":   {mod + "internal/window", mod + "internal/consume"},
	"internal/sim":       {"github.com/twmb/franz-go", "github.com/cockroachdb/pebble"},
	"internal/aggwindow": {"github.com/twmb/franz-go", "github.com/cockroachdb/pebble", "github.com/prometheus", mod + "internal/alerts", mod + "internal/event"},
	"internal/deliver":   {"github.com/cockroachdb/pebble", mod + "internal/consume", mod + "internal/window", mod + "internal/pipeline"},
	"internal/dlq":       {"github.com/cockroachdb/pebble", mod + "internal/consume"},
	"internal/rules":     {"github.com/twmb/franz-go", "github.com/cockroachdb/pebble", "github.com/prometheus", mod + "internal/consume"},
}

func TestDependencyDirection(t *testing.T) {
	for pkg, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", mod+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range bad {
				if dep == b || strings.HasPrefix(dep, b+"/") {
					t.Errorf("%s depends on %s (forbidden: %s)", pkg, dep, b)
				}
			}
		}
	}
}

// impure are the standard-library packages a pure package must not import,
// and why. A path forbids its subpackages too (sync forbids sync/atomic, log
// forbids log/slog, math/rand forbids math/rand/v2).
var impure = []struct{ path, why string }{
	{"time", "no clock: event time is data"},
	{"log", "no logging"},
	{"os", "no I/O"},
	{"net", "no I/O"},
	{"sync", "no goroutine synchronisation: one goroutine owns the state"},
	{"math/rand", "no randomness: outputs are functions of the input"},
	{"unsafe", "no unsafe memory"},
}

// pure maps each pure package (see its doc.go) to the module packages it may
// depend on, directly or transitively; apart from those it depends on the
// standard library only. Each package listed as allowed is a row itself, so
// nothing impure comes in through it.
var pure = map[string][]string{
	"internal/window":    {"internal/codec"},
	"internal/aggwindow": {"internal/codec"},
	"internal/dedup":     {"internal/codec"},
	"internal/watermark": {"internal/codec"},
	"internal/codec":     nil,
}

// TestPurePackages enforces the pure packages' doc.go rules: nothing
// outside the standard library but the module's own pure packages (by
// go list -deps), and no import of an impure standard package (time, a
// logger, I/O, ...) by any non-test file of the package, whatever its
// build constraints.
func TestPurePackages(t *testing.T) {
	for pkg, allowed := range pure {
		ok := map[string]bool{mod + pkg: true}
		for _, a := range allowed {
			if _, isPure := pure[a]; !isPure {
				t.Errorf("%s may depend on %s, which is not in the pure table", pkg, a)
			}
			ok[mod+a] = true
		}
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", mod+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if !ok[dep] {
				t.Errorf("%s depends on %s: only the standard library and %v", pkg, dep, allowed)
			}
		}

		out, err = exec.Command("go", "list", "-f", "{{.Dir}}", mod+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "*.go"))
		if err != nil {
			t.Fatal(err)
		}
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
				if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") && !ok[path] {
					t.Errorf("%s imports %s: only the standard library and %v", file, path, allowed)
				}
				for _, bad := range impure {
					if path == bad.path || strings.HasPrefix(path, bad.path+"/") {
						t.Errorf("%s imports %s: %s is pure (%s)", file, path, pkg, bad.why)
					}
				}
			}
		}
	}
}

// scaffolding are the packages written for tests (in-process clusters, fake
// registries): no package of the product may depend on them, so that what
// runs in production never carries test doubles.
var scaffolding = []string{mod + "internal/kafkatest", mod + "internal/avro/avrotest"}

func TestNoProductionCodeDependsOnTestScaffolding(t *testing.T) {
	// Every package of the module with its dependencies, tests not
	// included (Deps does not follow test imports).
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 20 {
		t.Fatalf("go list listed %d packages: %q", len(lines), out)
	}
	for _, line := range lines {
		f := strings.Fields(line)
		if slices.Contains(scaffolding, f[0]) {
			continue
		}
		for _, dep := range f[1:] {
			if slices.Contains(scaffolding, dep) {
				t.Errorf("%s depends on the test scaffolding %s", f[0], dep)
			}
		}
	}
}
