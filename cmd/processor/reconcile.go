package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/reconcile"
)

func reconcileCmd() *cobra.Command {
	var (
		cfgPath   string
		recompute bool
		quiet     bool
		from, to  string
	)
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Prove from the topics that no alert was lost or doubled and every input record is accounted for",
		Long: `reconcile reads the input, alerts, dead-letter, late and changelog topics of the
configured rule read_committed, from the start to their current end, and
checks: no alert revision twice and revisions in order; every evidence
sample exists in the input, has the alert's key and qualifies; every input
record up to the committed position counted exactly once (processed +
filtered + duplicate + dead_lettered + too_late = records per partition),
with the dead-letter and late topics holding exactly the counted records.
--recompute also reruns the rule over the committed input and compares
every output record. --from/--to limit the check to what was committed in
a time range: the input records whose accounting was committed then (by
partition offsets), and the alert revisions committed then. Exit code 0:
no violation; 1: violations (listed).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(cfgPath, cmd.Flags())
			if err != nil {
				return usageError{err}
			}
			if cfg.UsesAvro() {
				return usageError{fmt.Errorf("reconcile: reads JSON sources and JSON alerts only, and this configuration has Avro (sources: %v, alerts_format: %q); see docs/AVRO.md", avroSources(cfg), cfg.AlertsFormat)}
			}
			o := reconcile.Options{Config: cfg, Recompute: recompute}
			if o.ExtraKgoOpts, err = kafkaSecurityOpts(cfg.Kafka, newLogger(os.Stderr, "warn")); err != nil {
				return err
			}
			for _, b := range []struct {
				flag, val string
				dst       *time.Time
			}{{"--from", from, &o.From}, {"--to", to, &o.To}} {
				if b.val == "" {
					continue
				}
				t, err := time.Parse(time.RFC3339, b.val)
				if err != nil {
					return usageError{fmt.Errorf("%s %q is not an RFC 3339 time such as 2026-01-01T00:00:00Z", b.flag, b.val)}
				}
				*b.dst = t
			}
			if !quiet {
				o.Progress = progressBar()
			}
			rep, err := reconcile.Run(cmd.Context(), o)
			if !quiet {
				fmt.Fprintln(os.Stderr)
			}
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), rep.String())
			if !rep.OK() {
				return fmt.Errorf("reconcile: %d violations", len(rep.Violations))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "YAML configuration file (the processor's)")
	cmd.Flags().BoolVar(&recompute, "recompute", false, "also recompute all outputs and compare")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "no progress bar")
	cmd.Flags().StringVar(&from, "from", "", "check only what was committed at or after this RFC 3339 time")
	cmd.Flags().StringVar(&to, "to", "", "check only what was committed before this RFC 3339 time")
	addConfigFlags(cmd)
	return cmd
}

// progressBar draws one line on stderr per topic.
func progressBar() func(topic string, read, total int64) {
	last := ""
	return func(topic string, read, total int64) {
		if total <= 0 {
			return
		}
		pct := min(100, int(read*100/total))
		bar := strings.Repeat("#", pct/4) + strings.Repeat(".", 25-pct/4)
		line := fmt.Sprintf("\r[%s] %3d%% %s (%d/%d)", bar, pct, topic, read, total)
		if line != last {
			fmt.Fprint(os.Stderr, line)
			last = line
		}
	}
}

// avroSources lists the source topics whose format is avro.
func avroSources(cfg config.Config) []string {
	var out []string
	for _, s := range cfg.Sources {
		if cfg.SourceFormat(s.Topic).Format == config.FormatAvro {
			out = append(out, s.Topic)
		}
	}
	return out
}
