package arch

import (
	"os/exec"
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

// The pure event-time logic never reads the clock: it does not even import time.
func TestWindowDoesNotImportTime(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", mod+"internal/window").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		if imp == "time" {
			t.Fatal("internal/window imports time: event time is data, the clock must stay out")
		}
	}
}
