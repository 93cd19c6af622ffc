package consume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/state"
)

func jsonMarshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("consume: encode: %w", err)
	}
	return b, nil
}

// Changelog topic configuration: compacted, and tombstones kept for a week
// so that a local store that was offline for less than that restores
// correctly from its checkpoint.
var changelogConfigs = map[string]*string{
	"cleanup.policy":      kadm.StringPtr("compact"),
	"delete.retention.ms": kadm.StringPtr(strconv.Itoa(7 * 24 * 3600 * 1000)),
}

// ensureTopics checks the input topic and creates missing outputs with the
// input's partition count. It retries until ctx ends, so an unreachable
// Kafka fails start-up with a clear error after StartupTimeout.
func ensureTopics(ctx context.Context, cfg config.Config, opts []kgo.Opt, log *slog.Logger) error {
	// kadm answers ListTopics from metadata cached for MetadataMinAge:
	// keep it short so a topic created a moment ago is seen.
	cl, err := kgo.NewClient(append(opts, kgo.MetadataMinAge(50*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("consume: admin client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last error
	for {
		last = ensureTopicsOnce(ctx, cfg, adm, log)
		if last == nil || errors.Is(last, errPermanent) {
			return last
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("consume: kafka at %v not usable within %s: %w", cfg.Brokers, cfg.StartupTimeout, last)
		case <-time.After(500 * time.Millisecond):
			log.Info("consume: waiting for kafka", "brokers", cfg.Brokers, "err", last)
		}
	}
}

var errPermanent = errors.New("permanent")

func ensureTopicsOnce(ctx context.Context, cfg config.Config, adm *kadm.Client, log *slog.Logger) error {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	details, err := adm.ListTopics(rctx, cfg.Topics.Input)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	in, ok := details[cfg.Topics.Input]
	if !ok || errors.Is(in.Err, kerr.UnknownTopicOrPartition) {
		// Not permanent: the topic may be being created right now; the
		// retry ends with this message after startup_timeout.
		return fmt.Errorf("input topic %q does not exist (topics.input): create it first", cfg.Topics.Input)
	}
	if in.Err != nil {
		return fmt.Errorf("describe %s: %w", cfg.Topics.Input, in.Err)
	}
	parts := int32(len(in.Partitions))
	want := map[string]map[string]*string{
		cfg.Topics.Alerts:    nil,
		cfg.Topics.DLQ:       nil,
		cfg.Topics.Late:      nil,
		cfg.ChangelogTopic(): changelogConfigs,
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	existing, err := adm.ListTopics(rctx, names...)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	for name, configs := range want {
		td, ok := existing[name]
		if ok && td.Err == nil {
			if name == cfg.ChangelogTopic() && int32(len(td.Partitions)) != parts {
				return fmt.Errorf("consume: changelog topic %q has %d partitions, the input %q has %d: they must match: %w",
					name, len(td.Partitions), cfg.Topics.Input, parts, errPermanent)
			}
			continue
		}
		if !cfg.CreateTopics {
			return fmt.Errorf("consume: topic %q does not exist and create_topics is false: %w", name, errPermanent)
		}
		_, err := adm.CreateTopic(rctx, parts, int16(cfg.ReplicationFactor), configs, name)
		if errors.Is(err, kerr.TopicAlreadyExists) {
			continue // another replica created it a moment ago
		}
		if err != nil {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
		log.Info("consume: created topic", "topic", name, "partitions", parts)
	}
	// A created topic is usable once every partition has a leader in the
	// metadata; until then restores and produces would fail.
	for {
		ready, err := adm.ListTopics(rctx, names...)
		if err != nil {
			return fmt.Errorf("list topics: %w", err)
		}
		missing := ""
		for _, name := range names {
			td, ok := ready[name]
			// Output topics may have any partition count; the changelog
			// must mirror the input (checked above).
			if !ok || td.Err != nil || len(td.Partitions) == 0 ||
				(name == cfg.ChangelogTopic() && int32(len(td.Partitions)) != parts) {
				missing = name
				break
			}
			for _, pd := range td.Partitions {
				if pd.Err != nil || pd.Leader < 0 {
					missing = name
				}
			}
		}
		if missing == "" {
			return nil
		}
		select {
		case <-rctx.Done():
			return fmt.Errorf("topic %s has no leader for every partition yet: %w", missing, rctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// changelogReader reads committed changelog records for restores, with a
// short-lived direct (group-less) client per call.
type changelogReader struct {
	topic string
	opts  []kgo.Opt
}

var _ state.ChangelogReader = (*changelogReader)(nil)

func (c *changelogReader) Read(ctx context.Context, p int32, from, to int64, fn func(state.ChangelogRecord) error) error {
	cl, err := kgo.NewClient(append(c.opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.topic: {p: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return fmt.Errorf("restore client: %w", err)
	}
	defer cl.Close()
	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return fmt.Errorf("fetch changelog %s/%d: %w", c.topic, p, ferr)
		}
		done := false
		fetches.EachRecord(func(r *kgo.Record) {
			if done || r.Offset >= to {
				done = true
				return
			}
			if err == nil && !r.Attrs.IsControl() {
				err = fn(state.ChangelogRecord{Offset: r.Offset, Key: r.Key, Value: r.Value})
			}
			if r.Offset+1 >= to {
				done = true
			}
		})
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// end returns the changelog partition's last stable offset.
func (c *changelogReader) end(ctx context.Context, p int32) (int64, error) {
	cl, err := kgo.NewClient(c.opts...)
	if err != nil {
		return 0, fmt.Errorf("consume: changelog client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(ctx, c.topic)
	if err != nil {
		return 0, fmt.Errorf("consume: changelog end offsets: %w", err)
	}
	o, ok := ends.Lookup(c.topic, p)
	switch {
	case !ok:
		return 0, fmt.Errorf("consume: changelog %s has no partition %d in the metadata (partition counts must match the input)", c.topic, p)
	case o.Err != nil:
		return 0, fmt.Errorf("consume: changelog %s/%d end offset: %w", c.topic, p, o.Err)
	}
	return o.Offset, nil
}
