package consume

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/state"
)

// The "h" entry: a state hash ("2:" + config.StateHash) must be this
// rule's; a legacy value (the rule's hash alone, written before the skew
// was hashed) is accepted once when it is the rule's hash, whatever the
// skew, and rewritten at the next commit; anything else is refused.
func TestStoredHashFormats(t *testing.T) {
	cfg := testConfig(nil, t.TempDir(), "unit")
	cfg.Rule.MaxFutureSkew = 10 * time.Minute
	rs, err := cfg.Rules()
	if err != nil {
		t.Fatal(err)
	}
	stage, err := pipeline.NewStage(cfg.Rule)
	if err != nil {
		t.Fatal(err)
	}
	tk := &task{rule: rs[0], hash: cfg.StateHash(rs[0]), stage: stage, ns: "r.v1", cl: "r.changelog"}
	if tk.hash == rs[0].Hash {
		t.Fatal("the fixture's skew does not change the hash")
	}
	for _, c := range []struct {
		name     string
		stored   string
		refused  bool
		rewrites bool
	}{
		{"none", "", false, true},
		{"state hash", stateHashPrefix + tk.hash, false, false},
		{"legacy rule hash", rs[0].Hash, false, true},
		{"state hash of the default skew", stateHashPrefix + rs[0].Hash, true, false},
		{"another rule's legacy hash", "0123", true, false},
	} {
		st, err := state.Open(t.TempDir(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		tk.store = st
		if c.stored != "" {
			b := st.NewBatch()
			if err := b.Put(0, []byte(changelogHash), []byte(c.stored)); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		rp, err := loadRulePart(tk, 0, pipeline.DedupShare{})
		switch {
		case c.refused:
			if !errors.Is(err, ErrRuleChanged) {
				t.Errorf("%s: %v, want ErrRuleChanged", c.name, err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case rp.hashOK == c.rewrites:
			t.Errorf("%s: hashOK %v, want the hash rewritten: %v", c.name, rp.hashOK, c.rewrites)
		}
		st.Close()
	}
}
