package rules

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies enforces doc.go: the rule schema depends on no Kafka
// client, no store, no metrics and no viper, and on no other package of the
// module (the integration maps Compiled onto window and aggwindow configs,
// not the other way round).
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/twmb/franz-go", "github.com/cockroachdb/pebble", "github.com/prometheus",
		"github.com/spf13/viper", "github.com/vibeline/processor/internal/",
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/vibeline/processor/internal/rules" {
			continue
		}
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("internal/rules depends on %s", dep)
			}
		}
	}
}
