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
		Long: `reconcile reads the input, alerts, dead-letter, late and changelog topics
read_committed, from the start to their current end, and checks that no
alert was lost or doubled and every input record was accounted for exactly
once. Exit code 0: no violation; 1: violations (listed), or the run could
not finish (a topic or the schema registry could not be read); 2: a usage
error.

Each source is read in its format (sources:, JSON or Avro) and the alerts
in alerts_format. Avro writer schemas come from registry.url before any
record is judged: a registry that cannot answer stops the run (exit 1,
naming the registry and the schema id), never a violation; a schema id the
registry does not know makes its records schema_unknown, as the processor
dead-lettered them.

With the rule: block it checks that rule's accounting, dead letters,
too-late copies and alerts in one report. With rules_file it checks every
rule of the file and prints one section per rule (input records, alert
revisions, dead letters, too-late copies, accounting per partition,
violations), then the verdict. Per rule:
  - accounting (its changelog's "a" records): per input partition,
    processed + filtered + duplicate + dead_lettered + too_late = records,
    and records = the input records up to the committed position;
  - dead letters: each record that fails validation once per distinct
    dead-letter topic (rules sharing a topic share the copy), with its
    original key and value and source headers, the reason it fails, and as
    many as the rule's accounting counts;
  - too-late copies (late.rule, late.rule_version name the rule): each
    input record at most once, a valid qualifying event, as many as counted;
  - alerts (selected by rule_id and rule_version on a possibly shared
    topic): revisions 0, 1, 2, ... open first, at most one final closed or
    merged (merged for sliding and session rules only), record key = the
    alert's key (machine_id, or key for a sensor_id rule), the id of its
    rule, key and first evidence or window start; every evidence sample
    exists at its partition and offset, matches, has the alert's key and
    qualifies under the rule's filter; sliding: exactly N samples within
    the window; tumbling, hopping, session: 1 to 10 samples, at most the
    count, inside [start, end) of a window of the rule.
A repartitioned rule (key: sensor_id, or repartition: true) is checked
against its repartition topic, whose consumed records the processor
deletes: evidence whose record was deleted is found in the source by
event id, and record counts over deleted offsets are bounded, not exact
(the report says so).

--recompute also reruns each rule over the committed input and compares
every output record and the accounting with the reference; repartitioned
rules are not recomputed (their revision timing depends on how the source
partitions interleaved; the report says so). --from/--to limit the check to
what was committed in a time range: per rule, the input records whose
accounting was committed then (by partition offsets), and the alert
revisions committed then; --recompute takes no range.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(cfgPath, cmd.Flags())
			if err != nil {
				return usageError{err}
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
