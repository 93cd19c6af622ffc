// Package event owns the input contract of the processor (SPEC sections 2
// and 3, schema version 1): it decodes a Kafka record value, validates it
// field by field, normalises the value to mm/s, compares the record key with
// machine_id and tests the event clock against the record timestamp. The
// result is either an Event that satisfies every rule of the contract or an
// *Error carrying the stable dead-letter reason code.
//
// # Layout
//
//   - Decoder is the codec seam. JSONDecoder turns a JSON object into Fields,
//     a codec-neutral view of the contract's fields (kind, text, number,
//     exact-integer flag, raw text for messages). An Avro decoder in the
//     Confluent wire format plugs in beside it and yields the same Fields.
//   - scanner (scan.go) is JSONDecoder's single-pass validating JSON scanner:
//     it accepts exactly what encoding/json's json.Valid accepts (plus the
//     UTF-8 rule), without recursion, while the decoder picks the contract's
//     members out of the top-level object. FuzzDecodeMatchesStdlib holds it
//     to the json.Valid-based decoder it replaced.
//   - Validator owns the rules: field types and ranges, the order of the
//     reason codes, normalisation, the key check and clock_ahead. Rules live
//     here once, not in each codec.
//
// # Decisions where the contract is silent
//
//   - Integers (schema_version, seq, ts in epoch milliseconds) are JSON
//     numbers whose decimal value is exactly an integer in the int64 range,
//     whatever the notation: 7, 7.0, 7e0 and 0.7e1 are all 7; 7.5 is invalid.
//     Exactness is judged on the decimal text, not on a float64.
//   - ts as a string is RFC 3339 with a zone ("Z" or ±hh:mm, "T"/"Z" also in
//     lower case); a zone-less time, a space separator and leap second 60 are
//     invalid. Digits below the millisecond are truncated. Both forms must lie
//     in 1970-01-01T00:00:00.000Z .. 9999-12-31T23:59:59.999Z (MinTSMs ..
//     MaxTSMs): negative epoch milliseconds are invalid.
//   - A JSON null counts as the wrong type for a required field, and as
//     absent for the optional clock (which then defaults to "synced").
//   - Strings are compared exactly: no trimming, no case folding. Ids only
//     need to be non-empty.
//   - value may be negative (the contract only asks for finite); a value
//     whose in/s→mm/s conversion overflows is invalid_field.
//   - Member names match case-sensitively; unknown members are ignored
//     whatever they hold; for a repeated member the last occurrence wins.
//   - A value larger than Options.MaxBytes (default 900,000 bytes), an empty value
//     (a tombstone), invalid UTF-8, and nesting deeper than 10000 levels
//     anywhere in the value are decode_error.
//   - A nil or empty record key means "no key": the record is accepted and
//     machine_id is its key. A negative record timestamp (Kafka's "none")
//     skips the clock_ahead test.
//   - Error.Detail quotes at most 64 bytes of the offending value and is
//     always printable UTF-8 without control characters, so it is safe in a
//     Kafka header and a log line.
//
// # Invariants
//
// Check is a pure function of (key, value, record timestamp, Options): no
// clock, no I/O, no state. It never panics on any input (fuzzed by
// FuzzCheck), and an Event it returns without error satisfies every rule
// listed on Event.
//
// # Must never
//
// This package must not import a Kafka client, Pebble, Prometheus or the
// window logic, and must never retain the record's buffers: every string of
// an Event is a copy.
package event
