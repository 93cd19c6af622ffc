package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/pipeline"
	"github.com/vibeline/processor/internal/sim"
)

func demoCmd() *cobra.Command {
	var (
		minutes  int
		machines int
		verbose  bool
		httpAddr string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run an in-process Kafka, a simulated production line and the processor, and print the alerts",
		Long: `demo needs nothing but this binary: it starts franz-go's in-process
Kafka-protocol cluster (kfake), a simulated production line that also sends
late, duplicated, out-of-order and poison events, and the processor with the
vibration rule, then prints every alert revision with its evidence as it is
committed, and a summary of where every input record went.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), minutes, machines, verbose, httpAddr)
		},
	}
	cmd.Flags().IntVar(&minutes, "minutes", 15, "simulated minutes of production")
	cmd.Flags().IntVar(&machines, "machines", 8, "simulated machines (2 sensors each)")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "print the processor's logs")
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve the status page, /metrics, /healthz and /readyz here (e.g. 127.0.0.1:9100)")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, minutes, machines int, verbose bool, httpAddr string) error {
	if minutes < 1 || machines < 1 {
		return usageError{fmt.Errorf("--minutes and --machines must be >= 1 (got %d, %d)", minutes, machines)}
	}
	const partitions = 3
	cfg := config.Default()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, cfg.Topics.Input))
	if err != nil {
		return fmt.Errorf("demo: start in-process kafka: %w", err)
	}
	defer cluster.Close()
	stateDir, err := os.MkdirTemp("", "processor-demo-")
	if err != nil {
		return fmt.Errorf("demo: state dir: %w", err)
	}
	defer os.RemoveAll(stateDir)

	cfg.Brokers = cluster.ListenAddrs()
	cfg.InstanceID = "demo-0"
	cfg.StateDir = stateDir
	cfg.MetricsAddr = httpAddr
	logLevel := slog.LevelWarn
	if verbose {
		logLevel = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}))

	fmt.Fprintf(out, "in-process Kafka at %v; rule %s v%d: alert when %d %s (>= %.1f mm/s, quality %s) for one machine fall within %s of event time\n",
		cfg.Brokers, cfg.Rule.ID, cfg.Rule.Version, cfg.Rule.Threshold, cfg.Rule.Description, cfg.Rule.MinValue, cfg.Rule.Quality, cfg.Rule.Window)

	procCtx, stopProc := context.WithCancel(ctx)
	defer stopProc()
	g, gctx := errgroup.WithContext(procCtx)
	g.Go(func() error { return runProcessor(gctx, cfg, logger, consume.Options{}) })

	// The simulated line: every trouble a real one has.
	opts := sim.Demo()
	opts.Machines = machines
	line := sim.New(opts)
	prod, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.DefaultProduceTopic(cfg.Topics.Input))
	if err != nil {
		return fmt.Errorf("demo: producer: %w", err)
	}
	defer prod.Close()
	kinds := map[string]int{}
	total := 0
	end := opts.Start.Add(time.Duration(minutes) * time.Minute)
	for line.EventTime().Before(end) {
		r := line.Next()
		kinds[r.Kind]++
		total++
		prod.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, nil)
	}
	// The line keeps running quietly for a while: its watermark passes
	// every incident's end + window + allowed lateness, and they close.
	quiet := end.Add(cfg.Rule.WatermarkDelay + cfg.Rule.AllowedLateness + cfg.Rule.Window + time.Minute)
	for m := 0; m < machines; m++ {
		id := sim.MachineID(m)
		v := fmt.Sprintf(`{"event_id":"quiet-%s","machine_id":"%s","sensor_id":"S-q","ts":%d,"seq":0,"value":1.0,"unit":"mm/s","schema_version":1,"quality":"good"}`, id, id, quiet.UnixMilli())
		prod.Produce(ctx, &kgo.Record{Key: []byte(id), Value: []byte(v), Timestamp: quiet}, nil)
		kinds["normal"]++
		total++
	}
	if err := prod.Flush(ctx); err != nil {
		return fmt.Errorf("demo: produce: %w", err)
	}
	fmt.Fprintf(out, "simulated line sent %d records over %d minutes of event time: %v\n\n", total, minutes, sortedCounts(kinds))

	// Read the outputs as a downstream consumer would: read_committed.
	rd, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumeTopics(cfg.Topics.Alerts, cfg.Topics.DLQ, cfg.Topics.Late),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return fmt.Errorf("demo: reader: %w", err)
	}
	defer rd.Close()
	var nAlerts, nDLQ, nLate int
	reasons := map[string]int{}
	statuses := map[string]int{}
	idle := time.Now()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Since(idle) < 3*time.Second && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := rd.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			idle = time.Now()
			switch r.Topic {
			case cfg.Topics.Alerts:
				nAlerts++
				a, err := alerts.Decode(r.Value)
				if err != nil {
					fmt.Fprintf(out, "undecodable alert: %v\n", err)
					return
				}
				statuses[a.Status]++
				fmt.Fprintln(out, alerts.Human(a))
			case cfg.Topics.DLQ:
				nDLQ++
				reasons[header(r, pipeline.HeaderErrorReason)]++
				fmt.Fprintf(out, "DEAD LETTER  %-14s %s (partition %s offset %s)\n", header(r, pipeline.HeaderErrorReason),
					header(r, pipeline.HeaderErrorDetail), header(r, pipeline.HeaderSourcePartition), header(r, pipeline.HeaderSourceOffset))
			case cfg.Topics.Late:
				nLate++
				fmt.Fprintf(out, "TOO LATE     machine %s, %s ms behind the watermark %s\n", r.Key,
					header(r, pipeline.HeaderLatenessMs), header(r, pipeline.HeaderLateWatermark))
			}
		})
	}
	stopProc()
	if err := g.Wait(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("demo: processor: %w", err)
	}
	fmt.Fprintf(out, "\nsummary: %d alert revisions %v, %d dead letters %v, %d too-late records\n",
		nAlerts, sortedCounts(statuses), nDLQ, sortedCounts(reasons), nLate)
	if nAlerts == 0 {
		return fmt.Errorf("demo: no alert was produced; something is wrong")
	}
	return nil
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s=%d", k, m[k])
	}
	return "(" + s + ")"
}
