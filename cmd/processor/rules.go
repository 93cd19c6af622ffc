package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/rules"
)

// rulesCmd validates rule files and prints the rules a configuration runs.
func rulesCmd() *cobra.Command {
	root := &cobra.Command{Use: "rules", Short: "Work with rule files (YAML `rules:` lists, docs/RULES.md)"}
	var cfgPath string
	check := &cobra.Command{
		Use:   "check [FILE]",
		Short: "Validate a rule file, or the rules of a configuration, and print each rule in words",
		Long: `check parses FILE strictly (unknown keys are errors, with their line),
compiles every filter and threshold expression (errors name the rule, the
position and what is wrong), and prints each rule in words, for example
"alert when at least 3 events with value >= 7.1 and quality == "good" fall
within 2m (sliding, record-aligned), per machine_id; ...".

Without FILE it checks what "processor run" would run with the same
configuration (--config, PROCESSOR_* variables): the rules of its
rules_file, or its rule: block expressed as a rule.

Exit code 0 when every rule is valid, 2 otherwise.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := ""
			var cfg *config.Config // when the rules come from a configuration
			if len(args) == 1 {
				path = args[0]
			} else {
				c, err := config.LoadSettings(cfgPath, nil) // the rules are checked below
				if err != nil {
					return usageError{err}
				}
				if c.RulesFile == "" {
					return checkCompiled(cmd, c, "the configuration's rule: block")
				}
				path, cfg = c.RulesFile, &c
			}
			report, err := rules.Check(path)
			fmt.Fprint(cmd.OutOrStdout(), report)
			if err != nil {
				return usageError{fmt.Errorf("rules check %s: invalid", path)}
			}
			// What the schema accepts but this version cannot run yet.
			rs, err := rules.Load(path)
			if err != nil {
				return usageError{fmt.Errorf("rules check %s: %w", path, err)}
			}
			for _, r := range rs {
				if _, err := pipeline.NewRuleStage(r, pipeline.Options{}); err != nil {
					return usageError{fmt.Errorf("rules check %s: %w", path, err)}
				}
			}
			if err := consume.CheckCommitMetadata(rs); err != nil {
				return usageError{fmt.Errorf("rules check %s: %w", path, err)}
			}
			if err := consume.CheckDeadLetterRules(rs); err != nil {
				return usageError{fmt.Errorf("rules check %s: %w", path, err)}
			}
			if cfg != nil {
				ks, err := consume.Keepers(*cfg)
				if err != nil {
					return usageError{fmt.Errorf("rules check %s: %w", path, err)}
				}
				if len(ks) > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "\ndedup keepers (each persists the event ids of its rules once, in a changelog topic the processor creates like the rules' changelogs):\n")
				}
				for _, k := range ks {
					fmt.Fprintf(cmd.OutOrStdout(), "  %s: %s (input %s)\n", k.Changelog, strings.Join(k.Rules, ", "), k.Input)
				}
			}
			if cfg != nil && len(rs) > 0 && cfg.StateHash(rs[0]) != rs[0].Hash {
				// The hashes above are the rules'; what the processor
				// stores and compares also covers the skew.
				fmt.Fprintf(cmd.OutOrStdout(), "\nstate hashes (with rule.max_future_skew = %s, what the processor stores with each rule's state):\n", cfg.Rule.MaxFutureSkew)
				for _, r := range rs {
					fmt.Fprintf(cmd.OutOrStdout(), "  %s v%d, state hash %.16s\n", r.Rule.ID, r.Rule.Version, cfg.StateHash(r))
				}
			}
			return nil
		},
	}
	check.Flags().StringVar(&cfgPath, "config", "", "processor configuration (YAML) whose rules to check when no FILE is given")
	root.AddCommand(check)
	return root
}

// checkCompiled prints the rule block of cfg in words.
func checkCompiled(cmd *cobra.Command, cfg config.Config, what string) error {
	rs, err := cfg.Rules()
	if err != nil {
		return usageError{err}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: 1 rule, valid\n\n", what)
	for _, r := range rs {
		fmt.Fprintf(cmd.OutOrStdout(), "%s v%d, hash %.16s\n  %s\n", r.Rule.ID, r.Rule.Version, r.Hash, rules.Describe(r.Rule))
		if h := cfg.StateHash(r); h != r.Hash {
			fmt.Fprintf(cmd.OutOrStdout(), "  state hash %.16s (with rule.max_future_skew = %s, what the processor stores with the rule's state)\n", h, cfg.Rule.MaxFutureSkew)
		}
	}
	return nil
}
