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
	"github.com/vibeline/processor/internal/kafkasec/kgosec"
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

// wantTopic is a topic the rules read or write.
type wantTopic struct {
	name    string
	source  bool               // an input topic: must exist, never created
	like    string             // created with this source topic's partition count
	mirror  bool               // must have exactly like's partition count (changelog, repartition)
	configs map[string]*string // topic configs when created
}

// repartitionConfigs: a repartition topic keeps its records until the group
// has consumed them (Processor.purgeRepartitions deletes them then): no time
// retention, because forwarded records keep their source's timestamps, and
// a replay of old input would otherwise be deleted before it is read.
var repartitionConfigs = map[string]*string{
	"cleanup.policy": kstr("delete"),
	"retention.ms":   kstr("-1"),
}

func kstr(s string) *string { return &s }

// ensureTopics checks the input topics and creates missing outputs,
// changelogs and repartition topics with their source's partition count. It
// retries until ctx ends, so an unreachable Kafka fails start-up with a
// clear error after StartupTimeout; a security failure that retrying cannot
// fix (kgosec.Permanent: wrong credentials, an untrusted certificate) fails
// at once.
func ensureTopics(ctx context.Context, cfg config.Config, want []wantTopic, opts []kgo.Opt, log *slog.Logger) (map[string]int32, error) {
	// kadm answers ListTopics from metadata cached for MetadataMinAge:
	// keep it short so a topic created a moment ago is seen.
	cl, err := kgo.NewClient(append(opts, kgo.MetadataMinAge(50*time.Millisecond))...)
	if err != nil {
		return nil, fmt.Errorf("consume: admin client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last error
	for {
		parts := map[string]int32{}
		last = ensureTopicsOnce(ctx, cfg, want, parts, adm, log)
		if last == nil || errors.Is(last, errPermanent) {
			return parts, last
		}
		if kgosec.Permanent(last) {
			return nil, fmt.Errorf("consume: kafka at %v refuses this client (not retried): %w", cfg.Brokers, last)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("consume: kafka at %v not usable within %s: %w", cfg.Brokers, cfg.StartupTimeout, last)
		case <-time.After(500 * time.Millisecond):
			log.Info("consume: waiting for kafka", "brokers", cfg.Brokers, "err", last)
		}
	}
}

var errPermanent = errors.New("permanent")

func ensureTopicsOnce(ctx context.Context, cfg config.Config, want []wantTopic, parts map[string]int32, adm *kadm.Client, log *slog.Logger) error {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var names []string
	for _, w := range want {
		if !w.source {
			names = append(names, w.name)
			continue
		}
		details, err := adm.ListTopics(rctx, w.name)
		if err != nil {
			return fmt.Errorf("list topics: %w", err)
		}
		in, ok := details[w.name]
		if !ok || errors.Is(in.Err, kerr.UnknownTopicOrPartition) {
			// Not permanent: the topic may be being created right now; the
			// retry ends with this message after startup_timeout.
			return fmt.Errorf("input topic %q does not exist (a rule's source): create it first", w.name)
		}
		if in.Err != nil {
			return fmt.Errorf("describe %s: %w", w.name, in.Err)
		}
		parts[w.name] = int32(len(in.Partitions))
	}
	existing, err := adm.ListTopics(rctx, names...)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	for _, w := range want {
		if w.source {
			continue
		}
		n := parts[w.like]
		td, ok := existing[w.name]
		if ok && td.Err == nil {
			if w.mirror && int32(len(td.Partitions)) != n {
				return fmt.Errorf("consume: topic %q has %d partitions, its source %q has %d: they must match: %w",
					w.name, len(td.Partitions), w.like, n, errPermanent)
			}
			continue
		}
		if !cfg.CreateTopics {
			return fmt.Errorf("consume: topic %q does not exist and create_topics is false: %w", w.name, errPermanent)
		}
		_, err := adm.CreateTopic(rctx, n, int16(cfg.ReplicationFactor), w.configs, w.name)
		if errors.Is(err, kerr.TopicAlreadyExists) {
			continue // another replica created it a moment ago
		}
		if err != nil {
			return fmt.Errorf("create topic %s: %w", w.name, err)
		}
		log.Info("consume: created topic", "topic", w.name, "partitions", n)
	}
	// A created topic is usable once every partition has a leader in the
	// metadata; until then restores and produces would fail.
	for {
		ready, err := adm.ListTopics(rctx, names...)
		if err != nil {
			return fmt.Errorf("list topics: %w", err)
		}
		missing := ""
		for _, w := range want {
			if w.source {
				continue
			}
			td, ok := ready[w.name]
			// Output topics may have any partition count; changelogs and
			// repartition topics must mirror their source (checked above).
			if !ok || td.Err != nil || len(td.Partitions) == 0 ||
				(w.mirror && int32(len(td.Partitions)) != parts[w.like]) {
				missing = w.name
				break
			}
			for _, pd := range td.Partitions {
				if pd.Err != nil || pd.Leader < 0 {
					missing = w.name
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

// endOffsetTimeout bounds one end-offset lookup of a restore.
const endOffsetTimeout = 20 * time.Second

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
	return c.offset(ctx, p, true)
}

// highWater returns the changelog partition's high watermark: unlike the
// last stable offset, which another producer's open transaction (a zombie)
// can hold back, never below a committed position unless the topic lost
// records.
func (c *changelogReader) highWater(ctx context.Context, p int32) (int64, error) {
	return c.offset(ctx, p, false)
}

func (c *changelogReader) offset(ctx context.Context, p int32, stable bool) (int64, error) {
	cl, err := kgo.NewClient(c.opts...)
	if err != nil {
		return 0, fmt.Errorf("consume: changelog client: %w", err)
	}
	defer cl.Close()
	// The rebalance callback's context has no deadline: a broker that does
	// not answer must fail the restore (the group then retries), not hang
	// the member.
	ctx, cancel := context.WithTimeout(ctx, endOffsetTimeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	list := adm.ListEndOffsets
	if stable {
		list = adm.ListCommittedOffsets
	}
	ends, err := list(ctx, c.topic)
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
