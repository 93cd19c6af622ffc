// Package schemas holds the Avro schemas of the processor's wire formats, as
// the .avsc files beside this file (the published contract), embedded for
// the code that reads and writes them (internal/avro). docs/AVRO.md
// documents them and their versioning.
//
// This package owns only the schema texts: it has no behaviour and no
// mutable state (the embedded texts are reachable only through functions).
package schemas

import _ "embed"

//go:embed event.avsc
var event string

//go:embed alert.avsc
var alert string

// AlertVersion is the version of the alert schema returned by Alert. It
// changes with every change of alert.avsc; docs/AVRO.md lists the versions.
const AlertVersion = 3

// Event returns schemas/event.avsc: the reader schema of input events
// (input contract schema version 1, SPEC section 2).
func Event() string { return event }

// Alert returns schemas/alert.avsc: the schema of alert revisions in the
// Avro output format (alert schema version AlertVersion).
func Alert() string { return alert }
