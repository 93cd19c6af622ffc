package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/dlq"
)

func dlqCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect the dead-letter topic, and replay dead letters to the input after a fix",
	}
	cmd.AddCommand(dlqInspectCmd(), dlqReplayCmd())
	return cmd
}

// addDLQConfigFlags adds the config flags of the dlq commands.
func addDLQConfigFlags(cmd *cobra.Command, cfgPath *string) {
	cmd.Flags().StringVar(cfgPath, "config", "", "YAML configuration file (the processor's)")
	addConfigFlags(cmd)
	cmd.Flags().String("topics.dlq", config.Default().Topics.DLQ, "dead-letter topic")
}

// timeRange parses --from/--to (RFC 3339) into sel.
func timeRange(sel *dlq.Selection, from, to string) error {
	for _, b := range []struct {
		flag, val string
		dst       *time.Time
	}{{"--from", from, &sel.From}, {"--to", to, &sel.To}} {
		if b.val == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, b.val)
		if err != nil {
			return fmt.Errorf("%s %q is not an RFC 3339 time such as 2026-01-01T00:00:00Z", b.flag, b.val)
		}
		*b.dst = t
	}
	return nil
}

func dlqInspectCmd() *cobra.Command {
	var (
		cfgPath, from, to string
		reasons           []string
		samples           int
		asJSON            bool
	)
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Count dead letters by reason and source partition, with samples",
		Long: `inspect reads the dead-letter topic (topics.dlq) read_committed, from its start
to its last stable offsets at the time it starts, and prints how many dead
letters there are by reason, by source partition and by rule version (the
dlq.rules header; "(none)" for letters of older processors), the time span of
the original records and of the dead-lettering, how many are replays that
failed again, and --samples records per reason (the most recently
dead-lettered): key, rules, error detail, source position and the value,
escaped to printable text
and cut at 200 bytes. --from/--to select by the original record's timestamp
([from, to), RFC 3339). It only reads.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.LoadSettings(cfgPath, cmd.Flags()) // the DLQ commands use no rule
			if err != nil {
				return usageError{err}
			}
			o := dlq.InspectOptions{Config: cfg, Samples: samples, Selection: dlq.Selection{Reasons: reasons}}
			if o.ExtraKgoOpts, err = kafkaSecurityOpts(cfg.Kafka, newLogger(os.Stderr, "warn")); err != nil {
				return err
			}
			if err := timeRange(&o.Selection, from, to); err != nil {
				return usageError{err}
			}
			if err := o.Selection.Validate(); err != nil {
				return usageError{err}
			}
			sum, err := dlq.Inspect(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(sum)
			}
			fmt.Fprint(cmd.OutOrStdout(), sum.String())
			return nil
		},
	}
	addDLQConfigFlags(cmd, &cfgPath)
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "only original records at or after this RFC 3339 time")
	f.StringVar(&to, "to", "", "only original records before this RFC 3339 time")
	f.StringSliceVar(&reasons, "reason", nil, "only this error.reason (repeatable)")
	f.IntVar(&samples, "samples", 3, "sample records per reason")
	f.BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

func dlqReplayCmd() *cobra.Command {
	var (
		cfgPath, from, to, logLevel string
		o                           dlq.ReplayOptions
		sourcePartitions, dlqParts  []int32
		confirmReset                bool
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Re-inject chosen dead letters into the input topic, exactly once",
		Long: `replay re-injects the chosen dead letters into the topic they came from
(topics.input; --to-topic names another), with their original key, value,
record timestamp and headers, to their original partition, plus the headers
dlq.replayed=1, dlq.replayed.from=<dlq topic>/<partition>@<offset> and
dlq.original.{topic,partition,offset,timestamp}.

Exactly once: a consumer group on the dead-letter topic (--group, default
<group_id>.dlq-replay) examines the dead letters in transactions that hold
both the replays of a batch and the group's offsets after it. The group's
committed position therefore means "examined": letters the selection does
not choose are skipped, and count as examined too. A re-run continues where
the last run stopped and never injects a letter twice, even after a crash.
A run stops at the dead-letter topic's end as it was when the run started,
and prints how many letters it examined, replayed and skipped, by reason.

Use a new --group for each fix (say <group_id>.dlq-replay.<ticket>) when
letters skipped by an earlier selection should be examined again; --reset
--confirm-reset re-examines the whole topic with the same group, replaying
again what was replayed before. Always start with --dry-run.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.LoadSettings(cfgPath, cmd.Flags()) // the DLQ commands use no rule
			if err != nil {
				return usageError{err}
			}
			o.Config = cfg
			o.Selection.SourcePartitions, o.Selection.DLQPartitions = sourcePartitions, dlqParts
			if err := timeRange(&o.Selection, from, to); err != nil {
				return usageError{err}
			}
			if err := o.Selection.Validate(); err != nil {
				return usageError{err}
			}
			if o.Reset && !o.DryRun && !confirmReset {
				return usageError{errors.New("--reset re-examines every dead letter and replays again what was replayed before; add --confirm-reset to do it, or try --dry-run")}
			}
			o.Logger = newLogger(os.Stderr, logLevel)
			if o.ExtraKgoOpts, err = kafkaSecurityOpts(cfg.Kafka, o.Logger); err != nil {
				return err
			}
			rep, err := dlq.Replay(cmd.Context(), o)
			if err == nil || rep.Examined > 0 {
				// On an error, what the committed transactions did.
				fmt.Fprint(cmd.OutOrStdout(), rep.String())
			}
			if errors.Is(err, dlq.ErrLiveMembers) || errors.Is(err, dlq.ErrSourceTopic) {
				return usageError{err}
			}
			return err
		},
	}
	addDLQConfigFlags(cmd, &cfgPath)
	f := cmd.Flags()
	f.StringSliceVar(&o.Selection.Reasons, "reason", nil, "replay only this error.reason (repeatable)")
	f.Int32SliceVar(&sourcePartitions, "source-partition", nil, "replay only letters from this source partition (repeatable)")
	f.Int32SliceVar(&dlqParts, "dlq-partition", nil, "replay only letters in this dead-letter partition (repeatable)")
	f.Int64Var(&o.Selection.FromOffset, "from-offset", 0, "replay only letters at or after this dead-letter offset")
	f.Int64Var(&o.Selection.ToOffset, "to-offset", 0, "replay only letters before this dead-letter offset (0: no bound)")
	f.StringVar(&from, "from", "", "replay only original records at or after this RFC 3339 time")
	f.StringVar(&to, "to", "", "replay only original records before this RFC 3339 time")
	f.StringVar(&o.Group, "group", "", "replay consumer group (default <group_id>.dlq-replay)")
	f.StringVar(&o.ToTopic, "to-topic", "", "re-inject every chosen letter into this topic, whatever its source (default: topics.input, which must be its source)")
	f.BoolVar(&o.DryRun, "dry-run", false, "count what would be replayed and skipped; write nothing")
	f.BoolVar(&o.Reset, "reset", false, "re-examine from the start of the dead-letter topic (needs --confirm-reset)")
	f.BoolVar(&confirmReset, "confirm-reset", false, "confirm --reset")
	f.IntVar(&o.Batch, "batch", 500, "dead letters per transaction")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
