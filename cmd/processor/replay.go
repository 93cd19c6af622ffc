package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/replay"
)

func replayCmd() *cobra.Command {
	var (
		cfgPath string
		from    string
		dryRun  bool
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Reset the group's input offsets so a new rule version reprocesses the log on fresh state",
		Long: `replay prepares a reprocessing after a rule change. Bump rule.version in the
configuration first, stop every replica of the group, then run

  processor replay --config new.yaml [--from 2026-01-01T00:00:00Z] [--dry-run]

It refuses while the group has live members (naming them) and when the
configured rule version already has state; otherwise it resets the group's
input offsets to the earliest (or to the first record at or after --from)
with an empty state position, and prints what it did. Then start the
replicas with the new configuration: alert ids of the new version never
collide with the old ones.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(cfgPath, cmd.Flags())
			if err != nil {
				return usageError{err}
			}
			o := replay.Options{Config: cfg, DryRun: dryRun}
			if o.ExtraKgoOpts, err = kafkaSecurityOpts(cfg.Kafka, newLogger(os.Stderr, "warn")); err != nil {
				return err
			}
			if from != "" {
				t, err := time.Parse(time.RFC3339, from)
				if err != nil {
					return usageError{fmt.Errorf("--from %q is not an RFC 3339 time such as 2026-01-01T00:00:00Z", from)}
				}
				o.From = t
			}
			plan, err := replay.Run(cmd.Context(), o)
			if errors.Is(err, replay.ErrLiveMembers) || errors.Is(err, replay.ErrStateExists) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), plan.String())
			return nil
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "YAML configuration file (with the new rule version)")
	cmd.Flags().StringVar(&from, "from", "", "replay from the first record at or after this RFC 3339 time (default: earliest)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan, change nothing")
	addConfigFlags(cmd)
	cmd.Flags().Int("rule.version", config.Default().Rule.Version, "rule version to replay into")
	return cmd
}
