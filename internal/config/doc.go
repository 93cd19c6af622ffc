// Package config owns the processor's configuration: the typed Config
// struct with its documented defaults, loading it from a YAML file, the
// environment (PROCESSOR_*) and command-line flags through viper, and
// validating it with errors that name the key, the value and what is valid.
//
// Invariants: every field has a default written in Default(); Validate
// rejects every value the rest of the processor cannot run with, so that a
// bad configuration fails at start-up and never at the first record.
//
// It must never import a Kafka client or Pebble: the rest of the program
// receives a plain Config.
package config
