package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vibeline/processor/internal/rules"
)

// rulesCmd validates rule files. The rules of such a file are not yet what
// `processor run` executes (it runs the rule of the config's `rule:`
// section); this command is the first step of rules as configuration.
func rulesCmd() *cobra.Command {
	root := &cobra.Command{Use: "rules", Short: "Work with rule files (YAML `rules:` lists)"}
	root.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a rule file and print each rule in words",
		Long: `check parses FILE strictly (unknown keys are errors, with their line),
compiles every filter and threshold expression (errors name the rule, the
position and what is wrong), and prints each rule in words, for example
"alert when at least 3 events with value >= 7.1 and quality == "good" fall
within 2m (sliding, record-aligned), per machine_id; ...". Exit code 0 when
every rule is valid, 2 otherwise.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			report, err := rules.Check(args[0])
			fmt.Fprint(cmd.OutOrStdout(), report)
			if err != nil {
				return usageError{fmt.Errorf("rules check %s: invalid", args[0])}
			}
			return nil
		},
	})
	return root
}
