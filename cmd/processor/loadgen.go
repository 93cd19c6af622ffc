package main

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/sim"
)

func loadgenCmd() *cobra.Command {
	var (
		cfgPath  string
		brokers  []string
		topic    string
		count    int
		machines int
		rate     int
		seed     uint64
		clean    bool
		episodes float64
		outage   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "loadgen",
		Short: "Produce a deterministic stream of simulated vibration events to a topic",
		Long: `loadgen writes --count records of the simulated production line to --topic,
keyed by machine, at up to --rate records per second (0: as fast as possible).
The same --seed always produces the same records, so two runs of the
processor over loadgen's output can be compared record for record. With
--clean it sends only well-formed events (no duplicates, poison, late
replays or clock jumps).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if count < 1 || machines < 1 || rate < 0 {
				return usageError{fmt.Errorf("--count and --machines must be >= 1 and --rate >= 0")}
			}
			sec, err := loadKafkaSecurity(cfgPath)
			if err != nil {
				return usageError{err}
			}
			extra, err := kafkaSecurityOpts(sec, newLogger(os.Stderr, "warn"))
			if err != nil {
				return err
			}
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
				kgo.ProducerLinger(5 * time.Millisecond), kgo.MaxBufferedRecords(100_000)}, extra...)...)
			if err != nil {
				return err
			}
			defer cl.Close()
			o := sim.Load(machines)
			o.Seed = seed
			if episodes >= 0 {
				o.EpisodeRate = episodes
			}
			if outage > 0 {
				o.OutageLength = outage
			}
			if clean {
				o.DuplicateRate, o.SwapRate, o.PoisonRate, o.ClockAheadRate, o.OutageRate = 0, 0, 0, 0, 0
			}
			line := sim.New(o)
			var failed atomic.Int64
			var firstErr atomic.Value
			start := time.Now()
			for i := 0; i < count; i++ {
				if rate > 0 && i%100 == 0 {
					if ahead := time.Duration(float64(i)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
						time.Sleep(ahead)
					}
				}
				r := line.Next()
				cl.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				return err
			}
			if n := failed.Load(); n > 0 {
				return fmt.Errorf("loadgen: %d records failed, first: %v", n, firstErr.Load())
			}
			el := time.Since(start)
			fmt.Fprintf(cmd.OutOrStdout(), "loadgen: %d records to %s in %s (%.0f records/s)\n", count, topic, el.Round(time.Millisecond), float64(count)/el.Seconds())
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&brokers, "brokers", []string{"127.0.0.1:9092"}, "Kafka seed brokers")
	cmd.Flags().StringVar(&cfgPath, "config", "", "YAML configuration file: only its kafka: section (TLS, SASL) is used; PROCESSOR_KAFKA_* apply too")
	cmd.Flags().StringVar(&topic, "topic", "vibration.events", "topic to write")
	cmd.Flags().IntVar(&count, "count", 100_000, "records to send")
	cmd.Flags().IntVar(&machines, "machines", 200, "simulated machines")
	cmd.Flags().IntVar(&rate, "rate", 0, "records per second (0: unlimited)")
	cmd.Flags().Uint64Var(&seed, "seed", 42, "random seed")
	cmd.Flags().BoolVar(&clean, "clean", false, "only well-formed, in-order events")
	cmd.Flags().Float64Var(&episodes, "episode-rate", -1, "chance per machine per second that a high-vibration episode starts (default: the load profile's 0.002)")
	cmd.Flags().DurationVar(&outage, "outage", 0, "length of a gateway outage, replayed late afterwards (default: the load profile's 2m)")
	return cmd
}
