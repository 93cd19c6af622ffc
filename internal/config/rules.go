package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/vibeline/processor/internal/rules"
)

// Rules returns the compiled rules this configuration runs: those of
// RulesFile when it is set, else the rule block expressed in the rule schema
// (LegacyRule). Every problem of every rule is reported at once.
func (c Config) Rules() ([]*rules.Compiled, error) {
	if c.RulesFile != "" {
		rs, err := rules.Load(c.RulesFile)
		if err != nil {
			return nil, fmt.Errorf("config: rules_file = %q: %w", c.RulesFile, err)
		}
		if len(rs) == 0 {
			return nil, fmt.Errorf("config: rules_file = %q holds no rule: want at least one", c.RulesFile)
		}
		return rs, nil
	}
	r, err := rules.Compile(c.LegacyRule())
	if err != nil {
		return nil, fmt.Errorf("config: rule: %w", err)
	}
	return []*rules.Compiled{r}, nil
}

// LegacyRule expresses the rule block and topics in the rule schema: a
// record-aligned sliding rule keyed by machine_id whose filter is
// `value >= min_value && quality == "<quality>"` (no quality term when
// quality is empty) and whose threshold is `count >= threshold`. It makes
// the same decisions as the rule block always did.
func (c Config) LegacyRule() rules.Rule {
	r := rules.DefaultRule()
	r.ID, r.Version, r.Description = c.Rule.ID, c.Rule.Version, c.Rule.Description
	r.Source = c.Topics.Input
	r.Key = rules.DefaultKey
	filter := "value >= " + strconv.FormatFloat(c.Rule.MinValue, 'g', -1, 64)
	if c.Rule.Quality != "" {
		filter += " && quality == " + strconv.Quote(c.Rule.Quality)
	}
	r.Filter = rules.Expr(filter)
	r.Window = rules.Window{Type: rules.Sliding, Size: rules.Duration(c.Rule.Window)}
	r.Threshold = rules.Expr("count >= " + strconv.Itoa(c.Rule.Threshold))
	r.Watermark = rules.Watermark{Strategy: rules.WatermarkFixed, Delay: rules.Duration(c.Rule.WatermarkDelay)}
	r.AllowedLateness = rules.Duration(c.Rule.AllowedLateness)
	r.DedupHorizon = rules.Duration(c.Rule.DedupHorizon)
	r.Outputs = rules.Outputs{Alerts: c.Topics.Alerts, DLQ: c.Topics.DLQ, Late: c.Topics.Late}
	return r
}

// ChangelogFor returns the changelog topic of a rule:
// <group_id>.<rule id>.v<rule version>.changelog, or topics.changelog for
// the rule block when it is set.
func (c Config) ChangelogFor(r *rules.Compiled) string {
	if c.RulesFile == "" && c.Topics.Changelog != "" {
		return c.Topics.Changelog
	}
	return fmt.Sprintf("%s.%s.v%d.changelog", c.GroupID, r.Rule.ID, r.Rule.Version)
}

// RepartitionFor returns the internal repartition topic of a rule:
// <group_id>.<rule id>.v<rule version>.repartition.
func (c Config) RepartitionFor(r *rules.Compiled) string {
	return fmt.Sprintf("%s.%s.v%d.repartition", c.GroupID, r.Rule.ID, r.Rule.Version)
}

// StateHash returns the hash stored with a rule's state (and compared at
// start-up, so that a changed definition is refused rather than mixed with
// the state of the old one): the rule's own hash (rules.Hash) when
// rule.max_future_skew has its default, else a digest of that hash and the
// skew. rule.max_future_skew is one setting for every rule, outside the
// rule schema, but it decides which records are clock_ahead, so it shapes
// every rule's results; the default leaves the hash of a rule unchanged
// (states written before the skew was hashed keep theirs).
func (c Config) StateHash(r *rules.Compiled) string {
	ms := c.Rule.MaxFutureSkew.Milliseconds() // what the validator uses
	if ms == DefaultMaxFutureSkew.Milliseconds() {
		return r.Hash
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\nmax_future_skew_ms=%d", r.Hash, ms))
	return hex.EncodeToString(sum[:])
}
