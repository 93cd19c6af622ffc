package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/deliver"
	"github.com/vibeline/processor/internal/metrics"
	"github.com/vibeline/processor/internal/status"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// usageError marks errors that are the caller's (bad flags or config).
type usageError struct{ error }

func execute(args []string) int {
	root := &cobra.Command{
		Use:           "processor",
		Short:         "Kafka-native stateful stream processor: event-time alerts, exactly once",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(runCmd(), demoCmd(), loadgenCmd(), configCmd(), healthcheckCmd(), reconcileCmd(), replayCmd(), rulesCmd(), deliverCmd(), dlqCmd())
	root.SetArgs(args)
	// Cobra's own refusals (a bad flag, an unknown command, a wrong number
	// of arguments) are usage errors, exit 2, like the configuration's.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan struct{})
	defer close(done)
	go hardStop(ctx, done)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(os.Stderr, "processor:", err)
	var ue usageError
	if errors.As(err, &ue) || cobraUsage(err) {
		return exitUsage
	}
	return exitFailed
}

// cobraUsage reports whether err is one of cobra's command-line refusals
// that do not go through the flag error function: an unknown command, or
// arguments a command does not take.
func cobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command ", "accepts ", "requires at least ", "requires at most ", "requires between ", "unknown flag", "unknown shorthand flag", "invalid argument "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// shutdownGrace bounds the soft shutdown (commit the open batch, leave).
const shutdownGrace = 30 * time.Second

// hardStop is the second phase of shutdown: after the first SIGINT/SIGTERM
// the processor commits its open batch and leaves the group; a second signal,
// or shutdownGrace without finishing, exits at once. The open transaction is
// then aborted by the broker (fenced by the next incarnation, or timed out).
func hardStop(ctx context.Context, done <-chan struct{}) {
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	second := make(chan os.Signal, 1)
	signal.Notify(second, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(second)
	select {
	case <-done:
	case <-second:
		fmt.Fprintln(os.Stderr, "processor: second signal: exiting without committing (the open transaction aborts)")
		os.Exit(exitFailed)
	case <-time.After(shutdownGrace):
		fmt.Fprintf(os.Stderr, "processor: clean shutdown did not finish within %s: exiting (the open transaction aborts)\n", shutdownGrace)
		os.Exit(exitFailed)
	}
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

func runCmd() *cobra.Command {
	var cfgPath, logLevel string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Join the consumer group and process the input topic until SIGTERM",
		Long: `Run one processor instance. Configuration comes from the YAML file given with
--config, then PROCESSOR_* environment variables (rule.threshold is
PROCESSOR_RULE_THRESHOLD), then flags (--brokers, --instance_id, ...).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(cfgPath, cmd.Flags())
			if err != nil {
				return usageError{err}
			}
			logger := newLogger(os.Stderr, logLevel)
			sec, err := kafkaSecurityOpts(cfg.Kafka, logger)
			if err != nil {
				return err
			}
			return runProcessor(cmd.Context(), cfg, logger, consume.Options{ExtraKgoOpts: sec})
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "YAML configuration file")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	addConfigFlags(cmd)
	return cmd
}

// addConfigFlags exposes the most used keys as flags; every key is also
// settable by file and environment.
func addConfigFlags(cmd *cobra.Command) {
	d := config.Default()
	f := cmd.Flags()
	f.StringSlice("brokers", d.Brokers, "Kafka seed brokers")
	f.String("group_id", d.GroupID, "consumer group")
	f.String("instance_id", d.InstanceID, "stable instance name (transactional id suffix)")
	f.String("state_dir", d.StateDir, "local state directory")
	f.String("mode", d.Mode, "exactly_once or at_least_once")
	f.Duration("commit_interval", d.CommitInterval, "transaction commit interval")
	f.String("metrics_addr", d.MetricsAddr, "listen address of /metrics, /healthz, /readyz (empty: off)")
	f.String("topics.input", d.Topics.Input, "input topic")
}

// runProcessor wires registry, metrics server and processor, and runs them
// until ctx ends or one fails.
func runProcessor(ctx context.Context, cfg config.Config, logger *slog.Logger, o consume.Options) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	met, err := metrics.New(reg)
	if err != nil {
		return err
	}
	o.Logger, o.Metrics = logger, met
	proc, err := consume.New(cfg, o)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	procCtx, stopServer := context.WithCancel(gctx)
	if cfg.MetricsAddr != "" {
		pages := map[string]http.Handler{"/": status.Handler(proc, time.Now)}
		if cfg.MetricsPprof {
			pages["/debug/pprof/"] = http.HandlerFunc(pprof.Index)
			pages["/debug/pprof/profile"] = http.HandlerFunc(pprof.Profile)
			pages["/debug/pprof/symbol"] = http.HandlerFunc(pprof.Symbol)
			pages["/debug/pprof/trace"] = http.HandlerFunc(pprof.Trace)
		}
		g.Go(func() error { return met.Serve(procCtx, cfg.MetricsAddr, reg, logger, pages) })
	}
	g.Go(func() error {
		defer stopServer()
		return proc.Run(gctx)
	})
	return g.Wait()
}

func configCmd() *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Validate the configuration and print it with every default filled in",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(cfgPath, cmd.Flags())
			if err != nil {
				return usageError{err}
			}
			cfg.Delivery = redactURLs(cfg.Delivery).(map[string]any) // printed as read: mask URL passwords
			fmt.Fprintf(cmd.OutOrStdout(), "%+v\nchangelog topic: %s\ntransactional id: %s\n", cfg, cfg.ChangelogTopic(), cfg.TransactionalID())
			return nil
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "YAML configuration file")
	addConfigFlags(cmd)
	return cmd
}

// redactURLs returns a copy of v (a configuration section as read: maps,
// slices, scalars) with the password of every string member named url
// masked (deliver.RedactURL).
func redactURLs(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if s, ok := e.(string); ok && strings.EqualFold(k, "url") {
				out[k] = deliver.RedactURL(s)
				continue
			}
			out[k] = redactURLs(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = redactURLs(e)
		}
		return out
	}
	return v
}
