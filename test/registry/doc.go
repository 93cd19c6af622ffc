// Package registry holds the integration tests of the Avro formats
// (internal/avro) against a real schema registry: Apicurio Registry 3 with
// its Confluent-compatible API, started by TestMain with scripts/registry.sh
// on free 127.0.0.1 ports and a run dir of its own (or the registry at
// REGISTRY_URL, when set). Without a registry the tests fail; they never
// skip.
//
//   - evolution: the event schema v1 (schemas/event.avsc) and a v2 that
//     adds a defaulted field are registered under vibration.events-value
//     with BACKWARD compatibility; wire-format values of both decode with
//     the reader schema; an incompatible v3 is refused (409) and that is a
//     permanent error, not a transient one.
//   - unknown id: Prepare succeeds, the record is schema_unknown naming the
//     id.
//   - outage: the registry is stopped (scripts/registry.sh down --keep, and
//     a TCP proxy in front of it is closed): Prepare is transient
//     (ErrRegistryUnavailable), nothing is dead-lettered, cached ids keep
//     decoding; started again, the same ids resolve.
//   - alerts: schemas/alert.avsc registered under vibration.alerts-value,
//     alert revisions round-trip through a second, independent cache.
package registry
