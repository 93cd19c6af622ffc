package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/viper"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/kafkasec"
	"github.com/vibeline/processor/internal/kafkasec/kgosec"
)

// kafkaSecurityOpts returns the TLS and SASL options (kafka.tls.*,
// kafka.sasl.*) that every Kafka client of a command is built with, and
// logs what is in use at info and the risky choices as warnings, never a
// secret. An error is the configuration's (a file that went away since
// validation): exit code 2.
func kafkaSecurityOpts(c kafkasec.Config, logger *slog.Logger) ([]kgo.Opt, error) {
	opts, err := kgosec.Opts(c)
	if err != nil {
		return nil, usageError{err}
	}
	logger.Info("kafka security", "kafka", c)
	for _, w := range c.Warnings() {
		logger.Warn("kafka security: " + w)
	}
	return opts, nil
}

// loadKafkaSecurity reads only the kafka: section of the YAML file at path
// ("" for none) over the defaults, with PROCESSOR_KAFKA_* environment
// overrides, and validates it: for the commands that do not load the
// processor's configuration (deliver, loadgen). Unknown keys in the section
// are errors; the rest of the file is not read.
func loadKafkaSecurity(path string) (kafkasec.Config, error) {
	v, err := readProcessorKeys(path, func(key string) bool { return strings.HasPrefix(key, "kafka.") })
	if err != nil {
		return kafkasec.Config{}, err
	}
	var c struct {
		Kafka kafkasec.Config `mapstructure:"kafka"`
		Rest  map[string]any  `mapstructure:",remain"` // the processor's keys
	}
	if err := v.UnmarshalExact(&c); err != nil {
		return kafkasec.Config{}, fmt.Errorf("config: %w", err)
	}
	if err := c.Kafka.Validate(); err != nil {
		list := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok { // one per problem
			list = j.Unwrap()
		}
		for i, e := range list {
			list[i] = fmt.Errorf("config: %w", e)
		}
		return kafkasec.Config{}, errors.Join(list...)
	}
	return c.Kafka, nil
}

// readProcessorKeys reads the YAML file at path ("" for none) for a command
// that needs only some of the processor's keys: the processor's defaults
// of the keys keep selects, PROCESSOR_* environment overrides, then the
// file. The caller unmarshals its section (UnmarshalExact, with a ",remain"
// field for the keys that are not its own) and validates it.
func readProcessorKeys(path string, keep func(key string) bool) (*viper.Viper, error) {
	v := viper.New()
	for key, val := range config.Keys() {
		if keep(key) {
			v.SetDefault(key, val)
		}
	}
	v.SetEnvPrefix(config.EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if path != "" {
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("config: read %s: %w", path, err)
		}
	}
	return v, nil
}
