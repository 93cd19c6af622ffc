package config

import (
	"testing"
	"time"

	"github.com/vibeline/processor/internal/rules"
)

// The rule block's defaults, expressed in the rule schema, are the
// vibration rule of internal/rules/testdata/vibration.yaml: same hash, so
// the same decisions.
func TestLegacyRuleIsVibrationYAML(t *testing.T) {
	rs, err := rules.Load("../rules/testdata/vibration.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	got, err := def.Rules()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Hash != rs[0].Hash {
		t.Fatalf("legacy rule %+v\nhash %s, want %s (testdata/vibration.yaml)", got[0].Rule, got[0].Hash, rs[0].Hash)
	}
	if got[0].N != 3 {
		t.Errorf("N = %d", got[0].N)
	}
	def.Rule.Quality = ""
	r := def.LegacyRule()
	if r.Filter != "value >= 7.1" {
		t.Errorf("filter without quality = %q", r.Filter)
	}
}

func TestRulesFile(t *testing.T) {
	c := Default()
	c.RulesFile = "../rules/testdata/rules.yaml"
	rs, err := c.Rules()
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 5 {
		t.Fatalf("%d rules", len(rs))
	}
	if got := c.ChangelogFor(rs[1]); got != "vibration-processor.vibration-avg.v2.changelog" {
		t.Errorf("changelog %s", got)
	}
	c.RulesFile = "does-not-exist.yaml"
	if _, err := c.Rules(); err == nil {
		t.Error("missing rules file accepted")
	}
}

// The stored state hash is the rule's own with the default skew, and
// follows the skew in whole milliseconds, as the validator applies it.
func TestStateHash(t *testing.T) {
	c := Default()
	rs, err := c.Rules()
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if c.StateHash(r) != r.Hash {
		t.Fatal("the default skew changed the hash")
	}
	c.Rule.MaxFutureSkew = DefaultMaxFutureSkew + 500*time.Microsecond // the same 300000 ms
	if c.StateHash(r) != r.Hash {
		t.Fatal("a sub-millisecond difference changed the hash")
	}
	c.Rule.MaxFutureSkew = 10 * time.Minute
	ten := c.StateHash(r)
	c.Rule.MaxFutureSkew = 11 * time.Minute
	if ten == r.Hash || ten == c.StateHash(r) {
		t.Fatal("another skew kept the hash")
	}
}
