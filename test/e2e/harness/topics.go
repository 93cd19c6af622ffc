package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// adminTimeout bounds one admin request made by a helper.
const adminTimeout = 30 * time.Second

// UniqueName returns prefix followed by a random suffix, valid as a Kafka
// topic, group or transactional ID. Characters a topic name may not hold
// (such as the '/' of a subtest name) become '-'.
func UniqueName(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("harness: crypto/rand: %v", err)) // never fails on Linux
	}
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, prefix)
	if len(clean) > 200 { // topic names are at most 249 characters
		clean = clean[:200]
	}
	return clean + "-" + hex.EncodeToString(b[:])
}

// NewClient returns a kgo client for seeds with opts, closed in t.Cleanup.
func NewClient(t testing.TB, seeds []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		t.Fatalf("harness: new client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// NewAdmin returns an admin client for seeds, closed in t.Cleanup.
func NewAdmin(t testing.TB, seeds []string) *kadm.Client {
	t.Helper()
	return kadm.NewClient(NewClient(t, seeds))
}

// NewTopic creates topic name with the given partitions, the cluster's
// default replication factor and configs (nil for none; the values of
// kadm's CreateTopic), and deletes it in t.Cleanup. It returns name, so a
// call can read NewTopic(t, seeds, UniqueName("in"), 3, nil).
func NewTopic(t testing.TB, seeds []string, name string, partitions int32, configs map[string]*string) string {
	t.Helper()
	adm := NewAdmin(t, seeds)
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, -1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("harness: create topic %s (%d partitions, configs %v): %v", name, partitions, flatten(configs), err)
	}
	if err := waitTopic(ctx, adm, name, partitions); err != nil {
		t.Fatalf("harness: create topic %s: %v", name, err)
	}
	t.Cleanup(func() {
		// A fresh client: the test's clients may be closed by now, and a
		// test that stopped a broker must not fail on its clean-up.
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			t.Logf("harness: delete topic %s: %v", name, err)
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		resp, err := kadm.NewClient(cl).DeleteTopic(ctx, name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Logf("harness: delete topic %s: %v", name, err)
		}
	})
	return name
}

// waitTopic waits until the broker's metadata has topic with every
// partition led: CreateTopics returns once the controller has it, and a
// DescribeConfigs or produce right after can still find no topic.
func waitTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	var last error
	for {
		details, err := adm.ListTopics(ctx, topic)
		if err == nil {
			last = topicReady(details, topic, partitions)
			if last == nil {
				return nil
			}
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not in the metadata with all partitions led: %w", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func topicReady(details kadm.TopicDetails, topic string, partitions int32) error {
	d, ok := details[topic]
	switch {
	case !ok:
		return fmt.Errorf("topic %s not listed", topic)
	case d.Err != nil:
		return d.Err
	case int32(len(d.Partitions)) != partitions:
		return fmt.Errorf("%d of %d partitions listed", len(d.Partitions), partitions)
	}
	for _, p := range d.Partitions {
		if p.Err != nil {
			return fmt.Errorf("partition %d: %w", p.Partition, p.Err)
		}
		if p.Leader < 0 {
			return fmt.Errorf("partition %d has no leader", p.Partition)
		}
	}
	return nil
}

func flatten(configs map[string]*string) map[string]string {
	out := make(map[string]string, len(configs))
	for k, v := range configs {
		if v == nil {
			out[k] = "<nil>"
		} else {
			out[k] = *v
		}
	}
	return out
}
