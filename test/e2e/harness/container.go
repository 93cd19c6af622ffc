package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"
)

// containerImage is the Kafka image for the Docker fallback. The
// testcontainers Kafka module v0.40.0 (the newest the Go module proxy serves;
// it does not compile against testcontainers-go v0.45.0, so both are pinned
// at v0.40.0) is written for Confluent's confluent-local images. E2E_KAFKA_IMAGE overrides
// it. 7.9 is Apache Kafka 3.9: transactions, KIP-447 and compaction as the
// processor uses them. Not exercised on the project's machines, which have
// no Docker engine.
const containerImage = "confluentinc/confluent-local:7.9.0"

// startContainer starts a single-node Kafka in Docker, configured like the
// broker of scripts/kafka.sh. The container lives as long as the test
// binary: testcontainers' reaper (Ryuk) removes it when the process exits,
// so tests in the binary share it.
func startContainer() (seeds []string, err error) {
	// testcontainers panics in some set-ups without a Docker engine.
	defer func() {
		if r := recover(); r != nil {
			seeds, err = nil, fmt.Errorf("no Docker engine: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()

	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return nil, fmt.Errorf("no Docker engine: %w", err)
	}
	healthCtx, healthCancel := context.WithTimeout(ctx, 10*time.Second)
	defer healthCancel()
	if err := provider.Health(healthCtx); err != nil { // Health also closes the provider
		return nil, fmt.Errorf("no Docker engine: %w", err)
	}

	img := containerImage
	if v := os.Getenv("E2E_KAFKA_IMAGE"); v != "" {
		img = v
	}
	ctr, err := tckafka.Run(ctx, img, testcontainers.WithEnv(map[string]string{
		"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                                   "false",
		"KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS":                                "5",
		"KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS":                        "5",
		"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS":                                "6000",
		"KAFKA_LOG_CLEANER_DEDUPE_BUFFER_SIZE":                              "16777216",
		"KAFKA_LOG_CLEANER_BACKOFF_MS":                                      "1000",
		"KAFKA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "1000",
	}))
	if err != nil {
		if ctr != nil {
			err = errors.Join(err, testcontainers.TerminateContainer(ctr))
		}
		return nil, fmt.Errorf("start %s: %w", img, err)
	}
	seeds, err = ctr.Brokers(ctx)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("broker address: %w", err), testcontainers.TerminateContainer(ctr))
	}
	return seeds, nil
}
